package store

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"
)

func TestPhasesRoundTripAndLeaveSupersededRunsOut(t *testing.T) {
	s := newStore(t, Options{Redact: func(x string) string { return x }})
	exp, arm, run := seedExperiment(t, s)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	recovered, wedged := true, false
	for _, p := range []Phase{
		{Name: "c=32 before", Kind: "closed", Position: 0, Concurrency: 32, FirstSession: 0, Sessions: 32,
			Started: t0, Ended: t0.Add(2 * time.Second), Requests: 32, Completed: 32, Tokens: 4096, TokensPerSecond: 2048},
		{Name: "cascade 1", Kind: "cascade", Position: 1, Concurrency: 60, FirstSession: 32, Sessions: 61,
			Started: t0.Add(3 * time.Second), Ended: t0.Add(4 * time.Second), AbortedAt: t0.Add(3500 * time.Millisecond),
			Abort: "abort_all", Aborted: 58, Finished: 2, Recovered: &recovered, Recovery: 120 * time.Millisecond, Canaries: 1,
			TokensPerSecond: math.NaN()},
		{Name: "cascade 2", Kind: "cascade", Position: 2, FirstSession: 93, Sessions: 61, Abort: "disconnect",
			Recovered: &wedged, Recovery: time.Second, Note: "3 of 60 sessions were streaming", TokensPerSecond: math.NaN()},
	} {
		p.ExperimentID, p.RunID, p.ArmID = exp, run, arm
		if err := s.AddPhase(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// Recording a phase again (a resumed run) replaces it.
	again := Phase{ExperimentID: exp, RunID: run, ArmID: arm, Name: "c=32 before", Kind: "closed", Concurrency: 32, Sessions: 32,
		Requests: 32, Completed: 31, Tokens: 4000, TokensPerSecond: 2000}
	if err := s.AddPhase(ctx, again); err != nil {
		t.Fatal(err)
	}
	rows, err := Phases(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d phases, want 3", len(rows))
	}
	c32, c1, c2 := rows[0], rows[1], rows[2]
	if c32.Completed != 31 || c32.TokensPerSecond.Float64 != 2000 || c32.Recovered.Valid {
		t.Errorf("closed phase: %+v", c32)
	}
	if !c1.Recovered.Bool || c1.RecoveryMS.Float64 != 120 || c1.Aborted != 58 || c1.TokensPerSecond.Valid || !c1.AbortedAt.Valid {
		t.Errorf("recovered cascade: %+v", c1)
	}
	// A cascade after which the engine never served: recovered false, no recovery time.
	if !c2.Recovered.Valid || c2.Recovered.Bool || c2.RecoveryMS.Valid || c2.Note.String == "" {
		t.Errorf("wedged cascade: %+v", c2)
	}
	// A run superseded on resume is left out.
	if _, err := s.DB().Exec(`INSERT INTO runs (id, experiment_id, arm_id, block, runtime, status, started_at) VALUES (99, ?, ?, 0, 'process', 'done', '2026')`, exp, arm); err != nil {
		t.Fatal(err)
	}
	if err := s.Supersede(ctx, run, 99); err != nil {
		t.Fatal(err)
	}
	if rows, _ := Phases(ctx, s.DB(), exp); len(rows) != 0 {
		t.Errorf("%d phases of a superseded run", len(rows))
	}
}

func TestTurnMetricsCarryTheDecodeTime(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{})
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: 3, Index: 0, StatusCode: 200, TTFT: 20 * time.Millisecond,
		Latency: 220 * time.Millisecond, DecodeTime: 180 * time.Millisecond, Deltas: 40, CompletionTokens: 41, Request: "{}", Response: "{}"})
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: 3, Index: 1, StatusCode: 200, Request: "{}", Response: "{}", Deltas: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ms, err := TurnMetrics(context.Background(), s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Session != 3 || ms[0].DecodeMS.Float64 != 180 || ms[0].CompletionTokens != 41 || ms[1].DecodeMS.Valid {
		t.Fatalf("metrics %+v", ms)
	}
}

// TurnMetrics reads each arm on its own and joins them: the rows are those of one
// query over the experiment, in its order (arm, run, session, turn), whatever order
// they were written in, and a superseded run's are left out.
func TestTurnMetricsOfSeveralArmsComeInOneOrder(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	exp, first, _ := seedExperiment(t, s)
	arms := []int64{first}
	for _, name := range []string{"b", "c"} {
		arm, err := s.AddArm(ctx, Arm{ExperimentID: exp, Name: name, Position: -len(arms), Pins: "{}", Command: "[]", Env: "{}"})
		if err != nil {
			t.Fatal(err)
		}
		arms = append(arms, arm)
	}
	var runs []Run
	for _, arm := range arms {
		for range 2 {
			r := Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: "done", Started: time.Now()}
			id, err := s.StartRun(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			r.ID = id
			runs = append(runs, r)
		}
	}
	w := s.NewWriter(WriterOptions{})
	for i := 23; i >= 0; i-- { // backwards: the order read is not the order written
		r := runs[i%len(runs)]
		w.Turn(Turn{ExperimentID: exp, RunID: r.ID, ArmID: r.ArmID, Session: i % 5, Index: i / 5, StatusCode: 200,
			TTFT: time.Duration(i) * time.Millisecond, Request: "{}", Response: "{}", TokenTimes: []time.Duration{time.Duration(i) * time.Millisecond}})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Supersede(ctx, runs[2].ID, runs[3].ID); err != nil {
		t.Fatal(err)
	}
	var want []TurnMetric
	if err := s.DB().Select(&want, `SELECT t.arm_id, t.run_id, r.block, t.session_index, t.turn_index, t.round, t.corrupted, t.ttft_ms,
			t.latency_ms, t.prompt_tokens, t.completion_tokens, t.status_code, (t.error IS NOT NULL) AS failed, t.finish_reason,
			t.decode_ms, t.token_times
		FROM turns t JOIN runs r ON r.id = t.run_id
		WHERE t.experiment_id = ? AND r.superseded_by IS NULL
		ORDER BY t.arm_id, t.run_id, t.session_index, t.turn_index`, exp); err != nil {
		t.Fatal(err)
	}
	got, err := TurnMetrics(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 20 || !reflect.DeepEqual(got, want) {
		t.Errorf("TurnMetrics gave %d rows, one query %d (want 20, the superseded run's 4 left out); equal: %v", len(got), len(want), reflect.DeepEqual(got, want))
	}
}
