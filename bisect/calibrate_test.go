package bisect

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// calibrate writes the bisection's calibration under launches that differ (every cell,
// 2,000 simulated bisections each) to a markdown file: `make calibrate`.
var calibrate = flag.String("calibrate", "", "simulate bisections in every cell of launch heterogeneity and write the table to this file")

// TestBisectCalibration simulates the default search of 8 changes (culprits of one or
// two changes) with launches that differ, at intra-launch correlations up to 0.3 (three
// times the design's default), 40 to 240 sessions a launch and good configurations that
// corrupt 0, 2 or 10% of sessions, with a culprit exactly at the effect and one well
// beyond it, and writes the share of bisections that named a wrong culprit or called the
// bad configuration clean. It runs with -calibrate only; the cells run side by side,
// each from its own seed.
func TestBisectCalibration(t *testing.T) {
	if *calibrate == "" {
		t.Skip("the full calibration runs with -calibrate FILE (make calibrate)")
	}
	const (
		budget  = 0.05
		changes = 8
		reps    = 2000
	)
	maxSteps := MaxSteps(changes, 2)
	design, err := stats.NewStepDesign(arms.DefaultBisectLooks, budget/float64(maxSteps), 0.10, arms.DefaultLaunchICC)
	if err != nil {
		t.Fatal(err)
	}
	type cell struct {
		icc          float64
		sessions     int
		good, excess float64
		r            SimResult
		upper        float64
	}
	var cells []*cell
	for _, icc := range []float64{0, 0.05, 0.1, 0.2, 0.3} {
		for _, sessions := range []int{40, 120, 240} {
			for _, good := range []float64{0, 0.02, 0.10} {
				for _, excess := range []float64{0.10, 0.18} {
					cells = append(cells, &cell{icc: icc, sessions: sessions, good: good, excess: excess})
				}
			}
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	errs := make([]error, len(cells))
	for i, c := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			c.r, errs[i] = Simulate(SimOptions{Changes: changes, CulpritSizes: []int{1, 2}, RateGood: c.good, RateCulprit: c.good + c.excess,
				SessionsPerLook: c.sessions, LaunchICC: c.icc, Design: design, MaxSteps: maxSteps, Reps: reps, Seed: 20261206 + uint64(i)})
			c.upper = stats.ClopperPearson(c.r.WrongCulprit+c.r.NotReproduced, c.r.Reps, 0.90).Hi
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Bisection under launches that differ\n\n")
	fmt.Fprintf(&b, "`make calibrate` simulates the default search of %d changes (a culprit of one or two changes, drawn at random), %d bisections per row: "+
		"error budget %g split over %d steps, %d looks of one launch a side, effect 10 points, the clean bound allowing for an intra-launch correlation of %g (the default `search.launch_icc`). "+
		"Each launch's corruption rate is drawn from a beta distribution around its configuration's rate with the row's intra-launch correlation (ICC), up to three times what the design allows for, "+
		"and each launch runs the row's sessions. "+
		"Wrong is the share that named a wrong culprit or called the bad configuration clean, with its one-sided 95%% upper bound; it must stay at or below the budget.\n\n",
		changes, reps, budget, maxSteps, design.Looks, design.LaunchICC)
	b.WriteString("| ICC | sessions | good | culprit | wrong | bound | right | uncertain | steps | launches |\n|---|---|---|---|---|---|---|---|---|---|\n")
	worst := 0.0
	for _, c := range cells {
		r := c.r
		worst = max(worst, r.WrongRate())
		fmt.Fprintf(&b, "| %g | %d | %.4g%% | %.4g%% | %.4f | %.4f | %.3f | %.3f | %.2f | %.0f |\n", c.icc, c.sessions, 100*c.good, 100*(c.good+c.excess),
			r.WrongRate(), c.upper, float64(r.Right)/float64(r.Reps), float64(r.Uncertain)/float64(r.Reps), r.MeanSteps, r.MeanLaunches)
		if c.upper > budget {
			t.Errorf("icc %g, %d sessions, good %g, culprit %g: P(wrong) %.4f, bound %.4f above the budget", c.icc, c.sessions, c.good, c.good+c.excess, r.WrongRate(), c.upper)
		}
	}
	fmt.Fprintf(&b, "\nLargest share wrong: %.4f (budget %g). Where good corrupts a few percent, or launches differ much, most steps end inconclusive: the search then names nothing rather than guess, and more sessions a launch or more looks give it the power. Simulated in %s.\n", worst, budget, time.Since(start).Round(time.Second))
	if err := os.WriteFile(*calibrate, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
