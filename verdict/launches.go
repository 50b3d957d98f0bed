package verdict

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// The launch is the experimental unit. Two launches of one configuration are not
// replicas (clocks, memory layout, warm-up, the host's other load), so a difference
// between two arms' sessions may be a difference between their launches. Every claim a
// verdict makes (an arm corrupts more, wedges more, is faster or slower, is
// non-inferior) is therefore tested on launches: one number per launch, compared between
// the arms' launches. The session-level tests stay in the verdict as what they are, a
// description of these launches.
//
// The claims of one verdict form one family, so that a verdict claims anything falsely
// at most alpha of the time whatever it looks at: each claim is tested at its share of
// alpha (weighted Bonferroni). The workload's primary outcome (corruption for agents and
// traces, wedges for abort cascades, tok/s for throughput runs) shares primaryShare of
// alpha among its claims (stats.PrimaryShare); every other claim shares the rest. A claim whose launches
// cannot reach its share at all (too few launches) is not tested: the verdict reports
// what it saw and how many launches per arm would let it attribute that to the arms.

// The outcomes a launch claim can be about, beside the latency and tok/s metrics.
const (
	OutcomeCorruption     = "corruption"
	OutcomeCorruptionNI   = "corruption non-inferiority"
	OutcomeWedge          = "wedged launches"
	OutcomeNonInferiority = "tok/s non-inferiority"
	OutcomeStability      = "tok/s after cascades"
)

// Launch-level tests, in the words the verdict uses.
const (
	testRandomization = "randomization test on launches"
	testLaunchT       = "t test on launches"
)

// LaunchClaim is one claim of the verdict, tested on launches.
type LaunchClaim struct {
	// Outcome is what the claim is about: OutcomeCorruption, OutcomeWedge, a metric
	// (MetricThroughput, MetricTTFT, ...), OutcomeNonInferiority or OutcomeStability.
	Outcome string
	// Arm is compared with Against (the baseline, or the arm itself before its cascades)
	// in Group (a phase, or "" for corruption and wedges).
	Arm, Against, Group string
	// Primary is true for the workload's primary outcome.
	Primary bool
	// Level is the share of alpha the claim is tested at; for an arm judged by sequential
	// looks, further divided by the looks.
	Level float64
	// LaunchesArm and LaunchesBase are the launches compared.
	LaunchesArm, LaunchesBase int
	Test                      string
	// Estimate is the difference of the launches' mean rates (corruption, wedges) or
	// the ratio of their geometric means (speed: 1.05 is 5% more). CI is its interval at
	// 1 − Level (non-inferiority: the one-sided 1 − Level bound is CI.Lo).
	Estimate float64
	CI       stats.Interval
	P        float64 // NaN when not tested
	// Testable is false when the launches cannot reach Level at all (one launch per
	// arm, or a randomization test whose smallest p exceeds Level); Needed is then the
	// launches per arm that could.
	Testable bool
	Needed   int
	// Spread is the launch-to-launch variation seen within the arms: the pooled
	// intra-launch correlation for corruption, the pooled coefficient of variation for
	// speed (NaN with fewer than two launches in every arm).
	Spread float64
	// Claimed is true when the test supports the claim; Decision says which:
	// "higher"/"lower" (rates), "better"/"worse"/"negligible" (speed), "non-inferior".
	Claimed  bool
	Decision string
}

// LaunchFamily is every claim of a verdict and how alpha was shared between them.
type LaunchFamily struct {
	Alpha   float64
	Primary string // the primary outcome
	Claims  []*LaunchClaim
}

// claim finds the claim about outcome for arm in group; nil if there is none.
func (f *LaunchFamily) claim(outcome, arm, group string) *LaunchClaim {
	if f == nil {
		return nil
	}
	for _, c := range f.Claims {
		if c.Outcome == outcome && c.Arm == arm && c.Group == group {
			return c
		}
	}
	return nil
}

// Differences reports the claims that say two arms differ: an arm corrupts or wedges
// more or less, or is better or worse. Non-inferiority and "negligible" are not.
func (f *LaunchFamily) Differences() []*LaunchClaim {
	var out []*LaunchClaim
	if f == nil {
		return out
	}
	for _, c := range f.Claims {
		switch c.Decision {
		case "higher", "lower", "better", "worse":
			out = append(out, c)
		}
	}
	return out
}

