package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	"github.com/arbiterlab/arbiter/internal/enginehttp"
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

// maxMetricsBytes bounds the body read from /metrics (4 MiB). SGLang's and vLLM's
// expositions are some tens of kilobytes; a body past the limit is not parsed at all
// (its scrape fails with errMetricsOverLimit), since a truncated exposition would record
// wrong values, and parsing an engine's label-per-request series cost arbiter some 40
// times the body's size in memory.
const maxMetricsBytes = 4 << 20

// maxMetricsSeriesLines bounds the sample lines of the engine's own families one scrape
// parses (histogram buckets not counted): 16 times the series a scrape may store, so that
// repeats and a histogram's _sum and _count fit, while an engine with a label per
// request cannot make the parser build hundreds of thousands of series.
const maxMetricsSeriesLines = 16 * maxSeriesPerScrape

// errMetricsOverLimit is the failure of a scrape whose body ran past maxMetricsBytes or
// maxMetricsSeriesLines.
var errMetricsOverLimit = errors.New("metrics body over limit")

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
	// phase hears that a workload phase ended: the scraper scrapes at once and starts
	// its gaps again from firstScrapeInterval, so that every phase, however short, has
	// scrapes of its own (a closed loop of one second would otherwise fall between two
	// scrapes two seconds apart, and its load would count for none).
	phase chan struct{}
	// first is the gap after the first scrape and after each phase's end (default
	// firstScrapeInterval).
	first time.Duration
}

// phaseEnded tells the scraper a phase ended; it never blocks.
func (m *metricsScraper) phaseEnded() {
	select {
	case m.phase <- struct{}{}:
	default: // a nudge is pending already
	}
}

// run scrapes until ctx ends, with gaps growing from firstScrapeInterval to interval.
// It gives up on an engine that serves no metrics at all (a 404 before any scrape
// succeeded: SGLang and refserve without --enable-metrics).
func (m *metricsScraper) run(ctx context.Context, interval time.Duration) {
	first := m.first
	if first == 0 {
		first = firstScrapeInterval
	}
	gap := min(first, interval)
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
			gap = min(2*gap, interval)
		case <-m.phase: // a nil channel never yields
			t.Stop()
			gap = min(first, interval)
		}
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
	body := &cappedBody{r: resp.Body, left: maxMetricsBytes}
	lines := newKeptLines(body)
	fams, err := parseMetrics(lines)
	// Whatever the parser made of the part it read is dropped.
	switch {
	case body.over:
		return nil, fmt.Errorf("%s: %w: more than %d MiB; not parsed", url, errMetricsOverLimit, maxMetricsBytes>>20)
	case lines.over:
		return nil, fmt.Errorf("%s: %w: more than %d series lines of the engine's families (a label per request?); not parsed",
			url, errMetricsOverLimit, maxMetricsSeriesLines)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return fams, nil
}

// cappedBody reads at most left bytes of r; one byte more ends the read with
// errMetricsOverLimit and sets over. Unlike io.LimitReader, the end of a body that is
// too long cannot be taken for the end of the body.
type cappedBody struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.over {
		return 0, errMetricsOverLimit
	}
	// One byte past the limit is asked for, so that a body of exactly the limit passes.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		c.over = true
		n, c.left = int(c.left), 0
		return n, errMetricsOverLimit
	}
	c.left -= int64(n)
	return n, err
}

// keptLines passes on, line by line as they arrive, only what metricSamples can keep:
// the samples and TYPE lines of the engine's own families, without their HELP texts
// and the buckets of their histograms (only _sum and _count are kept). The parser then
// builds the families arbiter keeps and no others: an engine's runtime families and a
// histogram's buckets are most of a real exposition.
type keptLines struct {
	br      *bufio.Reader
	line    []byte // the line being read, or the kept line being passed on
	pending []byte // what of line is still to be passed on
	err     error  // the end of the body, once reached
	// histograms are the kept families declared histograms, whose _bucket lines are
	// dropped.
	histograms map[string]bool
	// samples counts the sample lines passed on; over is set past maxMetricsSeriesLines.
	samples int
	over    bool
}

func newKeptLines(r io.Reader) *keptLines {
	return &keptLines{br: bufio.NewReaderSize(r, 64<<10), histograms: map[string]bool{}}
}

func (k *keptLines) Read(p []byte) (int, error) {
	for len(k.pending) == 0 {
		if k.err != nil {
			return 0, k.err
		}
		k.line = k.line[:0]
		for {
			part, err := k.br.ReadSlice('\n')
			k.line = append(k.line, part...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue // a long line: the cap on the body bounds it
			}
			k.err = err
			break
		}
		if keepMetricsLine(k.line, k.histograms) {
			if t := bytes.TrimLeft(k.line, " \t"); len(t) > 0 && t[0] != '#' {
				if k.samples++; k.samples > maxMetricsSeriesLines {
					k.over, k.err = true, errMetricsOverLimit
					return 0, k.err
				}
			}
			k.pending = k.line
		}
	}
	n := copy(p, k.pending)
	k.pending = k.pending[n:]
	return n, nil
}

// keepMetricsLine says whether a line of an exposition is one keptLines passes on;
// histograms collects the kept families declared histograms, whose _bucket lines are
// dropped.
func keepMetricsLine(line []byte, histograms map[string]bool) bool {
	t := bytes.TrimLeft(line, " \t")
	if len(t) == 0 || t[0] == '{' {
		// A blank line, or a name written inside the braces: the parser judges it.
		return len(t) > 0
	}
	if t[0] == '#' {
		f := strings.Fields(string(t[1:min(len(t), 512)]))
		if len(f) < 3 || f[0] != "TYPE" || !keptFamily(f[1]) {
			return false // HELP texts and other comments are never kept
		}
		if f[2] == "histogram" {
			histograms[f[1]] = true
		}
		return true
	}
	end := bytes.IndexAny(t, "{ \t")
	if end < 0 {
		end = len(t)
	}
	name := string(t[:end])
	if !keptFamily(name) {
		return false
	}
	if base, ok := strings.CutSuffix(name, "_bucket"); ok && histograms[base] {
		return false
	}
	return true
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
// returns what ends it (one last scrape, the counters' final values, so that the
// throughput over the run is complete, and the wait for the scraper to stop) and what
// tells it that a workload phase ended.
func (e *experiment) scrapeServerMetrics(ctx context.Context, endpoint string, preset arms.Preset, runID, armID int64) (finish, phaseEnded func()) {
	interval := e.opts.MetricsInterval
	if preset.MetricsPath == "" || interval < 0 {
		return func() {}, func() {}
	}
	if interval == 0 {
		interval = 2 * time.Second
	}
	m := &metricsScraper{url: endpoint + preset.MetricsPath, client: enginehttp.Client(10 * time.Second), start: time.Now(),
		log: e.log.With("run", runID), phase: make(chan struct{}, 1),
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
	}, m.phaseEnded
}
