package orchestrator

import (
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// sequentialPlan is a group-sequential design over blocks: after every block but the
// last, each arm is compared with the baseline on the cumulative sessions, and the
// experiment stops scheduling once every comparison has crossed its Lan-DeMets
// O'Brien-Fleming boundary. With several arms each comparison gets alpha/(arms-1)
// (Bonferroni), so that stopping keeps the family's error at alpha.
type sequentialPlan struct {
	design []stats.Boundary
	looks  [][]stats.LookCounts // per arm, the looks taken so far
}

func newSequentialPlan(spec *arms.Spec, nArms int) (*sequentialPlan, error) {
	looks := spec.Analysis.Sequential.Looks
	if looks <= 1 || nArms < 2 {
		return nil, nil
	}
	alpha := spec.Analysis.Alpha / float64(nArms-1)
	design, err := stats.Boundaries(looks, alpha, nil)
	if err != nil {
		return nil, fmt.Errorf("sequential design: %w", err)
	}
	return &sequentialPlan{design: design, looks: make([][]stats.LookCounts, nArms)}, nil
}

// look takes one look at the cumulative counts and reports whether to stop, and why.
func (p *sequentialPlan) look(counts []armCounts, baseline int) (bool, string) {
	base := counts[baseline]
	for i, c := range counts {
		if i != baseline {
			p.looks[i] = append(p.looks[i], stats.LookCounts{EventsA: base.corrupted, SessionsA: base.sessions,
				EventsB: c.corrupted, SessionsB: c.sessions})
		}
	}
	var reasons []string
	for i := range counts {
		if i == baseline {
			continue
		}
		res, err := stats.SequentialDecision(p.looks[i], p.design)
		if err != nil || !res.Significant {
			return false, ""
		}
		reasons = append(reasons, res.Decision)
	}
	return len(reasons) > 0, strings.Join(reasons, " ")
}
