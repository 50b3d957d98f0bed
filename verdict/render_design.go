package verdict

import (
	"fmt"
	"math"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
)

// designSections writes the sections of the design-dependent analyses.
func (v markdownWriter) designSections() {
	b := v.b
	base := v.Arms[v.Baseline].Name
	if uv := v.UnitView; uv != nil {
		fmt.Fprintf(b, "\n## Unit of analysis: %s\n\n", uv.Unit)
		adjusted := "Donner p"
		if uv.Unit == "launch" {
			fmt.Fprintf(b, "The spec counts sessions, clustered in launches (engine runs). The last column is the randomization test on the launches' corruption rates (which decides, see Claims); the intra-cluster correlation and design effect are Donner's, for comparison with the naive Fisher p on the sessions.\n\n")
			adjusted = "launch p"
		} else {
			fmt.Fprintf(b, "The spec counts responses, clustered in sessions. Items of one cluster are correlated, so the test divides the chi-square by one pooled design effect (Donner's adjusted chi-square). It describes these launches; the claims are decided on launches.\n\n")
		}
		fmt.Fprintf(b, "| arm | corrupted | of | clusters | intra-cluster correlation | design effect | naive p | %s |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", adjusted)
		for i, a := range v.Arms {
			fmt.Fprintf(b, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", a.Name, uv.Events[i], uv.N[i], uv.Clusters[i],
				num(uv.ICC[i]), num(uv.DE[i]), pval(uv.NaiveP[i]), pval(uv.P[i]))
		}
		if uv.Fallback != "" {
			fmt.Fprintf(b, "\nThe clustered test could not decide: %s.\n", uv.Fallback)
		}
	}

	if len(v.Sequential) > 0 {
		fmt.Fprintf(b, "\n## Sequential design\n\n")
		fmt.Fprintf(b, "%d looks, one after each block. At every look each arm's launches so far are compared with %s's by the randomization test on their corruption rates, at %s from look %d on: the corruption claim's share of alpha divided over the looks whose launches can reach it (the earlier ones cannot reject and are not charged), so that stopping at any look keeps the claim's error at its share. Scheduling stops once every arm's test rejects.\n",
			v.Design.Looks, base, levelText(v.Sequential[0].Level), firstCharged(stats.SequentialLookLevels(v.Alpha, len(v.Sequential), v.Design.Looks)))
		for _, sv := range v.Sequential {
			fmt.Fprintf(b, "\n**%s** against %s:\n\n| look | launches | smallest p possible | launch p | crossed |\n|---:|---:|---:|---:|---|\n", sv.Arm, base)
			for k := 1; k <= sv.Looks; k++ {
				launches, minP, p, crossed := "–", "–", "–", "not taken"
				if k <= len(sv.Taken) {
					l := sv.Taken[k-1]
					launches = fmt.Sprintf("%d vs %d", l.LaunchesArm, l.LaunchesBase)
					minP, p = pval(l.MinP), pval(l.P)
					crossed = map[bool]string{true: "**yes**", false: "no"}[l.Crossed]
				}
				fmt.Fprintf(b, "| %d | %s | %s | %s | %s |\n", k, launches, minP, p, crossed)
			}
		}
		crossed := false
		for _, sv := range v.Sequential {
			crossed = crossed || sv.Stopped > 0
		}
		if v.StoppedEarly != "" && !crossed {
			// A stopping rule of the caller's (a bisection step shown clean), not a boundary.
			fmt.Fprintf(b, "\nScheduling stopped before the last look: %s\n", v.StoppedEarly)
		}
	}

	if len(v.Strata) > 0 {
		if v.strataName() == "block" {
			fmt.Fprintf(b, "\n## Stratified by block\n\nBlocks ran at different times; pooling the sessions within blocks (Cochran-Mantel-Haenszel) keeps a drift between blocks from passing for an arm effect. Each block holds one launch of each arm, so this still counts sessions as independent: it describes these launches, and the claims are decided on launches.\n\n")
		} else {
			fmt.Fprintf(b, "\n## Stratified by block and node\n\nArms ran on %d nodes (%s), and blocks at different times; pooling within each block and node (Cochran-Mantel-Haenszel) keeps a difference between nodes or a drift between blocks from passing for an arm effect. A stratum where only one of the two arms ran adds nothing.\n\n",
				len(v.nodes()), strings.Join(v.nodes(), ", "))
		}
		fmt.Fprintf(b, "| arm | strata | CMH p | MH risk difference | %.0f%% CI | MH odds ratio | Breslow-Day p |\n|---|---:|---:|---:|---|---:|---:|\n", 100*(1-v.Alpha))
		for _, s := range v.Strata {
			r := s.Result
			fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", s.Arm, r.Strata, pval(r.CMHP),
				points(r.RiskDifference), pointsInterval(r.RiskDifferenceCI.Lo, r.RiskDifferenceCI.Hi), num(r.OddsRatio), pval(r.BreslowDayP))
		}
	}

	if len(v.Pairs) > 0 {
		fmt.Fprintf(b, "\n## Paired sessions\n\nSession *i* of a block is the same seeded conversation in every arm, so the arms can also be compared pair by pair (exact McNemar on the discordant pairs).\n\n")
		fmt.Fprintf(b, "| arm | pairs | corrupted only in %s | corrupted only in the arm | McNemar p |\n|---|---:|---:|---:|---:|\n", base)
		for _, p := range v.Pairs {
			fmt.Fprintf(b, "| %s | %d | %d | %d | %s |\n", p.Arm, p.Pairs, p.Result.AOnly, p.Result.BOnly, pval(p.Result.P))
		}
	}

	if f := v.Factorial; f != nil {
		v.factorialSection()
	}

	if len(v.NonInferiority) > 0 {
		fmt.Fprintf(b, "\n## Non-inferiority (margin %.1f points)\n\n", 100*v.Design.Margin)
		fmt.Fprintf(b, "An arm is non-inferior when the one-sided upper bound of its excess over %s stays below the margin; \"not shown\" is not evidence that it is worse.\n\n", base)
		fmt.Fprintf(b, "| arm | difference | one-sided upper bound | margin | decision |\n|---|---:|---:|---:|---|\n")
		for _, ni := range v.NonInferiority {
			r := ni.Result
			d := "not shown"
			if r.NonInferior {
				d = "**non-inferior**"
			}
			if c := v.Arms[v.armIndex(ni.Arm)].Compare; c != nil && c.Inconclusive {
				d = c.Decision()
			}
			fmt.Fprintf(b, "| %s | %s | %s (%g%%) | %.1f pts | %s |\n", ni.Arm, points(r.Difference), points(r.Upper), 100*(1-r.Alpha), 100*r.Margin, d)
		}
	}

	v.lossSection()
}

