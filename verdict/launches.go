package verdict

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
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
	testWelch         = "Welch's t test on launch rates"
)

// rateTestName is the name of a rate claim's test in the claims table.
func rateTestName(kind stats.LaunchTestKind, floor *familyFloor) string {
	switch kind {
	case stats.TestWelch:
		return testWelch
	case stats.TestFloor:
		return fmt.Sprintf("contrast against noise floor #%d", floor.Experiment)
	}
	return testRandomization
}

// rateNeeded is how many launches per arm would let a rate claim be tested: with a floor,
// one; two for Welch's test (not for wedges or sequential looks); else as many as the
// randomization test needs to reach the claim's share (or its share of a family in which
// every claim could be tested: alpha's weighted Bonferroni split), which needs no spread
// between launches. 0 when the launches agreed exactly within each arm and either showed
// no difference or already are as many as that.
func rateNeeded(c *LaunchClaim, in familyInput, kind stats.LaunchTestKind, r stats.LaunchRateTest) int {
	if kind == stats.TestWelch && r.LaunchesA >= 2 && r.LaunchesB >= 2 {
		// Launches that agreed exactly within each arm give Welch's test no spread; the
		// randomization test needs none, from the launches its level takes.
		share := c.Share
		if !(share > 0) {
			share = c.nominal
		}
		// Launches alike across the arms too show no difference to test.
		if n := stats.LaunchesNeeded(share); n > min(r.LaunchesA, r.LaunchesB) && r.Difference != 0 {
			return n
		}
		return 0
	}
	if kind == stats.TestFloor {
		return 1
	}
	if c.Outcome != OutcomeWedge && armLooks(in, c.Arm) <= 1 && min(r.LaunchesA, r.LaunchesB) < 2 {
		return 2
	}
	if looks := armLooks(in, c.Arm); looks > 1 && c.Share > 0 {
		// A sequential arm's share is spread over its looks: the launches needed are
		// those of the first later look charged a level its test can reach, not the
		// fixed design's count, which the looks before may already have had.
		have := min(r.LaunchesA, r.LaunchesB)
		levels, _ := stats.LookLevels(c.Share, claimReach(c, in, looks))
		for k := have + 1; k <= len(levels); k++ {
			if levels[k-1] > 0 {
				return k
			}
		}
		return max(have+1, stats.LaunchesNeeded(c.Share/float64(looks)))
	}
	share := c.Share
	if !(share > 0) {
		share = c.nominal
	}
	return stats.LaunchesNeeded(share)
}

// familyFloor is what a noise floor lends the family's tests: the upper bound of the
// intra-launch correlation of corruption (negative: not measured) and, by group and
// metric, the upper bound of the launch-to-launch standard deviation of its log.
type familyFloor struct {
	Experiment int64
	ICC        float64
	SD         map[string]map[string]float64
}

// LaunchClaim is one claim of the verdict, tested on launches.
type LaunchClaim struct {
	// Outcome is what the claim is about: OutcomeCorruption, OutcomeWedge, a metric
	// (MetricThroughput, MetricTTFT, ...), OutcomeNonInferiority or OutcomeStability.
	Outcome string
	// Arm is compared with Against (the baseline, or the arm itself before its cascades)
	// in Group (a phase, or "" for corruption and wedges). AgainstGroup is Against's
	// phase where it is not Group: the "before" of an arm's tok/s after its cascades.
	Arm, Against, Group string
	AgainstGroup        string
	// Primary is true for the workload's primary outcome.
	Primary bool
	// Share is the claim's share of alpha (stats.AllotAlpha), 0 when its test could not
	// reach any share it could be given; Level is the level it is tested at: Share, or
	// for an arm judged by sequential looks the level of the look it was judged at.
	Share, Level float64
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
	// Faulted names the side whose every launch crashed or wedged, so that it leaves
	// nothing fair to compare: for corruption the baseline (the sessions that survived a
	// fault are not a fair sample), for speed either side that no launch reached the
	// group of. Such a
	// claim is not tested, and needs no launch count: more launches of a configuration
	// that faults every time would not supply it.
	Faulted string
	// FloorWouldTest is true when a noise floor would let one launch per arm test the
	// claim (rates but wedges, and speed, on a fixed design judged without a floor).
	FloorWouldTest bool
	// nominal is the share the claim would have if every claim of the family could be
	// tested: what more launches would have to reach.
	nominal float64
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
	// Unmeasured names the speed comparisons left out because a side's launches ran
	// and never measured the metric while other arms' did ("inter-token latency of q4_0
	// at all sessions").
	Unmeasured []string
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
	// Floor is the noise floor the claims are weighed against; nil when none is used.
	Floor *familyFloor
	// NoIntervals leaves out the inverted intervals of the rate claims, which no
	// decision but non-inferiority reads: a simulation of many verdicts saves their cost.
	NoIntervals bool
}

