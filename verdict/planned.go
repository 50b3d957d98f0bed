package verdict

import (
	"fmt"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// Before an experiment runs, `arbiter plan` and `arbiter validate` say at what level its
// verdict will test the claims on the primary outcome. They read it here, from the claims
// the verdict itself makes of such an experiment (familyClaims), so that neither counts
// the claims its own way: the level depends on how many other claims share alpha.

// PlannedLevel is the level the verdict of an experiment of spec, expanded to nArms arms
// (the baseline among them), will test each claim on the primary outcome at when every
// arm has n launches, with a noise floor or without: every claim such a verdict makes,
// each able to reach the smallest p its test gives with n launches a side (a rate claim
// its launch test's, stats.RateTestFor; a speed claim any from two launches a side, or
// from one against a floor; a stability claim any from two), alpha shared by
// stats.AllotAlpha. 0 when some primary claim would get no share: the verdict would then
// test some arms and not others, which no plan should count on.
func PlannedLevel(spec *arms.Spec, nArms, n int, floor bool) float64 {
	in := plannedInput(spec, nArms)
	claims := familyClaims(in)
	reach := make([]stats.Reach, len(claims))
	for i, c := range claims {
		minP := 1.0
		switch c.Outcome {
		case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
			wedge := c.Outcome == OutcomeWedge
			minP = stats.RateTestFor(n, n, floor && !wedge, wedge, false).MinP(n, n)
		case OutcomeStability:
			if n >= 2 {
				minP = 0
			}
		default:
			if n >= 2 || floor {
				minP = 0
			}
		}
		reach[i] = stats.FixedReach(c.Primary, minP)
	}
	level := 1.0
	for i, a := range stats.AllotAlpha(in.Alpha, reach) {
		if claims[i].Primary {
			level = min(level, a.Level())
		}
	}
	return level
}

// plannedInput is what the verdict of an experiment of spec with nArms arms will decide
// its claims from, but for the launches: its arms, its design and the groups its
// workload's phases will record.
func plannedInput(spec *arms.Spec, nArms int) familyInput {
	in := familyInput{Alpha: spec.Analysis.Alpha, Margin: spec.Analysis.ThroughputMargin}
	in.design(spec.Workload.Kind, spec.Analysis.Margin)
	for i := range max(nArms, 1) {
		in.Arms = append(in.Arms, fmt.Sprintf("arm %d", i))
	}
	w := spec.Workload
	switch {
	case w.Kind == arms.WorkloadThroughput && w.Throughput != nil:
		for i := range len(w.Throughput.Concurrency) + len(w.Throughput.Rates) {
			in.Groups = append(in.Groups, fmt.Sprintf("phase %d", i))
		}
	case w.Kind == arms.WorkloadAbortCascade && w.AbortCascade != nil:
		// Throughput before and after the cascades, at each concurrency; the cascades'
		// own sessions are cut on purpose and measure nothing.
		for i := range w.AbortCascade.ThroughputAt {
			before, after := fmt.Sprintf("c=%d before", i), fmt.Sprintf("c=%d after", i)
			in.Groups = append(in.Groups, before, after)
			in.Stability = append(in.Stability, [2]string{before, after})
		}
	default:
		in.Groups = []string{allSessions}
	}
	return in
}

// PlannedSpeedPrimary reports whether the primary outcome of an experiment of spec is a
// speed (a throughput workload's tok/s), which the verdict tests by the t test on the
// logs of the launches' medians, rather than a rate (corruption, wedges), which it tests
// by a launch test of rates.
func PlannedSpeedPrimary(spec *arms.Spec) bool {
	var in familyInput
	in.design(spec.Workload.Kind, spec.Analysis.Margin)
	return in.Primary == MetricThroughput
}
