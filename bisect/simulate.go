package bisect

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/arbiterlab/arbiter/stats"
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
	// SessionsPerLook are the sessions per arm in each look of a step.
	SessionsPerLook int
	Design          stats.StepDesign
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
	// MeanSteps and MostSteps are the steps a bisection took; MeanSessions the sessions
	// of both arms over all its steps.
	MeanSteps    float64
	MostSteps    int
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
	if o.Changes < 1 || o.Reps < 1 || o.SessionsPerLook < 1 || len(o.Design.Efficacy) == 0 {
		return SimResult{}, fmt.Errorf("bisect: simulation needs changes, repetitions, sessions per look and a step design")
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
	// The outcome at a look depends only on the look and its cumulative counts.
	memo := map[[3]int]stats.StepOutcome{}
	lookOutcome := func(k, a, b int) stats.StepOutcome {
		key := [3]int{k, a, b}
		if v, ok := memo[key]; ok {
			return v
		}
		n := k * o.SessionsPerLook
		_, v := o.Design.Look(k, stats.LookCounts{EventsA: a, SessionsA: n, EventsB: b, SessionsB: n})
		memo[key] = v
		return v
	}
	step := func(pB float64) (stats.StepOutcome, int) {
		a, b := 0, 0
		for k := 1; k <= o.Design.Looks; k++ {
			a += binomial(rng, o.SessionsPerLook, o.RateGood)
			b += binomial(rng, o.SessionsPerLook, pB)
			if v := lookOutcome(k, a, b); v.Decided() {
				return v, 2 * k * o.SessionsPerLook
			}
		}
		return stats.StepInconclusive, 2 * o.Design.Looks * o.SessionsPerLook
	}
	res := SimResult{Reps: o.Reps}
	var steps, sessions int
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
			sessions += used
			if err := s.Record(outcome); err != nil {
				return SimResult{}, err
			}
		}
		c := s.Conclusion()
		steps += c.Steps
		res.MostSteps = max(res.MostSteps, c.Steps)
		switch c.Status {
		case StatusCulprit:
			if slices.Equal(c.Culprit, culprit) {
				res.Right++
			} else {
				res.WrongCulprit++
			}
		case StatusNotReproduced:
			res.NotReproduced++
		default:
			res.Uncertain++
		}
	}
	res.MeanSteps = float64(steps) / float64(o.Reps)
	res.MeanSessions = float64(sessions) / float64(o.Reps)
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

func binomial(rng *rand.Rand, n int, p float64) int {
	x := 0
	for range n {
		if rng.Float64() < p {
			x++
		}
	}
	return x
}
