package verdict

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
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
	// Floor is the arm's divergence judged against the A/A floor; nil when the
	// experiment declared none, and for the floor arm itself.
	Floor *FloorComparison
	// ByTurn says, turn by turn, how many of the sessions still alike before that turn
	// (and compared at it) departed there: ByTurn[t] = {departed, at risk}. A turn's
	// context holds every turn before it, so a share that grows along ByTurn is
	// divergence growing with the context.
	ByTurn [][2]int
	// Depth is the median number of characters a departing turn agreed with the
	// baseline's before it departed; 0 when no session departed. A smaller change of
	// numerics departs later in the turn it departs in.
	Depth float64
	// launchRates are the shares of each launch's compared sessions that diverged;
	// departures each compared session's first departure, or last turn alike.
	launchRates []float64
	departures  []stats.Departure
	// depths are the departing sessions' characters alike in their departing turn.
	depths []float64
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
	perRun := map[int64][2]int{} // run -> compared, diverged
	var runs []int64
	for _, d := range rows {
		c, seen := perRun[d.RunID]
		if !seen {
			runs = append(runs, d.RunID)
		}
		c[0]++
		if d.Turn.Valid {
			c[1]++
		}
		perRun[d.RunID] = c
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
		row := DivergenceRow{Arm: v.Arms[i].Name, Compared: c.Compared, Diverged: c.Diverged,
			NotCompared: max(c.Sessions-c.Compared, 0), Example: examples[i]}
		for _, run := range runs {
			if armOfRun[run] == i && perRun[run][0] > 0 {
				row.launchRates = append(row.launchRates, float64(perRun[run][1])/float64(perRun[run][0]))
			}
		}
		var depths []float64
		for _, d := range rows {
			if armOfRun[d.RunID] != i {
				continue
			}
			if d.Turn.Valid && d.Rune.Valid {
				depths = append(depths, float64(d.Rune.Int64))
			}
			// Alike up to its first departure, or through every turn compared.
			last := d.Compared - 1
			if d.Turn.Valid {
				last = int(d.Turn.Int64)
			}
			if last >= 0 {
				row.departures = append(row.departures, stats.Departure{Turn: last, Departed: d.Turn.Valid})
			}
			for t := 0; t <= last; t++ {
				for len(row.ByTurn) <= t {
					row.ByTurn = append(row.ByTurn, [2]int{})
				}
				row.ByTurn[t][1]++
				if d.Turn.Valid && t == last {
					row.ByTurn[t][0]++
				}
			}
		}
		if len(depths) > 0 {
			slices.Sort(depths)
			row.Depth = stats.Median(depths)
			row.depths = depths
		}
		v.Divergence = append(v.Divergence, row)
	}
	v.judgeFloor()
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
func (v markdownWriter) divergenceSection() {
	b := v.b
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
	if floor := v.Design.DivergenceFloor; floor != "" {
		fmt.Fprintf(b, "Arm %s repeats the baseline's pins: how often it departs from the baseline is the A/A floor, the engine's own nondeterminism under this load, and every other arm is tested against it (one-sided: does it diverge more often?), on launches when both sides have enough of them to reach the level, else on sessions.", floor)
		if t := v.floorTest(); t != "" {
			fmt.Fprintf(b, " %s", t)
		}
		fmt.Fprintf(b, "\n\n")
	}
	floorColumn := v.Design.DivergenceFloor != ""
	if floorColumn {
		fmt.Fprintf(b, "| arm | sessions compared | diverged | not compared | against the A/A floor | first divergence |\n|---|---:|---:|---:|---|---|\n")
	} else {
		fmt.Fprintf(b, "| arm | sessions compared | diverged | not compared | first divergence |\n|---|---:|---:|---:|---|\n")
	}
	for _, d := range v.Divergence {
		against := " – |"
		switch {
		case !floorColumn:
			against = ""
		case d.Arm == v.Design.DivergenceFloor:
			against = " the floor |"
		case d.Floor != nil && d.Floor.Beyond:
			against = fmt.Sprintf(" **beyond** (p %s) |", pEq(d.Floor.P))
		case d.Floor != nil:
			against = fmt.Sprintf(" within (p %s) |", pEq(d.Floor.P))
		}
		fmt.Fprintf(b, "| %s | %d | %d (%s) | %d |%s %s |\n", d.Arm, d.Compared, d.Diverged, pct(float64(d.Diverged)/float64(max(d.Compared, 1))), d.NotCompared, against, mdCell(dash(d.Example)))
	}
	v.divergenceByTurn()
}

// divergenceByTurn shows, when sessions were compared over several turns, where they
// first departed: of the sessions still alike before each turn, how many departed at it.
// Each turn's context holds the turns before it, so a share that grows turn by turn is
// divergence that grows with the context.
func (v markdownWriter) divergenceByTurn() {
	b := v.b
	turns := 0
	for _, d := range v.Divergence {
		turns = max(turns, len(d.ByTurn))
	}
	if turns < 2 {
		return
	}
	fmt.Fprintf(b, "\nWhere sessions first departed: of the sessions still alike before each turn, those that departed at it. Every turn's context holds the turns before it, so a share that grows down the table is divergence that grows with the context.\n\n| turn |")
	for _, d := range v.Divergence {
		fmt.Fprintf(b, " %s |", d.Arm)
	}
	fmt.Fprintf(b, "\n|---:|%s\n", strings.Repeat("---:|", len(v.Divergence)))
	for t := range turns {
		fmt.Fprintf(b, "| %d |", t)
		for _, d := range v.Divergence {
			if t >= len(d.ByTurn) || d.ByTurn[t][1] == 0 {
				fmt.Fprintf(b, " – |")
				continue
			}
			c := d.ByTurn[t]
			fmt.Fprintf(b, " %d of %d (%s) |", c[0], c[1], pct(float64(c[0])/float64(c[1])))
		}
		fmt.Fprintf(b, "\n")
	}
	var growth []string
	for _, d := range v.Divergence {
		if s := growthClause(d); s != "" {
			growth = append(growth, s)
		}
	}
	if len(growth) > 0 {
		fmt.Fprintf(b, "\nThe first turn against the later ones, of the sessions still alike before each (Fisher's exact test, two-sided; the later turns pooled, a description rather than a claim): %s.\n", strings.Join(growth, "; "))
	}
}

// growthClause compares an arm's share of departures at the first turn with its share at
// the later turns, pooled: "f16-again departed at the first turn in 0 of 8, at the later
// ones in 6 of 16 (p = 0.06)"; "" when no session was still alike after the first turn.
func growthClause(d DivergenceRow) string {
	if len(d.ByTurn) < 2 {
		return ""
	}
	first := d.ByTurn[0]
	var later [2]int
	for _, c := range d.ByTurn[1:] {
		later[0] += c[0]
		later[1] += c[1]
	}
	if first[1] == 0 || later[1] == 0 {
		return ""
	}
	p := stats.FisherExact(later[0], later[1], first[0], first[1]).PTwoSided
	return fmt.Sprintf("%s departed at the first turn in %d of %d (%s), at the later ones in %d of %d (%s), p %s",
		d.Arm, first[0], first[1], pct(float64(first[0])/float64(first[1])), later[0], later[1], pct(float64(later[0])/float64(later[1])), pEq(p))
}