// lossSection shows, when sessions were lost, how many each arm lost and how, whether
// losses differ between arms, and how far labelling the lost sessions could move each
// decision.
func (v markdownWriter) lossSection() {
	b := v.b
	lost := false
	for _, a := range v.Arms {
		lost = lost || a.Lost > 0
	}
	if !lost {
		return
	}
	base := v.Arms[v.Baseline]
	fmt.Fprintf(b, "\n## Lost sessions\n\nA lost session (an error, a timeout, a crash or a wedge under it, or a launch that died before it started) carries no verdict and is not analysed, even when a response was corrupted before it was lost: counting those would keep only the corrupted sessions of a crash. The tipping point re-runs Fisher's exact test with every lost session counted, labelled against the decision.\n\n")
	fmt.Fprintf(b, "| arm | lost | corrupted, then lost | Fisher p on losses vs %s | difference if lost sessions were labelled | tipping point |\n|---|---:|---:|---:|---|---|\n", base.Name)
	for i, a := range v.Arms {
		lossP, bounds, tip := "–", "–", "–"
		if c := a.Compare; c != nil && c.Tipping != nil {
			t := c.Tipping
			lossP = pval(t.LossP)
			bounds = pointsInterval(t.Bounds.Lo, t.Bounds.Hi)
			tip = t.Sentence(a.Name)
		}
		name := a.Name
		if i == v.Baseline {
			name += " (baseline)"
		}
		fmt.Fprintf(b, "| %s | %d of %d (%s) | %d | %s | %s | %s |\n", name, a.Lost, a.Planned, pct(float64(a.Lost)/float64(max(a.Planned, 1))),
			a.CorruptedThenLost, lossP, bounds, tip)
	}
}