// decideFamily builds and decides every launch claim of a verdict.
func decideFamily(in familyInput) *LaunchFamily {
	f := &LaunchFamily{Alpha: in.Alpha, Primary: in.Primary, Claims: familyClaims(in)}
	nPrimary := 0
	for _, c := range f.Claims {
		if c.Primary {
			nPrimary++
		}
	}
	allotFamily(f, in, nPrimary)
	return f
}

// familyClaims are the claims a verdict makes, undecided, the primary ones marked: for
// every arm against the baseline its rates (corruption, and its non-inferiority or wedges
// where the design has them) and each speed metric of each group (and its
// non-inferiority under a throughput margin); under a throughput margin, each arm's
// stability from before to after.
// measured says whether a speed claim of arm against the baseline has something to
// test: a metric that a side's launches ran and did not measure (inter-token latency
// where every reply came in one event) is no claim, since more launches would not measure
// it either. A side whose judged launches all faulted keeps the claim, which it leaves
// uncompared (faultedSide). A plan, which has no launches yet, counts every metric.
func measured(in familyInput, arm int, group, metric string) bool {
	if in.Samples == nil {
		return true
	}
	for _, side := range []int{arm, in.Baseline} {
		if len(logMedians(in.Samples[side], group, metric)) > 0 {
			continue
		}
		if !everyJudgedFaulted(in.Samples[side]) {
			return false
		}
	}
	return true
}

// unmeasured lists the speed comparisons measured leaves out where some arm did measure
// the metric, each as "METRIC of ARM at GROUP" (the side that measured nothing).
func unmeasured(in familyInput) []string {
	var out []string
	for _, g := range in.Groups {
		for _, m := range metricOrder {
			some := false
			for _, samples := range in.Samples {
				some = some || len(logMedians(samples, g, m)) > 0
			}
			if !some {
				continue
			}
			seen := map[int]bool{}
			for i := range in.Arms {
				if i == in.Baseline || measured(in, i, g, m) {
					continue
				}
				for _, side := range []int{in.Baseline, i} {
					if len(logMedians(in.Samples[side], g, m)) == 0 && !seen[side] {
						seen[side] = true
						out = append(out, fmt.Sprintf("%s of %s at %s", m, in.Arms[side], g))
					}
				}
			}
		}
	}
	return out
}

