package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/arbiterlab/arbiter/internal/testkit/memtest"
	"github.com/arbiterlab/arbiter/store"
)

// vllmMetrics is a vLLM-style exposition: the engine's families, a histogram, a label
// value with an escaped quote, and the Python runtime's own families, which are not kept.
const vllmMetrics = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/m \"q\""} 31.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="org/m \"q\""} 2.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="org/m \"q\""} 5000.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="org/m \"q\""} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="org/m \"q\""} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="org/m \"q\""} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="org/m \"q\""} 2.5
`

func TestMetricSamplesKeepTheEnginesFamilies(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, vllmMetrics)
	}))
	defer srv.Close()
	fams, err := fetchMetrics(context.Background(), srv.Client(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	got := metricSamples(fams)
	labels := `{engine="0",model_name="org/m \"q\""}`
	want := []store.MetricSample{
		{Name: "vllm:e2e_request_latency_seconds_count", Labels: labels, Value: 4},
		{Name: "vllm:e2e_request_latency_seconds_sum", Labels: labels, Value: 2.5},
		{Name: "vllm:generation_tokens_total", Labels: labels, Value: 5000},
		{Name: "vllm:num_requests_running", Labels: labels, Value: 31},
		{Name: "vllm:num_requests_waiting", Labels: labels, Value: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("samples %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d: %+v; want %+v", i, got[i], want[i])
		}
	}
}

// TestScraperGivesUpOnAnEngineWithoutMetrics: a 404 before any scrape succeeded (SGLang or
// refserve without --enable-metrics) ends scraping at once; the scraper records nothing.
func TestScraperGivesUpOnAnEngineWithoutMetrics(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	m := &metricsScraper{url: srv.URL + "/metrics", client: srv.Client(), start: time.Now(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		record: func(context.Context, float64, []store.MetricSample) error {
			t.Error("recorded a scrape of an engine that serves no metrics")
			return nil
		}}
	done := make(chan struct{})
	go func() { defer close(done); m.run(context.Background(), time.Hour) }()
	<-done // returns by itself; a scraper that kept trying would hang the test
}

// TestScraperRecordsUntilCancelled: an engine that serves metrics is scraped until the
// workload ends, each scrape at a later time than the one before.
func TestScraperRecordsUntilCancelled(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, vllmMetrics) }))
	defer srv.Close()
	var mu sync.Mutex
	var at []float64
	third := make(chan struct{})
	m := &metricsScraper{url: srv.URL, client: srv.Client(), start: time.Now(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		record: func(_ context.Context, ms float64, samples []store.MetricSample) error {
			mu.Lock()
			defer mu.Unlock()
			if at = append(at, ms); len(at) == 3 {
				close(third)
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, 10*time.Millisecond) }()
	<-third
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(at); i++ {
		if at[i] <= at[i-1] {
			t.Errorf("scrape times %v do not rise", at)
		}
	}
	if !strings.Contains(srv.URL, "127.0.0.1") {
		t.Errorf("test server off loopback: %s", srv.URL)
	}
}

// A phase's end is scraped at once, however long the gap the scraper is waiting out:
// a phase shorter than the gaps still has a scrape at its end.
func TestScraperScrapesAtEveryPhaseEnd(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, vllmMetrics) }))
	defer srv.Close()
	scraped := make(chan float64, 10)
	m := &metricsScraper{url: srv.URL, client: srv.Client(), start: time.Now(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		phase: make(chan struct{}, 1), first: time.Hour,
		record: func(_ context.Context, ms float64, _ []store.MetricSample) error {
			scraped <- ms
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.run(ctx, time.Hour) }()
	<-scraped // the first scrape; the next would be an hour away
	for range 3 {
		m.phaseEnded()
		<-scraped
	}
	cancel()
	<-done
	if m.scraped != 4 {
		t.Errorf("%d scrapes, want the first and one per phase end", m.scraped)
	}
}

// FuzzMetricSamples: whatever an engine serves at /metrics, reading it never panics, and
// what is kept is the engine's own families only, each series once per scrape.
func FuzzMetricSamples(f *testing.F) {
	f.Add(vllmMetrics)
	f.Add("sglang:num_running_reqs{model_name=\"a\\\"b\\\\c\\nd\"} 3\n")
	f.Add("# TYPE sglang:x summary\nsglang:x{quantile=\"0.5\"} 1\nsglang:x_sum 2\nsglang:x_count 3\n")
	f.Add("refserve:cohort_sessions NaN\nvllm:y +Inf\n")
	f.Fuzz(func(t *testing.T, text string) {
		fams, err := parseMetrics(strings.NewReader(text))
		// What keptLines passes on is parsed alike: the lines it drops are never stored.
		kept, kerr := parseMetrics(newKeptLines(strings.NewReader(text)))
		if err != nil {
			return
		}
		if kerr != nil {
			t.Fatalf("the whole exposition parses, its kept lines do not: %v", kerr)
		}
		if a, b := metricSamples(fams), metricSamples(kept); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("kept lines give %v\nthe whole exposition %v", b, a)
		}
		seen := map[string]bool{}
		for _, s := range metricSamples(fams) {
			if !keptFamily(s.Name) {
				t.Errorf("kept %s", s.Name)
			}
			if k := s.Name + s.Labels; seen[k] {
				t.Errorf("series %s twice", k)
			} else {
				seen[k] = true
			}
		}
	})
}

// TestMetricsBodyOverLimit: an engine whose /metrics runs past maxMetricsBytes (16 MiB of
// series, here of its own family, each with a label per request) fails the scrape with
// "metrics body over limit", and is not parsed: reading it allocates a small part of the
// body's size, where parsing a 16 MiB body cost some 650 MB.
func TestMetricsBodyOverLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, line string }{
		{"runtime families", "python_gc_objects_collected_total{generation=\"%d\"} 1234.0\n"},
		{"a label per request", "vllm:request_tokens{rid=\"req-%d\",model_name=\"org/model\"} 17.0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body bytes.Buffer
			for i := 0; body.Len() < 16<<20; i++ {
				fmt.Fprintf(&body, tc.line, i)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write(body.Bytes())
			}))
			defer srv.Close()
			// What the scrape allocates is measured in a process of its own: the tests
			// running beside this one allocate too.
			var fams map[string]*dto.MetricFamily
			var err error
			use := memtest.Measure(t, func() {
				fams, err = fetchMetrics(context.Background(), srv.Client(), srv.URL+"/metrics")
			})
			if err == nil || !strings.Contains(err.Error(), "metrics body over limit") || fams != nil {
				t.Fatalf("%d families, error %v; want the over-limit error", len(fams), err)
			}
			// The server's side of the transfer allocates a little too; the bound is a
			// small part of the body, far below the 40 times it used to cost.
			if alloc := use.Allocated; alloc > 48<<20 {
				t.Errorf("a scrape of a 16 MiB body allocated %d MiB", alloc>>20)
			} else {
				t.Logf("a scrape of a 16 MiB body allocated %.1f MiB: %v", float64(alloc)/(1<<20), err)
			}
		})
	}
}

// TestMetricsKeepOnlyWhatIsStored: the runtime's families, HELP texts and histogram
// buckets are dropped before the parser builds anything, and what is stored is what the
// whole exposition gives.
func TestMetricsKeepOnlyWhatIsStored(t *testing.T) {
	t.Parallel()
	want, err := parseMetrics(strings.NewReader(vllmMetrics))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseMetrics(newKeptLines(strings.NewReader(vllmMetrics)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["python_gc_objects_collected_total"]; ok {
		t.Error("a runtime family reached the parser")
	}
	h := got["vllm:e2e_request_latency_seconds"]
	if h == nil || len(h.GetMetric()) != 1 || len(h.GetMetric()[0].GetHistogram().GetBucket()) != 0 || h.GetHelp() != "" {
		t.Errorf("histogram %v: want its _sum and _count only", h)
	}
	if a, b := metricSamples(want), metricSamples(got); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("samples %v\nwant %v", b, a)
	}
}
