package verdict

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/store"
)

// DivergenceRow is how far one arm's outputs departed from the baseline's at temperature
// 0, where session i of every arm is the same conversation: the divergence pass compares
// them turn by turn after the experiment.
type DivergenceRow struct {
	Arm      string
	Compared int // sessions compared with the baseline's
	Diverged int // of which departed from it
	// NotCompared are the arm's sessions left out: aborted on purpose, cut off or failed
	// before a turn both sides completed, or without a baseline session.
	NotCompared int
	// Example says where the first diverging session departed, and how.
	Example string
}

// loadDivergence reads the divergence pass's results, when it ran.
func (v *Verdict) loadDivergence(ctx context.Context, db *sqlx.DB, index map[int64]int) error {
	counts, err := store.DivergenceCounts(ctx, db, v.Experiment.ID)
	if err != nil || len(counts) == 0 {
		return err
	}
	rows, err := store.Divergences(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	armOfRun := map[int64]int{}
	for _, r := range v.Runs {
		armOfRun[r.ID] = v.armIndex(r.Arm)
	}
	examples := map[int]string{}
	for _, d := range rows {
		i, ok := armOfRun[d.RunID]
		if !ok || !d.Turn.Valid || examples[i] != "" {
			continue
		}
		examples[i] = fmt.Sprintf("session %d, turn %d (%s, rune %d): %q, baseline %q", d.Session, d.Turn.Int64,
			d.Field.String, d.Rune.Int64, short(d.ArmExcerpt.String), short(d.BaselineExcerpt.String))
	}
	for _, c := range counts {
		i, ok := index[c.ArmID]
		if !ok {
			continue
		}
		v.Divergence = append(v.Divergence, DivergenceRow{Arm: v.Arms[i].Name, Compared: c.Compared, Diverged: c.Diverged,
			NotCompared: max(c.Sessions-c.Compared, 0), Example: examples[i]})
	}
	return nil
}

// short keeps an excerpt to a table cell's length.
func short(s string) string {
	r := []rune(s)
	if len(r) > 20 {
		return string(r[:20]) + "…"
	}
	return s
}

// divergenceSection says where each arm's outputs departed from the baseline's.
func (v *Verdict) divergenceSection(b *strings.Builder) {
	if len(v.Divergence) == 0 {
		return
	}
	counted := false
	for _, d := range v.Detectors {
		counted = counted || d.Detector == "divergence"
	}
	fmt.Fprintf(b, "\n## Divergence from the baseline\n\n")
	fmt.Fprintf(b, "At temperature 0 session *i* is the same conversation in every arm, so each arm's replies can be compared with the baseline's turn by turn; a session diverges at its first differing turn. ")
	if counted {
		fmt.Fprintf(b, "The spec lists `divergence` as a detector, so a diverging session counts as corrupted.\n\n")
	} else {
		fmt.Fprintf(b, "This is informational: an arm that changes numerics may diverge without being wrong, so divergence counts as corruption only when the spec lists the `divergence` detector.\n\n")
	}
	fmt.Fprintf(b, "Only what the workload made comparable is compared: a reply aborted on purpose (an abort cascade's), cut off or failed, and what follows it in its session, is left out, and a session left with no turn to compare is counted beside.\n\n")
	fmt.Fprintf(b, "| arm | sessions compared | diverged | not compared | first divergence |\n|---|---:|---:|---:|---|\n")
	for _, d := range v.Divergence {
		fmt.Fprintf(b, "| %s | %d | %d (%s) | %d | %s |\n", d.Arm, d.Compared, d.Diverged, pct(float64(d.Diverged)/float64(max(d.Compared, 1))), d.NotCompared, mdCell(dash(d.Example)))
	}
}