func familyClaims(in familyInput) []*LaunchClaim {
	var claims []*LaunchClaim
	add := func(c *LaunchClaim) { claims = append(claims, c) }
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
				if measured(in, i, g, m) {
					add(&LaunchClaim{Outcome: m, Arm: arm, Against: base, Group: g})
				}
			}
			if in.Margin > 0 {
				add(&LaunchClaim{Outcome: OutcomeNonInferiority, Arm: arm, Against: base, Group: g})
			}
		}
	}
	if in.Margin > 0 {
		for _, arm := range in.Arms {
			for _, s := range in.Stability {
				add(&LaunchClaim{Outcome: OutcomeStability, Arm: arm, Against: arm, Group: s[1], AgainstGroup: s[0]})
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
	for _, c := range claims {
		c.Primary = primary(c)
	}
	return claims
}

// allotFamily gives every claim its level (stats.AllotAlpha: a claim whose test cannot
// reach its share passes it on) and decides it. An arm judged by sequential looks keeps
// the fixed primary share the orchestrator stopped on (stats.SequentialLevels), so that
// the verdict tests at the look it stopped at exactly the level the stop was decided
// at; the other claims share the rest.
func allotFamily(f *LaunchFamily, in familyInput, nPrimary int) {
	sequential := false
	for _, l := range in.Looks {
		sequential = sequential || l > 1
	}
	var rest []*LaunchClaim
	var reach []stats.Reach
	for _, c := range f.Claims {
		if looks := armLooks(in, c.Arm); sequential && c.Primary && looks > 1 {
			c.Share = stats.SequentialShare(in.Alpha, nPrimary)
			c.nominal = c.Share
			levels, _ := stats.LookLevels(c.Share, claimReach(c, in, looks))
			c.Level = levels[lookOf(c, in, looks)-1]
			continue
		}
		rest = append(rest, c)
		reach = append(reach, stats.Reach{Primary: c.Primary && !sequential, MinP: claimReach(c, in, 1)})
	}
	alpha := in.Alpha
	if sequential {
		alpha = in.Alpha * (1 - stats.PrimaryShare)
	}
	every := make([]stats.Reach, len(reach))
	for i, r := range reach {
		every[i] = stats.Reach{Primary: r.Primary, MinP: []float64{0}}
	}
	nominal := stats.AllotAlpha(alpha, every)
	for i, a := range stats.AllotAlpha(alpha, reach) {
		rest[i].Share, rest[i].Level, rest[i].nominal = a.Share, a.Level(), nominal[i].Share
	}
	for _, c := range f.Claims {
		decideClaim(c, in)
	}
}

// armLooks is the looks of the arm's sequential design; 1 for a fixed design.
func armLooks(in familyInput, arm string) int {
	if k := armIndexOf(in.Arms, arm); k >= 0 && k < len(in.Looks) && in.Looks[k] > 1 {
		return in.Looks[k]
	}
	return 1
}

// lookOf is the look a sequential claim is judged at: the launches both arms have,
// within 1..looks.
func lookOf(c *LaunchClaim, in familyInput, looks int) int {
	na, nb := claimLaunches(c, in)
	return min(max(min(na, nb), 1), looks)
}

// claimLaunches counts the launches each side of a claim has for its outcome.
func claimLaunches(c *LaunchClaim, in familyInput) (arm, base int) {
	ai, bi := armIndexOf(in.Arms, c.Arm), armIndexOf(in.Arms, c.Against)
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
		return len(launchCounts(c.Outcome, in.Samples[ai])), len(launchCounts(c.Outcome, in.Samples[bi]))
	case OutcomeStability:
		n := len(stabilityLogs(c, in))
		return n, n
	}
	metric := c.Outcome
	if metric == OutcomeNonInferiority {
		metric = MetricThroughput
	}
	return len(logMedians(in.Samples[ai], c.Group, metric)), len(logMedians(in.Samples[bi], c.Group, metric))
}

// everyJudgedFaulted reports whether a side's launches faulted, every one of them that
// says something of its engine: launches the user interrupted or whose node went away
// are not the engine's doing.
func everyJudgedFaulted(samples []launchSample) bool {
	judged := 0
	for _, s := range samples {
		if s.judged {
			if !s.faulted {
				return false
			}
			judged++
		}
	}
	return judged > 0
}

// faultedSide is the side of a claim whose every launch crashed or wedged and that
// leaves nothing fair to compare (LaunchClaim.Faulted); "" when neither does, and for
// wedges, whose outcome the faults are.
func faultedSide(c *LaunchClaim, in familyInput) string {
	if c.Outcome == OutcomeWedge {
		return ""
	}
	na, nb := claimLaunches(c, in)
	for _, side := range []struct {
		arm      string
		launches int
	}{{c.Arm, na}, {c.Against, nb}} {
		if !everyJudgedFaulted(in.Samples[armIndexOf(in.Arms, side.arm)]) {
			continue
		}
		switch c.Outcome {
		case OutcomeCorruption, OutcomeCorruptionNI:
			// An arm whose own launches all faulted keeps its claim while they left
			// sessions to count (the judge leaves its comparison inconclusive); one that
			// left none, or a baseline whose launches all faulted, leaves nothing to be
			// compared.
			if side.arm == c.Against || side.launches == 0 {
				return side.arm
			}
		default:
			if side.launches == 0 {
				return side.arm
			}
		}
	}
	return ""
}

// claimReach is the smallest p the claim's test can give at each of looks looks (one
// launch per arm added per look), or, for a fixed design (looks 1), with the launches
// it has: what the design fixes before any outcome is seen. A claim with a faulted side
// can reach nothing, and passes its share on.
func claimReach(c *LaunchClaim, in familyInput, looks int) []float64 {
	if faultedSide(c, in) != "" {
		return slices.Repeat([]float64{1}, max(looks, 1))
	}
	na, nb := claimLaunches(c, in)
	if looks <= 1 {
		return []float64{claimMinP(c, in, na, nb, false)}
	}
	out := make([]float64, looks)
	for k := 1; k <= looks; k++ {
		out[k-1] = claimMinP(c, in, k, k, true)
	}
	return out
}

// claimMinP is the smallest p the claim's test can give with na and nb launches.
func claimMinP(c *LaunchClaim, in familyInput, na, nb int, sequential bool) float64 {
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
		return rateKind(c, in, na, nb, sequential).MinP(na, nb)
	case OutcomeStability:
		if na >= 2 {
			return 0
		}
		return 1
	}
	if na >= 1 && nb >= 1 && floorSD(c, in, na, nb) > 0 {
		return 0
	}
	if na >= 2 && nb >= 2 {
		return 0
	}
	return 1
}

