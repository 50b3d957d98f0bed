package main

import (
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// /metrics serves the Prometheus text format (version 0.0.4) under SGLang's metric names,
// so that a scraper written for SGLang reads refserve unchanged, and a few refserve:
// metrics that show its faults and its logical load. The format is written here rather
// than with a Prometheus client library, as refserve depends on the standard library
// only; the tests parse it with Prometheus's own parser.

// Histogram buckets, in seconds. TTFT and TPOT are SGLang's; end-to-end latency adds
// finer buckets below SGLang's first (0.3 s), where refserve's scaled-down replies land.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30}
	e2eBuckets  = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}
	itlBuckets  = []float64{0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
)

// histogram is a cumulative Prometheus histogram; the scheduler's mutex guards it.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += v
	h.n++
}

// clone copies h, so it can be written out after the lock is released.
func (h *histogram) clone() histogram {
	c := *h
	c.counts = append([]uint64(nil), h.counts...)
	return c
}

// expositionWriter writes metric families in the text format. Every sample carries the
// same labels (model_name); label values and help text are escaped as the format asks.
type expositionWriter struct {
	b      strings.Builder
	labels string // `model_name="..."`, escaped
}

func newExpositionWriter(model string) *expositionWriter {
	return &expositionWriter{labels: `model_name="` + escapeLabelValue(model) + `"`}
}

func (w *expositionWriter) header(name, typ, help string) {
	w.b.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n# TYPE " + name + " " + typ + "\n")
}

func (w *expositionWriter) sample(name, extraLabel string, v float64) {
	w.b.WriteString(name + "{")
	if extraLabel != "" {
		w.b.WriteString(extraLabel + ",")
	}
	w.b.WriteString(w.labels + "} " + formatSampleValue(v) + "\n")
}

func (w *expositionWriter) gauge(name, help string, v float64) {
	w.header(name, "gauge", help)
	w.sample(name, "", v)
}

func (w *expositionWriter) counter(name, help string, v float64) {
	w.header(name, "counter", help)
	w.sample(name, "", v)
}

func (w *expositionWriter) histogram(name, help string, h histogram) {
	w.header(name, "histogram", help)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		w.sample(name+"_bucket", `le="`+formatSampleValue(b)+`"`, float64(cum))
	}
	w.sample(name+"_bucket", `le="+Inf"`, float64(h.n))
	w.sample(name+"_sum", "", h.sum)
	w.sample(name+"_count", "", float64(h.n))
}

// escapeLabelValue escapes a label value: backslash, double quote and line feed.
func escapeLabelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes help text: backslash and line feed.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatSampleValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// metrics serves /metrics.
func (s *server) metrics(w http.ResponseWriter, _ *http.Request) {
	sc := s.sched
	sc.mu.Lock()
	running, queued := len(sc.running), len(sc.queue)
	used := sc.usedTokensLocked()
	cohort := sc.cohort.size()
	gen := sc.genTokens.Load()
	rate := sc.tp.rate(time.Now(), gen)
	hitRate := sc.hitRate
	wedged, dead := sc.wedged, sc.transferDead
	ttft, e2e, itl := sc.ttft.clone(), sc.e2e.clone(), sc.itl.clone()
	sc.mu.Unlock()
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	x := newExpositionWriter(s.cfg.ServedModelName)
	x.gauge("sglang:num_running_reqs", "The number of running requests.", float64(running))
	x.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", float64(queued))
	x.gauge("sglang:num_used_tokens", "The number of used tokens.", float64(used))
	x.gauge("sglang:token_usage", "The token usage.", float64(used)/float64(s.cfg.MaxTotalTokens))
	x.gauge("sglang:gen_throughput", "The generation throughput (token/s).", rate)
	x.gauge("sglang:cache_hit_rate", "The prefix cache hit rate of the last batch admitted.", hitRate)
	x.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", float64(sc.promptTokens.Load()))
	x.counter("sglang:generation_tokens_total", "Number of generation tokens processed.", float64(gen))
	x.counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", float64(sc.cachedTokens.Load()))
	x.counter("sglang:num_requests_total", "Number of requests finished.", float64(sc.requests.Load()))
	x.counter("sglang:num_aborted_requests_total", "Number of requests aborted.", float64(sc.aborted.Load()))
	x.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft)
	x.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2e)
	x.histogram("sglang:time_per_output_token_seconds", "Histogram of time per output token in seconds.", itl)
	x.gauge("refserve:cohort_sessions", "Sessions the engine is serving: the logical load the sim fault model draws against (refserve only).", float64(cohort))
	x.counter("refserve:stale_index_k_steps_total", "Decode steps that read stale index-K (refserve only).", float64(sc.staleSteps.Load()))
	x.gauge("refserve:scheduler_wedged", "1 once a mass abort wedged the overlap scheduler (refserve only).", flag(wedged))
	x.gauge("refserve:kv_transfer_loop_dead", "1 once an abort of an in-flight KV transfer killed the transfer loop (refserve only).", flag(dead))
	x.counter("refserve:kv_transfer_aborts_total", "Aborts of requests whose KV transfer was in flight (refserve only).", float64(sc.transferAborts.Load()))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, x.b.String())
}
