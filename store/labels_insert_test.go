package store

import (
	"fmt"
	"testing"
)

// Every label of a turn is stored as it was given, in any number, and a detector named
// twice in one turn keeps its last label.
func TestTurnLabelsAreStoredAsGiven(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{})
	want := map[string]string{}
	for turn, n := range []int{0, 1, 4, 16, 19, 33} {
		var labels []Label
		for i := range n {
			l := Label{Detector: fmt.Sprintf("d%02d", i), Corrupted: i%3 == 0, Reason: fmt.Sprintf("turn %d label %d", turn, i)}
			labels = append(labels, l)
			want[fmt.Sprintf("%d/%s", turn, l.Detector)] = fmt.Sprintf("%t %s", l.Corrupted, l.Reason)
		}
		if n > 2 {
			// The same detector again, last: its second label is the one kept.
			labels = append(labels, Label{Detector: "d01", Corrupted: true, Reason: "again"})
			want[fmt.Sprintf("%d/d01", turn)] = "true again"
		}
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: 0, Index: turn, Labels: labels})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Turn      int    `db:"turn_index"`
		Detector  string `db:"detector"`
		Corrupted bool   `db:"corrupted"`
		Reason    string `db:"reason"`
	}
	if err := s.DB().Select(&rows, `SELECT turn_index, detector, corrupted, reason FROM labels WHERE run_id = ?`, run); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[fmt.Sprintf("%d/%s", r.Turn, r.Detector)] = fmt.Sprintf("%t %s", r.Corrupted, r.Reason)
	}
	if len(rows) != len(want) || len(got) != len(want) {
		t.Fatalf("%d label rows (%d distinct), want %d", len(rows), len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s: %q, want %q", k, got[k], v)
		}
	}
}
