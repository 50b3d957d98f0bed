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
	s, err := specFor(workload, analysis, extra)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func specFor(workload, analysis, extra string) (*arms.Spec, error) {
	return arms.Parse("plan.yaml", []byte(fmt.Sprintf(`version: 1
name: plan-test
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, %s}
analysis: {baseline: control, %s}
%s`, workload, analysis, extra)))
}

// A sequential design on launches spends the primary claim's share of alpha over the
// looks that can reach their level (stats.SequentialLookLevels): with 8 looks, 0.03 over
// looks 6 to 8, none charged before; with 4, all of it at look 4. Its simulated error
// under the null stays within the share.
func TestSequentialPlanIsOnLaunches(t *testing.T) {
	s := spec(t, "sessions: 30, rounds: 4, seed: 1", "sequential: {looks: 8}, plan: {p0: 0.02, p1: 0.2, power: 0.8, launch_icc: 0.05}", "")
	p, err := Compute(Options{Spec: s, SpecPath: "plan.yaml", Simulate: true, Reps: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sq := p.Sequential
	want := []float64{0, 0, 0, 0, 0, 0.01, 0.01, 0.01}
	if sq == nil || len(sq.Levels) != 8 || sq.EarliestStop != 6 || math.Abs(sq.LevelPerLook-0.01) > 1e-12 || sq.Null == nil || sq.Alt == nil {
		t.Fatalf("sequential plan %+v", sq)
	}
	for k, l := range want {
		if math.Abs(sq.Levels[k]-l) > 1e-12 {
			t.Errorf("look %d level %g, want %g", k+1, sq.Levels[k], l)
		}
	}
	if limit := 0.03 + 3*math.Sqrt(0.03*0.97/1000); sq.Null.RejectRate > limit {
		t.Errorf("null reject rate %g above the claim's share", sq.Null.RejectRate)
	}
	if sq.Alt.RejectRate < 0.5 || sq.Alt.MeanLaunches < 6 || sq.Alt.MeanLaunches > 8 {
		t.Errorf("alternative: %+v", sq.Alt)
	}
	var text strings.Builder
	p.WriteText(&text)
	if !strings.Contains(text.String(), "the earliest look that can stop with a claim: 6") {
		t.Errorf("text:\n%s", text.String())
	}
	four, _ := Compute(Options{Spec: spec(t, "sessions: 30, rounds: 4, seed: 1", "sequential: {looks: 4}, plan: {p0: 0, p1: 0.2}", "")})
	if four.Sequential.EarliestStop != 4 || math.Abs(four.Sequential.LevelPerLook-0.03) > 1e-12 {
		t.Errorf("4 looks: %+v", four.Sequential)
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
	if !strings.Contains(strings.Join(p.Notes, "\n"), "cannot attribute it to the arms") || p.LaunchPower != 0 || p.LaunchesPerArm != 1 || p.LaunchTest != "" {
		t.Errorf("one launch per arm not flagged: %+v", p)
	}
	four := spec(t, "sessions: 60, rounds: 4, seed: 1", "unit: launch, plan: {p0: 0, p1: 0.12, launch_icc: 0.05}", "launches: 4")
	p, _ = Compute(Options{Spec: four})
	if strings.Contains(strings.Join(p.Notes, "\n"), "cannot attribute") || p.LaunchesPerArm != 4 || math.Abs(p.LaunchMinP-2.0/70) > 1e-12 ||
		p.LaunchTest != "randomization" || p.LaunchICCBasis != "analysis.plan.launch_icc" || math.Abs(p.LaunchDesignEffect-(1+59*0.05)) > 1e-12 {
		t.Errorf("four launches per arm: %+v", p)
	}
	// The launch test's power at 4 launches of 60 sessions, 0% against 12%, ICC 0.05, is
	// about 0.87 (stats.TestLaunchPower).
	if p.LaunchPower < 0.8 || p.LaunchPower > 0.93 || p.LaunchesNeeded != 4 {
		t.Errorf("launch power %g, launches needed %d", p.LaunchPower, p.LaunchesNeeded)
	}
	resp := spec(t, "sessions: 60, rounds: 4, seed: 1", "unit: response, plan: {p0: 0, p1: 0.12, icc: 0.2}", "")
	p, _ = Compute(Options{Spec: resp, History: Recorded{ExperimentID: 3, TurnsPerSession: 8, TurnSeconds: 1.5}})
	if math.Abs(p.DesignEffect-(1+7*0.2)) > 1e-12 || p.WallTimeSeconds == nil || !strings.Contains(p.WallTimeBasis, "experiment 3") {
		t.Errorf("response unit: design effect %g, wall time %v (%s)", p.DesignEffect, p.WallTimeSeconds, p.WallTimeBasis)
	}
}

// The wall time counts the slots a block's arms run on at once, and a finished recorded
// run of the spec gives it outright, scaled by the launches.
func TestPlanWallTimeCountsSlotsAndTheRecordedRun(t *testing.T) {
	const turns = "sessions: 60, rounds: 4, concurrency: 60, seed: 1"
	one := spec(t, turns, "plan: {p0: 0, p1: 0.12, turn_seconds: 2}", "launches: 4")
	two := spec(t, turns, "plan: {p0: 0, p1: 0.12, turn_seconds: 2}", "launches: 4\nruntime: {kind: process, nodes: [{name: local, slots: 2}]}")
	p1, _ := Compute(Options{Spec: one})
	p2, _ := Compute(Options{Spec: two})
	// 8 turns of 2 s a launch; 4 blocks of 2 arms, in 2 waves a block on one slot, 1 on two.
	if p1.WallTimeSeconds == nil || p2.WallTimeSeconds == nil || *p1.WallTimeSeconds != 16*8 || *p2.WallTimeSeconds != 16*4 {
		t.Errorf("wall time on one slot %v, on two %v; want 128 s and 64 s", p1.WallTimeSeconds, p2.WallTimeSeconds)
	}
	rec := spec(t, turns, "plan: {p0: 0, p1: 0.12}", "launches: 4")
	p, _ := Compute(Options{Spec: rec, History: Recorded{ExperimentID: 9, TurnsPerSession: 8, TurnSeconds: 0.1, WallSeconds: 30, LaunchesPerArm: 2}})
	if p.WallTimeSeconds == nil || *p.WallTimeSeconds != 60 || !strings.Contains(p.WallTimeBasis, "experiment 9 took 30s for 2 launch(es) per arm") {
		t.Errorf("wall time from a run of 2 launches per arm in 30 s: %v (%s)", p.WallTimeSeconds, p.WallTimeBasis)
	}
}

// A level split three ways reads as a level, not as the float's every digit, and a t
// test, whose p has no floor, is given none.
func TestPlanTextRoundsItsLevels(t *testing.T) {
	p := Plan{Spec: "f.yaml", Alpha: 0.05, Comparisons: 3, AlphaPerComparison: 0.05 / 3, SessionsPerArm: 120,
		LaunchesPerArm: 2, LaunchTest: string(stats.TestWelch), LaunchLevel: 0.01, TargetPower: 0.8}
	var text strings.Builder
	p.WriteText(&text)
	out := text.String()
	if !strings.Contains(out, "Fisher's test at 0.0167)") || strings.Contains(out, "0.01666") {
		t.Errorf("Fisher's level not rounded:\n%s", out)
	}
	if !strings.Contains(out, "decided by the Welch test at 0.01: power") || strings.Contains(out, "smallest p") {
		t.Errorf("a t test given a smallest p:\n%s", out)
	}
	p.LaunchTest, p.LaunchesPerArm, p.LaunchMinP = string(stats.TestRandomization), 4, 1.0/35
	text.Reset()
	p.WriteText(&text)
	if !strings.Contains(text.String(), "(its smallest p with these launches 0.0286)") {
		t.Errorf("the randomization test's smallest p is missing:\n%s", text.String())
	}
}

// A recorded run of the spec gives how much its launches differ in corruption, where the
// spec declares none; a declared launch_icc stays.
func TestPlanTakesTheLaunchICCARecordedRunShowed(t *testing.T) {
	h := Recorded{ExperimentID: 6, LaunchICC: 0.03, ICCLaunches: 8, ICCMeasured: true}
	s := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0, p1: 0.12}", "launches: 4")
	p, err := Compute(Options{Spec: s, History: h})
	if err != nil {
		t.Fatal(err)
	}
	if p.LaunchICC != 0.03 || !strings.Contains(p.LaunchICCBasis, "experiment 6") || p.LaunchDesignEffect != 1+59*0.03 {
		t.Errorf("measured ICC: %g (%s), design effect %g", p.LaunchICC, p.LaunchICCBasis, p.LaunchDesignEffect)
	}
	declared := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0, p1: 0.12, launch_icc: 0.2}", "launches: 4")
	if p, _ := Compute(Options{Spec: declared, History: h}); p.LaunchICC != 0.2 || p.LaunchICCBasis != "analysis.plan.launch_icc" {
		t.Errorf("declared ICC: %g (%s)", p.LaunchICC, p.LaunchICCBasis)
	}
	if p, _ := Compute(Options{Spec: s, History: Recorded{ExperimentID: 6}}); p.LaunchICC != DefaultLaunchICC {
		t.Errorf("nothing measured: ICC %g (%s)", p.LaunchICC, p.LaunchICCBasis)
	}
}
