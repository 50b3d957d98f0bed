package plan

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
)

// An abort cascade's claim is on wedges, one yes or no per launch: its plan is on the
// shares of launches that wedge, exact, and says nothing of sessions.
func TestPlanOfAnAbortCascadeIsOnWedgedLaunches(t *testing.T) {
	s, _ := loadExample(t, "deadlock.yaml")
	if _, err := Compute(Options{Spec: s, SpecPath: "deadlock.yaml"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "shares of launches that wedge") {
		t.Fatalf("no shares: %v", err)
	}
	s.Analysis.Plan.P0, s.Analysis.Plan.P1 = 0, 1
	p, err := Compute(Options{Spec: s, SpecPath: "deadlock.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	// Every overlap-on launch wedges and no overlap-off launch does: four launches a side
	// are the fewest whose randomization test reaches the claim's share (2/70 ≤ 0.03).
	if p.Outcome != "wedges" || p.LaunchesNeeded != 4 || p.LaunchesPerArm != 4 || p.LaunchPower != 1 || p.LaunchTest != string(stats.TestRandomization) {
		t.Errorf("plan %+v", p)
	}
	for _, r := range p.PowerByLaunches {
		if (r.Launches < 4) != (r.Level == 0) {
			t.Errorf("%d launches per arm: %+v", r.Launches, r)
		}
	}
	if _, err := json.Marshal(p); err != nil {
		t.Errorf("the plan does not encode: %v", err)
	}
	var text strings.Builder
	p.WriteText(&text)
	if out := text.String(); !strings.Contains(out, "detect launches that wedge 100% of the time against 0%") || strings.Contains(out, "sessions per arm") || strings.Contains(out, "ICC") {
		t.Errorf("the plan's text:\n%s", out)
	}

	// Its time is the recorded experiment's, scaled by the launches: a cascade waits out
	// stalls, which no turn's pace predicts.
	s.Blocks = 8
	p, err = Compute(Options{Spec: s, SpecPath: "deadlock.yaml", History: Recorded{ExperimentID: 5, WallSeconds: 60, LaunchesPerArm: 4, TurnSeconds: 0.01}})
	if err != nil || p.WallTimeSeconds == nil || *p.WallTimeSeconds != 120 || !strings.Contains(p.WallTimeBasis, "experiment 5 took 1m0s for 4 launch(es) per arm") {
		t.Errorf("wall time of 8 launches per arm after 4 took a minute: %v, %+v", err, p)
	}
	s.Blocks = 4
	// The power is exact: every pair of wedged counts, weighed by its binomial chance,
	// judged by the randomization test on the launches' yes or no.
	s.Analysis.Plan.P0, s.Analysis.Plan.P1 = 0.1, 0.8
	p, err = Compute(Options{Spec: s, SpecPath: "deadlock.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.PowerByLaunches {
		if r.Launches != 6 && r.Launches != 8 {
			continue
		}
		n := r.Launches
		want := 0.0
		for x := 0; x <= n; x++ {
			for y := 0; y <= n; y++ {
				a, b := make([]int, n), make([]int, n)
				for i := range x {
					a[i] = 1
				}
				for i := range y {
					b[i] = 1
				}
				if pv, _ := countsP(a, b, nil); stats.Reject(pv, r.Level) {
					want += binom(n, x, 0.1) * binom(n, y, 0.8)
				}
			}
		}
		if math.Abs(r.Power-want) > 1e-9 {
			t.Errorf("%d launches per arm: power %.10g; by enumeration %.10g", n, r.Power, want)
		}
	}
}

func binom(n, k int, p float64) float64 {
	c := 1.0
	for i := range k {
		c = c * float64(n-i) / float64(i+1)
	}
	return c * math.Pow(p, float64(k)) * math.Pow(1-p, float64(n-k))
}
