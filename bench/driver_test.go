// Package bench measures arbiter's workload client side by side with a peer, vegeta, in
// one run, against one local fake OpenAI server (real HTTP on loopback) that answers at
// once, and reports both figures and their ratio. It is a module of its own so that the
// peer stays out of arbiter's dependencies: cd bench && go test -run '^$' -bench .
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/workload"
)

// streamBody is an SSE body of n content chunks, a finish chunk, a usage chunk and
// [DONE], as SGLang and vLLM send them, written from the wire types.
func streamBody(n int) []byte {
	var b bytes.Buffer
	event := func(v any) {
		j, _ := json.Marshal(v)
		b.WriteString("data: ")
		b.Write(j)
		b.WriteString("\n\n")
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1733000000, "model": "bench",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	for i := range n {
		event(chunk(map[string]any{"content": fmt.Sprintf("tok%d ", i)}, nil))
	}
	event(chunk(map[string]any{}, "stop"))
	event(map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1733000000, "model": "bench",
		"choices": []any{}, "usage": map[string]int{"prompt_tokens": 12, "completion_tokens": n, "total_tokens": n + 12}})
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// renderWhole is a non-streamed completion of n tokens.
func renderWhole(n int) []byte {
	var content strings.Builder
	for i := range n {
		fmt.Fprintf(&content, "tok%d ", i)
	}
	b, _ := json.Marshal(openai.ChatCompletion{ID: "chatcmpl-bench", Object: "chat.completion", Created: 1733000000, Model: "bench",
		Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: content.String()}, FinishReason: "stop"}},
		Usage:   &openai.Usage{PromptTokens: 12, CompletionTokens: n, TotalTokens: n + 12}})
	return b
}

// instantServer answers every chat completion with body at once.
func instantServer(tb testing.TB, body []byte, contentType string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

const benchConcurrency = 8

var benchRequest = func() openai.ChatRequest {
	temp, seed := 0.0, int64(1)
	return openai.ChatRequest{Model: "bench", Messages: []openai.Message{{Role: "user", Content: "Say something."}},
		Temperature: &temp, Seed: &seed, MaxTokens: 512}
}

// arbiterRate runs the workload client closed-loop at benchConcurrency for d and
// returns completed requests.
func arbiterRate(tb testing.TB, base string, stream bool, d time.Duration) int64 {
	req := benchRequest()
	req.Stream = stream
	if stream {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	// The collection policy Run applies to every workload, applied here the same way.
	defer workload.ApplyRunGCPolicy(benchConcurrency)()
	c := workload.NewClient(benchConcurrency)
	defer c.CloseIdleConnections()
	var done atomic.Int64
	var failed atomic.Value
	ctx := context.Background()
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ex := c.Chat(ctx, base, req)
				if ex.Err != nil || len(ex.Completion.Choices) == 0 {
					failed.Store(fmt.Sprint(ex.Err))
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		tb.Fatalf("arbiter client: %v", f)
	}
	return done.Load()
}

// vegetaRate runs vegeta at its maximum rate with benchConcurrency workers for d and
// returns completed requests.
func vegetaRate(tb testing.TB, base string, stream bool, d time.Duration) int64 {
	req := benchRequest()
	req.Stream = stream
	body, _ := json.Marshal(req)
	target := vegeta.Target{Method: http.MethodPost, URL: base + "/v1/chat/completions", Body: body,
		Header: http.Header{"Content-Type": {"application/json"}}}
	atk := vegeta.NewAttacker(vegeta.Workers(benchConcurrency), vegeta.MaxWorkers(benchConcurrency),
		vegeta.Connections(benchConcurrency), vegeta.KeepAlive(true))
	var n int64
	for r := range atk.Attack(vegeta.NewStaticTargeter(target), vegeta.Rate{}, d, "bench") {
		if r.Code != 200 {
			tb.Fatalf("vegeta: %d %s", r.Code, r.Error)
		}
		n++
	}
	return n
}

// BenchmarkDriverVsVegeta: requests per second of arbiter's workload client (SSE framing,
// chunk decoding, assembly, per-token times) and of vegeta (which reads each body and
// keeps it, decoding nothing), both closed-loop at 8 connections, in 300 ms turns whose
// order alternates from one iteration to the next (-benchtime 8x: four of each order).
func BenchmarkDriverVsVegeta(b *testing.B) {
	for _, c := range []struct {
		name   string
		body   []byte
		ct     string
		stream bool
		target float64
	}{
		{"nonstream-64tok", renderWhole(64), "application/json", false, 1.0},
		{"stream-64", streamBody(64), "text/event-stream", true, 0.8},
		{"stream-512", streamBody(512), "text/event-stream", true, 0.5},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := instantServer(b, c.body, c.ct)
			const turn = 300 * time.Millisecond
			var arb, veg int64
			for i := 0; b.Loop(); i++ {
				// Each turn starts on a collected heap, so that neither pays for the
				// other's garbage, and the order alternates, so that neither always runs
				// on a machine the other just loaded: run an even number of iterations.
				runtime.GC()
				if i%2 == 0 {
					arb += arbiterRate(b, srv.URL, c.stream, turn)
					runtime.GC()
					veg += vegetaRate(b, srv.URL, c.stream, turn)
				} else {
					veg += vegetaRate(b, srv.URL, c.stream, turn)
					runtime.GC()
					arb += arbiterRate(b, srv.URL, c.stream, turn)
				}
			}
			secs := turn.Seconds() * float64(b.N)
			b.ReportMetric(float64(arb)/secs, "arbiter-req/s")
			b.ReportMetric(float64(veg)/secs, "vegeta-req/s")
			b.ReportMetric(float64(arb)/float64(veg), "ratio")
			b.ReportMetric(c.target, "target-ratio")
		})
	}
}
