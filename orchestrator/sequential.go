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
// stops scheduling once every comparison rejects at its level. The level is the
// verdict's for a sequential arm: the corruption claims' share of alpha
// (stats.PrimaryLevel) divided over the looks, so that taking a look after every block
// and stopping at any of them keeps each claim's error at its share (Bonferroni over
// the looks). With few launches the test cannot reach that level at all, so the
// experiment cannot stop before enough launches have run; a session-level boundary
// would stop on a difference between two launches.
type sequentialPlan struct {
	level float64
	looks int
	names []string
	prev  []armCounts
	rates [][]float64 // per arm, each block's launch rate
}

func newSequentialPlan(spec *arms.Spec, names []string) (*sequentialPlan, error) {
	nArms := len(names)
	looks := spec.Analysis.Sequential.Looks
	if looks <= 1 || nArms < 2 {
		return nil, nil
	}
	level := stats.PrimaryLevel(spec.Analysis.Alpha, nArms-1) / float64(looks)
	if !(level > 0 && level < 1) {
		return nil, fmt.Errorf("sequential design: alpha %g gives no level to test at", spec.Analysis.Alpha)
	}
	return &sequentialPlan{level: level, looks: looks, names: names, prev: make([]armCounts, nArms), rates: make([][]float64, nArms)}, nil
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
		r, err := stats.LaunchPermutation(p.rates[baseline], p.rates[i], 0)
		if err != nil || !stats.Reject(r.MinP, p.level) || !stats.Reject(r.P, p.level) {
			return false, ""
		}
		reasons = append(reasons, fmt.Sprintf("%s against %s: launch p = %.3g ≤ %.3g over %d and %d launches", p.names[i], p.names[baseline], r.P, p.level, r.LaunchesB, r.LaunchesA))
	}
	return len(reasons) > 0, strings.Join(reasons, "; ")
}
