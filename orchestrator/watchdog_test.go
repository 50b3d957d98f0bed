package orchestrator

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// hostileSpec is an A/B spec whose engine is hostileserve in the given mode, run as a
// real process.
func hostileSpec(t *testing.T, mode string, sessions, concurrency int, timeouts string) *arms.Spec {
	t.Helper()
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	src := fmt.Sprintf(`version: 1
name: hostile-%s
engine:
  preset: custom
  command: [%q, --mode, %s]
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: %d, rounds: 2, concurrency: %d, seed: 3}
detectors: [dsml-leak]
timeouts: %s
`, mode, bin, mode, sessions, concurrency, timeouts)
	s, err := arms.Parse("hostile.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runClock records when each run's workload started and when the run ended.
type runClock struct {
	mu           sync.Mutex
	started, end map[string]time.Time
}

func newRunClock() *runClock {
	return &runClock{started: map[string]time.Time{}, end: map[string]time.Time{}}
}

func (c *runClock) RunStarted(arm string, _, _ int) {
	c.mu.Lock()
	c.started[arm] = time.Now()
	c.mu.Unlock()
}
func (c *runClock) SessionDone(string, int, store.SessionStatus, bool) {}
func (c *runClock) RunEnded(arm string, _ int, _ store.RunStatus) {
	c.mu.Lock()
	c.end[arm] = time.Now()
	c.mu.Unlock()
}
func (c *runClock) took(arm string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end[arm].Sub(c.started[arm])
}

func runErrors(t *testing.T, db string, exp int64) map[string]string {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var rows []struct {
		Arm   string `db:"name"`
		Error string `db:"error"`
	}
	if err := ro.Select(&rows, `SELECT a.name, coalesce(r.error, '') AS error FROM runs r JOIN arms a ON a.id = r.arm_id
		WHERE r.experiment_id = ?`, exp); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.Arm] = r.Error
	}
	return out
}

// TestTotalWedgeIsWedgedWhenSessionsEqualConcurrency: every request after the readiness
// probe hangs while /health answers. With as many sessions as run at once, every session
// ends at the stall timeout at the same moment the watchdog would look; the run must
// still be wedged, decided at the stall timeout rather than at the request timeout 30
// times longer. The bound between the two is wide: on a loaded 2-core machine, with the
// race detector and this package's other tests beside it, the watchdog's ticker was seen
// 1.4 s late and the commit of the sessions before the run ends 1.45 s long.
func TestTotalWedgeIsWedgedWhenSessionsEqualConcurrency(t *testing.T) {
	t.Parallel()
	const stall, request = 2 * time.Second, 60 * time.Second
	for _, shape := range []struct{ sessions, concurrency int }{{8, 8}, {24, 4}} {
		t.Run(fmt.Sprintf("%d sessions at %d", shape.sessions, shape.concurrency), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "a.db")
			clock := newRunClock()
			spec := hostileSpec(t, "wedge", shape.sessions, shape.concurrency, fmt.Sprintf("{startup: 30s, request: %v, stall: %v}", request, stall))
			res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Progress: clock})
			wantNoData(t, res, err)
			st, errs := runStatuses(t, db, res.ExperimentID), runErrors(t, db, res.ExperimentID)
			for _, arm := range []string{"control", "treatment"} {
				if st[arm] != store.RunWedged {
					t.Errorf("%s: status %q (%s), want wedged", arm, st[arm], errs[arm])
				}
				if !strings.Contains(errs[arm], "/health answers 200") {
					t.Errorf("%s: error %q does not say the engine still answered health", arm, errs[arm])
				}
				took := clock.took(arm)
				t.Logf("%s: wedged decided and the engine stopped %v after the workload began (stall %v): %s", arm,
					took.Round(10*time.Millisecond), stall, errs[arm])
				if took > stall+request/6 {
					t.Errorf("%s: wedge took %v to decide, want near the %v stall timeout, far from the %v request timeout", arm, took, stall, request)
				}
			}
		})
	}
}

// TestFastErrorsAreErroringNotWedged: every request after the readiness probe fails at
// once with HTTP 500. That is an erroring engine, decided long before the stall timeout,
// whatever the ratio of sessions to concurrency.
func TestFastErrorsAreErroringNotWedged(t *testing.T) {
	t.Parallel()
	const stall = 3 * time.Second
	for _, shape := range []struct{ sessions, concurrency int }{{8, 8}, {40, 4}} {
		t.Run(fmt.Sprintf("%d sessions at %d", shape.sessions, shape.concurrency), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "a.db")
			clock := newRunClock()
			spec := hostileSpec(t, "fast-500", shape.sessions, shape.concurrency, "{startup: 30s, request: 60s, stall: 3s}")
			res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Progress: clock})
			wantNoData(t, res, err)
			st, errs := runStatuses(t, db, res.ExperimentID), runErrors(t, db, res.ExperimentID)
			for _, arm := range []string{"control", "treatment"} {
				if st[arm] != store.RunErroring {
					t.Errorf("%s: status %q (%s), want erroring", arm, st[arm], errs[arm])
				}
				if !strings.Contains(errs[arm], "http 500") {
					t.Errorf("%s: error %q does not quote the engine's answer", arm, errs[arm])
				}
				if took := clock.took(arm); took >= stall {
					t.Errorf("%s: erroring took %v to decide, not less than the %v stall timeout", arm, took, stall)
				}
			}
			// Each engine's process group was recorded, and recorded as ended once stopped.
			ro, err := store.OpenReadOnly(db)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			var recorded, ended int
			ro.Get(&recorded, `SELECT count(*) FROM engine_processes`)
			ro.Get(&ended, `SELECT count(*) FROM engine_processes WHERE ended_at IS NOT NULL`)
			if recorded != 2 || ended != 2 {
				t.Errorf("engine process groups: %d recorded, %d ended; want 2 and 2", recorded, ended)
			}
		})
	}
}

