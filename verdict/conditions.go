package verdict

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/store"
)

// Conditions: what load each arm's engine actually carried, read from the metrics the
// orchestrator scraped from its /metrics while the workload ran (store.server_metrics).
// An A/B is clean when only the pinned factor differs; an arm whose engine ran at
// another load (fewer requests at once, a longer queue, another cache hit rate) is
// compared under other conditions, and the verdict says so.
//
// The rule: an arm's condition differs from the baseline's when both were measured and
// they are apart by more than ConditionTolerance of the larger one and by more than that
// condition's floor (conditionFloors), so that near-zero values (an empty queue against
// a queue of one) do not flag.

// ConditionTolerance is the relative difference beyond which a condition differs.
const ConditionTolerance = 0.25

// Condition names, in the order the verdict shows them.
const (
	CondRunning    = "running requests"
	CondQueued     = "queued requests"
	CondTokenUsage = "token usage"
	CondCacheHit   = "cache hit rate"
	CondThroughput = "throughput"
)

var conditionOrder = []string{CondRunning, CondQueued, CondTokenUsage, CondCacheHit, CondThroughput}

// conditionFloors are the absolute differences below which a condition never differs.
var conditionFloors = map[string]float64{
	CondRunning: 2, CondQueued: 2, CondTokenUsage: 0.05, CondCacheHit: 0.10, CondThroughput: 1,
}

// ArmConditions is one arm's load, averaged over its launches: time-weighted means of
// the scraped gauges, and the throughput from the generated-token counter (or the
// engine's own throughput gauge when it has no counter). A value is NaN when the engine
// does not report it.
type ArmConditions struct {
	Scrapes int
	Values  map[string]float64 // by condition name
	// RunningMax is the most requests seen running at one scrape.
	RunningMax float64
	// Differs names the conditions that differ from the baseline's (see the rule above);
	// empty for the baseline.
	Differs []string
	// Stopped counts the arm's launches left out because their engine wedged or crashed:
	// the load of an engine that stopped serving is the effect measured, not a condition
	// it was compared under.
	Stopped int
}

