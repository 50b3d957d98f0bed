package workload

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// calRecorder is a phaseRecorder that keeps the calibration too.
type calRecorder struct {
	phaseRecorder
	cmu  sync.Mutex
	cals []TraceCalibration
}

func (c *calRecorder) Calibration(tc TraceCalibration) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.cals = append(c.cals, tc)
}

// scrapeCounter reads one unlabelled-or-model-labelled sample of name from base/metrics.
func scrapeCounter(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no %s at %s/metrics", name, base)
	return 0
}

// TestMooncakeReplayAgainstRefserve replays examples/traces/mooncake-24.jsonl against a
// real refserve process, HiCache off and on: one probe pair measures the engine, every
// request is a session of one turn whose prompt the engine counts within 2% of its
// input_length and whose answer is its output_length, and HiCache's host tier raises the
// engine's hit rate.
func TestMooncakeReplayAgainstRefserve(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "mooncake-24.jsonl")
	index, err := ReadTraceFormat(path, arms.TraceMooncake)
	if err != nil {
		t.Fatal(err)
	}
	rates := map[bool]float64{}
	for _, hicache := range []bool{false, true} {
		args := []string{"--enable-metrics", "--max-total-tokens", "6000"}
		if hicache {
			args = append(args, "--enable-hierarchical-cache")
		}
		base := startRefserve(t, nil, args...)
		rec := &calRecorder{}
		cfg := Config{Kind: arms.WorkloadTrace, Seed: 42, Concurrency: 24,
			Trace: &TraceConfig{Path: path, Index: index, Format: arms.TraceMooncake, Speed: 8}}
		if err := Run(context.Background(), cfg, base, rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.cals) != 1 || rec.cals[0].Note != "" || rec.cals[0].BytesPerToken != 4 {
			t.Fatalf("calibrations %+v; want one, at refserve's four bytes a token", rec.cals)
		}
		if len(rec.turns) != 24 || len(rec.sessions) != 24 {
			t.Fatalf("%d turns, %d sessions; want 24 and 24", len(rec.turns), len(rec.sessions))
		}
		for _, turn := range rec.turns {
			req, err := index.Request(turn.Session)
			if err != nil {
				t.Fatal(err)
			}
			if turn.Err != "" || turn.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", turn.Session, turn.StatusCode, turn.Err)
			}
			if d := turn.PromptTokens - req.InputTokens; d*50 > req.InputTokens || -d*50 > req.InputTokens {
				t.Errorf("request %d: %d prompt tokens for an input_length of %d", turn.Session, turn.PromptTokens, req.InputTokens)
			}
			if turn.CompletionTokens != req.OutputTokens || turn.FinishReason != "length" {
				t.Errorf("request %d: %d tokens (%s) for an output_length of %d", turn.Session, turn.CompletionTokens, turn.FinishReason, req.OutputTokens)
			}
		}
		ph := rec.phase(t, "mooncake trace")
		if ph.Kind != PhaseOpen || ph.Requests != 24 || ph.Completed != 24 {
			t.Errorf("phase %+v", ph)
		}
		rates[hicache] = scrapeCounter(t, base, "sglang:cached_tokens_total") / scrapeCounter(t, base, "sglang:prompt_tokens_total")
	}
	t.Logf("prompt tokens cached: %.2f without HiCache, %.2f with", rates[false], rates[true])
	if !(rates[true] > rates[false]+0.3) {
		t.Errorf("hit rate %.2f without HiCache, %.2f with; want HiCache well above", rates[false], rates[true])
	}
}

// TestBurstGPTReplayAgainstRefserve replays examples/traces/burstgpt-16.csv in a closed
// loop: prompts of the recorded lengths that share no prefix.
func TestBurstGPTReplayAgainstRefserve(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "burstgpt-16.csv")
	base := startRefserve(t, nil, "--enable-metrics")
	rec := &calRecorder{}
	cfg := Config{Kind: arms.WorkloadTrace, Seed: 42, Concurrency: 4,
		Trace: &TraceConfig{Path: path, Format: arms.TraceBurstGPT, Arrivals: arms.ArrivalsClosed}}
	if err := Run(context.Background(), cfg, base, rec); err != nil {
		t.Fatal(err)
	}
	index, err := ReadTraceFormat(path, arms.TraceBurstGPT)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.turns) != 16 {
		t.Fatalf("%d turns, want 16", len(rec.turns))
	}
	for _, turn := range rec.turns {
		req, _ := index.Request(turn.Session)
		if turn.PromptTokens != req.InputTokens || turn.CompletionTokens != req.OutputTokens {
			t.Errorf("request %d: %d+%d tokens, recorded %d+%d", turn.Session, turn.PromptTokens, turn.CompletionTokens, req.InputTokens, req.OutputTokens)
		}
	}
	if ph := rec.phase(t, "burstgpt trace"); ph.Kind != PhaseClosed || ph.Concurrency != 4 || ph.Completed != 16 {
		t.Errorf("phase %+v", ph)
	}
	// Nothing is shared but the chat template's first page at most.
	if cached := scrapeCounter(t, base, "sglang:cached_tokens_total"); cached > 16*64 {
		t.Errorf("%v prompt tokens cached of prompts that share no prefix", cached)
	}
}
