package main

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// /metrics serves SGLang's metric names through the Prometheus client library, so that a
// scraper written for SGLang reads refserve unchanged, and a few refserve: metrics that
// show its faults and its logical load. As with SGLang, it is served only with
// --enable-metrics. The library writes the format (escaping included); refserve keeps
// its own counters under the scheduler's mutex and hands a snapshot to the library at
// each scrape.

// Histogram buckets, in seconds. TTFT and TPOT are SGLang's; end-to-end latency adds
// finer buckets below SGLang's first (0.3 s), where refserve's scaled-down replies land.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30}
	e2eBuckets  = []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}
	itlBuckets  = []float64{0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
)

// histogram is a Prometheus histogram kept under the scheduler's mutex, so that a
// request's observation and the scheduler's other counters change together.
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

// clone copies h, so it can be handed out after the lock is released.
func (h *histogram) clone() histogram {
	c := *h
	c.counts = append([]uint64(nil), h.counts...)
	return c
}

// cumulative is h's buckets as the client library takes them: upper bound to the count
// of observations at or below it.
func (h *histogram) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(h.bounds))
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		m[b] = cum
	}
	return m
}

// metricDef is one family refserve serves.
type metricDef struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType // GaugeValue or CounterValue; unused for histograms
}

// schedCollector reads the scheduler's state at each scrape. Every sample carries the
// served model's name as its model_name label, as SGLang's do.
type schedCollector struct {
	s     *server
	model string
	defs  map[string]metricDef
	order []string
}

func newSchedCollector(s *server) *schedCollector {
	c := &schedCollector{s: s, model: s.cfg.ServedModelName, defs: map[string]metricDef{}}
	add := func(name string, typ prometheus.ValueType, help string) {
		c.defs[name] = metricDef{desc: prometheus.NewDesc(name, help, []string{"model_name"}, nil), typ: typ}
		c.order = append(c.order, name)
	}
	g, n := prometheus.GaugeValue, prometheus.CounterValue
	add("sglang:num_running_reqs", g, "The number of running requests.")
	add("sglang:num_queue_reqs", g, "The number of requests in the waiting queue.")
	add("sglang:num_used_tokens", g, "The number of used tokens.")
	add("sglang:token_usage", g, "The token usage.")
	add("sglang:gen_throughput", g, "The generation throughput (token/s).")
	add("sglang:cache_hit_rate", g, "The prefix cache hit rate of the last batch admitted.")
	add("sglang:prompt_tokens_total", n, "Number of prefill tokens processed.")
	add("sglang:generation_tokens_total", n, "Number of generation tokens processed.")
	add("sglang:cached_tokens_total", n, "Number of cached prompt tokens.")
	add("sglang:num_requests_total", n, "Number of requests finished.")
	add("sglang:num_aborted_requests_total", n, "Number of requests aborted.")
	add("sglang:time_to_first_token_seconds", 0, "Histogram of time to first token in seconds.")
	add("sglang:e2e_request_latency_seconds", 0, "Histogram of End-to-end request latency in seconds")
	add("sglang:time_per_output_token_seconds", 0, "Histogram of time per output token in seconds.")
	add("refserve:cohort_sessions", g, "Sessions the engine is serving: the logical load the sim fault model draws against (refserve only).")
	add("refserve:stale_index_k_steps_total", n, "Decode steps that read stale index-K (refserve only).")
	add("refserve:scheduler_wedged", g, "1 once a mass abort wedged the overlap scheduler (refserve only).")
	add("refserve:kv_transfer_loop_dead", g, "1 once an abort of an in-flight KV transfer killed the transfer loop (refserve only).")
	add("refserve:kv_transfer_aborts_total", n, "Aborts of requests whose KV transfer was in flight (refserve only).")
	add("refserve:hicache_host_hit_tokens_total", n, "Cached prompt tokens found in HiCache's host tier and restored to the device (refserve only).")
	return c
}

// Describe implements prometheus.Collector.
func (c *schedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, name := range c.order {
		ch <- c.defs[name].desc
	}
}

// Collect implements prometheus.Collector: one consistent snapshot of the scheduler.
func (c *schedCollector) Collect(ch chan<- prometheus.Metric) {
	sc := c.s.sched
	sc.mu.Lock()
	running, queued := len(sc.running), len(sc.queue)
	used := sc.usedTokensLocked()
	cohort := sc.cohort.size()
	gen := sc.genTokens.Load()
	rate := sc.tp.rate(time.Now(), gen)
	hitRate := sc.hitRate
	hostHits := sc.cache.hostHits
	wedged, dead := sc.wedged, sc.transferDead
	ttft, e2e, itl := sc.ttft.clone(), sc.e2e.clone(), sc.itl.clone()
	sc.mu.Unlock()
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	values := map[string]float64{
		"sglang:num_running_reqs":                float64(running),
		"sglang:num_queue_reqs":                  float64(queued),
		"sglang:num_used_tokens":                 float64(used),
		"sglang:token_usage":                     float64(used) / float64(c.s.cfg.MaxTotalTokens),
		"sglang:gen_throughput":                  rate,
		"sglang:cache_hit_rate":                  hitRate,
		"sglang:prompt_tokens_total":             float64(sc.promptTokens.Load()),
		"sglang:generation_tokens_total":         float64(gen),
		"sglang:cached_tokens_total":             float64(sc.cachedTokens.Load()),
		"sglang:num_requests_total":              float64(sc.requests.Load()),
		"sglang:num_aborted_requests_total":      float64(sc.aborted.Load()),
		"refserve:cohort_sessions":               float64(cohort),
		"refserve:stale_index_k_steps_total":     float64(sc.staleSteps.Load()),
		"refserve:scheduler_wedged":              flag(wedged),
		"refserve:kv_transfer_loop_dead":         flag(dead),
		"refserve:kv_transfer_aborts_total":      float64(sc.transferAborts.Load()),
		"refserve:hicache_host_hit_tokens_total": float64(hostHits),
	}
	hists := map[string]histogram{
		"sglang:time_to_first_token_seconds":   ttft,
		"sglang:e2e_request_latency_seconds":   e2e,
		"sglang:time_per_output_token_seconds": itl,
	}
	for _, name := range c.order {
		d := c.defs[name]
		if h, ok := hists[name]; ok {
			ch <- prometheus.MustNewConstHistogram(d.desc, h.n, h.sum, h.cumulative(), c.model)
			continue
		}
		ch <- prometheus.MustNewConstMetric(d.desc, d.typ, values[name], c.model)
	}
}

// metricsHandler serves /metrics from a registry of refserve's own (no Go runtime or
// process collectors: a scraper of an engine wants the engine's metrics).
func (s *server) metricsHandler() http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newSchedCollector(s))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}
