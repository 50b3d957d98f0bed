package main

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics with Prometheus's own text parser.
func scrape(t testing.TB, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header) != expfmt.NewFormat(expfmt.TypeTextPlain) {
		t.Errorf("Content-Type %q is not the Prometheus text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse as Prometheus text: %v", err)
	}
	return fams
}

// TestMetricsParseAsPrometheusText: /metrics carries SGLang's metric families with their
// types, a model_name label escaped as the format asks (here a name with a quote, a
// backslash and a line feed), and histograms that count the requests served.
func TestMetricsParseAsPrometheusText(t *testing.T) {
	cfg := testConfig(t)
	cfg.ServedModelName = "deepseek \"v4\" flash\\fp8\nrev2"
	_, base := startServer(t, cfg, nil)
	const served = 5
	for i := range served {
		req := userRequest(fmt.Sprintf("Question %d about Quito", i), nil)
		req.Model = cfg.ServedModelName
		chat(t, base, req)
	}
	fams := scrape(t, base)
	for name, typ := range map[string]dto.MetricType{
		"sglang:num_running_reqs":              dto.MetricType_GAUGE,
		"sglang:num_queue_reqs":                dto.MetricType_GAUGE,
		"sglang:gen_throughput":                dto.MetricType_GAUGE,
		"sglang:token_usage":                   dto.MetricType_GAUGE,
		"sglang:num_used_tokens":               dto.MetricType_GAUGE,
		"sglang:cache_hit_rate":                dto.MetricType_GAUGE,
		"sglang:num_aborted_requests_total":    dto.MetricType_COUNTER,
		"sglang:num_requests_total":            dto.MetricType_COUNTER,
		"sglang:prompt_tokens_total":           dto.MetricType_COUNTER,
		"sglang:generation_tokens_total":       dto.MetricType_COUNTER,
		"sglang:cached_tokens_total":           dto.MetricType_COUNTER,
		"sglang:time_to_first_token_seconds":   dto.MetricType_HISTOGRAM,
		"sglang:e2e_request_latency_seconds":   dto.MetricType_HISTOGRAM,
		"sglang:time_per_output_token_seconds": dto.MetricType_HISTOGRAM,
		"refserve:cohort_sessions":             dto.MetricType_GAUGE,
		"refserve:stale_index_k_steps_total":   dto.MetricType_COUNTER,
		"refserve:scheduler_wedged":            dto.MetricType_GAUGE,
		"refserve:kv_transfer_loop_dead":       dto.MetricType_GAUGE,
		"refserve:kv_transfer_aborts_total":    dto.MetricType_COUNTER,
	} {
		f, ok := fams[name]
		if !ok {
			t.Errorf("%s not served", name)
			continue
		}
		if f.GetType() != typ || len(f.Metric) != 1 {
			t.Errorf("%s: type %s with %d samples; want one %s", name, f.GetType(), len(f.Metric), typ)
			continue
		}
		labels := f.Metric[0].GetLabel()
		if len(labels) != 1 || labels[0].GetName() != "model_name" || labels[0].GetValue() != cfg.ServedModelName {
			t.Errorf("%s: labels %v; want model_name=%q", name, labels, cfg.ServedModelName)
		}
	}
	for _, name := range []string{"sglang:time_to_first_token_seconds", "sglang:e2e_request_latency_seconds", "sglang:time_per_output_token_seconds"} {
		h := fams[name].GetMetric()[0].GetHistogram()
		b := h.GetBucket()
		if h.GetSampleCount() != served || len(b) == 0 || b[len(b)-1].GetCumulativeCount() > served || h.GetSampleSum() <= 0 {
			t.Errorf("%s: %d samples, sum %v; want one per request served (%d)", name, h.GetSampleCount(), h.GetSampleSum(), served)
		}
		for i := 1; i < len(b); i++ {
			if b[i].GetCumulativeCount() < b[i-1].GetCumulativeCount() || b[i].GetUpperBound() <= b[i-1].GetUpperBound() {
				t.Errorf("%s: buckets not cumulative at le=%v", name, b[i].GetUpperBound())
			}
		}
	}
	if v := fams["sglang:num_requests_total"].GetMetric()[0].GetCounter().GetValue(); v != served {
		t.Errorf("num_requests_total = %v; want %d", v, served)
	}
	if v := fams["sglang:token_usage"].GetMetric()[0].GetGauge().GetValue(); v != 0 {
		t.Errorf("token_usage = %v with nothing running", v)
	}
}

// TestTokenUsageCountsRunningRequests: token_usage is the running requests' prompts and
// generated tokens over --max-total-tokens.
func TestTokenUsageCountsRunningRequests(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxTotalTokens = 10000
	cfg.InterTokenDelay = 0
	s, base := startServer(t, cfg, gatedBackend{make(chan struct{})}) // nothing decodes
	startStream(t, base, bodyWith(longConversation(3000, "usage"), map[string]any{"stream": true}))
	waitFor(t, s, "the request to run", func() bool { r, _ := s.sched.load(); return r == 1 })
	fams := scrape(t, base)
	used := fams["sglang:num_used_tokens"].GetMetric()[0].GetGauge().GetValue()
	usage := fams["sglang:token_usage"].GetMetric()[0].GetGauge().GetValue()
	if used < 3000 || used > 3010 || math.Abs(usage-used/10000) > 1e-12 {
		t.Errorf("num_used_tokens %v, token_usage %v; want about 3000 and 0.3", used, usage)
	}
}

// TestKVCapacityQueuesRequests: a prompt that does not fit beside the running ones waits
// in the queue, as SGLang's scheduler keeps it waiting for memory.
func TestKVCapacityQueuesRequests(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxTotalTokens = 5000
	s, base := startServer(t, cfg, gatedBackend{make(chan struct{})})
	startStream(t, base, bodyWith(longConversation(3000, "first"), map[string]any{"stream": true}))
	waitFor(t, s, "the first to run", func() bool { r, _ := s.sched.load(); return r == 1 })
	startStream(t, base, bodyWith(longConversation(3000, "second"), map[string]any{"stream": true}))
	waitFor(t, s, "the second to queue", func() bool { r, q := s.sched.load(); return r == 1 && q == 1 })
	if v := metric(t, base, "sglang:num_queue_reqs"); v != 1 {
		t.Errorf("num_queue_reqs = %v; want 1", v)
	}
}

// TestMetricsOnlyWithEnableMetrics: like SGLang, refserve serves /metrics only when
// --enable-metrics asks for it.
func TestMetricsOnlyWithEnableMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.EnableMetrics = false
	_, base := startServer(t, cfg, nil)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics without --enable-metrics: HTTP %d; want 404", resp.StatusCode)
	}
}