// TestEndlessGenerationIsTimedOut: an engine that keeps streaming text and never finishes
// a reply makes progress token by token, so it is not wedged; its turns run past the
// request timeout.
func TestEndlessGenerationIsTimedOut(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	// A stall shorter than the request timeout, which the tokens, every 20 ms, never let
	// pass; it is long enough that a test process starved by a loaded machine does not
	// see one either (a run of the suite once saw no token for 1.2 s with a 0.4 s stall,
	// and the watchdog's own tick has been seen 2.1 s late).
	spec.Timeouts.Request, spec.Timeouts.Stall = 4*time.Second, 3*time.Second
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, func(n int64, e *engine, r *http.Request) bool { return n > 1 })
			e.trickle, e.trickleText = true, "la "
			return e
		})})
	wantNoData(t, res, err)
	st, errs := runStatuses(t, db, res.ExperimentID), runErrors(t, db, res.ExperimentID)
	for _, arm := range []string{"control", "treatment"} {
		if st[arm] != store.RunTimedOut || !strings.Contains(errs[arm], "request timeout") {
			t.Errorf("%s: status %q (%s), want timed-out", arm, st[arm], errs[arm])
		}
	}
}

func TestWatchdogDecides(t *testing.T) {
	t.Parallel()
	timeouts := arms.Timeouts{Request: time.Minute, Stall: time.Second}
	at := func(d *watchdog, after time.Duration) time.Time { return time.Unix(0, d.last.Load()).Add(after) }
	t.Run("a streak of stalls is a wedge", func(t *testing.T) {
		d := newWatchdog(timeouts, arms.Workload{Sessions: 4, Concurrency: 4})
		for range 4 {
			d.turn(workload.FailureStalled, "no event")
		}
		if c := d.decide(at(d, 0), true); c == nil || c.status != store.RunWedged {
			t.Fatalf("decided %+v", c)
		}
	})
	t.Run("a completed turn breaks the streak", func(t *testing.T) {
		d := newWatchdog(timeouts, arms.Workload{Sessions: 40, Concurrency: 4})
		for range 3 {
			d.turn(workload.FailureFast, "http 500")
		}
		d.turn(workload.FailureNone, "")
		d.turn(workload.FailureFast, "http 500")
		if c := d.decide(at(d, 0), false); c != nil {
			t.Fatalf("decided %+v after a completed turn", c)
		}
		for range 3 {
			d.turn(workload.FailureFast, "http 503: overloaded")
		}
		c := d.decide(at(d, 0), false)
		if c == nil || c.status != store.RunErroring || !strings.Contains(c.Error(), "http 503: overloaded") {
			t.Fatalf("decided %+v", c)
		}
	})
	t.Run("the most frequent failure names a mixed streak", func(t *testing.T) {
		d := newWatchdog(timeouts, arms.Workload{Sessions: 5, Concurrency: 8})
		d.turn(workload.FailureFast, "http 500")
		for range 3 {
			d.turn(workload.FailureTimedOut, "past 1m")
		}
		d.turn(workload.FailureCancelled, "cancelled") // not counted
		if c := d.decide(at(d, 0), false); c != nil {
			t.Fatalf("decided %+v with 4 of 5", c)
		}
		d.turn(workload.FailureStalled, "no event")
		if c := d.decide(at(d, 0), false); c == nil || c.status != store.RunTimedOut {
			t.Fatalf("decided %+v, want timed out (the streak limit is the 5 sessions)", c)
		}
	})
	t.Run("silence for the stall timeout is a wedge while the workload runs", func(t *testing.T) {
		d := newWatchdog(timeouts, arms.Workload{Sessions: 4, Concurrency: 4})
		if c := d.decide(at(d, 999*time.Millisecond), false); c != nil {
			t.Fatalf("decided %+v before the stall timeout", c)
		}
		d.token()
		if c := d.decide(at(d, 999*time.Millisecond), false); c != nil {
			t.Fatalf("a token did not count as progress: %+v", c)
		}
		if c := d.decide(at(d, time.Second), false); c == nil || c.status != store.RunWedged {
			t.Fatalf("decided %+v at the stall timeout", c)
		}
		// Once the workload ended by itself with its last turn completed, silence is no
		// fault (the detectors may have taken a while).
		d.turn(workload.FailureNone, "")
		if c := d.decide(at(d, time.Hour), true); c != nil {
			t.Fatalf("decided %+v for a finished workload", c)
		}
	})
}
