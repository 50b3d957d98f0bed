package verdict

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// Outcomes beyond corruption: how fast each arm served (per session latency and
// throughput, compared by ranks), how much it generated per phase, whether it wedged
// under an abort cascade and how fast it served again after each.
//
// The session is the unit: every session is first summarised by one number per metric
// (the median of its requests' TTFT, inter-token latency and end-to-end latency; its
// tokens over its requests' time), and the arms' session summaries are compared with the
// Mann-Whitney U test and the Hodges-Lehmann shift, as a ratio. Summarising first keeps
// the test exact and honest without modelling the correlation of a session's requests
// (a clustered rank test would need that model); arbiter's sessions are seeded to be the
// same in every arm, so their summaries are comparable one for one.

// Metrics of the per-session comparison, in the order the verdict lists them.
const (
	MetricTTFT       = "TTFT"
	MetricITL        = "inter-token latency"
	MetricLatency    = "end-to-end latency"
	MetricThroughput = "tok/s per request"
)

var metricOrder = []string{MetricThroughput, MetricTTFT, MetricITL, MetricLatency}

// higherBetter says which way each metric improves.
var higherBetter = map[string]bool{MetricThroughput: true}

// Outcomes are the verdict's judgements beyond corruption.
type Outcomes struct {
	// Groups are the sets of sessions compared: one per measured phase (closed loop at
	// a concurrency, open-loop arrivals at a rate), or "all sessions".
	Groups []OutcomeGroup
	// Metrics compare each arm's session summaries with the baseline's, per group and
	// metric; Holm-adjusted over every row.
	Metrics []MetricRow
	// Throughput judges, per group, each arm's tok/s per request against the baseline's
	// within analysis.throughput_margin; Stability judges, within each arm, the
	// throughput after its abort cascades against before.
	Throughput []ThroughputNI
	Stability  []ThroughputNI
	// Cascades is each arm's abort cascades, when the workload had any.
	Cascades []CascadeArm
	// Margin is analysis.throughput_margin (0: none declared).
	Margin float64
}

// OutcomeGroup is one set of sessions compared between arms.
type OutcomeGroup struct {
	Name        string
	Kind        string // closed, open, or "" for all sessions
	Concurrency int
	Rate        float64
	Position    int
	// EngineTPS is, per arm, the engine's generated tokens per second over the phase
	// (mean over the arm's launches); NaN where the arm did not run it.
	EngineTPS []float64
	// Sessions is, per arm, the sessions summarised.
	Sessions  []int
	summaries [][]sessionSummary
	// engine holds, per arm, each launch's EngineTPS.
	engine [][]float64
	// Gaps holds, per arm, the quantiles of every gap between consecutive streamed
	// tokens of the group's text replies (per-token times); Gaps[i].N is 0 where none
	// were recorded.
	Gaps []GapQuantiles
}

// GapQuantiles summarise inter-token gaps in milliseconds.
type GapQuantiles struct {
	N                  int
	P50, P90, P99, Max float64
}

