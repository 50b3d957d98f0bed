package verdict

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
)

// claimsSection lists, on the verdict's first screen, the claims its launches could
// test, then one sentence for each reason the others could not be, with what would
// decide them.
func (v markdownWriter) claimsSection() {
	b := v.b
	f := v.Claims
	if f == nil || len(f.Claims) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Claims, tested on launches\n")
	var tested, flat, untestable []*LaunchClaim
	faulted := map[string][]*LaunchClaim{}
	var faultedArms []string
	for _, c := range f.Claims {
		switch {
		case c.Testable:
			tested = append(tested, c)
		case c.Faulted != "":
			if faulted[c.Faulted] == nil {
				faultedArms = append(faultedArms, c.Faulted)
			}
			faulted[c.Faulted] = append(faulted[c.Faulted], c)
		case c.Needed == 0:
			flat = append(flat, c)
		default:
			untestable = append(untestable, c)
		}
	}
	arms := map[string]bool{}
	for _, c := range f.Claims {
		arms[c.Arm+" vs "+c.Against] = true
	}
	if len(tested) > 0 {
		fmt.Fprintf(b, "\n| outcome | arm | against | launches | estimate | interval | p | tested at | launch spread | decision |\n|---|---|---|---:|---:|---|---:|---:|---:|---|\n")
		for _, c := range tested {
			against := c.Against
			if g := cmp.Or(c.AgainstGroup, c.Group); g != "" {
				against += " at " + g
			}
			fmt.Fprintf(b, "| %s | %s | %s | %d vs %d | %s | %s | %s | %s | %s | %s |\n", c.Outcome, c.Arm, against, c.LaunchesArm, c.LaunchesBase,
				claimEstimate(c), claimInterval(c), pval(c.P), levelText(c.Level), claimSpread(c), claimDecision(c))
		}
		fmt.Fprintf(b, "\nEach interval is at the level its claim is tested at (non-inferiority: a one-sided bound), so it excludes no change exactly when the claim is made.")
		speed, undecided := false, false
		for _, c := range tested {
			speed = speed || !slices.Contains([]string{OutcomeCorruption, OutcomeWedge, OutcomeCorruptionNI}, c.Outcome)
			undecided = undecided || claimDecision(c) == "~"
		}
		if undecided {
			fmt.Fprintf(b, " `~`: tested, and neither a difference nor its absence is shown.")
		}
		if speed {
			fmt.Fprintf(b, " Speed is called better or worse only when its whole interval lies beyond %s of no change (`analysis.min_effect`), negligible only when it lies within it.", pctShort(v.MinEffect))
		}
		fmt.Fprintf(b, "\n")
	}
	for _, arm := range faultedArms {
		fmt.Fprintf(b, "\nNot compared, because %s %s and leaves nothing fair to compare: %s.\n", arm, v.faultWords(arm), claimList(faulted[arm], len(arms)))
	}
	if len(flat) > 0 {
		fmt.Fprintf(b, "\nNot tested, no spread between launches (they agreed exactly within each arm, which is no evidence either way): %s.\n", claimList(flat, len(arms)))
	}
	if len(f.Unmeasured) > 0 {
		fmt.Fprintf(b, "\nNot compared, because no launch of the arm measured it while other arms' launches did: %s.\n", joinAnd(f.Unmeasured))
	}
	if len(untestable) > 0 {
		most, floor := 0, false
		for _, c := range untestable {
			most = max(most, c.Needed)
			floor = floor || c.FloorWouldTest
		}
		them := "them"
		if len(untestable) == 1 {
			them = "it"
		}
		fmt.Fprintf(b, "\nNot attributable with these launches, too few per arm for the test to reach its level: %s. To decide %s, run %s", claimList(untestable, len(arms)), them, v.moreLaunches(most))
		if floor {
			fmt.Fprintf(b, ", or one per arm weighed against an A/A noise floor (`--noise-floor`)")
		}
		fmt.Fprintf(b, ".\n")
	}
}

// faultWords says how an arm's launches faulted, every one of them: "wedged in every
// launch (4 of 4)".
func (v markdownWriter) faultWords(arm string) string {
	i := v.armIndex(arm)
	if i < 0 {
		return "faulted in every launch"
	}
	l := v.Arms[i].Launches
	n := l.Crashed + l.Wedged + l.Erroring + l.TimedOut
	how := "crashed, wedged or kept failing"
	switch n {
	case l.Wedged:
		how = "wedged"
	case l.Crashed:
		how = "crashed"
	case l.Erroring + l.TimedOut:
		how = "kept failing its requests"
	}
	if n == 1 {
		return how + " in its one launch"
	}
	return fmt.Sprintf("%s in every launch (%d of %d)", how, n, n)
}

// allSessions is the group of a workload without phases: every session.
const allSessions = "all sessions"

