package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// gatedBackend holds every decode iteration until its gate is closed, so requests stay
// in flight for as long as a test needs.
type gatedBackend struct{ gate chan struct{} }

func (b gatedBackend) Decode(ctx context.Context, _ []Step) error {
	select {
	case <-b.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (gatedBackend) Close() error { return nil }

// TestMassAbortWedge: with the overlap scheduler and tensor parallelism, a mass abort
// wedges the scheduler for good while /health still answers, as in the field; turning
// the overlap scheduler off, or a single rank, keeps it serving.
func TestMassAbortWedge(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tp         int
		disable    bool
		aborts     int
		wantWedged bool
	}{
		{"overlap tp8 mass abort", 8, false, massAbort, true},
		{"overlap tp8 small abort", 8, false, massAbort - 1, false},
		{"overlap off tp8", 8, true, 40, false},
		{"overlap tp1", 1, false, 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.TPSize, cfg.DisableOverlapSchedule = tc.tp, tc.disable
			gate := make(chan struct{})
			s, base := startServer(t, cfg, gatedBackend{gate})
			rids := make([]string, tc.aborts)
			for i := range rids {
				rids[i] = fmt.Sprint("r", i)
			}
			ends := openStreams(t, base, rids...)
			waitFor(t, s, "every request in flight", func() bool { r, q := s.sched.load(); return r+q == tc.aborts })
			code, _ := postJSON(t, base+"/abort_request", map[string]any{"abort_all": true})
			if code != http.StatusOK {
				t.Fatalf("abort_all: HTTP %d", code)
			}
			for range tc.aborts {
				if got := <-ends; got.Finish != "abort" {
					t.Errorf("stream finished %q; want abort", got.Finish)
				}
			}
			close(gate)
			s.sched.mu.Lock()
			wedged := s.sched.wedged
			s.sched.mu.Unlock()
			if wedged != tc.wantWedged {
				t.Fatalf("wedged = %v; want %v", wedged, tc.wantWedged)
			}
			if resp, err := http.Get(base + "/health"); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("/health after the abort: %v %v; want 200 either way", resp, err)
			} else {
				resp.Body.Close()
			}
			if !tc.wantWedged {
				chat(t, base, userRequest("Still there?", nil)) // completes
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := probeHealthGenerate(ctx, base)
			waitFor(t, s, "the probe to queue", func() bool { _, q := s.sched.load(); return q == 1 })
			if r, q := s.sched.load(); r != 0 || q != 1 {
				t.Errorf("wedged scheduler: %d running, %d queued; want the probe stuck in the queue", r, q)
			}
			cancel()
			if code := <-done; code == http.StatusOK {
				t.Error("a wedged server passed /health_generate")
			}
		})
	}
}
