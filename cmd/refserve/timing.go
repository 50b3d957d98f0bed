package main

import "time"

// The cost model: how long refserve's iterations take.
//
// Every iteration of the scheduler is one forward pass. It decodes one token of every
// running request whose prompt is in the KV cache, and prefills up to
// --chunked-prefill-size prompt tokens of the requests that are not, oldest first, as
// SGLang's chunked prefill does; a request whose prefill completes in the iteration gets
// its first token from it. The pass takes
//
//	decode:  --inter-token-delay x (1 + (B-1) x --decode-batch-cost)   for B requests decoding
//	prefill: --prefill-delay-per-token x (1 + p/prefillAttentionSpan)  for each prompt token,
//	         p being its position in the context
//
// each times the launch's speed factor (--launch-speed-cv, launch.go; exactly 1 unless asked),
// and so throughput at concurrency 32 is higher in total and lower per request than at 1, a
// long prefill slows every decode that shares its iterations, and time to first token
// grows with the context even where the prefix cache spares most of the prompt: each new
// token attends to all those before it.
//
// The defaults keep the field's proportions at about nine times the field's pace, so that
// a demo runs in seconds: the field measured 54 tok/s for one request and 530 tok/s in
// total at concurrency 32 on SGLang; refserve's defaults give 500 and about 4,900 (32 /
// (1 + 31 x 0.073) = 9.8 times one request's, as 530 / 54 is). --inter-token-delay 18.5ms
// gives the field's own figures. A prompt of 2k tokens prefills in about 8 ms, one of 80k
// in about 0.5 s. The clock is the wall clock: these are timings, and nothing that decides
// a fault reads them (faults and corruption count logical events only).
const (
	defaultPrefillDelayPerToken = 4 * time.Microsecond
	defaultDecodeBatchCost      = 0.073
	// prefillAttentionSpan is the context length at which a prompt token costs twice what
	// the first one did.
	prefillAttentionSpan = 65536
)

// costModel turns the work of an iteration into its duration.
type costModel struct {
	interToken      time.Duration // one decode step of a lone request
	batchCost       float64       // share of it each further request adds
	prefillPerToken time.Duration // one prompt token at position 0
	// speed is the launch's speed factor (launch.go), which multiplies every duration;
	// 0 stands for 1.
	speed float64
}

// decode is the time of a decode step for a batch of n requests; 0 for none.
func (c costModel) decode(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(c.interToken) * (1 + float64(n-1)*c.batchCost) * c.speedFactor())
}

// restoreShare is the cost of restoring a token from HiCache's host tier, as a share of
// prefilling it at the start of a context: a host-to-device copy is much cheaper than
// the forward pass it spares, but not free.
const restoreShare = 0.1

// restore is the time to restore n tokens from the host tier to the device.
func (c costModel) restore(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(n) * restoreShare * float64(c.prefillPerToken) * c.speedFactor())
}

// prefill is the time to prefill n prompt tokens at positions from, from+1, ...
func (c costModel) prefill(from, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	f, k := float64(from), float64(n)
	work := k + (f*k+k*(k-1)/2)/prefillAttentionSpan
	return time.Duration(work * float64(c.prefillPerToken) * c.speedFactor())
}

// speedFactor is the launch's speed factor; at 1 the products above are exactly
// what they are without it.
func (c costModel) speedFactor() float64 {
	if c.speed == 0 {
		return 1
	}
	return c.speed
}

// pacer spaces iterations on a schedule of deadlines, so that the time spent between
// passes (building the batch, the backend, writing chunks) does not add up to a slower
// pace than the cost model's.
type pacer struct {
	last time.Time // the deadline of the previous iteration
}

// next is the deadline of an iteration of duration d that is planned at now. An
// iteration follows the previous one's deadline; after an idle spell, or when the loop
// has fallen more than one iteration behind, it starts now.
func (p *pacer) next(now time.Time, d time.Duration) time.Time {
	base := p.last
	if base.IsZero() || now.Sub(base) > d {
		base = now
	}
	p.last = base.Add(d)
	return p.last
}
