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
		v.Divergence = append(v.Divergence, DivergenceRow{Arm: v.Arms[i].Name, Compared: c.Compared, Diverged: c.Diverged, Example: examples[i]})
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
	fmt.Fprintf(b, "| arm | sessions compared | diverged | first divergence |\n|---|---:|---:|---|\n")
	for _, d := range v.Divergence {
		fmt.Fprintf(b, "| %s | %d | %d (%s) | %s |\n", d.Arm, d.Compared, d.Diverged, pct(float64(d.Diverged)/float64(max(d.Compared, 1))), mdCell(dash(d.Example)))
	}
}
