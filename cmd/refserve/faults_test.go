package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// bodyWith is a chat request's JSON object with fields the openai types do not carry
// (ignore_eos, min_tokens, max_completion_tokens), as SGLang's clients send them.
func bodyWith(req openai.ChatRequest, extra map[string]any) map[string]any {
	b, _ := json.Marshal(req)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// longReply asks for a reply that streams for as long as the test needs: ignore_eos with
// a cap far beyond it.
func longReply(rid string) map[string]any {
	req := userRequest("Write me a long report on "+rid, nil)
	req.RID, req.Stream = rid, true
	return bodyWith(req, map[string]any{"ignore_eos": true, "max_tokens": 100000})
}

// liveStream is a streaming request in flight.
type liveStream struct {
	first  chan struct{} // closed at the first content chunk
	done   chan streamed // gets the assembled stream when it ends
	cancel context.CancelFunc
}

// startStream posts body as a streaming request and reads it in the background; cancel
// disconnects the client, which aborts the request as a vLLM-style client does.
func startStream(t testing.TB, base string, body any) *liveStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		cancel()
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("stream: HTTP %d: %s", resp.StatusCode, raw)
	}
	ls := &liveStream{first: make(chan struct{}), done: make(chan streamed, 1), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		var once sync.Once
		s, _ := readStream(resp.Body, func(c openai.ChatCompletionChunk) {
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				once.Do(func() { close(ls.first) })
			}
		})
		ls.done <- s
	}()
	t.Cleanup(cancel)
	return ls
}

// decoding starts n long streams and returns once each has received a token: all n run
// together, past their first token.
func decoding(t testing.TB, base, prefix string, n int) []*liveStream {
	t.Helper()
	out := make([]*liveStream, n)
	for i := range out {
		out[i] = startStream(t, base, longReply(fmt.Sprintf("%s%d", prefix, i)))
	}
	for _, ls := range out {
		<-ls.first
	}
	return out
}

// canary sends a short request in the background and reports when it completed, or an
// error once ctx ends first.
func canary(ctx context.Context, base string) <-chan error {
	done := make(chan error, 1)
	go func() {
		req := userRequest("canary: are you alive?", nil)
		req.MaxTokens = 4
		b, _ := json.Marshal(req)
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		var cc openai.ChatCompletion
		if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil {
			done <- err
			return
		}
		if resp.StatusCode != http.StatusOK || len(cc.Choices) != 1 || cc.Choices[0].FinishReason == "abort" {
			done <- fmt.Errorf("canary: HTTP %d, %+v", resp.StatusCode, cc.Choices)
			return
		}
		done <- nil
	}()
	return done
}

func getStatus(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestMassAbortByDisconnects: twenty clients streaming replies hang up one after another,
// as a vLLM-style abort cascade does. With the overlap scheduler and --tp 8 the engine
// wedges: /health answers 200, /health_generate fails, a new request never gets a token.
// With --disable-overlap-schedule, or one rank, the same cascade leaves it serving.
func TestMassAbortByDisconnects(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tp         int
		disable    bool
		wantWedged bool
	}{
		{"overlap tp8", 8, false, true},
		{"overlap off tp8", 8, true, false},
		{"overlap tp1", 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.TPSize, cfg.DisableOverlapSchedule = tc.tp, tc.disable
			cfg.InterTokenDelay = time.Millisecond
			cfg.HealthCheckTimeout = 300 * time.Millisecond
			s, base := startServer(t, cfg, nil)
			streams := decoding(t, base, "cascade-", 20)
			for i, ls := range streams { // hang up one by one, each abort landed before the next
				ls.cancel()
				<-ls.done
				waitFor(t, s, "the disconnect to abort its request", func() bool { return s.sched.aborted.Load() == int64(i+1) })
			}
			waitFor(t, s, "every request aborted", func() bool { r, q := s.sched.load(); return r+q == 0 })
			if wedged, _ := s.sched.faultState(); wedged != tc.wantWedged {
				t.Fatalf("wedged = %v; want %v", wedged, tc.wantWedged)
			}
			if code := getStatus(t, base+"/health"); code != http.StatusOK {
				t.Errorf("/health: HTTP %d; want 200 either way", code)
			}
			if v := metric(t, base, "refserve:scheduler_wedged"); v != map[bool]float64{true: 1}[tc.wantWedged] {
				t.Errorf("refserve:scheduler_wedged = %v", v)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := canary(ctx, base)
			if !tc.wantWedged {
				if err := <-done; err != nil {
					t.Fatalf("canary after the cascade: %v", err)
				}
				if code := getStatus(t, base+"/health_generate"); code != http.StatusOK {
					t.Errorf("/health_generate: HTTP %d; want 200", code)
				}
				return
			}
			waitFor(t, s, "the canary to queue", func() bool { _, q := s.sched.load(); return q == 1 })
			if code := getStatus(t, base+"/health_generate"); code != http.StatusServiceUnavailable {
				t.Errorf("/health_generate on a wedged engine: HTTP %d; want 503 after SGLANG_HEALTH_CHECK_TIMEOUT", code)
			}
			if r, q := s.sched.load(); r != 0 || q != 1 {
				t.Errorf("wedged: %d running, %d queued; want the canary stuck in the queue", r, q)
			}
			select {
			case err := <-done:
				t.Fatalf("the canary finished on a wedged engine: %v", err)
			default:
			}
		})
	}
}