// launchSample is what the launch-level tests see of one arm: per launch, its analysed
// and corrupted sessions, whether it faulted, and per group and metric the median of its
// sessions' summaries; and per group pair (before, after) its tok/s ratio.
type launchSample struct {
	block             int
	sessions, corrupt int
	judged, faulted   bool
	metrics           map[string]map[string]float64 // group → metric → median
}

// familyInput is a verdict reduced to what its launch claims are decided from, so that
// the simulation of many verdicts (TestLaunchFamilyCalibration, cmd/arbiter calibrate)
// runs the very same decisions.
type familyInput struct {
	Alpha, MinEffect, Margin float64
	// CorruptionMargin is analysis.margin: non-inferiority of corruption rates (0: none).
	CorruptionMargin float64
	Arms             []string
	Baseline         int
	// Primary is the primary outcome: OutcomeCorruption, OutcomeWedge, or
	// MetricThroughput (throughput runs; with a margin their claims are
	// OutcomeNonInferiority).
	Primary string
	// Wedges is true when wedged launches are claimed on (abort cascades).
	Wedges bool
	// Groups name the speed comparisons' groups; Stability pairs "after" groups with
	// their "before" ones.
	Groups    []string
	Stability [][2]string
	// Looks divides a sequential arm's level (1 otherwise), by arm.
	Looks   []int
	Samples [][]launchSample
	// NoIntervals leaves out the inverted intervals of the rate claims, which no
	// decision but non-inferiority reads: a simulation of many verdicts saves their cost.
	NoIntervals bool
}

// decideFamily builds and decides every launch claim of a verdict.
func decideFamily(in familyInput) *LaunchFamily {
	f := &LaunchFamily{Alpha: in.Alpha, Primary: in.Primary}
	add := func(c *LaunchClaim) { f.Claims = append(f.Claims, c) }
	base := in.Arms[in.Baseline]
	for i, arm := range in.Arms {
		if i == in.Baseline {
			continue
		}
		add(&LaunchClaim{Outcome: OutcomeCorruption, Arm: arm, Against: base})
		if in.CorruptionMargin > 0 {
			add(&LaunchClaim{Outcome: OutcomeCorruptionNI, Arm: arm, Against: base})
		}
		if in.Wedges {
			add(&LaunchClaim{Outcome: OutcomeWedge, Arm: arm, Against: base})
		}
		for _, g := range in.Groups {
			for _, m := range metricOrder {
				add(&LaunchClaim{Outcome: m, Arm: arm, Against: base, Group: g})
			}
			if in.Margin > 0 {
				add(&LaunchClaim{Outcome: OutcomeNonInferiority, Arm: arm, Against: base, Group: g})
			}
		}
	}
	if in.Margin > 0 {
		for _, arm := range in.Arms {
			for _, s := range in.Stability {
				add(&LaunchClaim{Outcome: OutcomeStability, Arm: arm, Against: arm, Group: s[1]})
			}
		}
	}
	primary := func(c *LaunchClaim) bool {
		switch in.Primary {
		case MetricThroughput:
			if in.Margin > 0 {
				return c.Outcome == OutcomeNonInferiority
			}
			return c.Outcome == MetricThroughput
		}
		if in.Primary == OutcomeCorruption {
			return c.Outcome == OutcomeCorruption || c.Outcome == OutcomeCorruptionNI
		}
		return c.Outcome == in.Primary
	}
	nPrimary := 0
	for _, c := range f.Claims {
		c.Primary = primary(c)
		if c.Primary {
			nPrimary++
		}
	}
	share := map[bool]float64{true: stats.PrimaryShare, false: 1 - stats.PrimaryShare}
	switch {
	case nPrimary == 0:
		share[false] = 1
	case nPrimary == len(f.Claims):
		share[true] = 1
	}
	for _, c := range f.Claims {
		n := nPrimary
		if !c.Primary {
			n = len(f.Claims) - nPrimary
		}
		c.Level = in.Alpha * share[c.Primary] / float64(n)
		if k := armIndexOf(in.Arms, c.Arm); k >= 0 && k < len(in.Looks) && in.Looks[k] > 1 {
			c.Level /= float64(in.Looks[k])
		}
		decideClaim(c, in)
	}
	return f
}

