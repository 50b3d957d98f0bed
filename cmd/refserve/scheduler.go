package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// event is what a request's handler receives from the scheduler: visible content, and
// on the last event the finish reason.
type event struct {
	Content string
	Finish  string // "stop", "tool_calls", "length" or "abort" on the last event
	Tokens  int    // completion tokens, on the last event
}

// request is one chat completion inside the scheduler.
type request struct {
	rid    string
	place  sessionPlace
	probe  bool // the health generation: no conversation, outside the cohort
	load   int  // the logical load when it arrived (logicalLoadLocked)
	prompt int  // prompt tokens
	gen    *generation
	// events never blocks the scheduler: it holds one event per possible step plus the
	// final one.
	events chan event

	// guarded by scheduler.mu
	finished bool
	finish   string
}

func newRequest(rid string, place sessionPlace, prompt int, gen *generation) *request {
	return &request{rid: rid, place: place, prompt: prompt, gen: gen, events: make(chan event, gen.maxSteps()+1)}
}

// newProbe is a request of the health generation, which belongs to no conversation.
func newProbe(rid string, gen *generation) *request {
	r := newRequest(rid, sessionPlace{}, 1, gen)
	r.probe = true
	return r
}

// errClosed is returned for requests submitted while the server shuts down.
var errClosed = errors.New("scheduler: shutting down")

// scheduler admits requests up to --max-running-requests, queues the rest, and runs
// decode iterations at the inter-token delay: every running request advances one token
// per iteration, and every step goes through the backend. Each step carries both loads:
// the requests physically in the iteration, which depends on how fast clients come back,
// and the logical load its request met on arrival (the cohort, cohort.go), which does not.
type scheduler struct {
	backend    Backend
	delay      time.Duration
	maxRunning int // 0: unlimited
	log        *slog.Logger

	mu      sync.Mutex
	queue   []*request
	running []*request
	closed  bool
	tp      throughput
	cohort  cohort

	wake chan struct{}
	// changed is closed at the next admission, completion or abort; see changes.
	changed chan struct{}

	// wedgeOnMassAbort models the field's deadlock: with the overlap scheduler and
	// tensor parallelism, a mass abort left ranks out of step, some in a collective and
	// some idle, and the engine stopped decoding for good while /health still answered.
	wedgeOnMassAbort bool
	abortBurst       int  // requests aborted since the last decode iteration that saw none
	wedged           bool // decoding and admission have stopped for good

	genTokens    atomic.Int64
	promptTokens atomic.Int64
	requests     atomic.Int64 // finished requests, aborted ones included
	aborted      atomic.Int64
	staleSteps   atomic.Int64
}

func newScheduler(b Backend, delay time.Duration, maxRunning int, log *slog.Logger) *scheduler {
	return &scheduler{backend: b, delay: delay, maxRunning: maxRunning, log: log, wake: make(chan struct{}, 1)}
}

// submit queues a request; its events arrive on r.events.
func (s *scheduler) submit(r *request) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.queue = append(s.queue, r)
	if !r.probe {
		s.cohort.arrive(r.place)
		r.load = s.logicalLoadLocked()
	}
	s.notifyLocked()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// abort ends the requests whose rid matches (all of them with all); queued and running
// alike. It returns how many it ended.
func (s *scheduler) abort(rid string, all bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.queue {
		if all || r.rid == rid {
			s.abortLocked(r)
			n++
		}
	}
	for _, r := range s.running {
		if all || r.rid == rid {
			s.abortLocked(r)
			n++
		}
	}
	s.pruneLocked()
	return n
}

// cancel aborts one request, as a client disconnect does; a finished one is left alone.
func (s *scheduler) cancel(r *request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.finished {
		s.abortLocked(r)
		s.pruneLocked()
	}
}

// close aborts everything and refuses new requests.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, r := range append(s.queue, s.running...) {
		s.finishLocked(r, "abort")
	}
	s.pruneLocked()
}

// changes returns a channel that is closed at the scheduler's next change of state
// (a request queued, admitted or finished), so a watcher can wait for a condition
// without polling.
func (s *scheduler) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

func (s *scheduler) notifyLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// load is the number of running and queued requests.
func (s *scheduler) load() (running, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running), len(s.queue)
}

// abortLocked ends a request at a client's demand (abort_request or a disconnect) and
// counts it towards a mass abort.
func (s *scheduler) abortLocked(r *request) {
	if r.finished {
		return
	}
	s.finishLocked(r, "abort")
	s.abortBurst++
	if s.wedgeOnMassAbort && !s.wedged && s.abortBurst >= massAbort {
		s.wedged = true
		s.log.Warn("mass abort desynchronized the tensor-parallel ranks; the scheduler is wedged (--disable-overlap-schedule avoids this)",
			"aborted", s.abortBurst)
	}
}

func (s *scheduler) finishLocked(r *request, reason string) {
	if r.finished {
		return
	}
	r.finished = true
	r.finish = reason
	if !r.probe {
		s.cohort.finish(r.place.key, reason == "tool_calls")
	}
	r.events <- event{Finish: reason, Tokens: r.gen.n}
	s.notifyLocked()
	s.requests.Add(1)
	if reason == "abort" {
		s.aborted.Add(1)
	}
}