// TestAbortsThatNeverRanTogetherDoNotWedge: many aborts, but of requests that each ran
// alone (a client that times out now and then), are no mass abort.
func TestAbortsThatNeverRanTogetherDoNotWedge(t *testing.T) {
	cfg := testConfig(t)
	cfg.TPSize = 8
	cfg.InterTokenDelay = time.Millisecond
	s, base := startServer(t, cfg, nil)
	for i := range 3 * massAbort {
		ls := decoding(t, base, fmt.Sprint("lone-", i, "-"), 1)[0]
		code, _ := postJSON(t, base+"/abort_request", map[string]any{"rid": fmt.Sprint("lone-", i, "-0")})
		if code != http.StatusOK {
			t.Fatalf("abort_request: HTTP %d", code)
		}
		<-ls.done
	}
	if wedged, _ := s.sched.faultState(); wedged {
		t.Fatalf("%d aborts of requests that each ran alone wedged the engine", 3*massAbort)
	}
	if err := <-canary(context.Background(), base); err != nil {
		t.Fatal(err)
	}
}

// TestAbortLedger checks the mass-abort rule on hand-made spans.
func TestAbortLedger(t *testing.T) {
	var l abortLedger
	// 15 requests that ran together, aborted at ticks 20..34: not yet a mass abort.
	for i := range uint64(15) {
		if d := l.add(runSpan{from: i + 1, to: 20 + i}, i+2); d != int(i)+1 {
			t.Fatalf("abort %d: depth %d; want %d", i, d, i+1)
		}
	}
	if d := l.add(runSpan{from: 16, to: 40}, 41); d != 16 {
		t.Fatalf("the 16th request that ran with them: depth %d; want 16", d)
	}
	var lone abortLedger
	for i := range uint64(100) { // each admitted after the last one ended
		if d := lone.add(runSpan{from: 2 * i, to: 2*i + 1}, 2*i+2); d != 1 {
			t.Fatalf("lone abort %d: depth %d; want 1", i, d)
		}
	}
	if len(lone.spans) > 1 {
		t.Errorf("the ledger kept %d spans that can overlap nothing to come", len(lone.spans))
	}
}

// nixlConfig is a prefill server over NIXL with room for running requests.
func nixlConfig(t testing.TB, running int, handler bool) config {
	cfg := testConfig(t)
	cfg.DisaggregationMode, cfg.DisaggregationTransferBackend = "prefill", "nixl"
	cfg.NixlAbortHandler = handler
	cfg.MaxRunningRequests = running
	cfg.InterTokenDelay = time.Millisecond
	cfg.HealthCheckTimeout = 300 * time.Millisecond
	return cfg
}

