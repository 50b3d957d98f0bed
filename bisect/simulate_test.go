package bisect

import (
	"fmt"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// Bisections of 8 changes with a known culprit (one change or a pair, drawn at random)
// on simulated launches that differ from one another: the probability of naming a
// wrong culprit, or of calling the bad configuration clean, stays within the error
// budget of 5% at every launch-to-launch correlation up to 0.2 and good configurations
// that corrupt 0, 2 or 10% of sessions, with a culprit exactly at the effect (where a
// step's clean error is largest). The step design is a bisection's default for 8
// changes: the budget split over MaxSteps(8, 2) = 9 steps, 10 looks of one launch a
// side, 40 sessions each, effect 10 points.
func TestSimulatedBisectionsKeepTheErrorBudgetWhenLaunchesDiffer(t *testing.T) {
	t.Parallel()
	const budget = 0.05
	maxSteps := MaxSteps(8, 2)
	design, err := stats.NewStepDesign(arms.DefaultBisectLooks, budget/float64(maxSteps), 0.10, arms.DefaultLaunchICC)
	if err != nil {
		t.Fatal(err)
	}
	// 300 bisections a cell hold the bound here; make calibrate runs 2,000 in every cell
	// of a wider grid.
	reps := 300
	if testing.Short() {
		reps = 100
	}
	for _, icc := range []float64{0, 0.05, 0.2} {
		for _, good := range []float64{0, 0.02, 0.10} {
			t.Run(fmt.Sprintf("icc %g good %g", icc, good), func(t *testing.T) {
				r, err := Simulate(SimOptions{Changes: 8, CulpritSizes: []int{1, 2}, RateGood: good, RateCulprit: good + 0.10,
					SessionsPerLook: 40, LaunchICC: icc, Design: design, MaxSteps: maxSteps, Reps: reps, Seed: 20261202})
				if err != nil {
					t.Fatal(err)
				}
				wrong := r.WrongRate()
				upper := stats.ClopperPearson(r.WrongCulprit+r.NotReproduced, r.Reps, 0.90).Hi
				t.Logf("%d bisections: wrong culprit %d, bad called clean %d (P(wrong) = %.4f, one-sided 95%% bound %.4f), right %.3f, uncertain %.3f; steps %.2f on average, at most %d; %.0f launches per bisection",
					r.Reps, r.WrongCulprit, r.NotReproduced, wrong, upper, float64(r.Right)/float64(r.Reps),
					float64(r.Uncertain)/float64(r.Reps), r.MeanSteps, r.MostSteps, r.MeanLaunches)
				if upper > budget {
					t.Errorf("P(wrong) = %.4f, its upper bound %.4f exceeds the budget %g", wrong, upper, budget)
				}
				if r.MostSteps > maxSteps {
					t.Errorf("a bisection took %d steps, over its budget of %d", r.MostSteps, maxSteps)
				}
				// Where launches agree and good is clean, the search finds the culprit.
				if icc == 0 && good == 0 && float64(r.Right) < 0.6*float64(r.Reps) {
					t.Errorf("only %d of %d bisections named the right culprit", r.Right, r.Reps)
				}
			})
		}
	}
}

// Under noise too, a single culprit among 8 that corrupts well beyond the effect is
// named in at most ceil(log2 8) + 2 steps.
func TestSimulatedSingleCulpritWithinFiveSteps(t *testing.T) {
	t.Parallel()
	design, err := stats.NewStepDesign(arms.DefaultBisectLooks, 0.05/9, 0.10, arms.DefaultLaunchICC)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Simulate(SimOptions{Changes: 8, CulpritSizes: []int{1}, RateGood: 0, RateCulprit: 0.18,
		SessionsPerLook: 40, LaunchICC: 0.05, Design: design, MaxSteps: 9, Reps: 200, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r.MostSteps > 5 {
		t.Fatalf("a single culprit took %d steps", r.MostSteps)
	}
	if r.Right < r.Reps*9/10 {
		t.Fatalf("right in %d of %d", r.Right, r.Reps)
	}
	t.Logf("single culprit among 8: right in %d of %d, at most %d steps, %.2f on average, %.0f launches", r.Right, r.Reps, r.MostSteps, r.MeanSteps, r.MeanLaunches)
}
