package orchestrator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

// Server metrics: while a run's workload runs, the engine's /metrics is scraped and
// stored (store.server_metrics), so that the verdict can show the load each arm actually
// carried. Only the engines' own families are kept (names starting sglang:, vllm: or
// refserve:), not the Go or Python runtime's.

// metricPrefixes are the families kept.
var metricPrefixes = []string{"sglang:", "vllm:", "refserve:"}

// maxSeriesPerScrape bounds what one scrape may store (an engine with a label per
// request would otherwise grow the database without end).
const maxSeriesPerScrape = 2000

// maxMetricsBytes bounds the body read from /metrics.
const maxMetricsBytes = 16 << 20

// firstScrapeInterval is the gap after the first scrape; each gap doubles up to the
// configured interval, so that a run of a few seconds still gets several scrapes and a
// run of half an hour does not get thousands.
const firstScrapeInterval = 250 * time.Millisecond

// metricsScraper scrapes one run's engine.
type metricsScraper struct {
	url          string
	client       *http.Client
	start        time.Time
	record       func(ctx context.Context, elapsedMS float64, samples []store.MetricSample) error
	log          *slog.Logger
	scraped, bad int
}

// run scrapes until ctx ends, with gaps growing from firstScrapeInterval to interval.
// It gives up on an engine that serves no metrics at all (a 404 before any scrape
// succeeded: SGLang and refserve without --enable-metrics).
func (m *metricsScraper) run(ctx context.Context, interval time.Duration) {
	gap := min(firstScrapeInterval, interval)
	for {
		if err := m.scrape(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if m.scraped == 0 && strings.Contains(err.Error(), "HTTP 404") {
				m.log.Info("the engine serves no metrics; the verdict will show no conditions (SGLang and refserve need --enable-metrics)", "url", m.url)
				return
			}
			if m.bad++; m.bad == 1 {
				m.log.Warn("server metrics", "err", err)
			}
		}
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		gap = min(2*gap, interval)
	}
}

// scrape reads /metrics once and records it.
func (m *metricsScraper) scrape(ctx context.Context) error {
	at := time.Since(m.start)
	fams, err := fetchMetrics(ctx, m.client, m.url)
	if err != nil {
		return err
	}
	samples := metricSamples(fams)
	if len(samples) == 0 {
		return nil
	}
	if err := m.record(context.WithoutCancel(ctx), float64(at.Microseconds())/1000, samples); err != nil {
		return err
	}
	m.scraped++
	return nil
}

// fetchMetrics reads and parses an engine's /metrics in the Prometheus text format.
func fetchMetrics(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The text format, not OpenMetrics or protobuf: every engine serves it.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	fams, err := parseMetrics(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return fams, nil
}

// parseMetrics parses the Prometheus text format. The parser panics on some malformed
// input (a comment line followed by a bare label set, found by FuzzMetricSamples); an
// engine's bad /metrics must not bring arbiter down, so that is an error here.
func parseMetrics(r io.Reader) (fams map[string]*dto.MetricFamily, err error) {
	defer func() {
		if p := recover(); p != nil {
			fams, err = nil, fmt.Errorf("unreadable metrics (the parser failed: %v)", p)
		}
	}()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// metricSamples flattens the engine's own families into samples: a gauge, counter or
// untyped family one per series, a histogram or summary its _sum and _count. Sorted by
// name and labels, each series once; at most maxSeriesPerScrape.
func metricSamples(fams map[string]*dto.MetricFamily) []store.MetricSample {
	var out []store.MetricSample
	for name, f := range fams {
		if !keptFamily(name) {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := labelString(m.GetLabel())
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				out = append(out, store.MetricSample{Name: name, Labels: labels, Value: m.GetGauge().GetValue()})
			case dto.MetricType_COUNTER:
				out = append(out, store.MetricSample{Name: name, Labels: labels, Value: m.GetCounter().GetValue()})
			case dto.MetricType_UNTYPED:
				out = append(out, store.MetricSample{Name: name, Labels: labels, Value: m.GetUntyped().GetValue()})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out = append(out, store.MetricSample{Name: name + "_sum", Labels: labels, Value: h.GetSampleSum()},
					store.MetricSample{Name: name + "_count", Labels: labels, Value: float64(h.GetSampleCount())})
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				out = append(out, store.MetricSample{Name: name + "_sum", Labels: labels, Value: s.GetSampleSum()},
					store.MetricSample{Name: name + "_count", Labels: labels, Value: float64(s.GetSampleCount())})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Labels < out[j].Labels
	})
	// The text format may repeat a series; the last value served is the one kept.
	kept := out[:0]
	for i, s := range out {
		if i+1 < len(out) && out[i+1].Name == s.Name && out[i+1].Labels == s.Labels {
			continue
		}
		kept = append(kept, s)
	}
	out = kept
	if len(out) > maxSeriesPerScrape {
		out = out[:maxSeriesPerScrape]
	}
	return out
}

func keptFamily(name string) bool {
	for _, p := range metricPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// labelString writes a label set as the text format does, sorted by name:
// {a="x",b="y \"q\""}; "" for none.
func labelString(pairs []*dto.LabelPair) string {
	if len(pairs) == 0 {
		return ""
	}
	ps := append([]*dto.LabelPair(nil), pairs...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].GetName() < ps[j].GetName() })
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.GetName())
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(p.GetValue()))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// scrapeServerMetrics starts scraping the run's engine while its workload runs, and
// returns what ends it: one last scrape (the counters' final values, so that the
// throughput over the run is complete) and the wait for the scraper to stop.
func (e *experiment) scrapeServerMetrics(ctx context.Context, endpoint string, preset arms.Preset, runID, armID int64) (finish func()) {
	interval := e.opts.MetricsInterval
	if preset.MetricsPath == "" || interval < 0 {
		return func() {}
	}
	if interval == 0 {
		interval = 2 * time.Second
	}
	m := &metricsScraper{url: endpoint + preset.MetricsPath, client: &http.Client{Timeout: 10 * time.Second}, start: time.Now(),
		log: e.log.With("run", runID),
		record: func(ctx context.Context, elapsedMS float64, samples []store.MetricSample) error {
			return e.store.AddServerMetrics(ctx, e.id, runID, armID, elapsedMS, samples)
		}}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.run(sctx, interval)
	}()
	return func() {
		cancel()
		<-done
		if m.scraped > 0 && ctx.Err() == nil {
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := m.scrape(fctx); err != nil {
				m.log.Debug("last scrape of server metrics", "err", err)
			}
		}
	}
}