// TestNixlAbortWedge: an abort of a request whose KV transfer is in flight (queued, no
// first token yet) kills the transfer loop of a prefill server over NIXL. The requests
// already running finish; a new one waits forever; /health and /health_generate answer
// 200. With SGLANG_NIXL_ABORT_HANDLER=1 the same abort fails that request alone.
func TestNixlAbortWedge(t *testing.T) {
	for _, handler := range []bool{false, true} {
		t.Run(fmt.Sprint("handler=", handler), func(t *testing.T) {
			s, base := startServer(t, nixlConfig(t, 2, handler), nil)
			running := decoding(t, base, "run-", 2)
			queued := startStream(t, base, longReply("queued"))
			waitFor(t, s, "the third request to queue", func() bool { r, q := s.sched.load(); return r == 2 && q == 1 })

			if code, body := postJSON(t, base+"/abort_request", map[string]any{"rid": "queued"}); code != http.StatusOK || string(body) != "{\"aborted\":1}\n" {
				t.Fatalf("abort_request: HTTP %d %s", code, body)
			}
			if got := <-queued.done; got.Finish != "abort" {
				t.Errorf("the aborted request finished %q", got.Finish)
			}
			_, dead := s.sched.faultState()
			if dead == handler {
				t.Fatalf("transfer loop dead = %v with the handler %v", dead, handler)
			}
			if v := metric(t, base, "refserve:kv_transfer_aborts_total"); v != 1 {
				t.Errorf("kv_transfer_aborts_total = %v; want 1", v)
			}
			// Free a slot, then try a new request.
			running[0].cancel()
			<-running[0].done
			waitFor(t, s, "a free slot", func() bool { r, _ := s.sched.load(); return r == 1 })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := canary(ctx, base)
			if handler {
				if err := <-done; err != nil {
					t.Fatalf("canary with the handler: %v", err)
				}
				return
			}
			waitFor(t, s, "the canary to queue", func() bool { r, q := s.sched.load(); return r == 1 && q == 1 })
			for _, path := range []string{"/health", "/health_generate"} {
				if code := getStatus(t, base+path); code != http.StatusOK {
					t.Errorf("%s after the transfer loop died: HTTP %d; want 200 (the wedge hides from it)", path, code)
				}
			}
			if v := metric(t, base, "refserve:kv_transfer_loop_dead"); v != 1 {
				t.Errorf("refserve:kv_transfer_loop_dead = %v; want 1", v)
			}
			// The request that was running when the loop died is still decoding.
			select {
			case <-running[1].done:
				t.Error("a request already running ended when the transfer loop died")
			default:
			}
			if r, q := s.sched.load(); r != 1 || q != 1 {
				t.Errorf("%d running, %d queued; want the canary waiting behind a free slot", r, q)
			}
			select {
			case err := <-done:
				t.Fatalf("a new request finished after the transfer loop died: %v", err)
			default:
			}
			// With nothing else decoding, the probe passes on its own token: SGLang runs it
			// with a fake bootstrap, past the dead transfer loop.
			running[1].cancel()
			<-running[1].done
			waitFor(t, s, "the last running request to end", func() bool { r, _ := s.sched.load(); return r == 0 })
			if code := getStatus(t, base+"/health_generate"); code != http.StatusOK {
				t.Errorf("/health_generate with nothing running: HTTP %d; want 200", code)
			}
			if _, q := s.sched.load(); q != 1 {
				t.Errorf("%d queued; want the canary still waiting", q)
			}
		})
	}
}

// TestNixlCascadeCatchesRequestsStillWaiting: clients that hang up together reach the
// engine one by one. Here the running request's abort lands first, the queued request
// takes its slot and decodes, and only then does its own abort land: it still belongs to
// the cascade that struck while its transfer was in flight, and kills the transfer loop.
// The same request aborted after a slot freed without an abort is harmless.
func TestNixlCascadeCatchesRequestsStillWaiting(t *testing.T) {
	for _, cascade := range []bool{true, false} {
		s, base := startServer(t, nixlConfig(t, 1, false), nil)
		// The first request must still be decoding when the late one queues: a thousand
		// tokens at 1 ms each leave it a second, however loaded the machine.
		first := startStream(t, base, bodyWith(userRequest("a short one", nil), map[string]any{"stream": true, "rid": "first", "max_tokens": 1000, "ignore_eos": true}))
		<-first.first
		late := startStream(t, base, longReply("late"))
		waitFor(t, s, "the second request to queue", func() bool { _, q := s.sched.load(); return q == 1 })
		if cascade {
			postJSON(t, base+"/abort_request", map[string]any{"rid": "first"})
		}
		<-first.done // aborted, or finished of itself
		<-late.first // the late request runs and decodes
		late.cancel()
		<-late.done
		waitFor(t, s, "the late request's abort", func() bool { r, _ := s.sched.load(); return r == 0 })
		if _, dead := s.sched.faultState(); dead != cascade {
			t.Errorf("cascade %v: transfer loop dead = %v", cascade, dead)
		}
	}
}

