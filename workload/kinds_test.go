package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// bodies are a run's request bodies by session/turn.
func (m *memRecorder) bodies() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for _, t := range m.turns {
		out[fmt.Sprintf("%d/%d", t.Session, t.Index)] = string(t.Request)
	}
	return out
}

func TestThroughputPhasesAgainstRefserve(t *testing.T) {
	base := startRefserve(t, nil)
	cfg := Config{Kind: arms.WorkloadThroughput, Seed: 3, MaxTokens: 16, SessionOffset: 100,
		Throughput: &ThroughputConfig{Concurrency: []int{1, 4}, Rates: []float64{40}, Requests: 6, PromptTokens: 64, SharedPrefixTokens: 32}}
	run := func() *phaseRecorder {
		rec := &phaseRecorder{}
		if err := Run(context.Background(), cfg, base, rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	rec := run()
	if got := len(rec.bySession(t)); got != Planned(cfg) || got != 18 {
		t.Fatalf("%d sessions reported, planned %d", got, Planned(cfg))
	}
	for k, want := range []struct {
		name  string
		kind  string
		first int
	}{{"c=1", PhaseClosed, 100}, {"c=4", PhaseClosed, 106}, {"poisson 40/s", PhaseOpen, 112}} {
		p := rec.phase(t, want.name)
		if p.Kind != want.kind || p.Position != k || p.FirstSession != want.first || p.Sessions != 6 ||
			p.Requests != 6 || p.Completed != 6 || p.Tokens <= 0 || !(p.TokensPerSecond() > 0) || !p.Ended.After(p.Started) {
			t.Errorf("phase %s: %+v", want.name, p)
		}
	}
	for _, turn := range rec.turns {
		var req openai.ChatRequest
		if err := json.Unmarshal(turn.Request, &req); err != nil {
			t.Fatal(err)
		}
		if !req.IgnoreEOS || req.MaxTokens != 16 || len(req.Messages) != 2 || req.Messages[0].Role != "system" || !req.Stream {
			t.Fatalf("request %s: %+v", req.RID, req)
		}
		if turn.Err != "" || turn.StatusCode != 200 || turn.Latency <= 0 || turn.TTFT <= 0 || turn.Deltas < 1 {
			t.Fatalf("turn %d: %+v", turn.Session, turn)
		}
	}
	// Every session is the same request in a second run, as in every arm.
	if a, b := rec.bodies(), run().bodies(); len(a) != 18 || !reflect.DeepEqual(a, b) {
		t.Fatal("request bodies differ between two runs of one config")
	}
}

// TestPoissonArrivalsAreSeeded: the open loop's gaps are a pure function of the seed,
// with the requested mean.
func TestPoissonArrivalsAreSeeded(t *testing.T) {
	gaps := func(seed int64) []float64 {
		r := newScriptRand(seed, 12, -4)
		out := make([]float64, 2000)
		for i := range out {
			out[i] = expGap(r, 8)
		}
		return out
	}
	a := gaps(1)
	if !reflect.DeepEqual(a, gaps(1)) || reflect.DeepEqual(a, gaps(2)) {
		t.Fatal("gaps are not a function of the seed")
	}
	sum := 0.0
	for _, g := range a {
		if !(g > 0) || math.IsInf(g, 0) {
			t.Fatalf("gap %v", g)
		}
		sum += g
	}
	// The mean of 2000 exponential gaps at 8/s is 0.125 s, with a standard error of
	// 0.125/sqrt(2000) = 0.0028.
	if mean := sum / float64(len(a)); math.Abs(mean-0.125) > 0.012 {
		t.Fatalf("mean gap %v, want about 0.125", mean)
	}
}

func TestAbortCascadeWedgesTheOverlapSchedulerAndNotItsFix(t *testing.T) {
	const stall = 2 * time.Second
	cfg := Config{Kind: arms.WorkloadAbortCascade, Seed: 5, StallTimeout: stall, MaxTokens: 16,
		AbortCascade: &AbortCascadeConfig{Sessions: 24, Cascades: 1, ThroughputAt: []int{4}, ThroughputRequests: 4}}

	// The overlap scheduler with tensor parallelism wedges under the mass abort: no canary
	// completes, and the run says so within the recovery timeout.
	wedged := startRefserve(t, nil, "--tp", "8")
	rec := &phaseRecorder{}
	start := time.Now()
	err := Run(context.Background(), cfg, wedged, rec)
	if !errors.Is(err, ErrNoLiveness) {
		t.Fatalf("overlap on, tp 8: %v, want ErrNoLiveness", err)
	}
	p := rec.phase(t, "cascade 1")
	if p.Recovered || p.Aborted < 16 || p.Canaries < 1 || p.AbortedAt.IsZero() {
		t.Fatalf("wedged cascade: %+v", p)
	}
	if d := p.Ended.Sub(p.AbortedAt); d < stall || d > stall+5*time.Second {
		t.Fatalf("declared wedged %v after the abort, want about the stall timeout %v", d, stall)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the wedged run took %v", took)
	}
	canary := rec.bySession(t)[p.FirstSession+24]
	if canary.Status != SessionTimeout {
		t.Fatalf("canary session: %+v", canary)
	}

	// Without the overlap scheduler, every abort mode is followed by a canary that
	// completes, the cut turns say they were cut, and throughput is measured after.
	fixed := startRefserve(t, nil, "--tp", "8", "--disable-overlap-schedule")
	for _, mode := range []string{AbortAll, AbortRequest, AbortDisconnect} {
		t.Run(mode, func(t *testing.T) {
			c := cfg
			ac := *cfg.AbortCascade
			ac.Abort = []string{mode}
			c.AbortCascade = &ac
			rec := &phaseRecorder{}
			if err := Run(context.Background(), c, fixed, rec); err != nil {
				t.Fatal(err)
			}
			results := rec.bySession(t)
			if len(results) != Planned(c) {
				t.Fatalf("%d sessions reported, planned %d", len(results), Planned(c))
			}
			for s, r := range results {
				if r.Status != SessionOK {
					t.Errorf("session %d: %+v", s, r)
				}
			}
			p := rec.phase(t, "cascade 1")
			if !p.Recovered || p.Recovery <= 0 || p.Recovery > stall || p.Aborted+p.Finished != 24 || p.Aborted == 0 || p.Abort != mode {
				t.Fatalf("cascade: %+v", p)
			}
			cut := 0
			for _, turn := range rec.turns {
				if turn.Cut {
					cut++
					if turn.Session < p.FirstSession || turn.Session >= p.FirstSession+24 {
						t.Errorf("turn of session %d cut outside the cascade", turn.Session)
					}
				}
			}
			if cut != p.Aborted {
				t.Errorf("%d turns cut, the phase counts %d", cut, p.Aborted)
			}
			for _, name := range []string{"c=4 before", "c=4 after"} {
				if ph := rec.phase(t, name); ph.Completed != 4 || ph.Tokens <= 0 {
					t.Errorf("%s: %+v", name, ph)
				}
			}
		})
	}
}

func TestLongContextGrowsToTheCeiling(t *testing.T) {
	base := startRefserve(t, nil)
	lc := LongContextConfig{StartTokens: 1000, CeilingTokens: 9000, SharedPrefixTokens: 300}
	cfg := Config{Kind: arms.WorkloadLongContext, Sessions: 3, Rounds: 5, Concurrency: 3, Seed: 11, MaxTokens: 64, LongContext: &lc}
	rec := &memRecorder{}
	if err := Run(context.Background(), cfg, base, rec); err != nil {
		t.Fatal(err)
	}
	for s, r := range rec.bySession(t) {
		if r.Status != SessionOK {
			t.Fatalf("session %d: %+v", s, r)
		}
	}
	opening := map[int]map[int]Turn{} // session -> round -> the request that opened it
	systems := map[string]bool{}
	for _, turn := range rec.turns {
		if opening[turn.Session] == nil {
			opening[turn.Session] = map[int]Turn{}
		}
		if o, ok := opening[turn.Session][turn.Round]; !ok || turn.Index < o.Index {
			opening[turn.Session][turn.Round] = turn
		}
	}
	for s, rounds := range opening {
		if len(rounds) != 5 {
			t.Fatalf("session %d reached %d rounds", s, len(rounds))
		}
		for r := range 5 {
			turn := rounds[r]
			var req openai.ChatRequest
			if err := json.Unmarshal(turn.Request, &req); err != nil {
				t.Fatal(err)
			}
			shared := sharedPrefix(cfg.Seed, lc.SharedPrefixTokens)
			if !strings.HasPrefix(req.Messages[0].Content, shared) || len(shared) < 1000 {
				t.Fatalf("session %d: the system prompt does not begin with the shared document", s)
			}
			systems[req.Messages[0].Content] = true
			// refserve counts four characters per token, as the workload does: the
			// context the engine saw is the target, within what one tool schema adds.
			want := TargetTokens(lc, r, 5)
			if got := turn.PromptTokens; math.Abs(float64(got-want)) > 0.05*float64(want)+50 {
				t.Errorf("session %d round %d: prompt of %d tokens, want about %d", s, r, got, want)
			}
			if req.MaxTokens != 64 {
				t.Errorf("max_tokens %d", req.MaxTokens)
			}
		}
	}
	// Beyond the shared document, each session's system prompt is its own.
	if len(systems) != 3 {
		t.Errorf("%d different system prompts for 3 sessions", len(systems))
	}
}

// TestTraceReplaysIdenticallyAgainstDifferentEngines: arms whose engines answer
// differently still receive byte for byte the same requests.
func TestTraceReplaysIdenticallyAgainstDifferentEngines(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "support.jsonl")
	index, err := ReadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	convs, err := ParseTrace(path, bytes.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	control := startRefserve(t, []string{"BF16_INDEX_K=0"}, "--enable-hierarchical-cache")
	treatment := startRefserve(t, []string{"BF16_INDEX_K=1"}, "--enable-hierarchical-cache", "--seed", "9")
	cfg := Config{Kind: arms.WorkloadTrace, Concurrency: 12, Seed: 42, Trace: &TraceConfig{Path: path, Index: index}}
	var runs []*memRecorder
	for _, base := range []string{control, treatment} {
		rec := &memRecorder{}
		if err := Run(context.Background(), cfg, base, rec); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rec)
	}
	a, b := runs[0].bodies(), runs[1].bodies()
	want := 0
	for _, c := range convs {
		want += len(c.Requests)
	}
	if len(a) != want || !reflect.DeepEqual(a, b) {
		t.Fatalf("%d and %d requests (want %d), or the bodies differ between the arms", len(a), len(b), want)
	}
	// The replayed prefix is the recorded one, with the line's own max_tokens and tools.
	var req openai.ChatRequest
	if err := json.Unmarshal([]byte(a["0/1"]), &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Messages) != convs[0].Requests[1] || req.MaxTokens != 256 || len(req.Tools) != 4 ||
		!strings.Contains(string(req.ToolChoice), "auto") || req.Messages[3].Role != "tool" {
		t.Fatalf("request 0/1: %d messages, max_tokens %d, %d tools, tool_choice %s", len(req.Messages), req.MaxTokens, len(req.Tools), req.ToolChoice)
	}
	// The engines did answer differently somewhere (otherwise the test proves nothing):
	// their seeds differ.
	differ := false
	for i := range runs[0].turns {
		for j := range runs[1].turns {
			ti, tj := runs[0].turns[i], runs[1].turns[j]
			if ti.Session == tj.Session && ti.Index == tj.Index && string(ti.Raw) != string(tj.Raw) {
				differ = true
			}
		}
	}
	if !differ {
		t.Error("the two engines answered identically; the test needs them to differ")
	}
}

// TestAbortComesOnlyOnceEverySessionIsInTheEngine: aborting at the first token must not
// leave the cascade's later requests out of the abort, running on and starving the
// canary. With a batch cap, most sessions wait in the engine's queue when the abort comes.
func TestAbortComesOnlyOnceEverySessionIsInTheEngine(t *testing.T) {
	base := startRefserve(t, nil, "--max-running-requests", "8")
	cfg := Config{Kind: arms.WorkloadAbortCascade, Seed: 8, StallTimeout: 3 * time.Second,
		AbortCascade: &AbortCascadeConfig{Sessions: 40, Cascades: 2, AbortWhen: AbortWhenFirstToken, CascadeTokens: 4096}}
	rec := &phaseRecorder{}
	if err := Run(context.Background(), cfg, base, rec); err != nil {
		t.Fatalf("an engine with no fault did not serve after the abort: %v", err)
	}
	for _, name := range []string{"cascade 1", "cascade 2"} {
		p := rec.phase(t, name)
		if !p.Recovered || p.Aborted != 40 || p.Note != "" {
			t.Errorf("%s: %+v", name, p)
		}
	}
}