// factorialSection is the factorial model in one table: every main effect and two-way
// interaction, on the risk-difference scale (interactions) and the log-odds scale
// (Firth), each with its p, and `–` where a scale shows nothing.
func (v markdownWriter) factorialSection() {
	b := v.b
	f := v.Factorial
	fmt.Fprintf(b, "\n## Factorial model\n\n")
	var refs []string
	for _, name := range f.Result.Factors {
		r := f.Reference[name]
		refs = append(refs, fmt.Sprintf("%s: %s → %s", name, r[0], r[1]))
	}
	fmt.Fprintf(b, "Levels compared: %s. Interactions on the risk-difference scale (pooled over any other factor; MOVER-Wilson interval) say how much the first factor's effect on the corruption rate changes with the second; the log-odds scale is a Firth-penalized logistic regression on every main effect and two-way interaction (factors coded -1/2 and +1/2, penalized likelihood-ratio p), which stays finite when a cell has no corrupted session. Every number here counts sessions, as if sessions of one launch were independent: it describes these launches and claims nothing (%s). Claims are made on launches only, each cell against the baseline (the Claims section): a corruption confined to one cell shows there as that cell alone.\n\n", strings.Join(refs, "; "), f.Family.Description)
	conf := fmt.Sprintf("%.0f%% CI", 100*(1-v.Alpha))
	// Each scale shows its own p; the adjusted one is that of the term's claim, so that
	// it is never below the p beside it on the same scale.
	fmt.Fprintf(b, "| term | change in corruption rate (sessions) | %s | p (risk difference) | odds ratio | 95%% CI | p (log-odds) | Holm-adjusted p |\n|---|---:|---|---:|---:|---|---:|---:|\n", conf)
	additive := map[string]AdditiveInteraction{}
	for _, ai := range f.Additive {
		additive[ai.A+"\x00"+ai.B] = ai
		additive[ai.B+"\x00"+ai.A] = ai
	}
	for _, t := range f.Result.Terms {
		rd, rdCI, rdP := "", "", ""
		if len(t.Factors) == 2 {
			if ai, ok := additive[t.Factors[0]+"\x00"+t.Factors[1]]; ok {
				r := ai.Result
				rd, rdP = points(r.Estimate), pval(r.P)
				rdCI = interactionInterval(r.CI.Lo, r.CI.Hi)
				if ai.A != t.Factors[0] {
					// The model names a pair in name order; the interaction table in
					// factor order. Same interaction, same number.
					rdCI += fmt.Sprintf(" (%s's effect across %s)", ai.A, ai.B)
				}
			}
		}
		// The claim this term makes in the family: a main effect on the log-odds scale,
		// an interaction on the risk-difference scale.
		or, adj := num(math.Exp(t.Estimate)), "–"
		if len(t.Factors) == 1 {
			if cl, ok := f.Claim(stats.ClaimMainEffect, t.Factors[0], stats.ScaleLogOdds); ok {
				adj = pval(cl.AdjustedP)
			}
		} else if ai, ok := additive[t.Factors[0]+"\x00"+t.Factors[1]]; ok {
			adj = pval(ai.AdjustedP)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", factorLabel(t), dash(rd), dash(rdCI), dash(rdP), or,
			ratioInterval(math.Exp(t.CI.Lo), math.Exp(t.CI.Hi)), pval(t.P), adj)
	}
	if note := sharedPNote(f.Result.Terms); note != "" {
		fmt.Fprintf(b, "\n%s\n", note)
	}
	if bad := v.inconclusiveArms(); len(bad) > 0 {
		fmt.Fprintf(b, "\nThe model counts the sessions that survived in %s, which is inconclusive.\n", joinAnd(bad))
	}
}

// sharedPNote explains terms that share one p-value. With corrupted sessions in only a few
// cells, the data are symmetric in the factors involved: dropping any one of those terms
// from the penalized model costs the same likelihood, so their tests coincide (checked
// against an independent fit, testdata/firth_symmetry.py). It is a property of the data,
// not a fault, and a reader must know the model cannot tell those terms apart.
func sharedPNote(terms []stats.FactorialTerm) string {
	groups := map[string][]string{}
	var order []string
	for _, t := range terms {
		k := fmt.Sprintf("%.9g", t.P)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], factorLabel(t))
	}
	var parts []string
	for _, k := range order {
		if len(groups[k]) > 1 {
			parts = append(parts, joinAnd(groups[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Equal log-odds p-values (%s) are not a fault: with the corrupted sessions in few cells, the data are symmetric in those terms, so the penalized model cannot tell them apart; the corruption by arm above shows where the corruption is.",
		strings.Join(parts, "; "))
}

func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case math.IsInf(x, 1):
		return "∞"
	case math.IsInf(x, -1):
		return "-∞"
	case x != 0 && (math.Abs(x) >= 1000 || math.Abs(x) < 0.01):
		return fmt.Sprintf("%.2g", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// firstCharged is the first look (1-based) given a level; 0 when none is.
func firstCharged(levels []float64) int {
	for k, l := range levels {
		if l > 0 {
			return k + 1
		}
	}
	return 0
}