// claimList names claims in a sentence: their outcomes, and where they were compared
// when that says something (the pairs of arms, when not all allPairs of the family) ("TTFT and end-to-end latency (at c=1 after and c=32 after)").
func claimList(cs []*LaunchClaim, allPairs int) string {
	withArm := allPairs > 1
	// Claims of the same outcomes are named together: first the groups of one pair of
	// arms, then the pairs that share those groups.
	type kind struct {
		outcomes, groups, pairs []string
	}
	var kinds []*kind
	add := func(outcomes, groups []string, pair string) {
		for _, k := range kinds {
			if slices.Equal(k.outcomes, outcomes) && slices.Equal(k.groups, groups) {
				if pair != "" {
					k.pairs = append(k.pairs, pair)
				}
				return
			}
		}
		k := &kind{outcomes: outcomes, groups: groups}
		if pair != "" {
			k.pairs = []string{pair}
		}
		kinds = append(kinds, k)
	}
	var pairs []string
	byPair := map[string]map[string][]string{} // pair, group: outcomes
	var groups = map[string][]string{}         // pair: its groups in order
	for _, c := range cs {
		pair, group := "", ""
		if withArm {
			pair = c.Arm + " against " + c.Against
			if c.Against == c.Arm {
				pair = c.Arm + " against itself" // its tok/s after its cascades, against before them
			}
		}
		if c.Group != allSessions {
			group = c.Group
		}
		if byPair[pair] == nil {
			pairs = append(pairs, pair)
			byPair[pair] = map[string][]string{}
		}
		if _, ok := byPair[pair][group]; !ok {
			groups[pair] = append(groups[pair], group)
		}
		byPair[pair][group] = append(byPair[pair][group], c.Outcome)
	}
	for _, pair := range pairs {
		type set struct{ outcomes, groups []string }
		var sets []*set
		for _, g := range groups[pair] {
			os := dedupe(byPair[pair][g])
			i := slices.IndexFunc(sets, func(s *set) bool { return slices.Equal(s.outcomes, os) })
			if i < 0 {
				sets = append(sets, &set{outcomes: os})
				i = len(sets) - 1
			}
			if g != "" {
				sets[i].groups = append(sets[i].groups, g)
			}
		}
		for _, st := range sets {
			add(st.outcomes, st.groups, pair)
		}
	}
	var parts []string
	for _, k := range kinds {
		var place []string
		if len(k.pairs) > 0 && len(k.pairs) < allPairs {
			place = append(place, joinAnd(k.pairs))
		}
		if len(k.groups) > 0 {
			place = append(place, "at "+joinAnd(k.groups))
		}
		part := joinAnd(k.outcomes)
		if len(place) > 0 {
			part += " (" + strings.Join(place, " ") + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

// claimsMethodSection says how the claims were tested: the tests, how alpha was shared,
// and what an A/A's launches measured of the noise floor.
func (v markdownWriter) claimsMethodSection() {
	b := v.b
	f := v.Claims
	if f == nil || len(f.Claims) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## How the claims were tested\n\n")
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
	fmt.Fprintf(b, "\n\nLaunch spread: the intra-launch correlation of corruption (the share of its variance between launches of one arm), or the launches' coefficient of variation for speed.\n")
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
			// The floor pools every launch as one configuration, where the Claims table's
			// launch spread is each arm's: the two may differ.
			icc = fmt.Sprintf("%.3f, its launches taken as one configuration (%s%% upper bound %.3f)", f.ICC, confText(f.Conf), f.ICCUpper)
		}
		// Phase by phase where there are several: a closed loop's launches may agree
		// within 0.1% while an open loop's differ by several percent.
		var cvs []string
		for _, g := range groups {
			if sp, ok := f.Speed[g][MetricThroughput]; ok {
				at := ""
				if len(groups) > 1 {
					at = " at " + g
				}
				cvs = append(cvs, fmt.Sprintf("%s%s (upper bound %s)", spreadPct(sp.SD), at, spreadPct(sp.Upper)))
			}
		}
		if len(cvs) > 0 {
			cv = strings.Join(cvs, ", ")
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
		return points(c.Estimate)
	}
	return signedPct(c.Estimate - 1)
}

func claimInterval(c *LaunchClaim) string {
	if !c.Testable || math.IsNaN(c.CI.Lo) {
		return "–"
	}
	switch c.Outcome {
	case OutcomeCorruption, OutcomeWedge:
		return pointsInterval(c.CI.Lo, c.CI.Hi)
	case OutcomeCorruptionNI:
		return pointsBound(c.CI.Hi)
	case OutcomeNonInferiority, OutcomeStability:
		return changeBound(c.CI.Lo)
	}
	return changeInterval(c.CI.Lo, c.CI.Hi)
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
	return "CV " + spreadPct(c.Spread)
}

// spreadPct is a launch spread as a percentage: "0.6%", or "under 0.1%" for one that is
// there but rounds to none (launches that agree that closely still differ).
func spreadPct(x float64) string {
	if x > 0 && math.Round(1000*x) == 0 {
		return "under 0.1%"
	}
	return pctShort(x)
}

func claimDecision(c *LaunchClaim) string {
	switch {
	case c.Faulted != "":
		return "not compared: " + c.Faulted + " faulted"
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