// loadConditions reads the scraped metrics and compares every arm with the baseline.
func (v *Verdict) loadConditions(ctx context.Context, db *sqlx.DB) error {
	rows, err := store.ServerMetrics(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	stopped := map[int64]bool{}
	for _, r := range v.Runs {
		if r.Status == store.RunWedged || r.Status == store.RunCrashed {
			stopped[r.ID] = true
		}
	}
	kept := rows[:0:0]
	for _, r := range rows {
		if !stopped[r.RunID] {
			kept = append(kept, r)
		}
	}
	v.Conditions = conditionsOf(kept, v.index, len(v.Arms))
	for _, r := range v.Runs {
		if stopped[r.ID] && !r.Superseded {
			if i := v.armIndex(r.Arm); i >= 0 {
				v.Conditions[i].Stopped++
			}
		}
	}
	base := v.Conditions[v.Baseline]
	for i := range v.Conditions {
		if i == v.Baseline || v.Conditions[i].Scrapes == 0 || base.Scrapes == 0 {
			continue
		}
		v.Conditions[i].Differs = conditionsDiffer(base.Values, v.Conditions[i].Values)
	}
	return nil
}

// conditionsDiffer lists the conditions of arm that differ from base's.
func conditionsDiffer(base, arm map[string]float64) []string {
	var out []string
	for _, c := range conditionOrder {
		a, b := arm[c], base[c]
		if math.IsNaN(a) || math.IsNaN(b) {
			continue
		}
		d := math.Abs(a - b)
		if d > ConditionTolerance*math.Max(math.Abs(a), math.Abs(b)) && d > conditionFloors[c] {
			out = append(out, c)
		}
	}
	return out
}

// scrape is one scrape of one run: every series' value by metric name (label sets
// folded: see fold).
type scrape struct {
	at     float64 // ms since the workload started
	values map[string][]float64
}

// conditionsOf folds the scraped rows into each arm's conditions.
func conditionsOf(rows []store.ServerMetricRow, index map[int64]int, arms int) []ArmConditions {
	type runScrapes struct {
		arm     int
		scrapes []*scrape
	}
	runs := map[int64]*runScrapes{}
	var order []int64
	for _, r := range rows {
		rs := runs[r.RunID]
		if rs == nil {
			rs = &runScrapes{arm: index[r.ArmID]}
			runs[r.RunID] = rs
			order = append(order, r.RunID)
		}
		n := len(rs.scrapes)
		if n == 0 || rs.scrapes[n-1].at != r.ElapsedMS {
			rs.scrapes = append(rs.scrapes, &scrape{at: r.ElapsedMS, values: map[string][]float64{}})
			n++
		}
		s := rs.scrapes[n-1]
		// An engine can report anything: a value that is not finite is no reading.
		if !math.IsNaN(r.Value) && !math.IsInf(r.Value, 0) {
			s.values[r.Name] = append(s.values[r.Name], r.Value)
		}
	}
	type acc struct{ sum, weight float64 }
	sums := make([]map[string]*acc, arms)
	out := make([]ArmConditions, arms)
	for i := range out {
		sums[i] = map[string]*acc{}
		out[i].Values = map[string]float64{}
		out[i].RunningMax = math.NaN()
	}
	for _, id := range order {
		rs := runs[id]
		ac := &out[rs.arm]
		ac.Scrapes += len(rs.scrapes)
		for c, x := range runConditions(rs.scrapes) {
			if math.IsNaN(x.value) {
				continue
			}
			a := sums[rs.arm][c]
			if a == nil {
				a = &acc{}
				sums[rs.arm][c] = a
			}
			a.sum += x.value * x.weight
			a.weight += x.weight
		}
		for _, s := range rs.scrapes {
			if r, ok := sumOf(s, "sglang:num_running_reqs", "vllm:num_requests_running"); ok && (math.IsNaN(ac.RunningMax) || r > ac.RunningMax) {
				ac.RunningMax = r
			}
		}
	}
	for i := range out {
		for _, c := range conditionOrder {
			out[i].Values[c] = math.NaN()
			if a := sums[i][c]; a != nil && a.weight > 0 {
				out[i].Values[c] = a.sum / a.weight
			}
		}
	}
	return out
}

// weighted is a run's value of a condition and the weight (its time span in ms) it has
// among the arm's launches.
type weighted struct{ value, weight float64 }

// runConditions computes one run's conditions from its scrapes, in time order. A gauge
// is averaged over time: each scrape stands for the gap until the next (the last, taken
// as the workload ended, stands for none unless it is the only one). Throughput and a
// cache hit rate from counters are the counters' growth from the first scrape to the
// last, over the time between.
func runConditions(scrapes []*scrape) map[string]weighted {
	span := 1.0
	if n := len(scrapes); n > 1 {
		span = math.Max(scrapes[n-1].at-scrapes[0].at, 1e-9)
	}
	gauge := func(fold func(*scrape) (float64, bool)) weighted {
		var sum, w float64
		for i, s := range scrapes {
			x, ok := fold(s)
			if !ok || x < 0 {
				continue // requests, usage and rates are never negative: a bad reading
			}
			gap := 1.0
			if len(scrapes) > 1 {
				if i == len(scrapes)-1 {
					continue
				}
				gap = scrapes[i+1].at - s.at
			}
			sum += x * gap
			w += gap
		}
		if w == 0 {
			return weighted{math.NaN(), 0}
		}
		return weighted{sum / w, span}
	}
	// growth is a counter's increase over the run. A counter that falls was reset (the
	// engine restarted it): the increase goes on from its new value, as Prometheus's
	// increase() reads it, so that a reset never reads as negative throughput.
	growth := func(names ...string) (float64, bool) {
		var total, prev float64
		seen := 0
		for _, s := range scrapes {
			x, ok := sumOf(s, names...)
			if !ok || x < 0 {
				continue
			}
			if seen > 0 {
				if x >= prev {
					total += x - prev
				} else {
					total += x
				}
			}
			prev = x
			seen++
		}
		return total, seen >= 2
	}
	out := map[string]weighted{
		CondRunning: gauge(func(s *scrape) (float64, bool) {
			return sumOf(s, "sglang:num_running_reqs", "vllm:num_requests_running")
		}),
		CondQueued: gauge(func(s *scrape) (float64, bool) { return sumOf(s, "sglang:num_queue_reqs", "vllm:num_requests_waiting") }),
		CondTokenUsage: gauge(func(s *scrape) (float64, bool) {
			return meanOf(s, "sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
		}),
	}
	if tokens, ok := growth("sglang:generation_tokens_total", "vllm:generation_tokens_total"); ok && span > 0 {
		out[CondThroughput] = weighted{tokens / (span / 1000), span}
	} else {
		out[CondThroughput] = gauge(func(s *scrape) (float64, bool) { return sumOf(s, "sglang:gen_throughput") })
	}
	hits, okH := growth("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
	queries, okQ := growth("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
	if okH && okQ && queries > 0 {
		out[CondCacheHit] = weighted{hits / queries, span}
	} else {
		out[CondCacheHit] = gauge(func(s *scrape) (float64, bool) { return meanOf(s, "sglang:cache_hit_rate") })
	}
	return out
}

// sumOf is the first of names the scrape has, summed over its label sets (requests of
// several models or ranks add up).
func sumOf(s *scrape, names ...string) (float64, bool) {
	for _, n := range names {
		if xs, ok := s.values[n]; ok {
			var t float64
			for _, x := range xs {
				t += x
			}
			return t, true
		}
	}
	return 0, false
}

// meanOf is the first of names the scrape has, averaged over its label sets (a ratio of
// several ranks is their mean).
func meanOf(s *scrape, names ...string) (float64, bool) {
	t, ok := sumOf(s, names...)
	if !ok {
		return 0, false
	}
	for _, n := range names {
		if xs, ok := s.values[n]; ok {
			return t / float64(len(xs)), true
		}
	}
	return 0, false
}

// isLoadCondition says whether c is the load an engine carried: the requests it ran and
// queued, which the workload sets. The other conditions (token usage, cache hit rate, throughput) are
// what the engine made of that load, which its pins may change: a cache tier raises the
// hit rate, a KV format changes the memory a token takes.
func isLoadCondition(c string) bool { return c == CondRunning || c == CondQueued }

// conditionsCaveat notes the arms whose conditions differed from the baseline's: as a
// confound when the load differed, and as what the engines did under it when only their
// state did.
func (v *Verdict) conditionsCaveat(add func(CaveatKind, string, ...any)) {
	var loaded, state []string
	sameLoad := true // unless a load was not measured
	for i, c := range v.Conditions {
		if len(c.Differs) == 0 {
			continue
		}
		base := v.Conditions[v.Baseline]
		var ds []string
		load := false
		for _, d := range c.Differs {
			ds = append(ds, fmt.Sprintf("%s %s against %s", d, conditionValue(d, c.Values[d]), conditionValue(d, base.Values[d])))
			load = load || isLoadCondition(d)
		}
		part := fmt.Sprintf("%s (%s)", v.Arms[i].Name, strings.Join(ds, "; "))
		if load {
			loaded = append(loaded, part)
		} else {
			state = append(state, part)
			sameLoad = sameLoad && !math.IsNaN(c.Values[CondRunning]) && !math.IsNaN(base.Values[CondRunning])
		}
	}
	if len(loaded) > 0 {
		add(CaveatDesign, "The engines did not carry the same load: %s for %s, beyond the tolerance (see Conditions). The arms were not compared under identical conditions; a difference between them may come from the load as well as from the pins.",
			strings.Join(loaded, ", "), v.Arms[v.Baseline].Name)
	}
	if len(state) > 0 {
		under := "Under the same load, the engines' state differed"
		if !sameLoad {
			under = "The engines' state differed (their load was not measured)"
		}
		add(CaveatDesign, "%s: %s against %s, beyond the tolerance (see Conditions). Pins that change the engine's cache or memory (a cache tier, a KV format) do this; where these pins should not, the engines differed in more than their pins.",
			under, strings.Join(state, ", "), v.Arms[v.Baseline].Name)
	}
}

// conditionValue formats a condition for reading.
func conditionValue(c string, x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	switch c {
	case CondTokenUsage, CondCacheHit:
		return fmt.Sprintf("%.1f%%", 100*x)
	case CondThroughput:
		return fmt.Sprintf("%.0f tok/s", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// conditionsSection writes the Conditions section: always, so that a reader knows
// whether the load was seen at all; the launches' GPUs follow it.
func (v markdownWriter) conditionsSection() {
	b := v.b
	fmt.Fprintf(b, "\n## Conditions\n\n")
	defer v.telemetryText() // the GPUs, after the load
	if len(v.Conditions) == 0 {
		fmt.Fprintf(b, "No server metrics were recorded, so the load each arm's engine carried is unknown. arbiter scrapes the engine's `/metrics` while the workload runs; SGLang and refserve serve it with `--enable-metrics`, vLLM always.\n")
		return
	}
	fmt.Fprintf(b, "What each arm's engine reported at `/metrics` while its workload ran: time-weighted means over its scrapes, throughput from the generated-token counter. "+
		"Running and queued requests are the load the workload put on it; token usage, cache hit rate and throughput are what the engine made of that load, which its pins may change. "+
		"A condition differs from the baseline's when the two are more than %.0f%% of the larger apart and more than a floor (2 requests; 5 points of token usage; 10 points of cache hit rate; 1 tok/s).\n\n", 100*ConditionTolerance)
	fmt.Fprintf(b, "| arm | scrapes | running | running max | queued | token usage | cache hit rate | throughput | conditions |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, c := range v.Conditions {
		note := "same as " + v.Arms[v.Baseline].Name
		switch {
		case i == v.Baseline:
			note = "baseline"
		case c.Scrapes == 0:
			note = "not measured"
		case len(c.Differs) > 0:
			note = "**differ**: " + strings.Join(c.Differs, ", ")
		case v.Conditions[v.Baseline].Scrapes == 0:
			note = "baseline not measured"
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", v.Arms[i].Name, c.Scrapes,
			conditionValue(CondRunning, c.Values[CondRunning]), conditionValue(CondRunning, c.RunningMax),
			conditionValue(CondQueued, c.Values[CondQueued]), conditionValue(CondTokenUsage, c.Values[CondTokenUsage]),
			conditionValue(CondCacheHit, c.Values[CondCacheHit]), conditionValue(CondThroughput, c.Values[CondThroughput]), note)
	}
	var stopped []string
	for i, c := range v.Conditions {
		if c.Stopped > 0 {
			stopped = append(stopped, fmt.Sprintf("%s's %d", v.Arms[i].Name, c.Stopped))
		}
	}
	if len(stopped) > 0 {
		fmt.Fprintf(b, "\nLaunches whose engine wedged or crashed are left out (%s): an engine that stopped serving carries less load because of the effect measured, which is no condition it was compared under.\n", joinAnd(stopped))
	}
}