func gapQuantiles(xs []float64) GapQuantiles {
	if len(xs) == 0 {
		return GapQuantiles{P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	}
	sort.Float64s(xs)
	return GapQuantiles{N: len(xs), P50: stats.SortedQuantile(xs, 0.5), P90: stats.SortedQuantile(xs, 0.9),
		P99: stats.SortedQuantile(xs, 0.99), Max: xs[len(xs)-1]}
}

// sessionSummary is one session reduced to one number per metric (NaN: not measurable),
// with its block under blockKey.
type sessionSummary map[string]float64

// blockKey holds a session summary's block, runKey its launch's run id.
const (
	blockKey = "\x00block"
	runKey   = "\x00run"
)

// MetricRow is one arm against the baseline on one metric in one group.
type MetricRow struct {
	Group, Metric, Arm string
	Result             stats.RankResult
	// AdjustedP is the launch-level test's p (Launch.P); NaN when it could not be tested.
	AdjustedP float64
	// Decision is the launch-level claim's: "better" or "worse" when the whole interval
	// of the change lies beyond analysis.min_effect, "negligible" when it lies within it,
	// "" otherwise.
	Decision string
	// Launch is the claim as tested on launches; nil when none was made.
	Launch *LaunchClaim
}

// Decisive reports whether the row's difference is significant and large enough to
// call better or worse.
func (r MetricRow) Decisive() bool { return r.Decision == "better" || r.Decision == "worse" }

// ThroughputNI is a non-inferiority judgement of tok/s per request: Arm against
// Against (the baseline, or the same arm before its cascades).
type ThroughputNI struct {
	Group, Arm, Against string
	// AgainstGroup is the group compared with (the "before" phase for stability).
	AgainstGroup string
	Result       stats.RatioNonInferiority
	N1, N2       int
	// Launch is the claim as tested on launches, which decides Result.NonInferior.
	Launch *LaunchClaim
}

// CascadeArm is one arm's abort cascades.
type CascadeArm struct {
	Arm string
	// Launches and Wedged count the arm's launches and those recorded wedged or crashed.
	Launches, Wedged int
	// Cascades run, Recovered of them (a canary completed), their recovery times (ms).
	Cascades, Recovered int
	Recoveries          []float64
	// Aborted counts the requests the cascades cut.
	Aborted int
	// WedgedAfter are, for the cascades after which no canary completed, the times from
	// the abort to when the engine was declared wedged (ms).
	WedgedAfter []float64
	// FisherP compares wedged launches with the baseline's (NaN for the baseline).
	FisherP float64
	// Launch is the wedge claim against the baseline, tested on launches.
	Launch *LaunchClaim
	// Recovery compares recovery times with the baseline's, when both recovered twice
	// or more.
	Recovery *stats.RankResult
	Notes    []string
}

// loadOutcomes summarises every session from its turns' metrics, reads the phases, and
// judges them. It runs after account, which counts the launches.
func (v *Verdict) loadOutcomes(ctx context.Context, db *sqlx.DB, metrics []store.TurnMetric) error {
	phases, err := store.Phases(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	o := &Outcomes{Margin: v.Design.ThroughputMargin}
	n := len(v.Arms)

	// Which group each session belongs to, by run.
	type key struct {
		run     int64
		session int
	}
	groupOf := map[key]string{}
	skip := map[key]bool{} // sessions of abort cascades: cut on purpose
	groups := map[string]*OutcomeGroup{}
	engine := map[string][][]float64{}
	for _, p := range phases {
		for s := p.FirstSession; s < p.FirstSession+p.Sessions; s++ {
			if p.Kind == "cascade" {
				skip[key{p.RunID, s}] = true
			} else {
				groupOf[key{p.RunID, s}] = p.Name
			}
		}
		if p.Kind == "cascade" {
			continue
		}
		if groups[p.Name] == nil {
			groups[p.Name] = &OutcomeGroup{Name: p.Name, Kind: p.Kind, Concurrency: p.Concurrency, Rate: p.Rate,
				Position: p.Position, EngineTPS: make([]float64, n), Sessions: make([]int, n), summaries: make([][]sessionSummary, n)}
			engine[p.Name] = make([][]float64, n)
		}
		if p.TokensPerSecond.Valid {
			i := v.index[p.ArmID]
			engine[p.Name][i] = append(engine[p.Name][i], p.TokensPerSecond.Float64)
		}
	}
	const all = allSessions
	analysedSet := map[key]bool{}
	for _, s := range v.sessions {
		if analysed(s) {
			analysedSet[key{s.RunID, s.Index}] = true
		}
	}
	// Per-session summaries.
	type acc struct {
		arm, block      int
		group           string
		ttft, itl, lat  []float64
		tokens, seconds float64
	}
	accs := map[key]*acc{}
	var order []key
	// The token times of every analysed text reply, by group and arm, and their bytes:
	// a blob holds at most one gap a byte, so each arm's gaps are decoded into one
	// slice made once (growing it turn by turn copied a 512-token run's gaps over and
	// over). Their quantiles do not depend on the order.
	type blobs struct {
		times [][]byte
		bytes int
	}
	tokenTimes := map[string][]blobs{}
	for _, t := range metrics {
		k := key{t.RunID, t.Session}
		if skip[k] || !analysedSet[k] || t.Failed || t.StatusCode != 200 {
			continue
		}
		g, ok := groupOf[k]
		if !ok {
			if len(phases) > 0 {
				continue // a session outside every measured phase (a canary)
			}
			g = all
		}
		a := accs[k]
		if a == nil {
			a = &acc{arm: v.index[t.ArmID], block: t.Block, group: g}
			accs[k] = a
			order = append(order, k)
		}
		if t.TTFT > 0 {
			a.ttft = append(a.ttft, t.TTFT)
		}
		// Inter-token latency from text replies only: a tool call's markup may be held
		// back by the engine's parser and sent in a burst, whose pace is the parser's.
		if t.CompletionTokens >= 2 && t.DecodeMS.Valid && t.DecodeMS.Float64 > 0 && t.FinishReason != "tool_calls" {
			a.itl = append(a.itl, t.DecodeMS.Float64/float64(t.CompletionTokens-1))
		}
		if t.FinishReason != "tool_calls" && len(t.TokenTimes) > 0 {
			if tokenTimes[a.group] == nil {
				tokenTimes[a.group] = make([]blobs, n)
			}
			b := &tokenTimes[a.group][a.arm]
			b.times = append(b.times, t.TokenTimes)
			b.bytes += len(t.TokenTimes)
		}
		a.lat = append(a.lat, t.Latency)
		a.tokens += float64(t.CompletionTokens)
		a.seconds += t.Latency / 1000
	}
	if len(phases) == 0 && len(order) > 0 {
		groups[all] = &OutcomeGroup{Name: all, EngineTPS: make([]float64, n), Sessions: make([]int, n), summaries: make([][]sessionSummary, n)}
		for i := range groups[all].EngineTPS {
			groups[all].EngineTPS[i] = math.NaN()
		}
	}
	for _, k := range order {
		a := accs[k]
		g := groups[a.group]
		if g == nil {
			continue
		}
		s := sessionSummary{MetricTTFT: stats.Median(a.ttft), MetricITL: stats.Median(a.itl), MetricLatency: stats.Median(a.lat),
			MetricThroughput: math.NaN(), blockKey: float64(a.block), runKey: float64(k.run)}
		if a.seconds > 0 && a.tokens > 0 {
			s[MetricThroughput] = a.tokens / a.seconds
		}
		g.summaries[a.arm] = append(g.summaries[a.arm], s)
		g.Sessions[a.arm]++
	}
	for name, g := range groups {
		g.Gaps = make([]GapQuantiles, n)
		for i := range g.Gaps {
			var xs []float64
			if tokenTimes[name] != nil {
				b := tokenTimes[name][i]
				xs = make([]float64, 0, b.bytes)
				for _, times := range b.times {
					// A blob that does not decode is left out: its turn's other figures stand.
					xs, _ = store.AppendTokenGaps(xs, times)
				}
			}
			g.Gaps[i] = gapQuantiles(xs)
		}
		if e, ok := engine[name]; ok {
			g.engine = e
			for i := range g.EngineTPS {
				g.EngineTPS[i] = stats.Mean(e[i])
			}
		}
		o.Groups = append(o.Groups, *g)
	}
	sort.Slice(o.Groups, func(i, j int) bool {
		if o.Groups[i].Position != o.Groups[j].Position {
			return o.Groups[i].Position < o.Groups[j].Position
		}
		return o.Groups[i].Name < o.Groups[j].Name
	})
	v.Outcomes = o
	v.compareMetrics()
	v.judgeThroughput()
	v.judgeCascades(phases)
	return nil
}

// values are one metric of a group's sessions of arm i, leaving out unmeasurable ones.
func (g OutcomeGroup) values(i int, metric string) []float64 {
	var out []float64
	for _, s := range g.summaries[i] {
		if x := s[metric]; !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// blockRatios are, for each block both arms ran, the ratio of arm i's median session tok/s
// to the baseline's in group g: whether a difference holds launch after launch.
func (g OutcomeGroup) blockRatios(base, i int) (blocks []int, ratios []float64) {
	med := func(arm int) map[int]float64 {
		by := map[int][]float64{}
		for _, s := range g.summaries[arm] {
			if x := s[MetricThroughput]; !math.IsNaN(x) {
				b := int(s[blockKey])
				by[b] = append(by[b], x)
			}
		}
		out := map[int]float64{}
		for b, xs := range by {
			out[b] = stats.Median(xs)
		}
		return out
	}
	mb, ma := med(base), med(i)
	for b, x := range mb {
		if _, ok := ma[b]; ok && x > 0 {
			blocks = append(blocks, b)
		}
	}
	sort.Ints(blocks)
	for _, b := range blocks {
		ratios = append(ratios, ma[b]/mb[b])
	}
	return blocks, ratios
}

// compareMetrics describes every arm against the baseline on every metric of every
// group by the sessions' ranks (Hodges-Lehmann change, Mann-Whitney p). It describes the
// launches measured; the decisions are the launch family's (judgeLaunches).
func (v *Verdict) compareMetrics() {
	o := v.Outcomes
	for _, g := range o.Groups {
		for _, m := range metricOrder {
			base := g.values(v.Baseline, m)
			for i, a := range v.Arms {
				if i == v.Baseline {
					continue
				}
				arm := g.values(i, m)
				if len(base) < 2 || len(arm) < 2 {
					continue
				}
				r, err := stats.RankCompare(base, arm, 0.95)
				if err != nil {
					continue
				}
				o.Metrics = append(o.Metrics, MetricRow{Group: g.Name, Metric: m, Arm: a.Name, Result: r, AdjustedP: math.NaN()})
			}
		}
	}
}

// judgeThroughput judges non-inferiority of tok/s per request within the margin: each
// arm against the baseline in every group, and within each arm, every "after" phase
// against its "before".
func (v *Verdict) judgeThroughput() {
	o := v.Outcomes
	if o.Margin <= 0 {
		return
	}
	for _, g := range o.Groups {
		base := g.values(v.Baseline, MetricThroughput)
		for i, a := range v.Arms {
			if i == v.Baseline {
				continue
			}
			arm := g.values(i, MetricThroughput)
			if len(base) < 2 || len(arm) < 2 {
				continue
			}
			r, err := stats.NonInferiorRatio(base, arm, o.Margin, v.Alpha, true)
			if err != nil {
				continue
			}
			o.Throughput = append(o.Throughput, ThroughputNI{Group: g.Name, AgainstGroup: g.Name, Arm: a.Name,
				Against: v.Arms[v.Baseline].Name, Result: r, N1: len(base), N2: len(arm)})
		}
	}
	for _, g := range o.Groups {
		stem, ok := strings.CutSuffix(g.Name, " after")
		if !ok {
			continue
		}
		var before *OutcomeGroup
		for k := range o.Groups {
			if o.Groups[k].Name == stem+" before" {
				before = &o.Groups[k]
			}
		}
		if before == nil {
			continue
		}
		for i, a := range v.Arms {
			b, after := before.values(i, MetricThroughput), g.values(i, MetricThroughput)
			if len(b) < 2 || len(after) < 2 {
				continue
			}
			r, err := stats.NonInferiorRatio(b, after, o.Margin, v.Alpha, true)
			if err != nil {
				continue
			}
			o.Stability = append(o.Stability, ThroughputNI{Group: g.Name, AgainstGroup: before.Name, Arm: a.Name,
				Against: a.Name, Result: r, N1: len(b), N2: len(after)})
		}
	}
}

// judgeCascades gathers each arm's abort cascades and compares wedged launches (exact
// test on launches) and recovery times with the baseline's.
func (v *Verdict) judgeCascades(phases []store.PhaseRow) {
	o := v.Outcomes
	any := false
	for _, p := range phases {
		any = any || p.Kind == "cascade"
	}
	if !any {
		return
	}
	o.Cascades = make([]CascadeArm, len(v.Arms))
	for i, a := range v.Arms {
		l := a.Launches
		o.Cascades[i] = CascadeArm{Arm: a.Name, Launches: l.Judged(), Wedged: l.Faulted(), FisherP: math.NaN()}
	}
	for _, p := range phases {
		if p.Kind != "cascade" {
			continue
		}
		c := &o.Cascades[v.index[p.ArmID]]
		c.Cascades++
		c.Aborted += p.Aborted
		if p.Recovered.Valid && p.Recovered.Bool && p.RecoveryMS.Valid {
			c.Recovered++
			c.Recoveries = append(c.Recoveries, p.RecoveryMS.Float64)
		} else if p.AbortedAt.Valid && p.EndedAt.Valid {
			if d := elapsed(p.AbortedAt.String, p.EndedAt.String); d != nil {
				c.WedgedAfter = append(c.WedgedAfter, float64(*d)/float64(time.Millisecond))
			}
		}
		if p.Note.Valid && p.Note.String != "" {
			c.Notes = append(c.Notes, fmt.Sprintf("block %d %s: %s", p.Block, p.Name, p.Note.String))
		}
	}
	base := o.Cascades[v.Baseline]
	for i := range o.Cascades {
		if i == v.Baseline {
			continue
		}
		c := &o.Cascades[i]
		if c.Launches > 0 && base.Launches > 0 {
			c.FisherP = stats.FisherExact(base.Wedged, base.Launches, c.Wedged, c.Launches).PTwoSided
		}
		if len(c.Recoveries) >= 2 && len(base.Recoveries) >= 2 {
			if r, err := stats.RankCompare(base.Recoveries, c.Recoveries, 0.95); err == nil {
				c.Recovery = &r
			}
		}
	}
}

// outcomeKind says whether the experiment's workload is judged by its outcomes beyond
// corruption (an abort cascade, a throughput measurement) rather than by corruption.
func (v *Verdict) outcomeKind() bool {
	return v.Outcomes != nil && (v.Design.Kind == arms.WorkloadAbortCascade || v.Design.Kind == arms.WorkloadThroughput)
}

// outcomeHeadline is the headline of an abort cascade or a throughput measurement: what
// wedged or crashed first, then the evidence, then the decision; "" for other workloads,
// and when corruption was found (then the corruption headline says so, and these
// outcomes stay in the body).
func (v *Verdict) outcomeHeadline(mark string) string {
	if !v.outcomeKind() || len(v.Arms) < 2 {
		return ""
	}
	for _, a := range v.Arms {
		if c := a.Compare; c != nil && !c.Inconclusive && c.Significant {
			return ""
		}
	}
	var s []string
	if v.Design.Kind == arms.WorkloadAbortCascade {
		s = v.cascadeHeadline(mark)
	} else {
		s = v.throughputHeadline(mark)
	}
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, " ")
}

// cascadeHeadline: wedges (exact test on launches), recovery and throughput, decision.
func (v *Verdict) cascadeHeadline(mark string) []string {
	o := v.Outcomes
	var wedged, live []int
	for i, c := range o.Cascades {
		if c.Wedged > 0 {
			wedged = append(wedged, i)
		} else {
			live = append(live, i)
		}
	}
	// First: which engines wedged, against which did not, with the exact p on launches.
	var first string
	if len(wedged) == 0 {
		first = "No engine wedged: after every abort cascade, in every launch, a canary request completed."
	} else {
		var parts []string
		for _, i := range wedged {
			c := o.Cascades[i]
			parts = append(parts, fmt.Sprintf("%s in %d of %d launches", bold(c.Arm, mark), c.Wedged, c.Launches))
		}
		var others []string
		for _, i := range live {
			c := o.Cascades[i]
			others = append(others, fmt.Sprintf("%s in %d of %d", bold(c.Arm, mark), c.Wedged, c.Launches))
		}
		first = "The engine wedged under the abort cascade (no canary completed after the abort): " + joinAnd(parts)
		if len(others) > 0 {
			first += ", against " + joinAnd(others)
		}
		if p, ok := v.cascadeP(); ok {
			first += fmt.Sprintf(" (randomization test on launches: p %s)", pEq(p))
		}
		first += "."
	}
	// Then: how the arms that did not wedge recovered, and what the cascades cost them.
	var second string
	for _, i := range live {
		c := o.Cascades[i]
		if c.Recovered == 0 {
			continue
		}
		second = fmt.Sprintf("%s served a canary within %s of every abort (%d cascades, median %s)",
			bold(c.Arm, mark), ms(maxOf(c.Recoveries)), c.Recovered, ms(stats.Quantile(c.Recoveries, 0.5)))
		if st := v.stabilityOf(c.Arm); len(st) > 0 {
			second += ", and " + v.stabilityClause(st)
		}
		second += "."
		break
	}
	return []string{first, second, v.cascadeDecision(mark)}
}

// cascadeP is the exact p on launches of the comparison that decides: with two arms,
// the one arm against the baseline.
func (v *Verdict) cascadeP() (float64, bool) {
	best, ok := math.NaN(), false
	for i, c := range v.Outcomes.Cascades {
		if i == v.Baseline || math.IsNaN(c.FisherP) {
			continue
		}
		if !ok || c.FisherP < best {
			best, ok = c.FisherP, true
		}
	}
	return best, ok
}

func maxOf(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

func (v *Verdict) stabilityOf(arm string) []ThroughputNI {
	var out []ThroughputNI
	for _, s := range v.Outcomes.Stability {
		if s.Arm == arm {
			out = append(out, s)
		}
	}
	return out
}

// stabilityClause says how throughput after the cascades compares with before, load by
// load, as the non-inferiority table decides each.
func (v *Verdict) stabilityClause(st []ThroughputNI) string {
	var ni, niAt, not []string
	for _, s := range st {
		load := strings.TrimSuffix(s.Group, " after")
		if s.Result.NonInferior {
			ni = append(ni, fmt.Sprintf("%s %s", load, signedPct(s.Result.Ratio-1)))
			niAt = append(niAt, fmt.Sprintf("%s (%s)", load, signedPct(s.Result.Ratio-1)))
		} else {
			not = append(not, fmt.Sprintf("%s (it may be %s)", load, lowerBy(s.Result.Bound)))
		}
	}
	margin := pctShort(v.Outcomes.Margin)
	switch {
	case len(not) == 0:
		return fmt.Sprintf("its throughput after them was non-inferior to before within the %s margin (%s)", margin, strings.Join(ni, ", "))
	case len(ni) == 0:
		return fmt.Sprintf("its throughput after them was not shown non-inferior to before within the %s margin at %s", margin, joinAnd(not))
	}
	return fmt.Sprintf("its throughput after them was non-inferior to before within the %s margin at %s, not shown so at %s", margin, joinAnd(niAt), joinAnd(not))
}

// cascadeDecision is the last sentence: the wedge decision, and throughput's.
func (v *Verdict) cascadeDecision(mark string) string {
	o := v.Outcomes
	base := o.Cascades[v.Baseline]
	var clauses []string
	for i, c := range o.Cascades {
		if i == v.Baseline || c.Launch == nil {
			continue
		}
		switch {
		case c.Launch.Claimed && c.Launch.Decision == "higher":
			clauses = append(clauses, fmt.Sprintf("%s wedges significantly more often than %s", bold(c.Arm, mark), bold(base.Arm, mark)))
		case c.Launch.Claimed:
			clauses = append(clauses, fmt.Sprintf("%s wedges significantly less often than %s", bold(c.Arm, mark), bold(base.Arm, mark)))
		case c.Wedged+base.Wedged > 0 && !c.Launch.Testable:
			clauses = append(clauses, fmt.Sprintf("with %d and %d launches, how often %s and %s wedge cannot be told apart from chance; %d launches per arm can",
				c.Launches, base.Launches, bold(c.Arm, mark), bold(base.Arm, mark), c.Launch.Needed))
		case c.Wedged+base.Wedged > 0:
			share := func(a CascadeArm) float64 { return float64(a.Wedged) / float64(max(a.Launches, 1)) }
			clauses = append(clauses, fmt.Sprintf("%s and %s do not differ significantly in how often they wedge (%d of %d against %d of %d launches; more launches, as blocks, would tell, and `%s` says how many)",
				bold(c.Arm, mark), bold(base.Arm, mark), c.Wedged, c.Launches, base.Wedged, base.Launches, v.planCommandAt(share(base), share(c))))
		}
	}
	if ni := v.niClauses(mark); ni != "" {
		clauses = append(clauses, ni)
	}
	if len(clauses) == 0 {
		return "Neither arm wedged, and no throughput margin was declared to judge the cost of either (analysis.throughput_margin)."
	}
	return "Decision: " + strings.Join(clauses, "; ") + "."
}

// niClauses says, per arm, whether its throughput is non-inferior to the baseline's in
// every group both ran.
func (v *Verdict) niClauses(mark string) string {
	o := v.Outcomes
	if o.Margin <= 0 {
		return ""
	}
	arms, byArm := groupInOrder(o.Throughput, func(t ThroughputNI) string { return t.Arm })
	var clauses []string
	undecided := false // some arm was not shown non-inferior somewhere
	for _, a := range arms {
		ts := byArm[a]
		worst := ts[0]
		all := true
		for _, t := range ts {
			all = all && t.Result.NonInferior
			if t.Result.Bound < worst.Result.Bound {
				worst = t
			}
		}
		level := "one-sided bound"
		if worst.Launch != nil {
			level = boundLabel(worst.Launch.Level)
		}
		launches := ""
		if worst.Launch != nil {
			launches = fmt.Sprintf(", over %d and %d launches", worst.Launch.LaunchesArm, worst.Launch.LaunchesBase)
		}
		switch {
		case all:
			cost := costAtMost(worst.Result.Bound, "")
			clauses = append(clauses, fmt.Sprintf("%s's throughput is non-inferior to %s's within the %s margin at %s: %s (%s%s, lowest at %s)",
				bold(a, mark), bold(worst.Against, mark), pctShort(o.Margin), groupsOf(ts), cost, level, launches, worst.Group))
		case worst.Launch != nil && !worst.Launch.Testable && worst.Launch.Needed > 0:
			clauses = append(clauses, fmt.Sprintf("with one launch per arm, %s's throughput cannot be judged against %s's within the %s margin: 2 launches per arm can",
				bold(a, mark), bold(worst.Against, mark), pctShort(o.Margin)))
		default:
			// The groups it was shown non-inferior in are said first: a loaded phase left
			// undecided must not hide the ones that were decided.
			var shown, unshown []ThroughputNI
			for _, t := range ts {
				if t.Result.NonInferior {
					shown = append(shown, t)
				} else {
					unshown = append(unshown, t)
				}
			}
			if len(shown) == 0 {
				clauses = append(clauses, fmt.Sprintf("%s's throughput is not shown to cost less than the %s margin against %s's: at %s its tok/s per request may be %s (%s%s)",
					bold(a, mark), pctShort(o.Margin), bold(worst.Against, mark), worst.Group, lowerBy(worst.Result.Bound), level, launches))
				undecided = true
				break
			}
			least := shown[0]
			for _, t := range shown {
				if t.Result.Bound < least.Result.Bound {
					least = t
				}
			}
			cost := costAtMost(least.Result.Bound, " there")
			where := fmt.Sprintf("%s, where", worst.Group)
			if len(unshown) > 1 {
				where = fmt.Sprintf("%s: at %s", groupsOf(unshown), worst.Group)
			}
			clauses = append(clauses, fmt.Sprintf("%s's throughput is non-inferior to %s's within the %s margin at %s (%s), but not shown so at %s its tok/s per request may be %s (%s%s)",
				bold(a, mark), bold(worst.Against, mark), pctShort(o.Margin), groupsOf(shown), cost, where, lowerBy(worst.Result.Bound), level, launches))
			undecided = true
		}
	}
	if undecided {
		clauses = append(clauses, fmt.Sprintf("more launches per arm (`blocks`) narrow the bound: `%s` says how many would show it", v.speedPlanCommand()))
	}
	return strings.Join(clauses, "; ")
}

// speedPlanCommand is the `arbiter plan` of this experiment's spec from the spread of its
// own launches where they showed one (two or more a side), and with the noise floor it
// was weighed against.
func (v *Verdict) speedPlanCommand() string {
	spec := v.Experiment.SpecPath
	if spec == "" {
		spec = "SPEC"
	}
	words := "plan " + shellWord(spec)
	if v.Claims != nil && slices.ContainsFunc(v.Claims.Claims, func(c *LaunchClaim) bool {
		return c.Outcome == OutcomeNonInferiority && !math.IsNaN(c.Spread)
	}) {
		words += fmt.Sprintf(" --from %d", v.Experiment.ID)
	}
	if v.Floor.Used() {
		words += fmt.Sprintf(" --noise-floor %d", v.Floor.Experiment)
	}
	return Command(words, v.DB)
}

// costAtMost says what a non-inferiority bound (a ratio to the baseline) allows: "it
// costs at most 3.3%", or "it is no slower" for a bound at or above 1; where follows.
func costAtMost(bound float64, where string) string {
	if bound >= 1 {
		return "it is no slower" + where
	}
	return fmt.Sprintf("it costs at most %s%s", pctShort(1-bound), where)
}

func groupsOf(ts []ThroughputNI) string {
	if len(ts) == 1 {
		return ts[0].Group
	}
	var gs []string
	for _, t := range ts {
		gs = append(gs, t.Group)
	}
	return joinAnd(gs)
}

// throughputHeadline: problems, the evidence at the heaviest load, the decision.
func (v *Verdict) throughputHeadline(mark string) []string {
	o := v.Outcomes
	problems := v.problemSentence(mark)
	// The heaviest load: the closed loop at the highest concurrency, else the last group.
	var heavy *OutcomeGroup
	for k := range o.Groups {
		g := &o.Groups[k]
		if heavy == nil || g.Concurrency >= heavy.Concurrency {
			heavy = g
		}
	}
	var evidence string
	// With a margin the decision answers the question asked ("does it cost more than
	// the margin?") with the bound that decides; a point estimate beside it would be a
	// figure no test stands behind.
	if heavy != nil && o.Margin <= 0 {
		for i, a := range v.Arms {
			if i == v.Baseline {
				continue
			}
			row := v.metricRow(heavy.Name, MetricThroughput, a.Name)
			if row == nil || row.Launch == nil {
				continue
			}
			lc := row.Launch
			evidence = fmt.Sprintf("At %s, %s generated %s tok/s against %s for %s; over %d and %d launches its tok/s per request differ by %s",
				heavy.Name, bold(a.Name, mark), tps(heavy.EngineTPS[i]), tps(heavy.EngineTPS[v.Baseline]), bold(v.Arms[v.Baseline].Name, mark),
				lc.LaunchesArm, lc.LaunchesBase, signedPct(lc.Estimate-1))
			if lc.Testable {
				evidence += fmt.Sprintf(" (%s)", labelled(intervalLabel(lc.Level), claimInterval(lc)))
			}
			evidence += "."
			break
		}
	}
	decision := v.niClauses(mark)
	if decision != "" {
		decision = "Decision: " + decision + "."
	} else {
		decision = v.significanceSentence(mark)
	}
	return []string{problems, evidence, decision}
}

func (v *Verdict) metricRow(group, metric, arm string) *MetricRow {
	for k := range v.Outcomes.Metrics {
		r := &v.Outcomes.Metrics[k]
		if r.Group == group && r.Metric == metric && r.Arm == arm {
			return r
		}
	}
	return nil
}

// significanceSentence is the decision without a margin: which metrics differ beyond
// analysis.min_effect on launches.
func (v *Verdict) significanceSentence(mark string) string {
	var sig, small []string
	untestable := 0
	for _, r := range v.Outcomes.Metrics {
		lc := r.Launch
		if lc == nil {
			continue
		}
		if !lc.Testable && lc.Needed > 0 {
			untestable++
		}
		switch {
		case r.Decisive():
			sig = append(sig, fmt.Sprintf("%s's %s at %s is %s (%s, %s)", bold(r.Arm, mark), r.Metric, r.Group,
				r.Decision, signedPct(lc.Estimate-1), labelled(intervalLabel(lc.Level), claimInterval(lc))))
		case r.Decision == "negligible":
			small = append(small, fmt.Sprintf("%s's %s at %s, %s", r.Arm, r.Metric, r.Group, signedPct(lc.Estimate-1)))
		}
	}
	if len(v.Outcomes.Metrics) == 0 {
		return "Too few sessions were measured on both sides to compare latency or throughput."
	}
	if len(sig) == 0 && untestable > 0 {
		return fmt.Sprintf("With fewer than 2 launches per arm no latency or throughput difference from %s can be told apart from a difference between launches: 2 launches per arm can test them.",
			bold(v.Arms[v.Baseline].Name, mark))
	}
	if len(sig) == 0 && len(small) > 0 {
		if len(small) > 3 {
			small = append(small[:3], fmt.Sprintf("%d more", len(small)-3))
		}
		return fmt.Sprintf("No latency or throughput change from %s is shown to reach %s (`analysis.min_effect`); shown smaller than that: %s.",
			bold(v.Arms[v.Baseline].Name, mark), pctShort(v.MinEffect), joinAnd(small))
	}
	if len(sig) == 0 {
		return fmt.Sprintf("No latency or throughput change from %s is shown beyond %s (`analysis.min_effect`) on launches, nor shown to be smaller.",
			bold(v.Arms[v.Baseline].Name, mark), pctShort(v.MinEffect))
	}
	if len(sig) > 3 {
		sig = append(sig[:3], fmt.Sprintf("%d more", len(sig)-3))
	}
	return "Decision: " + joinAnd(sig) + "."
}

// outcomeCaveats are the outcomes' own caveats, ranked with the others.
func (v *Verdict) outcomeCaveats(add func(CaveatKind, string, ...any)) {
	o := v.Outcomes
	if o == nil {
		return
	}
	// With several launches: does the tok/s difference keep its direction in every block?
	for _, g := range o.Groups {
		for i, a := range v.Arms {
			if i == v.Baseline {
				continue
			}
			blocks, ratios := g.blockRatios(v.Baseline, i)
			if len(blocks) < 2 {
				continue
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			var parts []string
			for k, r := range ratios {
				lo, hi = math.Min(lo, r), math.Max(hi, r)
				parts = append(parts, fmt.Sprintf("block %d %s", blocks[k], signedPct(r-1)))
			}
			if lo < 0.99 && hi > 1.01 {
				add(CaveatDesign, "At %s, %s's median tok/s per request against %s's changes direction from block to block (%s): the difference follows the launches more than the arms.",
					g.Name, a.Name, v.Arms[v.Baseline].Name, strings.Join(parts, ", "))
			}
		}
	}
	for _, c := range o.Cascades {
		for _, n := range c.Notes {
			add(CaveatStatus, "Abort cascade of %s, %s.", c.Arm, strings.TrimSuffix(n, "."))
		}
	}
}

// outcomeGate applies the gates on outcomes beyond corruption; ok is false for the
// others. With a margin, the throughput gate fails where the launches show an arm's tok/s
// per request below it (the one-sided upper bound under 1 − margin) and cannot decide
// where they show it neither non-inferior nor inferior: identical arms whose launches are
// too few are undecided (exit 6), not failed (exit 3).
func (v *Verdict) outcomeGate(name string) (g GateResult, why string, ok bool) {
	switch name {
	case "wedge":
		for _, r := range v.Runs {
			if !r.Superseded && (r.Status == store.RunWedged || r.Status == store.RunCrashed) {
				return GateFail, fmt.Sprintf("run %s %s: %s", store.LaunchName(r.Arm, r.Block), r.Status, r.Error), true
			}
		}
		return GatePass, "", true
	case "throughput":
		o := v.Outcomes
		if o == nil {
			return GatePass, "", true
		}
		if o.Margin > 0 {
			g, why := GatePass, ""
			for k, set := range [][]ThroughputNI{o.Throughput, o.Stability} {
				for _, t := range set {
					if t.Result.NonInferior {
						continue
					}
					if lc := t.Launch; lc != nil && lc.Testable && lc.CI.Hi < 1-o.Margin {
						return GateFail, fmt.Sprintf("%s's tok/s per request at %s is shown lower than %s's by more than the %s margin: %s, one-sided upper bound %s (launch p %s)",
							t.Arm, t.Group, t.Against, pctShort(o.Margin), signedPct(lc.Estimate-1), signedPct(lc.CI.Hi-1), pEq(1-lc.P)), true
					}
					if g == GateUndecided {
						continue
					}
					g = GateUndecided
					why = fmt.Sprintf("%s's tok/s per request at %s is neither shown non-inferior to %s's within the %s margin nor shown below it: %s, one-sided lower bound %s",
						t.Arm, t.Group, t.Against, pctShort(o.Margin), signedPct(t.Result.Ratio-1), signedPct(t.Result.Bound-1))
					// An estimate inside the margin with a bound beyond it is a question of
					// launches, which the plan answers.
					if k == 0 && t.Result.Ratio > 1-o.Margin {
						why += fmt.Sprintf("; more launches per arm narrow the bound: `%s` says how many would show it", v.speedPlanCommand())
					}
				}
			}
			return g, why, true
		}
		for _, r := range o.Metrics {
			if r.Metric == MetricThroughput && r.Decision == "worse" && r.Launch != nil {
				return GateFail, claimEvidence(r.Launch), true
			}
		}
		return GatePass, "", true
	}
	return GatePass, "", false
}