// TestNixlAbortOfDecodingRequestIsHarmless: a request past its first token holds its KV
// on the decode side; aborting it sends no ABORT to the prefill side.
func TestNixlAbortOfDecodingRequestIsHarmless(t *testing.T) {
	s, base := startServer(t, nixlConfig(t, 0, false), nil)
	for _, ls := range decoding(t, base, "dec-", 20) {
		ls.cancel()
		<-ls.done
	}
	if code, _ := postJSON(t, base+"/abort_request", map[string]any{"abort_all": true}); code != http.StatusOK {
		t.Fatal("abort_all")
	}
	if _, dead := s.sched.faultState(); dead {
		t.Fatal("aborting requests past their first token killed the transfer loop")
	}
	if err := <-canary(context.Background(), base); err != nil {
		t.Fatal(err)
	}
}

// TestNixlWedgeNeedsNixlAndDisaggregation: the same abort of a queued request leaves an
// engine serving when it is not disaggregated, or transfers over mooncake, which handles
// ABORT.
func TestNixlWedgeNeedsNixlAndDisaggregation(t *testing.T) {
	for _, tc := range []struct{ mode, backend string }{{"null", "nixl"}, {"prefill", "mooncake"}, {"decode", "mooncake"}} {
		cfg := nixlConfig(t, 1, false)
		cfg.DisaggregationMode, cfg.DisaggregationTransferBackend = tc.mode, tc.backend
		s, base := startServer(t, cfg, nil)
		running := decoding(t, base, "r", 1)
		queued := startStream(t, base, longReply("q"))
		waitFor(t, s, "one queued", func() bool { _, q := s.sched.load(); return q == 1 })
		postJSON(t, base+"/abort_request", map[string]any{"rid": "q"})
		<-queued.done
		running[0].cancel()
		<-running[0].done
		if err := <-canary(context.Background(), base); err != nil {
			t.Errorf("mode %s over %s: canary after the abort: %v", tc.mode, tc.backend, err)
		}
	}
}

// TestNixlCascadeRecovery is the field's proof of the fix, in small: sessions in flight,
// more than the running batch holds, all aborted at once; with the handler a canary
// completes right after, without it none does. It logs the recovery time: abort to
// canary completed.
func TestNixlCascadeRecovery(t *testing.T) {
	for _, handler := range []bool{false, true} {
		s, base := startServer(t, nixlConfig(t, 8, handler), nil)
		decoding(t, base, "s", 8)
		for i := range 8 {
			startStream(t, base, longReply(fmt.Sprint("w", i)))
		}
		waitFor(t, s, "8 running and 8 queued", func() bool { r, q := s.sched.load(); return r == 8 && q == 8 })
		start := time.Now()
		if code, body := postJSON(t, base+"/abort_request", map[string]any{"abort_all": true}); code != http.StatusOK || string(body) != "{\"aborted\":16}\n" {
			t.Fatalf("abort_all: HTTP %d %s", code, body)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := canary(ctx, base)
		if handler {
			if err := <-done; err != nil {
				t.Fatalf("canary: %v", err)
			}
			t.Logf("with SGLANG_NIXL_ABORT_HANDLER=1: abort of 16 requests (8 queued) to a completed canary: %s", time.Since(start))
			cancel()
			continue
		}
		waitFor(t, s, "the canary to queue", func() bool { r, q := s.sched.load(); return r == 0 && q == 1 })
		if v := metric(t, base, "sglang:num_queue_reqs"); v != 1 {
			t.Errorf("num_queue_reqs = %v; want the canary", v)
		}
		cancel()
		if err := <-done; err == nil {
			t.Error("a canary completed after the transfer loop died")
		}
	}
}