// rateKind is the test of a claim on rates.
func rateKind(c *LaunchClaim, in familyInput, na, nb int, sequential bool) stats.LaunchTestKind {
	// A sequential arm stops on the randomization test alone (the orchestrator's looks
	// know no floor), so it is judged on it too.
	floor := in.Floor != nil && in.Floor.ICC >= 0 && c.Outcome != OutcomeWedge && !sequential
	return stats.RateTestFor(na, nb, floor, c.Outcome == OutcomeWedge, sequential)
}

// floorSD is the noise floor's bound on the launch-to-launch standard deviation of the
// claim's metric (its log); 0 when there is no floor for it, or when its arms' na and nb
// launches test it better on their own (stats.FloorWeighs).
func floorSD(c *LaunchClaim, in familyInput, na, nb int) float64 {
	if in.Floor == nil || !stats.FloorWeighs(na, nb) {
		return 0
	}
	metric := c.Outcome
	if metric == OutcomeNonInferiority {
		metric = MetricThroughput
	}
	if sd := in.Floor.SD[c.Group][metric]; sd > 0 && !math.IsInf(sd, 0) {
		return sd
	}
	return 0
}

// launchCounts is one count per launch that counts for a rate outcome: its corrupted and
// analysed sessions, or for wedges 1 of 1 when it faulted and 0 of 1 when not.
func launchCounts(outcome string, samples []launchSample) []stats.ClusterCounts {
	var out []stats.ClusterCounts
	for _, s := range samples {
		switch {
		case outcome == OutcomeWedge && s.judged && s.faulted:
			out = append(out, stats.ClusterCounts{Events: 1, Responses: 1})
		case outcome == OutcomeWedge && s.judged:
			out = append(out, stats.ClusterCounts{Events: 0, Responses: 1})
		case outcome != OutcomeWedge && s.sessions > 0:
			out = append(out, stats.ClusterCounts{Events: s.corrupt, Responses: s.sessions})
		}
	}
	return out
}