func armIndexOf(arms []string, name string) int {
	for i, a := range arms {
		if a == name {
			return i
		}
	}
	return -1
}

// decideClaim tests one claim at its level.
func decideClaim(c *LaunchClaim, in familyInput) {
	c.P, c.Estimate, c.Spread = math.NaN(), math.NaN(), math.NaN()
	c.CI = stats.Interval{Lo: math.NaN(), Hi: math.NaN()}
	ai, bi := armIndexOf(in.Arms, c.Arm), armIndexOf(in.Arms, c.Against)
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
		var a, b []float64
		for _, s := range in.Samples[bi] {
			if x, ok := rateOf(c.Outcome, s); ok {
				a = append(a, x)
			}
		}
		for _, s := range in.Samples[ai] {
			if x, ok := rateOf(c.Outcome, s); ok {
				b = append(b, x)
			}
		}
		c.Test = testRandomization
		c.LaunchesBase, c.LaunchesArm = len(a), len(b)
		if c.Outcome != OutcomeWedge {
			c.Spread = pooledICC(in.Samples[bi], in.Samples[ai])
		}
		// Non-inferiority is one-sided at the claim's level: the upper bound of the
		// two-sided interval at 1 − 2·level.
		level := c.Level
		if c.Outcome == OutcomeCorruptionNI {
			level = 2 * c.Level
		}
		if len(a) == 0 || len(b) == 0 {
			c.Needed = stats.LaunchesNeeded(level)
			return
		}
		conf := 1 - level
		if in.NoIntervals && c.Outcome != OutcomeCorruptionNI {
			conf = 0
		}
		r, err := stats.LaunchPermutation(a, b, conf)
		if err != nil {
			return
		}
		c.Estimate = r.Difference
		c.Testable = stats.Reject(r.MinP, level)
		if !c.Testable {
			c.Needed = stats.LaunchesNeeded(level)
			return
		}
		c.P, c.CI = r.P, r.CI
		if c.Outcome == OutcomeCorruptionNI {
			if c.CI.Hi < in.CorruptionMargin {
				c.Claimed, c.Decision = true, "non-inferior"
			}
			return
		}
		if stats.Reject(r.P, c.Level) {
			c.Claimed = true
			c.Decision = direction(r.Difference)
		}
	case OutcomeStability:
		before := ""
		for _, s := range in.Stability {
			if s[1] == c.Group {
				before = s[0]
			}
		}
		var x []float64
		for _, s := range in.Samples[ai] {
			b, a := s.metrics[before][MetricThroughput], s.metrics[c.Group][MetricThroughput]
			if b > 0 && a > 0 {
				x = append(x, math.Log(a/b))
			}
		}
		c.Test, c.LaunchesArm, c.LaunchesBase = testLaunchT, len(x), len(x)
		r, err := stats.LaunchMean(x, 1-2*c.Level)
		if err != nil {
			return
		}
		c.Estimate = math.Exp(r.Difference)
		if !r.Possible {
			c.Needed = needed(len(x), 2)
			return
		}
		c.Testable, c.P = true, r.PAbove(math.Log(1-in.Margin))
		c.CI = stats.Interval{Lo: math.Exp(r.CI.Lo), Hi: math.Exp(r.CI.Hi)}
		if c.CI.Lo > 1-in.Margin {
			c.Claimed, c.Decision = true, "non-inferior"
		}
	default:
		metric := c.Outcome
		if metric == OutcomeNonInferiority {
			metric = MetricThroughput
		}
		a, b := logMedians(in.Samples[bi], c.Group, metric), logMedians(in.Samples[ai], c.Group, metric)
		c.Test, c.LaunchesBase, c.LaunchesArm = testLaunchT, len(a), len(b)
		c.Spread = pooledCV(a, b)
		conf := 1 - c.Level
		if c.Outcome == OutcomeNonInferiority {
			conf = 1 - 2*c.Level
		}
		r, err := stats.LaunchMeans(a, b, conf)
		if err != nil {
			return
		}
		c.Estimate = math.Exp(r.Difference)
		if !r.Possible {
			c.Needed = needed(len(a), len(b))
			return
		}
		c.Testable, c.P = true, r.P
		c.CI = stats.Interval{Lo: math.Exp(r.CI.Lo), Hi: math.Exp(r.CI.Hi)}
		if c.Outcome == OutcomeNonInferiority {
			c.P = r.PAbove(math.Log(1 - in.Margin))
			if c.CI.Lo > 1-in.Margin {
				c.Claimed, c.Decision = true, "non-inferior"
			}
			return
		}
		c.Decision = speedDecision(metric, c.CI, in.MinEffect)
		c.Claimed = c.Decision != ""
	}
}

