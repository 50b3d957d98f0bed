package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// seedTwoArms records a baseline and a treatment run, two sessions of two turns each; the
// treatment's session 1 turn 0 was already flagged by a per-response detector.
func seedTwoArms(t *testing.T, s *Store) (exp, baseRun, armRun, armID int64) {
	t.Helper()
	ctx := context.Background()
	exp, baseArm, baseRun := seedExperiment(t, s)
	armID, err := s.AddArm(ctx, Arm{ExperimentID: exp, Name: "treatment", Position: 1, Pins: "{}", Command: "[]", Env: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	armRun, err = s.StartRun(ctx, Run{ExperimentID: exp, ArmID: armID, Runtime: "process", Status: "done", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	for _, r := range []struct{ run, arm int64 }{{baseRun, baseArm}, {armRun, armID}} {
		for i := range 2 {
			for j := range 2 {
				bad := r.run == armRun && i == 1 && j == 0
				w.Turn(Turn{ExperimentID: exp, RunID: r.run, ArmID: r.arm, Session: i, Index: j, Started: time.Now(),
					StatusCode: 200, FinishReason: "stop", Content: "answer", Request: "{}", Response: "{}", Corrupted: bad,
					Labels: []Label{{Detector: "dsml-leak", Corrupted: bad}}})
			}
			var first *int
			if r.run == armRun && i == 1 {
				first = new(int)
			}
			w.Session(Session{ExperimentID: exp, RunID: r.run, ArmID: r.arm, Index: i, Status: "ok", Turns: 2,
				Corrupted: first != nil, FirstCorruptedTurn: first})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return exp, baseRun, armRun, armID
}

func TestWriteDivergenceReplacesRowsAndSyncsFlags(t *testing.T) {
	secret := "hf_divergenceSecret"
	s := newStore(t, Options{Redact: func(v string) string { return strings.ReplaceAll(v, secret, "[redacted]") }})
	ctx := context.Background()
	exp, baseRun, armRun, armID := seedTwoArms(t, s)
	rows := []SessionDivergence{
		{RunID: armRun, Session: 0, BaselineRunID: baseRun, Compared: 2, Turn: sql.NullInt64{Int64: 1, Valid: true},
			Field: sql.NullString{String: "content", Valid: true}, Rune: sql.NullInt64{Int64: 3, Valid: true},
			BaselineExcerpt: sql.NullString{String: "ans", Valid: true}, ArmExcerpt: sql.NullString{String: "an " + secret, Valid: true}},
		{RunID: armRun, Session: 1, BaselineRunID: baseRun, Compared: 2},
	}
	// Counted as corruption: session 0 becomes corrupted at turn 1.
	labels := []DivergenceLabel{{RunID: armRun, Session: 0, Turn: 0}, {RunID: armRun, Session: 0, Turn: 1, Corrupted: true, Reason: "diverges"},
		{RunID: armRun, Session: 1, Turn: 0}, {RunID: armRun, Session: 1, Turn: 1}}
	if err := s.WriteDivergence(ctx, exp, rows, labels); err != nil {
		t.Fatal(err)
	}
	sessionFlags := func() map[int][2]int64 {
		var got []struct {
			Index     int           `db:"session_index"`
			Corrupted bool          `db:"corrupted"`
			First     sql.NullInt64 `db:"first_corrupted_turn"`
		}
		if err := s.DB().Select(&got, `SELECT session_index, corrupted, first_corrupted_turn FROM sessions WHERE run_id = ?`, armRun); err != nil {
			t.Fatal(err)
		}
		out := map[int][2]int64{}
		for _, g := range got {
			f := int64(-1)
			if g.First.Valid {
				f = g.First.Int64
			}
			c := int64(0)
			if g.Corrupted {
				c = 1
			}
			out[g.Index] = [2]int64{c, f}
		}
		return out
	}
	if got := sessionFlags(); got[0] != [2]int64{1, 1} || got[1] != [2]int64{1, 0} {
		t.Errorf("sessions after a counted divergence = %v", got)
	}
	counts, err := DivergenceCounts(ctx, s.DB(), exp)
	if err != nil || len(counts) != 1 || counts[0] != (DivergenceCount{ArmID: armID, Compared: 2, Diverged: 1, Sessions: 2}) {
		t.Errorf("counts = %+v, %v", counts, err)
	}
	got, err := Divergences(ctx, s.DB(), exp)
	if err != nil || len(got) != 2 || got[0].ArmExcerpt.String != "an [redacted]" || got[0].Field.String != "content" || got[1].Turn.Valid {
		t.Errorf("divergences = %+v, %v", got, err)
	}

	// Again, informational: the rows are replaced, the divergence labels go, and the
	// flags fall back to what the other detectors said.
	rows[0].Rune = sql.NullInt64{Int64: 4, Valid: true}
	if err := s.WriteDivergence(ctx, exp, rows, nil); err != nil {
		t.Fatal(err)
	}
	if got := sessionFlags(); got[0] != [2]int64{0, -1} || got[1] != [2]int64{1, 0} {
		t.Errorf("sessions after an informational pass = %v", got)
	}
	var n, labelsLeft int
	s.DB().Get(&n, `SELECT count(*) FROM divergences WHERE experiment_id = ? AND rune = 4`, exp)
	s.DB().Get(&labelsLeft, `SELECT count(*) FROM labels WHERE detector = ?`, DivergenceDetector)
	if n != 1 || labelsLeft != 0 {
		t.Errorf("rows with the new rune = %d, divergence labels = %d", n, labelsLeft)
	}
	var turnFlags int
	s.DB().Get(&turnFlags, `SELECT sum(corrupted) FROM turns WHERE experiment_id = ?`, exp)
	if turnFlags != 1 {
		t.Errorf("corrupted turns = %d, want the one dsml-leak flagged", turnFlags)
	}
}

// A pass whose context is cancelled (Ctrl-C at a run's end) reads nothing and keeps
// nothing: the rows of the pass before it stay as they were.
func TestDivergencePassCancelledKeepsTheRowsBefore(t *testing.T) {
	s := newStore(t, Options{})
	exp, baseRun, armRun, _ := seedTwoArms(t, s)
	rows := []SessionDivergence{{RunID: armRun, Session: 0, BaselineRunID: baseRun, Compared: 2}}
	if err := s.WriteDivergence(context.Background(), exp, rows, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.OutputTurns(ctx, exp); !errors.Is(err, context.Canceled) {
		t.Errorf("OutputTurns after cancel: %v, want context.Canceled", err)
	}
	again := []SessionDivergence{{RunID: armRun, Session: 1, BaselineRunID: baseRun, Compared: 2}}
	if err := s.WriteDivergence(ctx, exp, again, []DivergenceLabel{{RunID: armRun, Session: 1, Turn: 0, Corrupted: true}}); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteDivergence after cancel: %v, want context.Canceled", err)
	}
	var sessions []int
	if err := s.DB().Select(&sessions, `SELECT session_index FROM divergences WHERE experiment_id = ?`, exp); err != nil {
		t.Fatal(err)
	}
	var labels int
	s.DB().Get(&labels, `SELECT count(*) FROM labels WHERE detector = ?`, DivergenceDetector)
	if len(sessions) != 1 || sessions[0] != 0 || labels != 0 {
		t.Errorf("after a cancelled pass: divergences of sessions %v, %d divergence labels; want session 0's, none", sessions, labels)
	}
}

// syncCorrupted writes only the rows whose flags change: a row rewritten is rewritten
// whole, its stored bodies included.
func TestSyncCorruptedWritesOnlyWhatChanges(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	exp, _, armRun, _ := seedTwoArms(t, s)
	changes := func(prepare string) int {
		t.Helper()
		tx, err := s.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if prepare != "" {
			if _, err := tx.Exec(prepare, armRun); err != nil {
				t.Fatal(err)
			}
		}
		var before, after int
		if err := tx.Get(&before, `SELECT total_changes()`); err != nil {
			t.Fatal(err)
		}
		if err := syncCorrupted(ctx, tx, exp); err != nil {
			t.Fatal(err)
		}
		if err := tx.Get(&after, `SELECT total_changes()`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return after - before
	}
	if n := changes(""); n != 0 {
		t.Errorf("flags that agree with the labels: %d rows written, want 0", n)
	}
	// A second turn of the flagged session turns bad: that turn is written; the session's
	// flag stands and its first corrupted turn stays 0, so it is not.
	if n := changes(`UPDATE labels SET corrupted = 1 WHERE run_id = ? AND session_index = 1 AND turn_index = 1`); n != 1 {
		t.Errorf("one more bad turn in a bad session: %d rows written, want 1", n)
	}
	// The first bad turn is cleared: the turn is written, and the session (its first
	// corrupted turn moves to 1).
	if n := changes(`UPDATE labels SET corrupted = 0 WHERE run_id = ? AND session_index = 1 AND turn_index = 0`); n != 2 {
		t.Errorf("the first bad turn cleared: %d rows written, want 2", n)
	}
	var first sql.NullInt64
	if err := s.DB().Get(&first, `SELECT first_corrupted_turn FROM sessions WHERE run_id = ? AND session_index = 1`, armRun); err != nil || first.Int64 != 1 {
		t.Errorf("first corrupted turn = %v (%v), want 1", first, err)
	}
}

// BenchmarkDivergencePass is the pass at the end of a run: every output turn of two arms
// read back, and a divergences row written for each compared session (divergence not
// counted as corruption, as by default). The rows are the size of a non-streamed tool
// call's: a 3 KiB request, the tools, a reply and its raw body.
func BenchmarkDivergencePass(b *testing.B) {
	const sessions, turns = 1500, 4
	s, err := Open(filepath.Join(b.TempDir(), "d.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	exp, _ := s.CreateExperiment(ctx, Experiment{Name: "b", Created: time.Now()})
	request, tools, labels := benchTurnParts()
	response := `{"id":"chatcmpl-bench","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":` +
		`"` + strings.Repeat("tok ", 64) + `"},"finish_reason":"stop"}]}`
	var runs [2]int64
	w := s.NewWriter(WriterOptions{})
	for a := range runs {
		arm, _ := s.AddArm(ctx, Arm{ExperimentID: exp, Name: fmt.Sprint("arm", a), Position: a, Pins: "{}", Command: "[]", Env: "{}"})
		runs[a], _ = s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Status: "done", Started: time.Now()})
		for i := range sessions {
			for j := range turns {
				w.Turn(Turn{ExperimentID: exp, RunID: runs[a], ArmID: arm, Session: i, Index: j, Started: time.Now(),
					StatusCode: 200, FinishReason: "stop", Content: strings.Repeat("tok ", 64), Request: request,
					Response: response, Tools: tools, Raw: response, Labels: labels})
			}
			w.Session(Session{ExperimentID: exp, RunID: runs[a], ArmID: arm, Index: i, Status: "ok", Turns: turns})
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	rows := make([]SessionDivergence, sessions)
	for i := range rows {
		rows[i] = SessionDivergence{RunID: runs[1], Session: i, BaselineRunID: runs[0], Compared: turns}
	}
	// A run's context can be cancelled (Ctrl-C), and the driver works differently then.
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	b.ResetTimer()
	for b.Loop() {
		out, err := s.OutputTurns(run, exp)
		if err != nil || len(out) != 2*sessions*turns {
			b.Fatalf("%d output turns (%v), want %d", len(out), err, 2*sessions*turns)
		}
		if err := s.WriteDivergence(run, exp, rows, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*sessions*turns), "ns/turn")
}
