package store

import (
	"context"
	"math"
	"testing"
)

func TestServerMetricsRoundTripAndLeaveSupersededRunsOut(t *testing.T) {
	s := newStore(t, Options{Redact: func(x string) string { return x }})
	exp, arm, run := seedExperiment(t, s)
	ctx := context.Background()
	scrape := []MetricSample{
		{Name: "sglang:num_running_reqs", Labels: `{model_name="m"}`, Value: 32},
		{Name: "sglang:gen_throughput", Labels: `{model_name="m"}`, Value: math.NaN()}, // left out
		{Name: "sglang:generation_tokens_total", Value: 4096},
	}
	for _, at := range []float64{0, 250} {
		if err := s.AddServerMetrics(ctx, exp, run, arm, at, scrape); err != nil {
			t.Fatal(err)
		}
	}
	// A scrape recorded again replaces it.
	if err := s.AddServerMetrics(ctx, exp, run, arm, 250, scrape[:1]); err != nil {
		t.Fatal(err)
	}
	rows, err := ServerMetrics(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d samples, want 4 (two series at 0 ms, two at 250 ms): %+v", len(rows), rows)
	}
	if r := rows[0]; r.Name != "sglang:generation_tokens_total" || r.Labels != "" || r.Value != 4096 || r.ElapsedMS != 0 || r.RunID != run {
		t.Errorf("first sample %+v", r)
	}
	if _, err := s.DB().Exec(`INSERT INTO runs (id, experiment_id, arm_id, block, runtime, status, started_at) VALUES (99, ?, ?, 0, 'process', 'done', '2026')`, exp, arm); err != nil {
		t.Fatal(err)
	}
	if err := s.Supersede(ctx, run, 99); err != nil {
		t.Fatal(err)
	}
	if rows, _ := ServerMetrics(ctx, s.DB(), exp); len(rows) != 0 {
		t.Errorf("a superseded run's metrics were read: %+v", rows)
	}
}

// TestMigrationNumbersRise: SchemaVersion is the highest migration's number, and the
// numbers rise strictly (a number handed out ahead may be missing).
func TestMigrationNumbersRise(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].version <= ms[i-1].version {
			t.Errorf("%s after %s", ms[i].name, ms[i-1].name)
		}
	}
	if SchemaVersion != ms[len(ms)-1].version {
		t.Errorf("SchemaVersion %d; the last migration is %s", SchemaVersion, ms[len(ms)-1].name)
	}
}
