package main

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
	"github.com/arbiterlab/arbiter/workload"
)

// TestMooncakeTraceExampleShowsHiCache runs examples/trace-mooncake.yaml as a user does:
// a Mooncake trace of 24 requests over 4 shared prefixes against refserve, HiCache off and
// on. Each arm replays the 24 requests; the prompt tokens the engine reported, as stored,
// are within 10% of each request's input_length; each launch's calibration is stored;
// and HiCache on shows the higher cache hit rate, both in the verdict's Conditions and in
// the engine's cached-token counters as scraped.
func TestMooncakeTraceExampleShowsHiCache(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	db := filepath.Join(t.TempDir(), "results.db")
	spec := filepath.Join("..", "..", "examples", "trace-mooncake.yaml")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", filepath.Join(t.TempDir(), "verdict.md"))
	if code != 0 {
		t.Fatalf("arbiter run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	index, err := workload.ReadTraceFormat(filepath.Join("..", "..", "examples", "traces", "mooncake-24.jsonl"), arms.TraceMooncake)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()

	var turns []struct {
		Arm     string `db:"name"`
		Session int    `db:"session_index"`
		Prompt  int    `db:"prompt_tokens"`
		Status  int    `db:"status_code"`
	}
	if err := ro.Select(&turns, `SELECT a.name, t.session_index, t.prompt_tokens, t.status_code
		FROM turns t JOIN arms a ON a.id = t.arm_id ORDER BY a.name, t.session_index`); err != nil {
		t.Fatal(err)
	}
	perArm := map[string]int{}
	worst := 0.0
	for _, tu := range turns {
		perArm[tu.Arm]++
		req, err := index.Request(tu.Session)
		if err != nil {
			t.Fatal(err)
		}
		off := math.Abs(float64(tu.Prompt-req.InputTokens)) / float64(req.InputTokens)
		worst = max(worst, off)
		if tu.Status != 200 || off > 0.10 {
			t.Errorf("%s request %d: status %d, %d prompt tokens for an input_length of %d", tu.Arm, tu.Session, tu.Status, tu.Prompt, req.InputTokens)
		}
	}
	if len(perArm) != 2 || perArm["hicache=off"] != 24 || perArm["hicache=on"] != 24 {
		t.Fatalf("requests per arm %v; want 24 in each of hicache=off and hicache=on", perArm)
	}
	t.Logf("prompt tokens at most %.1f%% from input_length", 100*worst)

	var ok int
	ro.Get(&ok, `SELECT count(*) FROM sessions WHERE status = 'ok'`)
	if ok != 48 {
		t.Errorf("%d sessions ok, want 48", ok)
	}
	var exp int64
	if err := ro.Get(&exp, `SELECT id FROM experiments`); err != nil {
		t.Fatal(err)
	}
	cals, err := store.TraceCalibrations(context.Background(), ro, exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(cals) != 2 {
		t.Fatalf("%d calibrations stored, want one per launch", len(cals))
	}
	for _, c := range cals {
		if c.Note != "" || c.BytesPerToken != 4 || c.LongTokens <= c.ShortTokens {
			t.Errorf("calibration %+v; want refserve's four bytes a token", c)
		}
	}

	// The engine's counters as scraped: cached over prompt tokens over each run.
	var counters []struct {
		Arm    string  `db:"name"`
		Cached float64 `db:"cached"`
		Prompt float64 `db:"prompt"`
	}
	if err := ro.Select(&counters, `SELECT a.name,
		max(CASE WHEN m.name = 'sglang:cached_tokens_total' THEN m.value END) - min(CASE WHEN m.name = 'sglang:cached_tokens_total' THEN m.value END) AS cached,
		max(CASE WHEN m.name = 'sglang:prompt_tokens_total' THEN m.value END) - min(CASE WHEN m.name = 'sglang:prompt_tokens_total' THEN m.value END) AS prompt
		FROM server_metrics m JOIN arms a ON a.id = m.arm_id GROUP BY a.name`); err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, c := range counters {
		if c.Prompt > 0 {
			counted[c.Arm] = c.Cached / c.Prompt
		}
	}
	v, err := verdict.Build(context.Background(), ro, exp)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]float64{}
	for i, a := range v.Arms {
		if i < len(v.Conditions) {
			shown[a.Name] = v.Conditions[i].Values[verdict.CondCacheHit]
		}
	}
	t.Logf("cache hit rate in the verdict's Conditions: off %.2f, on %.2f; cached over prompt tokens: off %.2f, on %.2f",
		shown["hicache=off"], shown["hicache=on"], counted["hicache=off"], counted["hicache=on"])
	if !(counted["hicache=on"] > counted["hicache=off"]+0.3) {
		t.Errorf("cached over prompt tokens: off %.2f, on %.2f; want HiCache well above", counted["hicache=off"], counted["hicache=on"])
	}
	if !(shown["hicache=on"] > shown["hicache=off"]) {
		t.Errorf("the verdict's cache hit rate: off %.2f, on %.2f; want HiCache above", shown["hicache=off"], shown["hicache=on"])
	}
}