// needed is the launches per arm a t test on launches needs: 2, or 0 when both arms had
// them and the launches agreed exactly (a spread of zero is no evidence, and more
// launches of the same would not change that).
func needed(a, b int) int {
	if a >= 2 && b >= 2 {
		return 0
	}
	return 2
}

// speedDecision applies the interval rule: a change is called better or worse only when
// its whole interval lies beyond the negligible zone (within minEffect of no change), and
// negligible only when its whole interval lies inside it; otherwise nothing is called.
func speedDecision(metric string, ci stats.Interval, minEffect float64) string {
	var up bool
	switch {
	case ci.Lo > 1+minEffect:
		up = true
	case ci.Hi < 1-minEffect:
		up = false
	case minEffect > 0 && ci.Lo >= 1-minEffect && ci.Hi <= 1+minEffect:
		return "negligible"
	default:
		return ""
	}
	if up == higherBetter[metric] {
		return "better"
	}
	return "worse"
}

// rateOf is one launch's value for a rate outcome: its corrupted share of analysed
// sessions, or 1 when it faulted; ok is false for a launch that does not count.
func rateOf(outcome string, s launchSample) (float64, bool) {
	if outcome == OutcomeWedge {
		if !s.judged {
			return 0, false
		}
		if s.faulted {
			return 1, true
		}
		return 0, true
	}
	if s.sessions == 0 {
		return 0, false
	}
	return float64(s.corrupt) / float64(s.sessions), true
}

// logMedians are the logs of the launches' medians of one metric in one group.
func logMedians(samples []launchSample, group, metric string) []float64 {
	var out []float64
	for _, s := range samples {
		if x := s.metrics[group][metric]; x > 0 && !math.IsInf(x, 0) {
			out = append(out, math.Log(x))
		}
	}
	return out
}

// pooledICC is the intra-launch correlation of corruption within the two arms, the
// mean of each arm's estimate that is defined.
func pooledICC(arms ...[]launchSample) float64 {
	var xs []float64
	for _, samples := range arms {
		var cs []stats.ClusterCounts
		for _, s := range samples {
			if s.sessions > 0 {
				cs = append(cs, stats.ClusterCounts{Events: s.corrupt, Responses: s.sessions})
			}
		}
		if icc := stats.LaunchICC(cs); !math.IsNaN(icc) {
			xs = append(xs, icc)
		}
	}
	return meanOrNaN(xs)
}

// pooledCV is the launch-to-launch coefficient of variation within the arms, from the
// pooled standard deviation of the launches' logs.
func pooledCV(arms ...[]float64) float64 {
	ss, df := 0.0, 0
	for _, xs := range arms {
		if len(xs) < 2 {
			continue
		}
		m := meanOrNaN(xs)
		for _, x := range xs {
			ss += (x - m) * (x - m)
		}
		df += len(xs) - 1
	}
	if df == 0 {
		return math.NaN()
	}
	return math.Sqrt(ss / float64(df))
}

// judgeLaunches decides every claim of the verdict on launches and makes the tables,
// the headline, show, --json and --fail-on say the same thing.
func (v *Verdict) judgeLaunches() {
	in := familyInput{Alpha: v.Alpha, MinEffect: v.MinEffect, Arms: make([]string, len(v.Arms)), Baseline: v.Baseline,
		Primary: OutcomeCorruption, Looks: make([]int, len(v.Arms)), Samples: v.launchSamples()}
	for i, a := range v.Arms {
		in.Arms[i] = a.Name
		if c := a.Compare; c != nil && c.Sequential {
			in.Looks[i] = max(1, v.Design.Looks)
		}
	}
	in.CorruptionMargin = v.Design.Margin
	switch v.Design.Kind {
	case arms.WorkloadAbortCascade:
		in.Primary, in.Wedges = OutcomeWedge, true
	case arms.WorkloadThroughput:
		in.Primary = MetricThroughput
	}
	if o := v.Outcomes; o != nil {
		in.Margin = o.Margin
		for _, g := range o.Groups {
			in.Groups = append(in.Groups, g.Name)
			if stem, ok := strings.CutSuffix(g.Name, " after"); ok {
				for _, h := range o.Groups {
					if h.Name == stem+" before" {
						in.Stability = append(in.Stability, [2]string{h.Name, g.Name})
					}
				}
			}
		}
	}
	f := decideFamily(in)
	v.Claims = f
	v.applyLaunchFamily(f)
}

