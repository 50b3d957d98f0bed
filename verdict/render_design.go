package verdict

import (
	"fmt"
	"math"
	"strings"
)

// designSections writes the sections of the design-dependent analyses.
func (v *Verdict) designSections(b *strings.Builder) {
	base := v.Arms[v.Baseline].Name
	if uv := v.UnitView; uv != nil {
		fmt.Fprintf(b, "\n## Unit of analysis: %s\n\n", uv.Unit)
		what := map[string]string{"response": "responses, clustered in sessions", "launch": "sessions, clustered in launches (engine runs)"}[uv.Unit]
		fmt.Fprintf(b, "The spec counts %s. Items of one cluster are correlated, so the test divides the chi-square by the design effect (first-order Rao-Scott).\n\n", what)
		fmt.Fprintf(b, "| arm | corrupted | of | clusters | intra-cluster correlation | design effect | naive p | Rao-Scott p |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, a := range v.Arms {
			fmt.Fprintf(b, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", a.Name, uv.Events[i], uv.N[i], uv.Clusters[i],
				num(uv.ICC[i]), num(uv.DE[i]), pval(uv.NaiveP[i]), pval(uv.P[i]))
		}
		if uv.Fallback != "" {
			fmt.Fprintf(b, "\nThe clustered test could not be computed: %s.\n", uv.Fallback)
		}
	}

	if len(v.Sequential) > 0 {
		fmt.Fprintf(b, "\n## Sequential design\n\n")
		fmt.Fprintf(b, "%d looks, one after each block, with Lan-DeMets O'Brien-Fleming alpha spending on the exact test; an arm is judged at the first look whose Fisher p falls to the look's threshold.", v.Design.Looks)
		if v.StoppedEarly != "" {
			fmt.Fprintf(b, " Scheduling stopped early: %s", v.StoppedEarly)
		}
		fmt.Fprintf(b, "\n")
		for _, sv := range v.Sequential {
			fmt.Fprintf(b, "\n**%s** against %s:\n\n| look | information | threshold | Fisher p | crossed |\n|---:|---:|---:|---:|---|\n", sv.Arm, base)
			for k, bd := range sv.Design {
				p, crossed := "–", "not taken"
				if k < len(sv.Result.Looks) {
					l := sv.Result.Looks[k]
					p = pval(l.P)
					crossed = map[bool]string{true: "**yes**", false: "no"}[l.Crossed]
				}
				fmt.Fprintf(b, "| %d | %.0f%% | %s | %s | %s |\n", bd.Look, 100*bd.Fraction, pval(bd.NominalP), p, crossed)
			}
			fmt.Fprintf(b, "\n%s\n", sv.Result.Decision)
		}
	}

	if len(v.Strata) > 0 {
		fmt.Fprintf(b, "\n## Stratified by block\n\nBlocks ran at different times; pooling within blocks (Cochran-Mantel-Haenszel) keeps a drift between blocks from passing for an arm effect.\n\n")
		fmt.Fprintf(b, "| arm | strata | CMH p | MH risk difference | %.0f%% CI | MH odds ratio | Breslow-Day p |\n|---|---:|---:|---:|---|---:|---:|\n", 100*(1-v.Alpha))
		for _, s := range v.Strata {
			r := s.Result
			fmt.Fprintf(b, "| %s | %d | %s | %+.1f pts | %+.1f to %+.1f pts | %s | %s |\n", s.Arm, r.Strata, pval(r.CMHP),
				100*r.RiskDifference, 100*r.RiskDifferenceCI.Lo, 100*r.RiskDifferenceCI.Hi, num(r.OddsRatio), pval(r.BreslowDayP))
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
		fmt.Fprintf(b, "\n## Factorial model\n\nFirth-penalized logistic regression of corrupted sessions on the factors (coded -1/2 and +1/2) and their two-way interactions; penalized likelihood-ratio tests. It stays finite when a cell has no corrupted session.\n\n")
		var refs []string
		for _, name := range f.Result.Factors {
			r := f.Reference[name]
			refs = append(refs, fmt.Sprintf("%s: %s → %s", name, r[0], r[1]))
		}
		fmt.Fprintf(b, "Levels compared: %s.\n\n", strings.Join(refs, "; "))
		fmt.Fprintf(b, "Interactions on the risk-difference scale (pooled over any other factor; MOVER-Wilson interval): how much the first factor's effect changes with the second.\n\n")
		fmt.Fprintf(b, "| interaction | effect of the first at the second's reference | at its other level | difference | %.0f%% CI | |\n|---|---:|---:|---:|---|---|\n", 100*(1-v.Alpha))
		for _, ai := range f.Additive {
			r := ai.Result
			mark := ""
			if r.Significant {
				mark = "**significant**"
			}
			fmt.Fprintf(b, "| %s x %s | %+.1f pts | %+.1f pts | %+.1f pts | %+.1f to %+.1f pts | %s |\n", ai.A, ai.B,
				100*r.EffectAt[0], 100*r.EffectAt[1], 100*r.Estimate, 100*r.CI.Lo, 100*r.CI.Hi, mark)
		}
		fmt.Fprintf(b, "\nThe same terms on the log-odds scale:\n\n")
		fmt.Fprintf(b, "| term | odds ratio | 95%% CI | p | |\n|---|---:|---|---:|---|\n")
		for _, t := range f.Result.Terms {
			mark := ""
			if t.P < v.Alpha {
				mark = "**significant**"
			}
			fmt.Fprintf(b, "| %s | %s | %s – %s | %s | %s |\n", factorLabel(t), num(math.Exp(t.Estimate)), num(math.Exp(t.CI.Lo)), num(math.Exp(t.CI.Hi)), pval(t.P), mark)
		}
	}

	if len(v.NonInferiority) > 0 {
		fmt.Fprintf(b, "\n## Non-inferiority (margin %.1f points)\n\n", 100*v.Design.Margin)
		for _, ni := range v.NonInferiority {
			fmt.Fprintf(b, "- %s\n", v.niSentence(ni, "**"))
		}
	}

	if len(v.Losses) > 0 {
		fmt.Fprintf(b, "\n## Lost sessions\n\nSessions lost to crashes, timeouts or errors carry no label. If losses differ between arms, or if labelling them could change the decision, the comparison is fragile.\n\n")
		fmt.Fprintf(b, "| arm | lost (arm) | lost (%s) | Fisher p on losses | difference if lost sessions were labelled |\n|---|---:|---:|---:|---|\n", base)
		for _, l := range v.Losses {
			r := l.Result
			fmt.Fprintf(b, "| %s | %s | %s | %s | %+.1f to %+.1f pts |\n", l.Arm, pct(r.LossRateB), pct(r.LossRateA), pval(r.LossP), 100*r.Bounds.Lo, 100*r.Bounds.Hi)
		}
	}
}

// noteOnce adds a caveat unless it is already there.
func (v *Verdict) noteOnce(s string) {
	for _, c := range v.Caveats {
		if c == s {
			return
		}
	}
	v.Caveats = append(v.Caveats, s)
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
