package bisect

import (
	"testing"

	"github.com/arbiterlab/arbiter/stats"
)

// Thousands of bisections of 8 changes with a known culprit (one change or a pair, drawn
// at random) on simulated sessions: the probability of naming a wrong culprit, or of
// calling the bad configuration clean, stays within the error budget of 5%. The step
// design is a bisection's default for 8 changes: the budget split over MaxSteps(8, 2) =
// 9 steps, 3 looks of 50 sessions per arm, effect 10 points.
func TestSimulatedBisectionsKeepTheErrorBudget(t *testing.T) {
	const budget = 0.05
	maxSteps := MaxSteps(8, 2)
	design, err := stats.NewStepDesign(3, budget/float64(maxSteps), 0.10)
	if err != nil {
		t.Fatal(err)
	}
	reps := 10000
	if testing.Short() {
		reps = 1000
	}
	for _, sc := range []struct {
		name            string
		good, culprit   float64
		sizes           []int
		sessions        int
		wantRightAtLeat float64
	}{
		{"rates 0 vs 0.12, single or pair", 0, 0.12, []int{1, 2}, 50, 0.9},
		// A good configuration that corrupts now and then: a clean subset can now be
		// called corrupting by chance, which the budget must absorb too, and showing a
		// subset clean takes three times the sessions.
		{"rates 0.03 vs 0.15, single or pair", 0.03, 0.15, []int{1, 2}, 150, 0.7},
		// A culprit exactly at the declared effect: the clean boundary's error is at its
		// largest.
		{"rates 0 vs 0.10 (at the effect), single", 0, 0.10, []int{1}, 50, 0.7},
	} {
		t.Run(sc.name, func(t *testing.T) {
			r, err := Simulate(SimOptions{Changes: 8, CulpritSizes: sc.sizes, RateGood: sc.good, RateCulprit: sc.culprit,
				SessionsPerLook: sc.sessions, Design: design, MaxSteps: maxSteps, Reps: reps, Seed: 20260313})
			if err != nil {
				t.Fatal(err)
			}
			wrong := r.WrongRate()
			upper := stats.ClopperPearson(r.WrongCulprit+r.NotReproduced, r.Reps, 0.90).Hi
			t.Logf("%d bisections (%d sessions per arm and look): wrong culprit %d, bad called clean %d (P(wrong) = %.4f, one-sided 95%% bound %.4f), right %.3f, uncertain %.3f; steps %.2f on average, at most %d; %.0f sessions per bisection",
				r.Reps, sc.sessions, r.WrongCulprit, r.NotReproduced, wrong, upper, float64(r.Right)/float64(r.Reps),
				float64(r.Uncertain)/float64(r.Reps), r.MeanSteps, r.MostSteps, r.MeanSessions)
			if upper > budget {
				t.Errorf("P(wrong) = %.4f, its upper bound %.4f exceeds the budget %g", wrong, upper, budget)
			}
			if right := float64(r.Right) / float64(r.Reps); right < sc.wantRightAtLeat {
				t.Errorf("only %.3f of bisections named the right culprit", right)
			}
			if r.MostSteps > maxSteps {
				t.Errorf("a bisection took %d steps, over its budget of %d", r.MostSteps, maxSteps)
			}
		})
	}
}

// Under noise too, a single culprit among 8 is named in at most ceil(log2 8) + 2 steps.
func TestSimulatedSingleCulpritWithinFiveSteps(t *testing.T) {
	design, err := stats.NewStepDesign(3, 0.05/9, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Simulate(SimOptions{Changes: 8, CulpritSizes: []int{1}, RateGood: 0, RateCulprit: 0.12,
		SessionsPerLook: 50, Design: design, MaxSteps: 9, Reps: 500, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r.MostSteps > 5 {
		t.Fatalf("a single culprit took %d steps", r.MostSteps)
	}
	if r.Right < r.Reps*9/10 {
		t.Fatalf("right in %d of %d", r.Right, r.Reps)
	}
	t.Logf("single culprit among 8: right in %d of %d, at most %d steps, %.2f on average", r.Right, r.Reps, r.MostSteps, r.MeanSteps)
}
