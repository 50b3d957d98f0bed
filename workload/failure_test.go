package workload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// TestTurnsSayHowTheyFailed drives one session per kind of failure against a real server
// on loopback and checks the Failure each turn reports.
func TestTurnsSayHowTheyFailed(t *testing.T) {
	e := newScriptedEngine(t)
	e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
		switch req.RID {
		case "arb-9-1-0": // says nothing at all
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return true
		case "arb-9-2-0": // answers at once with an error
			http.Error(w, `{"error":{"message":"out of memory"}}`, http.StatusInternalServerError)
			return true
		case "arb-9-3-0": // talks forever without finishing
			w.Header().Set("Content-Type", "text/event-stream")
			tick := time.NewTicker(10 * time.Millisecond) // pacing of the stream
			defer tick.Stop()
			for {
				if _, err := w.Write([]byte(`data: {"id":"x","choices":[{"index":0,"delta":{"content":"la "}}]}` + "\n\n")); err != nil {
					return true
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return true
				case <-tick.C:
				}
			}
		}
		return false
	}
	rec := &memRecorder{}
	var tokens atomic.Int64
	cfg := Config{Sessions: 4, Rounds: 1, Concurrency: 4, Seed: 9, StallTimeout: 300 * time.Millisecond,
		RequestTimeout: 1500 * time.Millisecond, OnToken: func() { tokens.Add(1) }}
	if err := Run(context.Background(), cfg, e.srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	want := map[int]Failure{0: FailureNone, 1: FailureStalled, 2: FailureFast, 3: FailureTimedOut}
	for s, f := range want {
		turns := rec.turnsOf(s)
		if len(turns) == 0 {
			t.Fatalf("session %d has no turn", s)
		}
		if got := turns[0].Failure; got != f {
			t.Errorf("session %d: first turn failure %q (err %q), want %q", s, got, turns[0].Err, f)
		}
	}
	// The healthy session's answers and the endless talker's events are generated text;
	// a stall and an HTTP error are not.
	if n := tokens.Load(); n < 10 {
		t.Errorf("OnToken heard %d arrivals of text, want the healthy session's and the talker's", n)
	}
}

func TestCancelledTurnsAreNotTheEnginesFault(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ex := make(chan Exchange)
	go func() { ex <- (&Client{}).Chat(ctx, srv.URL, weatherRequest("c1", true)) }()
	cancel()
	if f := failureOf(ctx, (<-ex).Err); f != FailureCancelled {
		t.Errorf("failure of a cancelled request = %q", f)
	}
}
