package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// frozenServer decodes nothing for an hour, so requests stay in flight until aborted.
func frozenServer(t *testing.T, maxRunning int) (*server, string) {
	cfg := testConfig(t)
	cfg.InterTokenDelay = time.Hour
	cfg.MaxRunningRequests = maxRunning
	return startServer(t, cfg, nil)
}

// openStreams starts one stream per rid and returns their assembled results as they end.
func openStreams(t *testing.T, base string, rids ...string) chan streamed {
	out := make(chan streamed, len(rids))
	for _, rid := range rids {
		req := userRequest("Plan a week in "+rid, testTools())
		req.RID = rid
		resp := openStream(t, context.Background(), base, req)
		go func() {
			defer resp.Body.Close()
			s, err := readStream(resp.Body, nil)
			if err != nil {
				t.Errorf("stream %s: %v", rid, err)
			}
			out <- s
		}()
	}
	return out
}

func TestAbortByRID(t *testing.T) {
	s, base := frozenServer(t, 0)
	ends := openStreams(t, base, "keep", "kill")
	waitFor(t, s, "two running requests", func() bool { r, _ := s.sched.load(); return r == 2 })

	code, body := postJSON(t, base+"/abort_request", map[string]any{"rid": "kill"})
	if code != http.StatusOK || string(body) != "{\"aborted\":1}\n" {
		t.Fatalf("abort_request: HTTP %d %s", code, body)
	}
	got := <-ends
	if got.Finish != "abort" || !got.SawDone || len(got.Chunks) == 0 || got.Chunks[0].ID != "kill" {
		t.Errorf("aborted stream: finish %q, done %v", got.Finish, got.SawDone)
	}
	if r, _ := s.sched.load(); r != 1 {
		t.Errorf("%d running after aborting one of two", r)
	}
	if v := metric(t, base, "sglang:num_aborted_requests_total"); v != 1 {
		t.Errorf("num_aborted_requests_total = %v; want 1", v)
	}
	if v := metric(t, base, "sglang:num_running_reqs"); v != 1 {
		t.Errorf("num_running_reqs = %v; want 1", v)
	}
	if code, _ := postJSON(t, base+"/abort_request", map[string]any{"rid": "nobody"}); code != http.StatusOK {
		t.Errorf("abort of an unknown rid: HTTP %d", code)
	}
	if code, _ := postJSON(t, base+"/abort_request", map[string]any{}); code != http.StatusBadRequest {
		t.Errorf("abort naming nothing: HTTP %d; want 400", code)
	}
}

func TestAbortAllIncludesQueued(t *testing.T) {
	s, base := frozenServer(t, 2)
	ends := openStreams(t, base, "a", "b", "c")
	waitFor(t, s, "two running and one queued", func() bool { r, q := s.sched.load(); return r == 2 && q == 1 })
	if v := metric(t, base, "sglang:num_queue_reqs"); v != 1 {
		t.Errorf("num_queue_reqs = %v; want 1", v)
	}
	code, body := postJSON(t, base+"/abort_request", map[string]any{"abort_all": true})
	if code != http.StatusOK || string(body) != "{\"aborted\":3}\n" {
		t.Fatalf("abort_all: HTTP %d %s", code, body)
	}
	for range 3 {
		if got := <-ends; got.Finish != "abort" {
			t.Errorf("stream ended with %q; want abort", got.Finish)
		}
	}
	if v := metric(t, base, "sglang:num_aborted_requests_total"); v != 3 {
		t.Errorf("num_aborted_requests_total = %v; want 3", v)
	}
}

func TestAbortNonStreaming(t *testing.T) {
	s, base := frozenServer(t, 0)
	done := make(chan openai.ChatCompletion, 1)
	go func() {
		req := userRequest("Summarise the report", nil)
		req.RID = "ns"
		done <- chat(t, base, req)
	}()
	waitFor(t, s, "one running request", func() bool { r, _ := s.sched.load(); return r == 1 })
	postJSON(t, base+"/abort_request", map[string]any{"rid": "ns"})
	if c := <-done; c.Choices[0].FinishReason != "abort" {
		t.Errorf("non-streaming abort finished %q", c.Choices[0].FinishReason)
	}
}

func TestDisconnectAborts(t *testing.T) {
	s, base := frozenServer(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	resp := openStream(t, ctx, base, userRequest("Watch the queue", nil))
	waitFor(t, s, "one running request", func() bool { r, _ := s.sched.load(); return r == 1 })
	cancel() // the client goes away mid-stream
	resp.Body.Close()
	waitFor(t, s, "the abandoned request to be aborted", func() bool { r, _ := s.sched.load(); return r == 0 })
	if v := metric(t, base, "sglang:num_aborted_requests_total"); v != 1 {
		t.Errorf("num_aborted_requests_total = %v; want 1", v)
	}
}

func TestMetricsCount(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	var gen, prompt int
	for i := range 3 {
		c := chat(t, base, userRequest(fmt.Sprintf("Count %d things", i), nil))
		gen += c.Usage.CompletionTokens
		prompt += c.Usage.PromptTokens
	}
	for name, want := range map[string]float64{
		"sglang:num_requests_total":          3,
		"sglang:generation_tokens_total":     float64(gen),
		"sglang:prompt_tokens_total":         float64(prompt),
		"sglang:num_running_reqs":            0,
		"sglang:num_aborted_requests_total":  0,
		"refserve:stale_index_k_steps_total": 0,
	} {
		if got := metric(t, base, name); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	if v := metric(t, base, "sglang:gen_throughput"); v <= 0 {
		t.Errorf("gen_throughput = %v right after generating; want > 0", v)
	}
}