// pruneLocked drops finished requests from the queue and the running batch.
func (s *scheduler) pruneLocked() {
	keep := func(rs []*request) []*request {
		out := rs[:0]
		for _, r := range rs {
			if !r.finished {
				out = append(out, r)
			}
		}
		for i := len(out); i < len(rs); i++ {
			rs[i] = nil
		}
		return out
	}
	s.queue = keep(s.queue)
	s.running = keep(s.running)
}

// logicalLoadLocked is the load the sim fault model draws against: the sessions of the
// cohort, of which no more than --max-running-requests share a decode batch. A request
// keeps the value it met on arrival, when its pages were restored.
func (s *scheduler) logicalLoadLocked() int {
	n := s.cohort.size()
	if s.maxRunning > 0 {
		n = min(n, s.maxRunning)
	}
	return n
}

// massAbort is how many requests aborted in a burst wedge a scheduler that can wedge:
// the field's abort cascade killed 60 sessions at once.
const massAbort = 16

// admitLocked moves queued requests into the running batch while there is room.
func (s *scheduler) admitLocked() {
	for !s.wedged && len(s.queue) > 0 && (s.maxRunning <= 0 || len(s.running) < s.maxRunning) {
		r := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.running = append(s.running, r)
		s.promptTokens.Add(int64(r.prompt))
		s.notifyLocked()
	}
}

// run decodes until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	var tick <-chan time.Time
	if s.delay > 0 {
		t := time.NewTicker(s.delay)
		defer t.Stop()
		tick = t.C
	}
	var batch []*request
	var steps []Step
	prevBurst := 0
	for {
		s.mu.Lock()
		s.admitLocked()
		idle, wedged := len(s.running) == 0, s.wedged
		if idle { // nothing left in flight: whatever burst of aborts there was is over
			s.abortBurst, prevBurst = 0, 0
		}
		s.mu.Unlock()
		if wedged { // as in the field: nothing moves until the process is restarted
			<-ctx.Done()
			return
		}
		if idle {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		for waiting := tick != nil; waiting; {
			select {
			case <-tick:
				waiting = false
			case <-s.wake: // admit arrivals now, as prefill would, not at the next step
				s.mu.Lock()
				s.admitLocked()
				s.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
		s.mu.Lock()
		if s.wedged {
			s.mu.Unlock()
			continue
		}
		s.admitLocked() // what arrived during the wait joins this iteration
		batch = append(batch[:0], s.running...)
		steps = steps[:0]
		for _, r := range batch {
			steps = append(steps, Step{Session: r.place.key, Position: r.prompt + r.gen.n, InFlight: len(batch),
				Load: r.load, Restored: r.place.restores()})
		}
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		err := s.backend.Decode(ctx, steps)
		if err != nil {
			s.log.Error("decode iteration failed; aborting its requests", "requests", len(batch), "err", err)
		}
		s.mu.Lock()
		var made int64
		for i, r := range batch {
			if r.finished { // aborted while the backend ran
				continue
			}
			if err != nil {
				s.finishLocked(r, "abort")
				continue
			}
			if steps[i].Stale {
				s.staleSteps.Add(1)
			}
			content, finish := r.gen.step(steps[i].Stale, steps[i].Position)
			made++
			if content != "" {
				r.events <- event{Content: content}
			}
			if finish != "" {
				s.finishLocked(r, finish)
			}
		}
		s.pruneLocked()
		if s.abortBurst == prevBurst { // no abort since the last iteration: the burst is over
			s.abortBurst = 0
		}
		prevBurst = s.abortBurst
		s.genTokens.Add(made)
		s.tp.record(time.Now(), s.genTokens.Load())
		s.mu.Unlock()
		clear(batch)
	}
}

// throughput keeps recent (time, generated tokens) samples for sglang:gen_throughput.
type throughput struct {
	samples [16]tpSample
	next    int
	n       int
}

type tpSample struct {
	at     time.Time
	tokens int64
}

const tpEvery = 100 * time.Millisecond

func (t *throughput) record(now time.Time, tokens int64) {
	if t.n > 0 {
		last := t.samples[(t.next+len(t.samples)-1)%len(t.samples)]
		if now.Sub(last.at) < tpEvery {
			return
		}
	}
	t.samples[t.next] = tpSample{now, tokens}
	t.next = (t.next + 1) % len(t.samples)
	t.n = min(t.n+1, len(t.samples))
}

// rate is tokens per second over about the last second.
func (t *throughput) rate(now time.Time, tokens int64) float64 {
	var base *tpSample
	for i := 0; i < t.n; i++ {
		s := &t.samples[(t.next+len(t.samples)-1-i)%len(t.samples)]
		base = s
		if now.Sub(s.at) >= time.Second {
			break
		}
	}
	if base == nil {
		return 0
	}
	dt := now.Sub(base.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(tokens-base.tokens) / dt
}
