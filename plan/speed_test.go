package plan

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

func throughputSpec(t *testing.T, analysis string, blocks int) *arms.Spec {
	t.Helper()
	s, err := arms.Parse("tp.yaml", []byte(`version: 1
name: tp
engine: {preset: refserve}
arms:
  off: {}
  on:  {args: [--enable-hierarchical-cache]}
workload: {kind: throughput, seed: 1, concurrency: [1, 32], rate: 16, requests: 32, max_tokens: 64}
analysis: {baseline: off, alpha: 0.05, `+analysis+`}
blocks: `+strconv.Itoa(blocks)+`
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Under a margin the claim is non-inferiority: its power by launches per arm is the one-
// sided t test's at the verdict's level, with the true ratio clearing log(1 − margin),
// and the launches needed are the fewest that reach the target power.
func TestSpeedPlanIsTheTTestOnLaunchMedians(t *testing.T) {
	s := throughputSpec(t, "throughput_margin: 5%", 4)
	p, err := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03})
	if err != nil {
		t.Fatal(err)
	}
	if p.Ratio != 1 || p.Margin != 0.05 || len(p.Phases) != 3 || p.Phases[2].Phase != "poisson 16/s" {
		t.Fatalf("plan %+v", p)
	}
	shift := -math.Log(0.95)
	for _, ph := range p.Phases {
		if ph.CV != 0.03 || ph.Basis != "--cv" {
			t.Errorf("%s: CV %g from %q", ph.Phase, ph.CV, ph.Basis)
		}
		for _, r := range ph.Power {
			level := verdict.PlannedLevel(s, 2, r.Launches, false)
			switch {
			case r.Launches == 1:
				if r.Level != 0 || r.Power != 0 {
					t.Errorf("one launch per arm without a floor: %+v", r)
				}
			case r.Level != level || r.Test != TestLaunchMedians || math.Abs(r.Power-stats.LaunchTPower(r.Launches, 0.03, shift, level)) > 1e-12:
				t.Errorf("%s, %d launches: %+v; want the t test at %g", ph.Phase, r.Launches, r, level)
			}
		}
		k := ph.Needed
		level := verdict.PlannedLevel(s, 2, k, false)
		if k < 2 || stats.LaunchTPower(k, 0.03, shift, level) < 0.8 || stats.LaunchTPower(k-1, 0.03, shift, level) >= 0.8 {
			t.Errorf("%s: %d launches per arm needed for 0.8", ph.Phase, k)
		}
		if want := stats.LaunchTPower(4, 0.03, shift, verdict.PlannedLevel(s, 2, 4, false)); ph.SpecPower != want {
			t.Errorf("%s: power at the spec's 4 launches %g; want %g", ph.Phase, ph.SpecPower, want)
		}
	}
	// A true cost is planned for: the power falls; a cost beyond the margin cannot be
	// shown non-inferior at all.
	cost, _ := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03, Ratio: 0.98})
	if !(cost.Phases[0].SpecPower < p.Phases[0].SpecPower) || cost.Phases[0].Needed <= p.Phases[0].Needed {
		t.Errorf("a 2%% cost: power %g, %d launches; no cost: %g, %d", cost.Phases[0].SpecPower, cost.Phases[0].Needed, p.Phases[0].SpecPower, p.Phases[0].Needed)
	}
	beyond, _ := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03, Ratio: 0.9})
	if beyond.Phases[0].Needed != 0 || len(beyond.Notes) == 0 || !strings.Contains(beyond.Notes[0], "not within the 5% margin") {
		t.Errorf("a 10%% cost under a 5%% margin: %+v", beyond)
	}
}

// Without a margin the claim is a change beyond min_effect, which the verdict's two-
// sided interval at 1 − level must clear: the plan needs the change to find.
func TestSpeedPlanWithoutAMarginFindsAChange(t *testing.T) {
	s := throughputSpec(t, "min_effect: 2%", 4)
	if _, err := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--ratio 0.9") {
		t.Fatalf("no ratio: %v", err)
	}
	p, err := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03, Ratio: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	level := verdict.PlannedLevel(s, 2, 4, false)
	if want := stats.LaunchTPower(4, 0.03, math.Log(0.98)-math.Log(0.9), level/2); math.Abs(p.Phases[0].SpecPower-want) > 1e-12 {
		t.Errorf("10%% slower, 4 launches: power %g; want %g", p.Phases[0].SpecPower, want)
	}
	faster, _ := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03, Ratio: 1.1})
	if want := stats.LaunchTPower(4, 0.03, math.Log(1.1)-math.Log(1.02), level/2); math.Abs(faster.Phases[0].SpecPower-want) > 1e-12 {
		t.Errorf("10%% faster, 4 launches: power %g; want %g", faster.Phases[0].SpecPower, want)
	}
	negligible, _ := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", CV: 0.03, Ratio: 0.99})
	if len(negligible.Notes) == 0 || !strings.Contains(negligible.Notes[0], "negligible") {
		t.Errorf("a change within min_effect: notes %q", negligible.Notes)
	}
}

// The spread comes from a recorded run, phase by phase, with its bound; a noise floor
// lets one or two launches per arm be tested by its z test.
func TestSpeedPlanFromRecordedSpreadsAndAFloor(t *testing.T) {
	s := throughputSpec(t, "throughput_margin: 5%", 2)
	rec := []verdict.GroupSpread{
		{Group: "c=1", Spread: verdict.Spread{SD: 0.01, Upper: 0.02, DF: 6}, Launches: 8},
		{Group: "c=32", Spread: verdict.Spread{SD: 0.04, Upper: 0.07, DF: 6}, Launches: 8},
	}
	p, err := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", Recorded: rec, Experiment: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Phases) != 2 || p.Phases[0].Basis != "experiment 7, 8 launches" || p.Phases[1].CVUpper != 0.07 {
		t.Fatalf("phases %+v", p.Phases)
	}
	if len(p.Notes) == 0 || !strings.Contains(p.Notes[0], "poisson 16/s") {
		t.Errorf("the unmeasured phase is not named: %q", p.Notes)
	}
	if ph := p.Phases[1]; ph.NeededUpper != 0 && ph.NeededUpper < ph.Needed {
		t.Errorf("more launches at the spread's estimate (%d) than at its bound (%d)", ph.Needed, ph.NeededUpper)
	}
	floor := &verdict.Floor{Experiment: 3, Name: "tp-aa", Speed: map[string]map[string]verdict.Spread{
		"c=1": {verdict.MetricThroughput: {SD: 0.012, Upper: 0.018, DF: 14}}}}
	p, err = ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml", Recorded: rec, Experiment: 7, Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	shift := -math.Log(0.95)
	c1 := p.Phases[0]
	for _, r := range c1.Power[:2] {
		level := verdict.PlannedLevel(s, 2, r.Launches, true)
		if r.Test != TestFloorZ || !(level > 0) || math.Abs(r.Power-stats.LaunchZPower(r.Launches, 0.01, 0.018, shift, level)) > 1e-12 {
			t.Errorf("c=1, %d launches against the floor: %+v", r.Launches, r)
		}
	}
	var text strings.Builder
	p.WriteText(&text)
	for _, want := range []string{"the floor's bound", "1.8%", "0.83 (floor)", "experiment 7, 8 launches", "not planned, since nothing measured how its launches differ: poisson 16/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the plan's text lacks %q:\n%s", want, text.String())
		}
	}
	if r := c1.Power[2]; r.Test != TestLaunchMedians {
		t.Errorf("c=1, 3 launches: %+v; the floor weighs only one or two", r)
	}
	if r := p.Phases[1].Power[0]; r.Level != 0 {
		t.Errorf("c=32, which the floor did not measure, at one launch: %+v", r)
	}
	// Nothing measured: the plan says where a spread comes from.
	if _, err := ComputeSpeed(SpeedOptions{Spec: s, SpecPath: "tp.yaml"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--cv") {
		t.Errorf("nothing measured: %v", err)
	}
	// A spec whose claim is on rates is not planned here.
	if _, err := ComputeSpeed(SpeedOptions{Spec: spec(t, "sessions: 10, rounds: 2, seed: 1", "alpha: 0.05", ""), SpecPath: "r.yaml", CV: 0.03}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a rate spec: %v", err)
	}
}
