package bisect

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// SimOptions describe simulated bisections: a known culprit among the changes, binomial
// sessions, and the same search and step design a real bisection uses.
type SimOptions struct {
	// Changes is how many changes separate good from bad.
	Changes int
	// CulpritSizes are the sizes a culprit may have, drawn uniformly for each bisection
	// with its members drawn uniformly among the changes (default {1, 2}).
	CulpritSizes []int
	// RateGood is the corruption rate of a configuration without the culprit,
	// RateCulprit of one with it.
	RateGood, RateCulprit float64
	// SessionsPerLook are the sessions of each launch (one launch a side per look).
	SessionsPerLook int
	// LaunchICC is how much launches of one configuration differ: each launch's rate is
	// drawn from a beta distribution around the configuration's rate with this
	// intra-launch correlation (0: every launch has the configuration's rate).
	LaunchICC float64
	Design    stats.StepDesign
	// MaxSteps bounds each search; CheckRevert adds the revert check.
	MaxSteps    int
	CheckRevert bool
	Reps        int
	Seed        uint64
}

// SimResult counts how simulated bisections ended.
type SimResult struct {
	Reps int
	// Right named exactly the culprit; WrongCulprit named another set of changes;
	// NotReproduced called the bad configuration clean although it held the culprit;
	// Uncertain named nothing.
	Right, WrongCulprit, NotReproduced, Uncertain int
	// MeanSteps and MostSteps are the steps a bisection took; MeanLaunches the launches
	// of both arms over all its steps and MeanSessions their sessions.
	MeanSteps    float64
	MostSteps    int
	MeanLaunches float64
	MeanSessions float64
}

// WrongRate is the share of bisections that named a wrong culprit or called the bad
// configuration clean: the errors the budget bounds.
func (r SimResult) WrongRate() float64 {
	return float64(r.WrongCulprit+r.NotReproduced) / float64(r.Reps)
}

// Simulate runs o.Reps bisections, each step a group-sequential three-way test of
// simulated sessions, the search the one a real bisection runs.
func Simulate(o SimOptions) (SimResult, error) {
	if o.Changes < 1 || o.Reps < 1 || o.SessionsPerLook < 1 || len(o.Design.Levels) == 0 || !(o.LaunchICC >= 0 && o.LaunchICC < 1) {
		return SimResult{}, fmt.Errorf("bisect: simulation needs changes, repetitions, sessions per look, a step design and an ICC in [0, 1)")
	}
	sizes := o.CulpritSizes
	if len(sizes) == 0 {
		sizes = []int{1, 2}
	}
	for _, k := range sizes {
		if k < 1 || k > o.Changes {
			return SimResult{}, fmt.Errorf("bisect: a culprit of %d of %d changes", k, o.Changes)
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x5bd1e995))
	blocks := make([]stats.LookCounts, 0, o.Design.Looks)
	step := func(pB float64) (stats.StepOutcome, int) {
		blocks = blocks[:0]
		n := o.SessionsPerLook
		for k := 1; k <= o.Design.Looks; k++ {
			blocks = append(blocks, stats.LookCounts{
				EventsA: stats.BetaBinomialDraw(rng, n, o.RateGood, o.LaunchICC), SessionsA: n,
				EventsB: stats.BetaBinomialDraw(rng, n, pB, o.LaunchICC), SessionsB: n})
			if _, v := o.Design.Look(blocks); v.Decided() {
				return v, k
			}
		}
		return stats.StepInconclusive, o.Design.Looks
	}
	res := SimResult{Reps: o.Reps}
	var steps, launches int
	for range o.Reps {
		k := sizes[rng.IntN(len(sizes))]
		culprit := rng.Perm(o.Changes)[:k]
		slices.Sort(culprit)
		s, err := NewSearch(o.Changes, o.MaxSteps, o.CheckRevert)
		if err != nil {
			return SimResult{}, err
		}
		for {
			p, ok := s.Next()
			if !ok {
				break
			}
			rate := o.RateGood
			if holdsAll(p.Changes, culprit) {
				rate = o.RateCulprit
			}
			outcome, used := step(rate)
			launches += 2 * used
			if err := s.Record(outcome); err != nil {
				return SimResult{}, err
			}
		}
		c := s.Conclusion()
		steps += c.Steps
		res.MostSteps = max(res.MostSteps, c.Steps)
		switch c.Status {
		case store.ConclusionCulprit:
			if slices.Equal(c.Culprit, culprit) {
				res.Right++
			} else {
				res.WrongCulprit++
			}
		case store.ConclusionNotReproduced:
			res.NotReproduced++
		default:
			res.Uncertain++
		}
	}
	res.MeanSteps = float64(steps) / float64(o.Reps)
	res.MeanLaunches = float64(launches) / float64(o.Reps)
	res.MeanSessions = res.MeanLaunches * float64(o.SessionsPerLook)
	return res, nil
}

func holdsAll(set, members []int) bool {
	for _, m := range members {
		if !slices.Contains(set, m) {
			return false
		}
	}
	return true
}
