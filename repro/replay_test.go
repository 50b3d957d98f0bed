package repro

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// bundleOf is a bundle of n cases, each a plain chat request, judged by dsml-leak.
func bundleOf(n, concurrency int) *Bundle {
	b := &Bundle{Concurrency: concurrency, Detectors: []string{"dsml-leak"}}
	for i := range n {
		b.Cases = append(b.Cases, Case{ID: "case-" + string(rune('a'+i%26)), Request: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)})
	}
	return b
}

const leakAnswer = `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">"},"finish_reason":"stop"}]}`

// A replay redirected to another port, where something answers with the failure, is
// not a reproduction: the redirect is not followed, and the replay could not judge.
func TestReplayFollowsNoRedirectElsewhere(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, leakAnswer) }))
	defer elsewhere.Close()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer engine.Close()
	results, _, err := Replay(context.Background(), bundleOf(3, 3), ReplayOptions{BaseURL: engine.URL, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := OutcomeOf(results); got != Unreached {
		t.Errorf("outcome %s (%+v); want %s", got, results, Unreached)
	}
}

// An engine that cannot be reached is told from one that no longer reproduces.
func TestReplayOutcomes(t *testing.T) {
	clean := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}`)
	}))
	defer clean.Close()
	leaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, leakAnswer) }))
	defer leaky.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for url, want := range map[string]Outcome{clean.URL: NoLongerReproduces, leaky.URL: Reproduced, gone.URL: Unreached} {
		results, _, err := Replay(context.Background(), bundleOf(2, 2), ReplayOptions{BaseURL: url, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if got := OutcomeOf(results); got != want {
			t.Errorf("%s: outcome %s (%+v), want %s", url, got, results, want)
		}
	}
}

// An answer that trickles forever ends at the timeout; a bundle of many cases is sent
// through at most MaxReplayConcurrency connections, every case still sent.
func TestReplayIsBounded(t *testing.T) {
	var inFlight, most atomic.Int64
	many := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond) // long enough for the slots to overlap
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}`)
	}))
	defer many.Close()
	results, _, err := Replay(context.Background(), bundleOf(2*MaxReplayConcurrency, 100000), ReplayOptions{BaseURL: many.URL, Rounds: 1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > MaxReplayConcurrency {
		t.Errorf("%d requests in flight at once, over %d", m, MaxReplayConcurrency)
	}
	for _, r := range results {
		if r.Sent == 0 {
			t.Fatalf("case %s never sent", r.ID)
		}
	}

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x",`)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
				io.WriteString(w, " ")
				w.(http.Flusher).Flush()
			}
		}
	}))
	defer slow.Close()
	start := time.Now()
	results, _, err = Replay(context.Background(), bundleOf(1, 1), ReplayOptions{BaseURL: slow.URL, Rounds: 1, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second || OutcomeOf(results) != Unreached {
		t.Errorf("a trickling answer: %v, %+v", took, results)
	}
}
