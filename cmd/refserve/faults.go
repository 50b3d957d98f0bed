package main

// The two wedges, modelled on logical events only.
//
// Both faults of the field that stopped an engine for good were set off by aborts, and
// both are decided here from which requests were aborted and what state they were in,
// never from when: an abort cascade seeded the same way wedges the engine in every
// launch, or in none, on any machine.
//
// The overlap-scheduler deadlock (on unless --disable-overlap-schedule, with --tp above
// 1). In the field a mass abort left the tensor-parallel ranks out of step, some inside a
// collective and some idle, and the decode engine hung forever while /health answered. A
// mass abort here is the abort of massAbort requests of the running batch (admitted,
// prefilling or decoding; queued requests do not count) that were all running together
// at one moment. The aborts need not be simultaneous: one abort_all, or sixty clients
// that disconnect one after another while their replies stream, both count, while the
// same number of aborts spread over requests that never ran side by side (a client that
// times out now and then) does not. The scheduler keeps, for every aborted request, the
// span of its run on a logical clock that ticks at each admission and each end of a
// request, and wedges once massAbort of those spans share a point.
//
// The NIXL abort wedge (--disaggregation-mode prefill or decode with
// --disaggregation-transfer-backend nixl). The decode side tells the prefill side's
// bootstrap thread when a request whose KV transfer has not completed is aborted; the
// field's build had no handler for that ABORT message, the thread died on an assert, and
// every later request hung. A transfer is in flight here from a request's arrival (the
// decode side bootstraps with the prefill side as the request comes in) until its first
// token (when the decode side holds the KV): an abort of a request that is queued or
// prefilling kills the transfer loop. So does an abort of a request that was caught in
// the cascade: one whose transfer was in flight when another request was aborted. Clients
// that hang up together reach the engine one by one, as their connections are noticed
// closed; meanwhile the slots the first aborts free are filled from the queue, and a
// queued request whose client has already gone may get its first token before its own
// abort lands. Which of them does depends on goroutine scheduling; that the cascade struck
// while they were still waiting does not. From then on no request that was still queued, nor
// any later one, is admitted (its bootstrap is never answered); requests already running
// finish. /health answers 200, and so does /health_generate, whose probe SGLang runs with
// a fake bootstrap that needs no transfer: only a real request shows the wedge.
// SGLANG_NIXL_ABORT_HANDLER=1 stands in for the patched build: such an abort fails that
// one transfer and nothing else.

// massAbort is how many requests of the running batch, aborted while running together,
// wedge an engine that can wedge: the field's cascade aborted 60 sessions at once.
const massAbort = 16

// maxLedgerSpans bounds the ledger: a mass abort needs massAbort spans, not thousands.
const maxLedgerSpans = 1024

// runSpan is the run of an aborted request on the scheduler's logical clock.
type runSpan struct{ from, to uint64 }

// abortLedger holds the spans of the aborted requests that may still share a point with a
// future abort.
type abortLedger struct {
	spans []runSpan
}

// add records an aborted request's span and returns the most spans that share a point.
// oldestRunning is the admission tick of the oldest request still running (or the
// current tick when none is): a span that ended before it, and before s began, can share
// a point with no span to come, so it is dropped.
func (l *abortLedger) add(s runSpan, oldestRunning uint64) int {
	horizon := min(oldestRunning, s.from)
	keep := l.spans[:0]
	for _, o := range l.spans {
		if o.to >= horizon {
			keep = append(keep, o)
		}
	}
	l.spans = append(keep, s)
	if n := len(l.spans) - maxLedgerSpans; n > 0 { // aborts trickling past a long-lived request
		l.spans = append(l.spans[:0], l.spans[n:]...)
	}
	// The deepest point of a set of intervals is the start of one of them.
	best := 0
	for _, p := range l.spans {
		n := 0
		for _, o := range l.spans {
			if o.from <= p.from && p.from <= o.to {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}
