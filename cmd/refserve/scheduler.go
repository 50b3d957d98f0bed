package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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
	probe  bool // the health generation: no conversation, outside the cohort and the metrics
	load   int  // the logical load when it arrived (logicalLoadLocked)
	prompt int  // prompt tokens
	// prefix lists the prompt's prefixes for the prefix cache, and promptBytes the bytes
	// they count, so that the reply can be cached as their continuation.
	prefix      []prefixKey
	promptBytes int
	gen         *generation
	events      eventQueue

	// guarded by scheduler.mu
	arrived   time.Time
	admitted  bool      // in the running batch
	admitTick uint64    // the logical clock at admission
	computed  int       // prompt tokens in the KV cache: found cached at admission, then prefilled
	restored  int       // of those found cached, the tokens restored from the host tier, not yet paid for
	firstAt   time.Time // when its first token was decoded
	// caught says another request was aborted while this one's KV transfer was in
	// flight: an abort of this one belongs to the same cascade (faults.go).
	caught   bool
	finished bool
	finish   string
}

func newRequest(rid string, place sessionPlace, prompt int, gen *generation) *request {
	return &request{rid: rid, place: place, prompt: prompt, gen: gen, events: eventQueue{ready: make(chan struct{}, 1)}}
}

// eventQueue carries a request's events from the scheduler to its handler. Pushing never
// blocks, so a slow client never holds up a pass, however long its reply.
type eventQueue struct {
	mu      sync.Mutex
	pending []event
	ready   chan struct{} // holds a token while pending may be non-empty
}

func (q *eventQueue) push(e event) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take moves the pending events into buf; call it after receiving from ready.
func (q *eventQueue) take(buf []event) []event {
	q.mu.Lock()
	buf = append(buf[:0], q.pending...)
	clear(q.pending)
	q.pending = q.pending[:0]
	q.mu.Unlock()
	return buf
}

// newProbe is a request of the health generation, which belongs to no conversation.
func newProbe(rid string, gen *generation) *request {
	r := newRequest(rid, sessionPlace{}, 1, gen)
	r.probe = true
	return r
}

// errClosed is returned for requests submitted while the server shuts down.
var errClosed = errors.New("scheduler: shutting down")

// schedulerConfig is what the scheduler is built with.
type schedulerConfig struct {
	cost         costModel
	chunk        int // most prompt tokens prefilled per iteration; 0 or less: no limit
	maxRunning   int // 0: unlimited
	maxTotal     int // KV capacity in tokens of the running requests
	cacheTokens  int // capacity of the prefix cache's device tier in tokens
	hostTokens   int // capacity of its host tier (HiCache); 0 for none
	noRadixCache bool

	// The faults (faults.go).
	wedgeOnMassAbort   bool // the overlap scheduler with tensor parallelism
	disaggregated      bool // requests go through a KV transfer
	transferAbortKills bool // over NIXL without the abort handler
}

// schedulerConfig is the scheduler's part of the configuration.
func (c config) schedulerConfig() schedulerConfig {
	hostTokens := 0
	if c.EnableHierarchicalCache { // the host pool keeps what the device pool evicts
		hostTokens = max(int(float64(c.MaxTotalTokens)*c.HiCacheRatio), 1)
	}
	return schedulerConfig{
		cost:               c.costModel(),
		chunk:              c.ChunkedPrefillSize,
		maxRunning:         c.MaxRunningRequests,
		maxTotal:           c.MaxTotalTokens,
		cacheTokens:        c.MaxTotalTokens,
		hostTokens:         hostTokens,
		noRadixCache:       c.DisableRadixCache,
		wedgeOnMassAbort:   c.massAbortArmed(),
		disaggregated:      c.DisaggregationMode != "null",
		transferAbortKills: c.nixlAbortArmed(),
	}
}