// stabilityLogs are the logs of each launch's tok/s after its cascades over before.
func stabilityLogs(c *LaunchClaim, in familyInput) []float64 {
	before := ""
	for _, s := range in.Stability {
		if s[1] == c.Group {
			before = s[0]
		}
	}
	var x []float64
	for _, s := range in.Samples[armIndexOf(in.Arms, c.Arm)] {
		b, a := s.metrics[before][MetricThroughput], s.metrics[c.Group][MetricThroughput]
		if b > 0 && a > 0 {
			x = append(x, math.Log(a/b))
		}
	}
	return x
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
	c.FloorWouldTest = in.Floor == nil && c.Outcome != OutcomeWedge && c.Outcome != OutcomeStability && armLooks(in, c.Arm) <= 1
	c.P, c.Estimate, c.Spread = math.NaN(), math.NaN(), math.NaN()
	c.CI = stats.Interval{Lo: math.NaN(), Hi: math.NaN()}
	if c.Faulted = faultedSide(c, in); c.Faulted != "" {
		c.LaunchesArm, c.LaunchesBase = claimLaunches(c, in)
		c.FloorWouldTest = false
		return
	}
	ai, bi := armIndexOf(in.Arms, c.Arm), armIndexOf(in.Arms, c.Against)
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
		a, b := launchCounts(c.Outcome, in.Samples[bi]), launchCounts(c.Outcome, in.Samples[ai])
		sequential := armLooks(in, c.Arm) > 1
		kind := rateKind(c, in, len(b), len(a), sequential)
		c.Test = rateTestName(kind, in.Floor)
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
		conf := 1 - level
		if (in.NoIntervals && c.Outcome != OutcomeCorruptionNI) || !(level > 0) {
			conf = 0
		}
		icc := 0.0
		if kind == stats.TestFloor {
			icc = in.Floor.ICC
		}
		r, err := stats.CompareLaunchRates(kind, a, b, icc, conf)
		if err != nil {
			return
		}
		c.Estimate = r.Difference
		c.Testable = r.Possible && level > 0 && stats.Reject(r.MinP, level)
		if !c.Testable {
			c.Needed = rateNeeded(c, in, kind, r)
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
		x := stabilityLogs(c, in)
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
		if !(c.Level > 0) {
			// No share of alpha: the claim is described, not tested.
			conf = 0.95
		}
		var r stats.LaunchTest
		var err error
		if sd := floorSD(c, in, len(a), len(b)); sd > 0 {
			c.Test = fmt.Sprintf("z test against noise floor #%d", in.Floor.Experiment)
			r, err = stats.FloorMeans(a, b, sd, conf)
		} else {
			r, err = stats.LaunchMeans(a, b, conf)
		}
		if err != nil {
			return
		}
		c.Estimate = math.Exp(r.Difference)
		if !r.Possible || !(c.Level > 0) {
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
	return stats.Mean(xs)
}

// pooledCV is the launch-to-launch coefficient of variation within the arms, from the
// pooled standard deviation of the launches' logs.
func pooledCV(arms ...[]float64) float64 {
	ss, df := 0.0, 0
	for _, xs := range arms {
		if len(xs) < 2 {
			continue
		}
		m := stats.Mean(xs)
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
	in.design(v.Design.Kind, v.Design.Margin)
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
	in.Floor = v.familyFloor(in.Samples, in.Groups)
	f := decideFamily(in)
	f.Unmeasured = unmeasured(in)
	v.Claims = f
	v.applyLaunchFamily(f)
}

// design sets what the workload's kind and the corruption margin make of the claims: the
// primary outcome, whether wedges are claimed on, corruption's non-inferiority.
func (in *familyInput) design(kind string, corruptionMargin float64) {
	in.Primary, in.CorruptionMargin = OutcomeCorruption, corruptionMargin
	switch kind {
	case arms.WorkloadAbortCascade:
		in.Primary, in.Wedges = OutcomeWedge, true
	case arms.WorkloadThroughput:
		in.Primary = MetricThroughput
	}
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
		if !store.InAnalysis(r.Status, r.Superseded) {
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
						s.metrics[g.Name][m] = stats.Median(xs)
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

// attributionSentence says, for a corruption comparison the launches cannot test, what
// was seen and how many launches per arm would let arbiter test it. same is true when
// the arms' sessions show no difference at all: that is said of these sessions only, and
// the test these launches could not make is still named.
func (v *Verdict) attributionSentence(c *LaunchClaim, same bool) string {
	if c == nil || c.Testable {
		return ""
	}
	switch {
	case c.Faulted != "":
		return fmt.Sprintf("It is not compared: %s crashed or wedged in every launch and leaves nothing fair to compare.", c.Faulted)
	case c.Needed == 0:
		return "The launches agreed exactly within each arm: there is no spread between them to weigh the difference against, which is no evidence either way."
	}
	n := min(c.LaunchesArm, c.LaunchesBase)
	s := fmt.Sprintf("With %d launch%s per arm this cannot be told apart from a difference between launches of one configuration: %s can test it",
		n, pluralEs(n), v.moreLaunches(c.Needed))
	if same {
		s = fmt.Sprintf("These sessions show no difference, and with %d launch%s per arm a difference could not have been told apart from one between launches of one configuration: %s can test for one",
			n, pluralEs(n), v.moreLaunches(c.Needed))
	}
	if c.FloorWouldTest {
		s += ", or one per arm weighed against an A/A noise floor (`--noise-floor`)"
	}
	return s + "."
}

// moreLaunches names what gives an arm needed launches in the analysis: the rest of its
// own plan when the experiment stopped before it was done and planned enough (the
// headline names the resume that runs it), a larger plan otherwise.
func (v *Verdict) moreLaunches(needed int) string {
	if planned, ok := v.planCovers(needed); ok {
		return fmt.Sprintf("the rest of its plan (%d launches per arm)", planned)
	}
	return fmt.Sprintf("%d launches per arm (`launches: %d`)", needed, needed)
}

// canTestWords is moreLaunches for a table cell: "4 can test it", "the rest of its plan
// (4) can test it".
func (v *Verdict) canTestWords(needed int) string {
	if planned, ok := v.planCovers(needed); ok {
		return fmt.Sprintf("the rest of its plan (%d) can test it", planned)
	}
	return fmt.Sprintf("%d can test it", needed)
}

// planCovers reports whether the experiment stopped before its plan was done and its
// plan holds needed launches per arm, with the launches per arm it planned.
func (v *Verdict) planCovers(needed int) (int, bool) {
	planned := max(v.Design.Blocks, 1)
	return planned, v.Experiment.State() != store.ExperimentDone && v.interruptedLaunches() > 0 && planned >= needed
}

func pluralEs(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}

// levelText is a claim's level, short: "0.03".
func levelText(x float64) string {
	if !(x > 0) {
		return "–"
	}
	return fmt.Sprintf("%.3g", x)
}

// launchCaveat says, once, what the launches could not attribute, and how much launches
// of one arm differed where that could be seen.
func (v *Verdict) launchCaveat(add func(CaveatKind, string, ...any)) {
	v.floorCaveat(add)
	f := v.Claims
	if f == nil {
		return
	}
	var untestable, flat []string
	faulted := map[string][]string{}
	var faultedArms []string
	most, floorWould, tested := 0, false, 0
	for _, c := range f.Claims {
		if c.Share > 0 {
			tested++
		}
		switch {
		case c.Testable:
		case c.Faulted != "":
			if faulted[c.Faulted] == nil {
				faultedArms = append(faultedArms, c.Faulted)
			}
			faulted[c.Faulted] = append(faulted[c.Faulted], c.Outcome)
		case c.Needed == 0:
			flat = append(flat, c.Outcome)
		default:
			untestable = append(untestable, c.Outcome)
			most = max(most, c.Needed)
			floorWould = floorWould || c.FloorWouldTest
		}
	}
	if len(untestable) > 0 {
		floor := ""
		if floorWould {
			floor = " (or one launch per arm, for the rates and speeds, weighed against an A/A noise floor: `--noise-floor`)"
		}
		add(CaveatUntested, "Not attributable to the arms with these launches: %s. A difference seen there may be a difference between launches of one configuration; %d launches per arm can test each of them%s.",
			joinAnd(dedupe(untestable)), most, floor)
	}
	for _, arm := range faultedArms {
		add(CaveatUntested, "Not compared: %s, because %s crashed or wedged in every launch and leaves nothing fair to compare; more launches that fault alike would not change that.",
			joinAnd(dedupe(faulted[arm])), arm)
	}
	if len(flat) > 0 {
		add(CaveatUntested, "Not tested: %s, whose launches agreed exactly within each arm; a spread of zero between launches is no evidence either way.", joinAnd(dedupe(flat)))
	}
	if len(f.Unmeasured) > 0 {
		add(CaveatUntested, "Not compared, because no launch of the arm measured it while other arms' launches did: %s. Inter-token latency needs replies that stream in two events or more.", joinAnd(f.Unmeasured))
	}
	if m := len(f.Claims); m > 1 && tested > 0 {
		untested := ""
		if tested < m {
			untested = fmt.Sprintf("; the other %d, not tested (the Claims section says why), are not charged", m-tested)
			if m-tested == 1 {
				untested = "; the other one, not tested (the Claims section says why), is not charged"
			}
		}
		add(CaveatMultiplicity, "This verdict tests %d claim%s on launches, sharing alpha %g between them (the Claims section): each is tested at its share, so that the verdict claims anything falsely at most %g of the time%s.", tested, plural(tested), v.Alpha, v.Alpha, untested)
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
