package verdict

import (
	"fmt"
	"math"

	"github.com/arbiterlab/arbiter/stats"
)

// claimsSection lists every claim of the verdict as tested on launches: what each
// compared, at which level, and what it decided.
func (v markdownWriter) claimsSection() {
	b := v.b
	f := v.Claims
	if f == nil || len(f.Claims) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Claims, tested on launches\n\n")
	fmt.Fprintf(b, "Launches of one configuration differ (clocks, memory layout, warm-up, the host's other load), so every claim is tested on launches, one number per launch: ")
	fmt.Fprintf(b, "for rates the randomization test from %d launches per arm (exact; it cannot go below the smallest p its launches allow), Welch's t test on the launches' rates with 2 or 3 (where the randomization test cannot reach a useful level)", stats.RandomizationLaunches)
	if v.Floor.Used() {
		fmt.Fprintf(b, ", and here, weighed against noise floor #%d, the difference of the pooled rates on counts shrunk by the floor's design effect (from one launch per arm)", v.Floor.Experiment)
	}
	fmt.Fprintf(b, "; for speed the t test on the logs of the launches' medians")
	if v.Floor.Used() {
		fmt.Fprintf(b, " (with the floor, a z test with its spread)")
	}
	fmt.Fprintf(b, ". The claims share alpha %g: those on %s split %.0f%% of it and the others the rest, one group all of it when the other has nothing its launches can test; a claim whose launches cannot reach its share is not tested and passes the share on, so that this verdict claims anything falsely at most %g of the time.",
		v.Alpha, outcomeWords(f.Primary), 100*primaryShareOf(f), v.Alpha)
	if v.Design.Looks > 1 {
		fmt.Fprintf(b, " An arm judged at sequential looks tests its corruption claim at every look, its share spread over the %d looks that its launches can reach it at.", v.Design.Looks)
	}
	fmt.Fprintf(b, "\n\n| outcome | arm | against | launches | estimate | interval | p | tested at | launch spread | decision |\n|---|---|---|---:|---:|---|---:|---:|---:|---|\n")
	for _, c := range f.Claims {
		against := c.Against
		if c.Group != "" {
			against += " at " + c.Group
		}
		outcome := c.Outcome
		if c.Primary {
			outcome = "**" + outcome + "**"
		}
		p := "–"
		if c.Testable {
			p = pval(c.P)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d vs %d | %s | %s | %s | %s | %s | %s |\n", outcome, c.Arm, against, c.LaunchesArm, c.LaunchesBase,
			claimEstimate(c), claimInterval(c), p, levelText(c.Level), claimSpread(c), claimDecision(c))
	}
	fmt.Fprintf(b, "\nThe interval is at 1 − the level the claim is tested at (non-inferiority: its one-sided lower bound), so it excludes no change exactly when the claim is made. Launch spread: the intra-launch correlation of corruption (the share of its variance between launches of one arm), or the launches' coefficient of variation for speed. ")
	fmt.Fprintf(b, "Speed is called better or worse only when its whole interval lies beyond %s of no change (`analysis.min_effect`), negligible only when it lies within it. Not attributable: too few launches per arm for the test to reach its level at all; the number in brackets can.\n", pctShort(v.MinEffect))
	if n := v.NoiseFloor(); v.Design.AA && n.Launches >= 2 {
		var groups []string
		if o := v.Outcomes; o != nil {
			for _, g := range o.Groups {
				groups = append(groups, g.Name)
			}
		}
		f := measureFloor(v.launchSamples(), groups)
		icc, cv := "not measured (no corrupted session)", "not measured"
		if !math.IsNaN(f.ICCUpper) {
			icc = fmt.Sprintf("%.3f (%s%% upper bound %.3f)", f.ICC, confText(f.Conf), f.ICCUpper)
		}
		for _, g := range groups {
			if sp, ok := f.Speed[g][MetricThroughput]; ok {
				cv = fmt.Sprintf("%s (upper bound %s)", pctShort(sp.SD), pctShort(sp.Upper))
				break
			}
		}
		fmt.Fprintf(b, "\nThe noise floor this A/A measured over its %d launches: intra-launch correlation of corruption %s, launch-to-launch variation of tok/s %s. `arbiter run SPEC --noise-floor %d` weighs an experiment on the same engine, workload and hardware against the upper bounds, so that one launch per arm can decide; `arbiter plan SPEC --noise-floor %d` plans with them.\n",
			f.Launches, icc, cv, v.Experiment.ID, v.Experiment.ID)
	}
}

// primaryShareOf is the share of alpha the primary outcome's claims split: of the shares
// given, or, when no claim could be tested, of those they would have had.
func primaryShareOf(f *LaunchFamily) float64 {
	for _, given := range []bool{true, false} {
		total, primary := 0.0, 0.0
		for _, c := range f.Claims {
			share := c.nominal
			if given {
				share = c.Share
			}
			total += share
			if c.Primary {
				primary += share
			}
		}
		if total > 0 {
			return primary / total
		}
	}
	return 0
}

// outcomeWords names an outcome in a sentence.
func outcomeWords(outcome string) string {
	switch outcome {
	case OutcomeCorruption:
		return "corruption"
	case OutcomeWedge:
		return "wedged launches"
	case MetricThroughput:
		return "tok/s"
	}
	return outcome
}

func claimEstimate(c *LaunchClaim) string {
	if math.IsNaN(c.Estimate) {
		return "–"
	}
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI:
		return fmt.Sprintf("%+.1f pts", 100*c.Estimate)
	}
	return signedPct(c.Estimate - 1)
}

func claimInterval(c *LaunchClaim) string {
	if !c.Testable || math.IsNaN(c.CI.Lo) {
		return "–"
	}
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge:
		return fmt.Sprintf("%s to %s pts", signedNum(100*c.CI.Lo), signedNum(100*c.CI.Hi))
	case OutcomeCorruptionNI:
		return "≤ " + signedNum(100*c.CI.Hi) + " pts"
	case OutcomeNonInferiority, OutcomeStability:
		return "≥ " + signedPct(c.CI.Lo-1)
	}
	return signedPct(c.CI.Lo-1) + " to " + signedPct(c.CI.Hi-1)
}

// signedNum is a signed figure with one decimal, or ±∞.
func signedNum(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "+∞"
	case math.IsInf(x, -1):
		return "−∞"
	}
	if math.Abs(x) < 0.05 {
		x = 0 // no "-0.0"
	}
	return fmt.Sprintf("%+.1f", x)
}

func claimSpread(c *LaunchClaim) string {
	if math.IsNaN(c.Spread) {
		return "–"
	}
	switch c.Outcome {
	case OutcomeCorruption, OutcomeCorruptionNI:
		return fmt.Sprintf("ICC %.3f", c.Spread)
	case OutcomeWedge, OutcomeStability:
		return "–"
	}
	return "CV " + pctShort(c.Spread)
}

func claimDecision(c *LaunchClaim) string {
	switch {
	case !c.Testable && c.Needed == 0:
		return "not tested: no spread"
	case !c.Testable:
		return fmt.Sprintf("not attributable (%d)", c.Needed)
	case c.Decision == "":
		return "~"
	case c.Decision == "negligible":
		return c.Decision
	}
	return "**" + c.Decision + "**"
}
