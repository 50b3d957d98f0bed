package bisect

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// calibrate writes the bisection's calibration under launches that differ (every cell,
// 2,000 simulated bisections each) to a markdown file: `make calibrate`.
var calibrate = flag.String("calibrate", "", "simulate bisections in every cell of launch heterogeneity and write the table to this file")

// TestBisectCalibration simulates the default search of 8 changes (culprits of one or
// two changes) with launches that differ at every intra-launch correlation and base
// rate of the launch calibration, with a culprit exactly at the effect and one well
// beyond it, and writes the share of bisections that named a wrong culprit or called
// the bad configuration clean. It runs with -calibrate only.
func TestBisectCalibration(t *testing.T) {
	if *calibrate == "" {
		t.Skip("the full calibration runs with -calibrate FILE (make calibrate)")
	}
	const (
		budget   = 0.05
		changes  = 8
		sessions = 40
		reps     = 2000
	)
	maxSteps := MaxSteps(changes, 2)
	design, err := stats.NewStepDesign(arms.DefaultBisectLooks, budget/float64(maxSteps), 0.10, arms.DefaultLaunchICC)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "# Bisection under launches that differ\n\n")
	fmt.Fprintf(&b, "`make calibrate` simulates the default search of %d changes (a culprit of one or two changes, drawn at random), %d bisections per row: "+
		"error budget %g split over %d steps, %d looks of one launch a side with %d sessions each, effect 10 points, the clean bound allowing for an intra-launch correlation of %g. "+
		"Each launch's corruption rate is drawn from a beta distribution around its configuration's rate with the row's intra-launch correlation (ICC). "+
		"Wrong is the share that named a wrong culprit or called the bad configuration clean, with its one-sided 95%% upper bound; it must stay at or below the budget.\n\n",
		changes, reps, budget, maxSteps, design.Looks, sessions, design.LaunchICC)
	b.WriteString("| ICC | good | culprit | wrong | bound | right | uncertain | steps | launches |\n|---|---|---|---|---|---|---|---|---|\n")
	worst := 0.0
	seed := uint64(20261202)
	for _, icc := range []float64{0, 0.05, 0.2} {
		for _, good := range []float64{0, 0.02, 0.10} {
			for _, excess := range []float64{0.10, 0.18} {
				seed++
				r, err := Simulate(SimOptions{Changes: changes, CulpritSizes: []int{1, 2}, RateGood: good, RateCulprit: good + excess,
					SessionsPerLook: sessions, LaunchICC: icc, Design: design, MaxSteps: maxSteps, Reps: reps, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				upper := stats.ClopperPearson(r.WrongCulprit+r.NotReproduced, r.Reps, 0.90).Hi
				worst = max(worst, r.WrongRate())
				fmt.Fprintf(&b, "| %g | %.4g%% | %.4g%% | %.4f | %.4f | %.3f | %.3f | %.2f | %.0f |\n", icc, 100*good, 100*(good+excess),
					r.WrongRate(), upper, float64(r.Right)/float64(r.Reps), float64(r.Uncertain)/float64(r.Reps), r.MeanSteps, r.MeanLaunches)
				if upper > budget {
					t.Errorf("icc %g, good %g, culprit %g: P(wrong) %.4f, bound %.4f above the budget", icc, good, good+excess, r.WrongRate(), upper)
				}
			}
		}
	}
	fmt.Fprintf(&b, "\nLargest share wrong: %.4f (budget %g). Where good corrupts a few percent, or launches differ much, most steps end inconclusive: the search then names nothing rather than guess, and more sessions a launch or more looks give it the power. Simulated in %s.\n", worst, budget, time.Since(start).Round(time.Second))
	if err := os.WriteFile(*calibrate, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
