package plan

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

func spec(t *testing.T, workload, analysis, extra string) *arms.Spec {
	t.Helper()
	s, err := arms.Parse("plan.yaml", []byte(fmt.Sprintf(`version: 1
name: plan-test
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, %s}
analysis: {baseline: control, %s}
%s`, workload, analysis, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A sequential design whose looks are small enough saves sessions against the fixed
// design at the plan's power; the saving is measured against that design, not against
// the sequential design's own ceiling.
func TestSequentialSavingIsAgainstTheFixedDesignAtTargetPower(t *testing.T) {
	s := spec(t, "sessions: 13, rounds: 4, seed: 1", "sequential: {looks: 4}, plan: {p0: 0, p1: 0.15, power: 0.8}", "")
	p, err := Compute(Options{Spec: s, SpecPath: "plan.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	sq := p.Sequential
	if sq == nil || sq.SavedFraction == nil {
		t.Fatalf("no sequential figures: %+v", p)
	}
	perArm, total := stats.FixedDesignSessions(0, 0.15, 0.05, 0.8)
	if p.SessionsNeeded != perArm || sq.FixedSessions != total {
		t.Errorf("fixed design %d per arm (%d in all), want %d (%d)", p.SessionsNeeded, sq.FixedSessions, perArm, total)
	}
	design, _ := stats.Boundaries(4, 0.05, nil)
	op, _ := stats.SequentialExact(0, 0.15, 13, design)
	if sq.Power != op.Power || sq.ExpectedSessions != op.MeanSessions || sq.MaxSessions != 104 {
		t.Errorf("sequential figures %+v, want %+v", sq, op)
	}
	if want := 1 - op.MeanSessions/float64(total); math.Abs(*sq.SavedFraction-want) > 1e-12 {
		t.Errorf("saved %.4f, want %.4f", *sq.SavedFraction, want)
	}
	t.Logf("4 looks of 13 per arm at 0%% vs 15%%: power %.3f, %.1f sessions expected of at most %d; fixed design at power 0.8: %d; saved %.1f%%",
		sq.Power, sq.ExpectedSessions, sq.MaxSessions, total, 100**sq.SavedFraction)
	var text strings.Builder
	p.WriteText(&text)
	for _, want := range []string{fmt.Sprintf("fixed design at the plan's power 0.80: %d sessions per arm (%d in all)", perArm, total), "it saves"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if sq.PerLookForTarget != 13 || sq.ExpectedForTarget != sq.ExpectedSessions {
		t.Errorf("looks of 13 reach the target power, yet the plan sizes them at %d", sq.PerLookForTarget)
	}

	// One session fewer per look falls short of the target power: no saving is claimed
	// against a design more powerful than it, and the plan says how to size the looks.
	short, err := Compute(Options{Spec: spec(t, "sessions: 12, rounds: 4, seed: 1", "sequential: {looks: 4}, plan: {p0: 0, p1: 0.15, power: 0.8}", "")})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	short.WriteText(&text)
	if short.Sequential.Power >= 0.8 || strings.Contains(text.String(), "saves") || !strings.Contains(text.String(), "falls short") ||
		!strings.Contains(text.String(), "13 sessions per arm and look") {
		t.Errorf("a design below the target power (%.3f):\n%s", short.Sequential.Power, text.String())
	}
}

func TestPlanRefusesWhatItCannotPlan(t *testing.T) {
	if _, err := Compute(Options{Spec: spec(t, "sessions: 60, rounds: 4, seed: 1", "alpha: 0.05", ""), SpecPath: "plan.yaml"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "declare the rates") {
		t.Errorf("no rates: %v", err)
	}
	fixed := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0, p1: 0.12}", "")
	if _, err := Compute(Options{Spec: fixed, Simulate: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("--simulate without looks: %v", err)
	}
	if _, err := Compute(Options{Spec: fixed, Reps: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative reps: %v", err)
	}
	p, err := Compute(Options{Spec: fixed})
	if err != nil || p.TargetPower != DefaultPower || p.Sequential != nil {
		t.Errorf("default power: %+v, %v", p, err)
	}
}

func TestPlanForOtherUnits(t *testing.T) {
	one := spec(t, "sessions: 60, rounds: 4, seed: 1", "unit: launch, plan: {p0: 0, p1: 0.12}", "")
	p, err := Compute(Options{Spec: one})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "no launch-level conclusion is possible") {
		t.Errorf("one launch per arm not flagged: %v", p.Notes)
	}
	four := spec(t, "sessions: 60, rounds: 4, seed: 1", "unit: launch, plan: {p0: 0, p1: 0.12}", "blocks: 4")
	p, _ = Compute(Options{Spec: four})
	if !strings.Contains(strings.Join(p.Notes, "\n"), "6 degrees of freedom") {
		t.Errorf("four launches per arm: %v", p.Notes)
	}
	resp := spec(t, "sessions: 60, rounds: 4, seed: 1", "unit: response, plan: {p0: 0, p1: 0.12, icc: 0.2}", "")
	p, _ = Compute(Options{Spec: resp, History: Recorded{ExperimentID: 3, TurnsPerSession: 8, TurnSeconds: 1.5}})
	if math.Abs(p.DesignEffect-(1+7*0.2)) > 1e-12 || p.WallTimeSeconds == nil || !strings.Contains(p.WallTimeBasis, "experiment 3") {
		t.Errorf("response unit: design effect %g, wall time %v (%s)", p.DesignEffect, p.WallTimeSeconds, p.WallTimeBasis)
	}
}
