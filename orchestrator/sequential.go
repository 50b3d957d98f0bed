package orchestrator

import (
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// sequentialPlan is a group-sequential design over blocks, decided on launches: after
// every block but the last, each arm's launches so far are compared with the
// baseline's by the randomization test on their corruption rates, and the experiment
// stops scheduling once every comparison rejects at its level. The levels are the
// verdict's for a sequential arm: the corruption claims' share of alpha
// (stats.SequentialShare) spread over the looks whose launches can reach it
// (stats.LookLevels), so that stopping at any look keeps each claim's error at its share
// (Bonferroni over the looks) and a look that could never reject costs nothing. A
// session-level boundary would stop on a difference between two launches.
type sequentialPlan struct {
	levels []float64 // by look
	looks  int
	names  []string
	prev   []armCounts
	rates  [][]float64 // per arm, each block's launch rate
}

func newSequentialPlan(spec *arms.Spec, names []string) (*sequentialPlan, error) {
	nArms := len(names)
	looks := spec.Analysis.Sequential.Looks
	if looks <= 1 || nArms < 2 {
		return nil, nil
	}
	share := stats.SequentialShare(spec.Analysis.Alpha, nArms-1)
	if !(share > 0 && share < 1) {
		return nil, fmt.Errorf("sequential design: alpha %g gives no level to test at", spec.Analysis.Alpha)
	}
	return &sequentialPlan{levels: stats.SequentialLookLevels(spec.Analysis.Alpha, nArms-1, looks), looks: looks, names: names, prev: make([]armCounts, nArms), rates: make([][]float64, nArms)}, nil
}

// look takes one look after a block, at the cumulative counts, and reports whether to
// stop, and why.
func (p *sequentialPlan) look(counts []armCounts, baseline int) (bool, string) {
	for i, c := range counts {
		d := armCounts{sessions: c.sessions - p.prev[i].sessions, corrupted: c.corrupted - p.prev[i].corrupted}
		if d.sessions > 0 {
			p.rates[i] = append(p.rates[i], float64(d.corrupted)/float64(d.sessions))
		}
		p.prev[i] = c
	}
	var reasons []string
	for i := range counts {
		if i == baseline {
			continue
		}
		look := min(len(p.rates[baseline]), len(p.rates[i]))
		if look < 1 || look > len(p.levels) || !(p.levels[look-1] > 0) {
			return false, ""
		}
		level := p.levels[look-1]
		r, err := stats.LaunchPermutation(p.rates[baseline], p.rates[i], 0)
		if err != nil || !stats.Reject(r.MinP, level) || !stats.Reject(r.P, level) {
			return false, ""
		}
		reasons = append(reasons, fmt.Sprintf("%s against %s: launch p = %.3g ≤ %.3g over %d and %d launches", p.names[i], p.names[baseline], r.P, level, r.LaunchesB, r.LaunchesA))
	}
	return len(reasons) > 0, strings.Join(reasons, "; ")
}
