package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
	"github.com/arbiterlab/arbiter/store"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/workload"
)

// The watchdog tells apart three ways an engine that still runs can fail a workload, and
// decides them the same way whether the sessions outnumber the concurrency or not:
//
//   - wedged: no turn completed and no generated token arrived for timeouts.stall (the
//     overlap-scheduler deadlock: /health says OK, nothing is scheduled);
//   - erroring: the streak limit of turns in a row failed fast (an HTTP error, a broken,
//     incomplete or empty reply, a dropped connection) with none completing;
//   - timed out: the streak limit of turns in a row ran past timeouts.request with none
//     completing, while tokens kept coming (an engine that never stops generating).
//
// The streak limit is the workload's concurrency, capped at its sessions: every request
// that was in flight failed. A streak of mixed failures is named by its most frequent kind
// (ties: wedged, then timed out, then erroring). An engine that exits is crashed, whatever
// its turns did. The watchdog looks every stall/10 (at most 250 ms), and once more when
// the workload ends by itself, so that a run whose every session ended in the same wedge
// is recorded as wedged, not done.

// watchTick is how often the watchdog looks.
func watchTick(stall time.Duration) time.Duration {
	return max(min(stall/10, 250*time.Millisecond), 10*time.Millisecond)
}

// watchdog follows the progress of one run's workload.
type watchdog struct {
	stall       time.Duration
	request     time.Duration
	streakLimit int

	last atomic.Int64 // unix nanoseconds of the last progress: a completed turn or a token
	// held counts the sessions (and the end of the workload) waiting on the detectors
	// rather than on the engine: while any does, the engine's silence is not its own.
	held atomic.Int64
	// frozen, once set (unix nanoseconds), is when the workload ended: the engine's
	// silence is measured up to then, however long its last turns take to label.
	frozen atomic.Int64

	mu      sync.Mutex
	streak  map[workload.Failure]int // failed turns since the last completed one, by kind
	lastErr map[workload.Failure]string
}

func newWatchdog(t arms.Timeouts, w arms.Workload) *watchdog {
	limit := max(w.Concurrency, 1)
	if w.Sessions > 0 {
		limit = min(limit, w.Sessions)
	}
	stall := t.Stall
	if stall <= 0 {
		stall = arms.DefaultStallTimeout
	}
	d := &watchdog{stall: stall, request: t.Request, streakLimit: limit,
		streak: map[workload.Failure]int{}, lastErr: map[workload.Failure]string{}}
	d.last.Store(time.Now().UnixNano())
	return d
}

// hold hears that the workload waits on the labelling (+1), or no longer (-1). Leaving a
// hold counts as progress: the engine is timed from when it was given work again.
func (d *watchdog) hold(delta int) {
	d.held.Add(int64(delta))
	d.last.Store(time.Now().UnixNano())
}

// freeze stops the clock of the engine's silence where it is: the workload has ended, and
// what follows (labelling its last turns) is not the engine's.
func (d *watchdog) freeze() { d.frozen.CompareAndSwap(0, time.Now().UnixNano()) }

// token hears generated text arrive: progress, though no turn completed yet.
func (d *watchdog) token() { d.last.Store(time.Now().UnixNano()) }

// turn hears a turn end, completed (FailureNone) or not.
func (d *watchdog) turn(f workload.Failure, errText string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch f {
	case workload.FailureNone:
		d.last.Store(time.Now().UnixNano())
		clear(d.streak)
	case workload.FailureCancelled:
		// arbiter's doing, not the engine's
	default:
		d.streak[f]++
		d.lastErr[f] = errText
	}
}

// stopCause is why the watchdog stopped (or judged) a run: the run status and the error
// that explains it.
type stopCause struct {
	status store.RunStatus
	err    error
}

func (c *stopCause) Error() string { return c.err.Error() }
func (c *stopCause) Unwrap() error { return c.err }

// decide returns why the run must end now, or nil to let it go on. final says that the
// workload ended by itself: then silence counts only if turns failed in it.
func (d *watchdog) decide(now time.Time, final bool) *stopCause {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.streak {
		n += c
	}
	if f := d.frozen.Load(); f != 0 {
		now = time.Unix(0, f)
	} else if d.held.Load() > 0 {
		d.last.Store(now.UnixNano())
	}
	idle := now.Sub(time.Unix(0, d.last.Load()))
	if n >= d.streakLimit {
		switch d.mostFrequent() {
		case workload.FailureStalled:
			return d.wedged(idle, n)
		case workload.FailureTimedOut:
			return &stopCause{store.RunTimedOut, fmt.Errorf("%w (%d turns in a row ran past the %v request timeout, none completed)",
				ErrTimedOut, n, d.request)}
		default:
			return &stopCause{store.RunErroring, fmt.Errorf("%w (%d turns in a row failed, none completed; the last: %s)",
				ErrErroring, n, d.lastErr[workload.FailureFast])}
		}
	}
	if idle >= d.stall && (!final || n > 0) {
		return d.wedged(idle, n)
	}
	return nil
}