// scheduler admits requests up to --max-running-requests and the KV capacity, queues the
// rest, and runs iterations paced by the cost model (timing.go): each prefills a chunk of
// the prompts not yet in the KV cache and decodes one token of every other running
// request, and every decode step goes through the backend. Each step carries both loads:
// the requests physically in the iteration, which depends on how fast clients come back,
// and the logical load its request met on arrival (the cohort, cohort.go), which does not.
type scheduler struct {
	backend Backend
	cfg     schedulerConfig
	log     *slog.Logger

	mu      sync.Mutex
	queue   []*request
	running []*request
	closed  bool
	tp      throughput
	cohort  cohort
	cache   prefixCache
	// clock ticks at every admission and every end of a request: the logical time on
	// which the mass-abort fault measures which requests ran together.
	clock uint64

	wake chan struct{}
	// changed is closed at the next admission, completion or abort; see changes.
	changed chan struct{}
	// output is closed at the next iteration that decodes a token; see outputs.
	output chan struct{}

	// Faults (faults.go).
	aborts       abortLedger
	wedged       bool // decoding and admission have stopped for good
	transferDead bool // the KV transfer loop died: nothing queued is admitted any more

	// Metrics; the histograms and hitRate are guarded by mu.
	genTokens      atomic.Int64
	promptTokens   atomic.Int64
	cachedTokens   atomic.Int64
	requests       atomic.Int64 // finished requests, aborted ones included
	aborted        atomic.Int64
	staleSteps     atomic.Int64
	transferAborts atomic.Int64 // aborts of requests whose KV transfer was in flight
	hitRate        float64      // of the last batch admitted, as SGLang reports it
	ttft, e2e, itl histogram
}

func newScheduler(b Backend, cfg schedulerConfig, log *slog.Logger) *scheduler {
	s := &scheduler{backend: b, cfg: cfg, log: log, wake: make(chan struct{}, 1)}
	s.cache.off = cfg.noRadixCache
	s.cache.device, s.cache.host = cfg.cacheTokens, cfg.hostTokens
	s.ttft = newHistogram(ttftBuckets)
	s.e2e = newHistogram(e2eBuckets)
	s.itl = newHistogram(itlBuckets)
	return s
}

// submit queues a request; its events arrive on r.events.
func (s *scheduler) submit(r *request) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	r.arrived = time.Now()
	s.queue = append(s.queue, r)
	if !r.probe {
		s.cohort.arrive(r.place)
		r.load = s.logicalLoadLocked()
	}
	s.notifyLocked()
	s.admitLocked() // it runs from the next pass on, even while a pass is under way
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

func (s *scheduler) notifyLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// outputs returns a channel that is closed when the scheduler next decodes a token of
// any request: SGLang's /health_generate passes on any output, not only its own.
func (s *scheduler) outputs() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.output == nil {
		s.output = make(chan struct{})
	}
	return s.output
}

// faultState says whether the scheduler is wedged and whether its transfer loop died.
func (s *scheduler) faultState() (wedged, transferDead bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wedged, s.transferDead
}

// abortLocked ends a request at a client's demand (abort_request or a disconnect) and
// lets the faults see it (faults.go). The health probe, which SGLang runs outside the
// request path, sets off neither.
func (s *scheduler) abortLocked(r *request) {
	if r.finished {
		return
	}
	s.finishLocked(r, "abort")
	if r.probe {
		return
	}
	if r.admitted {
		depth := s.aborts.add(runSpan{from: r.admitTick, to: s.clock}, s.oldestRunningLocked())
		if s.cfg.wedgeOnMassAbort && !s.wedged && depth >= massAbort {
			s.wedged = true
			s.log.Warn("mass abort desynchronized the tensor-parallel ranks; the scheduler is wedged (--disable-overlap-schedule avoids this)",
				"aborted_together", depth)
		}
	}
	if !s.cfg.disaggregated {
		return
	}
	// Every request whose transfer is in flight now is caught in this cascade: its own
	// abort may reach the engine only after it was admitted and decoded (faults.go).
	for _, rs := range [][]*request{s.queue, s.running} {
		for _, o := range rs {
			if !o.finished && !o.probe && o.gen.n == 0 {
				o.caught = true
			}
		}
	}
	if (r.gen.n == 0 || r.caught) && !s.transferDead { // its KV transfer was in flight
		s.transferAborts.Add(1)
		if s.cfg.transferAbortKills {
			s.transferDead = true
			s.log.Error("Exception in thread bootstrap_thread: AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic? "+
				"(an ABORT for an in-flight KV transfer; no later request will be bootstrapped; SGLANG_NIXL_ABORT_HANDLER=1 is the fix)",
				"rid", r.rid)
		} else {
			s.log.Debug("abort of an in-flight KV transfer handled", "rid", r.rid)
		}
	}
}