// launchSamples reduces the verdict's sessions, runs and session summaries to one
// launchSample per launch, per arm, in block order.
func (v *Verdict) launchSamples() [][]launchSample {
	byRun := map[int64]*launchSample{}
	armOf := map[int64]int{}
	var runs []int64
	get := func(run int64, arm, block int) *launchSample {
		s, ok := byRun[run]
		if !ok {
			s = &launchSample{block: block, metrics: map[string]map[string]float64{}}
			byRun[run] = s
			armOf[run] = arm
			runs = append(runs, run)
		}
		return s
	}
	for _, r := range v.Runs {
		if r.Superseded {
			continue
		}
		s := get(r.ID, v.armIndex(r.Arm), r.Block)
		s.judged = r.Status.EngineAnswers()
		s.faulted = r.Status.EngineFault()
	}
	for _, ss := range v.sessions {
		if !analysed(ss) {
			continue
		}
		s := get(ss.RunID, v.index[ss.ArmID], ss.Block)
		s.sessions++
		if ss.Corrupted {
			s.corrupt++
		}
	}
	if o := v.Outcomes; o != nil {
		for _, g := range o.Groups {
			for arm, sums := range g.summaries {
				perRun := map[int64]map[string][]float64{}
				blockOf := map[int64]int{}
				for _, sum := range sums {
					run := int64(sum[runKey])
					if perRun[run] == nil {
						perRun[run] = map[string][]float64{}
						blockOf[run] = int(sum[blockKey])
					}
					for _, m := range metricOrder {
						if x := sum[m]; !math.IsNaN(x) {
							perRun[run][m] = append(perRun[run][m], x)
						}
					}
				}
				for run, ms := range perRun {
					s := get(run, arm, blockOf[run])
					s.metrics[g.Name] = map[string]float64{}
					for m, xs := range ms {
						s.metrics[g.Name][m] = medianOrNaN(xs)
					}
				}
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool {
		if byRun[runs[i]].block != byRun[runs[j]].block {
			return byRun[runs[i]].block < byRun[runs[j]].block
		}
		return runs[i] < runs[j]
	})
	out := make([][]launchSample, len(v.Arms))
	for _, r := range runs {
		if a := armOf[r]; a >= 0 && a < len(out) {
			out[a] = append(out[a], *byRun[r])
		}
	}
	return out
}

// applyLaunchFamily puts the family's decisions where every reader of the verdict looks:
// the corruption comparisons, the latency rows, the non-inferiority rows and the
// cascades.
func (v *Verdict) applyLaunchFamily(f *LaunchFamily) {
	for i := range v.Arms {
		c := v.Arms[i].Compare
		if c == nil {
			continue
		}
		lc := f.claim(OutcomeCorruption, v.Arms[i].Name, "")
		c.Launch = lc
		c.Significant, c.Direction = false, ""
		if lc != nil && lc.Claimed {
			c.Significant, c.Direction = true, lc.Decision
		}
		c.AdjustedP = math.NaN()
		if lc != nil {
			c.AdjustedP = lc.P
		}
	}
	for k := range v.NonInferiority {
		ni := &v.NonInferiority[k]
		lc := f.claim(OutcomeCorruptionNI, ni.Arm, "")
		ni.Launch = lc
		ni.Result.NonInferior = lc != nil && lc.Claimed
		if lc != nil && lc.Testable {
			ni.Result.Upper = lc.CI.Hi
		}
	}
	o := v.Outcomes
	if o == nil {
		return
	}
	for k := range o.Metrics {
		r := &o.Metrics[k]
		lc := f.claim(r.Metric, r.Arm, r.Group)
		r.Launch = lc
		r.Decision, r.AdjustedP = "", math.NaN()
		if lc != nil {
			r.Decision, r.AdjustedP = lc.Decision, lc.P
		}
	}
	for _, set := range [][]ThroughputNI{o.Throughput, o.Stability} {
		for k := range set {
			t := &set[k]
			outcome := OutcomeNonInferiority
			if t.AgainstGroup != t.Group {
				outcome = OutcomeStability
			}
			lc := f.claim(outcome, t.Arm, t.Group)
			t.Launch = lc
			t.Result.NonInferior = lc != nil && lc.Claimed
			if lc != nil {
				t.Result.Ratio, t.Result.Bound = lc.Estimate, lc.CI.Lo
			}
		}
	}
	for k := range o.Cascades {
		c := &o.Cascades[k]
		lc := f.claim(OutcomeWedge, c.Arm, "")
		c.Launch = lc
		if lc != nil {
			c.FisherP = lc.P
		}
	}
}

// attributionSentence says, for a difference the launches cannot attribute to the arms,
// what was seen and how many launches per arm would let arbiter test it.
func attributionSentence(c *LaunchClaim) string {
	if c == nil || c.Testable {
		return ""
	}
	n := min(c.LaunchesArm, c.LaunchesBase)
	return fmt.Sprintf("With %d launch%s per arm this cannot be told apart from a difference between launches of one configuration: %d launches per arm (`launches: %d`) can test it.",
		n, pluralEs(n), c.Needed, c.Needed)
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// levelText is a claim's level, short: "0.03".
func levelText(x float64) string { return fmt.Sprintf("%.3g", x) }

// launchCaveat says, once, what the launches could not attribute, and how much launches
// of one arm differed where that could be seen.
func (v *Verdict) launchCaveat(add func(CaveatKind, string, ...any)) {
	f := v.Claims
	if f == nil {
		return
	}
	var untestable, flat []string
	most := 0
	for _, c := range f.Claims {
		switch {
		case c.Testable:
		case c.Needed == 0:
			flat = append(flat, c.Outcome)
		default:
			untestable = append(untestable, c.Outcome)
			most = max(most, c.Needed)
		}
	}
	if len(untestable) > 0 {
		add(CaveatDesign, "Not attributable to the arms with these launches: %s. A difference seen there may be a difference between launches of one configuration; %d launches per arm can test every claim of this verdict.",
			joinAnd(dedupe(untestable)), most)
	}
	if len(flat) > 0 {
		add(CaveatDesign, "Not tested: %s, whose launches agreed exactly within each arm; a spread of zero between launches is no evidence either way.", joinAnd(dedupe(flat)))
	}
	if m := len(f.Claims); m > 1 {
		add(CaveatMultiplicity, "This verdict tests %d claims on launches, sharing alpha %g between them (the Claims section): each is tested at its share, so that the verdict claims anything falsely at most %g of the time.", m, v.Alpha, v.Alpha)
	}
}

// dedupe keeps the first of equal strings, in order.
func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// NoiseFloor is how much launches of one configuration differed in an experiment: the
// intra-launch correlation of corruption and the coefficient of variation of tok/s, each
// the largest seen among the arms' comparisons (NaN where no arm had two launches, or
// no corrupted session to correlate). An A/A experiment measures it for an engine,
// workload and hardware; `arbiter plan --noise-floor EXP` plans with it.
type NoiseFloor struct {
	Experiment int64
	AA         bool
	ICC, CV    float64
	Launches   int // the fewest launches of an arm
}

// NoiseFloor reads the experiment's launch spread from its claims.
func (v *Verdict) NoiseFloor() NoiseFloor {
	n := NoiseFloor{Experiment: v.Experiment.ID, AA: v.Design.AA, ICC: math.NaN(), CV: math.NaN(), Launches: math.MaxInt}
	if v.Claims == nil {
		n.Launches = 0
		return n
	}
	for _, c := range v.Claims.Claims {
		switch c.Outcome {
		case OutcomeCorruption:
			n.Launches = min(n.Launches, c.LaunchesArm, c.LaunchesBase)
			if !math.IsNaN(c.Spread) && (math.IsNaN(n.ICC) || c.Spread > n.ICC) {
				n.ICC = c.Spread
			}
		case MetricThroughput:
			if !math.IsNaN(c.Spread) && (math.IsNaN(n.CV) || c.Spread > n.CV) {
				n.CV = c.Spread
			}
		}
	}
	if n.Launches == math.MaxInt {
		n.Launches = 0
	}
	return n
}