func (d *watchdog) mostFrequent() workload.Failure {
	best := workload.FailureStalled
	for _, f := range []workload.Failure{workload.FailureTimedOut, workload.FailureFast} {
		if d.streak[f] > d.streak[best] {
			best = f
		}
	}
	return best
}

func (d *watchdog) wedged(idle time.Duration, n int) *stopCause {
	streak := ""
	if n > 0 {
		streak = fmt.Sprintf("; %d turns in a row failed", n)
	}
	return &stopCause{store.RunWedged, fmt.Errorf("%w (no turn completed and no token arrived for %v%s)",
		ErrWedged, idle.Round(10*time.Millisecond), streak)}
}

// watch stops the workload (through cancel) when the engine exits on its own or when the
// watchdog decides the run is wedged, erroring or timed out.
func (e *experiment) watch(ctx context.Context, inst runtime.Instance, d *watchdog, preset arms.Preset,
	cancel context.CancelCauseFunc) {
	tick := time.NewTicker(watchTick(d.stall))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-inst.Done():
			cancel(crashedDuringWorkload(inst))
			return
		case now := <-tick.C:
			select {
			case <-inst.Done():
				// An engine that died also fails its turns: say it crashed, not wedged.
				cancel(crashedDuringWorkload(inst))
				return
			default:
			}
			if c := d.decide(now, false); c != nil {
				if diedUnder(ctx, inst, c) {
					cancel(crashedDuringWorkload(inst))
				} else {
					cancel(e.explain(ctx, inst, preset, c))
				}
				return
			}
		}
	}
}

// judgeEnd looks once more when the workload ended by itself: a run whose every session
// ended in the same fault is that fault, not done. It returns nil for a run that is done.
func (e *experiment) judgeEnd(ctx context.Context, inst runtime.Instance, d *watchdog, preset arms.Preset) error {
	c := d.decide(time.Now(), true)
	if c == nil {
		return nil
	}
	if diedUnder(ctx, inst, c) {
		return crashedDuringWorkload(inst)
	}
	return e.explain(ctx, inst, preset, c)
}

// diedUnder says whether the engine ended by itself under the turns that made the
// watchdog decide c. Turns that fail fast are also what a dying engine's last requests
// do (a cancelled Slurm job, a node gone, a process killed): its end is looked for now,
// where its runtime polls for it, and given a moment to be seen before the run is called
// erroring. An engine that ended so is crashed, or lost with its node, not erroring.
func diedUnder(ctx context.Context, inst runtime.Instance, c *stopCause) bool {
	if endedByItself(ctx, inst) {
		return true
	}
	if c.status != store.RunErroring {
		return false
	}
	select {
	case <-inst.Done():
		return !inst.Exit().Stopped
	case <-ctx.Done():
		return false
	case <-time.After(500 * time.Millisecond):
		return false
	}
}

func crashedDuringWorkload(inst runtime.Instance) error {
	return fmt.Errorf("%w during the workload (%s)", runtime.ErrCrashed, inst.Exit())
}

// explain adds to a wedge what the engine's health endpoint says, since a wedged engine
// that still answers it is the case liveness by health misses.
func (e *experiment) explain(ctx context.Context, inst runtime.Instance, preset arms.Preset, c *stopCause) error {
	if c.status != store.RunWedged {
		return c
	}
	path := preset.HealthPath
	if path == "" {
		path = "/health"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(time.Second, max(e.spec.Timeouts.Stall, 100*time.Millisecond)))
	defer cancel()
	note := fmt.Sprintf("%s answers 200", path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.Endpoint()+path, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = enginehttp.Client(0).Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				note = fmt.Sprintf("%s answers %d", path, resp.StatusCode)
			}
		}
	}
	if err != nil {
		note = fmt.Sprintf("%s does not answer either", path)
	}
	return &stopCause{c.status, fmt.Errorf("%w; %s", c.err, note)}
}

// Sentinels of the run outcomes the watchdog decides, besides ErrWedged.
var (
	// ErrErroring reports an engine whose requests fail fast, none completing.
	ErrErroring = errors.New("engine erroring: its replies fail fast and none completes")
	// ErrTimedOut reports an engine whose requests run past the request timeout, none
	// completing.
	ErrTimedOut = errors.New("engine timed out: its requests run past the request timeout and none completes")
)