// oldestRunningLocked is the admission tick of the oldest request still running, or the
// clock when none is.
func (s *scheduler) oldestRunningLocked() uint64 {
	oldest := s.clock
	for _, r := range s.running {
		if !r.finished {
			oldest = min(oldest, r.admitTick)
		}
	}
	return oldest
}

func (s *scheduler) finishLocked(r *request, reason string) {
	if r.finished {
		return
	}
	r.finished = true
	r.finish = reason
	s.clock++
	r.events.push(event{Finish: reason, Tokens: r.gen.n})
	s.notifyLocked()
	if r.probe {
		return
	}
	s.cohort.finish(r.place.key, reason == "tool_calls")
	s.requests.Add(1)
	if reason == "abort" {
		s.aborted.Add(1)
		return
	}
	now := time.Now()
	s.e2e.observe(now.Sub(r.arrived).Seconds())
	if r.gen.n > 1 {
		s.itl.observe(now.Sub(r.firstAt).Seconds() / float64(r.gen.n-1))
	}
	if r.prefix != nil && !s.cache.off { // the next turn resends this reply: cache it too
		keys, _ := extendPrefix(r.prefix[:len(r.prefix):len(r.prefix)], r.prefix[len(r.prefix)-1].hash, r.promptBytes, r.gen.message())
		s.cache.insert(keys)
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
	if s.cfg.maxRunning > 0 {
		n = min(n, s.cfg.maxRunning)
	}
	return n
}

// usedTokensLocked is the KV the running requests hold: prompts and what they decoded.
func (s *scheduler) usedTokensLocked() int {
	n := 0
	for _, r := range s.running {
		n += r.prompt + r.gen.n
	}
	return n
}

// admitLocked moves queued requests into the running batch, oldest first, while there is
// room: a free slot under --max-running-requests and KV for the prompt under
// --max-total-tokens (a prompt larger than all of it runs alone). After the transfer loop
// died, a request that needs a transfer is never admitted; the probe needs none.
func (s *scheduler) admitLocked() {
	var hit, total int
	for i := 0; i < len(s.queue) && !s.wedged; {
		if s.cfg.maxRunning > 0 && len(s.running) >= s.cfg.maxRunning {
			break
		}
		r := s.queue[i]
		if s.transferDead && !r.probe {
			i++
			continue
		}
		if len(s.running) > 0 && s.usedTokensLocked()+r.prompt+1 > s.cfg.maxTotal {
			break
		}
		s.queue = slices.Delete(s.queue, i, i+1)
		s.clock++
		r.admitted, r.admitTick = true, s.clock
		s.running = append(s.running, r)
		if !r.probe {
			r.computed, r.restored = s.cache.match(r.prefix, r.prompt)
			s.promptTokens.Add(int64(r.prompt))
			s.cachedTokens.Add(int64(r.computed))
			hit, total = hit+r.computed, total+r.prompt
		}
		s.notifyLocked()
	}
	if total > 0 {
		s.hitRate = float64(hit) / float64(total)
	}
}

// prefillChunk is part of a prompt prefilled in an iteration.
type prefillChunk struct {
	r      *request
	tokens int
}

// iteration is the work of one forward pass.
type iteration struct {
	prefill []prefillChunk
	batch   []*request // the requests that decode a token
	steps   []Step     // their steps, for the backend
	took    time.Duration
}

// planLocked fills it with the next pass: chunks of the prompts not yet in the KV cache,
// oldest first, up to --chunked-prefill-size tokens, and a decode step for every other
// running request and for every one whose prefill completes in this pass (the pass
// samples its first token).
func (s *scheduler) planLocked(it *iteration) {
	it.prefill, it.batch, it.steps, it.took = it.prefill[:0], it.batch[:0], it.steps[:0], 0
	left := s.cfg.chunk
	for _, r := range s.running {
		if r.computed < r.prompt {
			if left == 0 {
				continue
			}
			n := r.prompt - r.computed
			if left > 0 {
				n = min(n, left)
				left -= n
			}
			it.took += s.cfg.cost.prefill(r.computed, n) + s.cfg.cost.restore(r.restored)
			r.restored = 0 // the first pass that prefills it loads them
			it.prefill = append(it.prefill, prefillChunk{r, n})
			if r.computed+n < r.prompt {
				continue
			}
		}
		it.batch = append(it.batch, r)
		it.steps = append(it.steps, Step{Session: r.place.key, Position: r.prompt + r.gen.n,
			Load: r.load, Restored: r.place.restores()})
	}
	for i := range it.steps {
		it.steps[i].InFlight = len(it.steps)
	}
	it.took += s.cfg.cost.decode(len(it.batch))
}

// applyLocked lands a pass that took place: prefill progress, then one token of every
// request in the batch that is still running.
func (s *scheduler) applyLocked(it *iteration, decodeErr error) {
	for _, c := range it.prefill {
		if c.r.finished {
			continue
		}
		c.r.computed += c.tokens
		if c.r.computed == c.r.prompt && c.r.prefix != nil {
			s.cache.insert(c.r.prefix)
		}
	}
	if len(it.batch) == 0 {
		return
	}
	now := time.Now()
	var made int64
	for i, r := range it.batch {
		if r.finished { // aborted while the pass ran
			continue
		}
		if decodeErr != nil {
			s.finishLocked(r, "abort")
			continue
		}
		if it.steps[i].Stale {
			s.staleSteps.Add(1)
		}
		content, finish := r.gen.step(it.steps[i].Stale, it.steps[i].Position)
		made++
		if r.gen.n == 1 {
			r.firstAt = now
			if !r.probe {
				s.ttft.observe(now.Sub(r.arrived).Seconds())
			}
		}
		if content != "" {
			r.events.push(event{Content: content})
		}
		if finish != "" {
			s.finishLocked(r, finish)
		}
	}
	s.pruneLocked()
	s.genTokens.Add(made)
	s.tp.record(now, s.genTokens.Load())
	if made > 0 && s.output != nil {
		close(s.output)
		s.output = nil
	}
}

// run runs passes until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var it iteration
	var pace pacer
	for {
		s.mu.Lock()
		s.admitLocked()
		if s.wedged { // as in the field: nothing moves until the process is restarted
			s.mu.Unlock()
			<-ctx.Done()
			return
		}
		s.planLocked(&it)
		s.mu.Unlock()
		if len(it.prefill) == 0 && len(it.batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		deadline := pace.next(time.Now(), it.took)
		var err error
		if len(it.steps) > 0 {
			if err = s.backend.Decode(ctx, it.steps); err != nil {
				s.log.Error("decode iteration failed; aborting its requests", "requests", len(it.steps), "err", err)
			}
		}
		if !s.waitUntil(ctx, timer, deadline) {
			return
		}
		s.mu.Lock()
		if !s.wedged { // a pass cut short by the wedge never lands
			s.applyLocked(&it, err)
		}
		s.mu.Unlock()
		clear(it.batch)
		clear(it.prefill)
	}
}

// waitUntil waits for the pass to end at deadline, admitting arrivals in the meantime
// (they join the next pass). It returns false when ctx ended.
func (s *scheduler) waitUntil(ctx context.Context, timer *time.Timer, deadline time.Time) bool {
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return true
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			return true
		case <-s.wake:
			timer.Stop()
			s.mu.Lock()
			s.admitLocked()
			s.mu.Unlock()
		case <-ctx.Done():
			timer.Stop()
			return false
		}
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
