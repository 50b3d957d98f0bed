package verdict

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/arbiterlab/arbiter/internal/ui"
	"github.com/arbiterlab/arbiter/store"
)

// WriteSummary writes the verdict for a terminal (`arbiter show`): the experiment's
// status and arbiter version, one line per arm (its pins, its launches by how they
// ended, analysed sessions, corrupted, lost, and its decision against the baseline), the
// headline wrapped to the terminal, and where the arms ran.
func (v *Verdict) WriteSummary(w io.Writer) error {
	e := v.Experiment
	fmt.Fprintf(w, "experiment %d (%s): %s, started %s by arbiter %s\n", e.ID, ui.Safe(e.Name), e.State(), When(e.CreatedAt), ui.Safe(e.Version))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ARM\tPINS\tLAUNCHES\tSESSIONS\tCORRUPTED\tLOST\tDECISION")
	for i, a := range v.Arms {
		decision := "baseline"
		if i != v.Baseline {
			decision = v.DecisionWords(i)
		}
		corrupted := fmt.Sprint(a.Corrupted)
		if a.Sessions > 0 {
			corrupted += " (" + pct(float64(a.Corrupted)/float64(a.Sessions)) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", a.Name, ui.Safe(dash(a.Pins)), a.Launches.words(), a.Sessions, corrupted, a.Lost, decision)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, line := range v.Headline() {
		fmt.Fprint(w, ui.Wrap(line, "", 100))
	}
	if lines := v.Placement(); len(lines) > 0 {
		fmt.Fprintf(w, "\nWhere the arms ran (%s):\n%s\n",
			Command(fmt.Sprintf("query %q", store.PlacementQuery(e.ID)), v.DB),
			strings.Join(lines, "\n"))
	}
	return nil
}

// words says an arm's launches by how they ended: "2 done, 1 crashed"; "none".
func (l LaunchCounts) words() string {
	var parts []string
	for _, c := range []struct {
		n    int
		word string
	}{{l.Done, "done"}, {l.Crashed, "crashed"}, {l.Wedged, "wedged"}, {l.Erroring, "erroring"}, {l.TimedOut, "timed out"},
		{l.Failed, "failed"}, {l.Interrupted, "interrupted"}, {l.NodeLost, "node lost"}, {l.Unfinished, "unfinished"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.word))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
