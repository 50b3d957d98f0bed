package verdict

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
)

// judge computes every arm's intervals, its comparison with the baseline, the
// response-level view and the caveats.
func (v *Verdict) judge() {
	// Intervals are 95% whatever alpha is, as their labels say; alpha sets decisions.
	const conf = 0.95
	for i := range v.Arms {
		a := &v.Arms[i]
		if a.Sessions > 0 {
			a.Rate = float64(a.Corrupted) / float64(a.Sessions)
			a.Wilson = stats.Wilson(a.Corrupted, a.Sessions, 0.95)
			a.Exact = stats.ClopperPearson(a.Corrupted, a.Sessions, 0.95)
		} else {
			a.Rate = math.NaN()
			a.Wilson = stats.Interval{Lo: math.NaN(), Hi: math.NaN()}
			a.Exact = a.Wilson
		}
	}
	base := v.Arms[v.Baseline]
	var ps []float64
	var compared []int
	for i := range v.Arms {
		a := &v.Arms[i]
		if i == v.Baseline || a.Sessions == 0 || base.Sessions == 0 {
			continue
		}
		f := stats.FisherExact(base.Corrupted, base.Sessions, a.Corrupted, a.Sessions)
		c := &Comparison{
			Difference: a.Rate - base.Rate,
			DiffCI:     stats.Newcombe(base.Corrupted, base.Sessions, a.Corrupted, a.Sessions, conf),
			FisherP:    f.PTwoSided,
			MidP:       f.MidP,
		}
		a.Compare = c
		ps = append(ps, c.FisherP)
		compared = append(compared, i)
	}
	adjusted := holm(ps)
	fdr := ps
	if len(ps) > 1 {
		if q, err := stats.BenjaminiHochberg(ps); err == nil {
			fdr = q
		}
	}
	for k, i := range compared {
		c := v.Arms[i].Compare
		c.AdjustedP = adjusted[k]
		c.FDRQ = fdr[k]
		c.Significant = c.AdjustedP < v.Alpha
		if c.Significant {
			c.Direction = "higher"
			if c.Difference < 0 {
				c.Direction = "lower"
			}
		}
	}
	v.responseView()
	v.analyseDesign(v.sessions, v.index)
	v.caveats()
}

// holm adjusts p-values for several comparisons with Holm's step-down method.
func holm(ps []float64) []float64 {
	if len(ps) <= 1 {
		return append([]float64(nil), ps...)
	}
	adj, err := stats.Holm(ps)
	if err != nil {
		// Fisher p-values are always in [0, 1]; an error here is a bug, so report the
		// unadjusted values rather than invent adjusted ones.
		return append([]float64(nil), ps...)
	}
	return adj
}

func (v *Verdict) responseView() {
	if len(v.Arms) != 2 {
		return
	}
	base, other := v.Arms[v.Baseline], v.Arms[1-v.Baseline]
	if len(base.clusters) < 2 || len(other.clusters) < 2 {
		return
	}
	rs, err := stats.RaoScott(base.clusters, other.clusters)
	if err != nil {
		return
	}
	nb, no := sumResponses(base.clusters), sumResponses(other.clusters)
	f := stats.FisherExact(base.CorruptedTurns, nb, other.CorruptedTurns, no)
	v.Responses = &ResponseView{
		Responses: []int{nb, no}, Corrupted: []int{base.CorruptedTurns, other.CorruptedTurns},
		FisherP: f.PTwoSided, ICC: rs.ICC, DesignEffect: rs.DesignEffect, RaoScottP: rs.P,
		Available: base.CorruptedTurns+other.CorruptedTurns > 0 && !math.IsNaN(rs.ICC),
	}
}

func sumResponses(cs []stats.ClusterCounts) int {
	n := 0
	for _, c := range cs {
		n += c.Responses
	}
	return n
}

func (v *Verdict) caveats() {
	add := func(format string, args ...any) { v.Caveats = append(v.Caveats, fmt.Sprintf(format, args...)) }
	if v.Experiment.Status != "done" {
		add("The experiment is **%s**: the counts cover only what was recorded before it stopped.", v.Experiment.Status)
	}
	for _, r := range v.Runs {
		if r.Superseded {
			continue
		}
		switch r.Status {
		case "crashed", "wedged", "erroring", "timed-out", "failed":
			add("Run %s/b%d %s: %s. Its unfinished sessions count as lost, not as clean.", r.Arm, r.Block, r.Status, dash(r.Error))
		}
	}
	for _, a := range v.Arms {
		if a.Sessions == 0 {
			add("Arm %s has no completed session: nothing can be said about it.", a.Name)
			continue
		}
		if a.Corrupted == 0 {
			add("Arm %s had no corrupted session in %d: that bounds its rate below %s (95%% exact upper bound), it does not show the rate is zero.",
				a.Name, a.Sessions, pct(a.Exact.Hi))
		}
	}
	lost := 0
	for _, a := range v.Arms {
		lost += a.Lost
	}
	if lost > 0 {
		var parts []string
		for _, a := range v.Arms {
			parts = append(parts, fmt.Sprintf("%s %d of %d", a.Name, a.Lost, a.Started))
		}
		add("Sessions lost to errors, timeouts or aborts: %s. An arm that loses more sessions can look cleaner than it is.", strings.Join(parts, ", "))
	}
	for _, a := range v.Arms {
		c := a.Compare
		if c == nil {
			continue
		}
		if !c.Significant && c.Difference != 0 {
			add("%s vs %s: not significant, but the 95%% interval of the difference runs from %+.1f to %+.1f points: differences that large are not ruled out by %d and %d sessions. `arbiter plan` says how many sessions would tell them apart.",
				a.Name, v.Arms[v.Baseline].Name, 100*c.DiffCI.Lo, 100*c.DiffCI.Hi, v.Arms[v.Baseline].Sessions, a.Sessions)
		}
		if !c.Significant && c.Difference == 0 {
			add("%s vs %s: identical rates; the interval of the difference (%+.1f to %+.1f pts) is how large a difference these sessions cannot rule out.",
				a.Name, v.Arms[v.Baseline].Name, 100*c.DiffCI.Lo, 100*c.DiffCI.Hi)
		}
	}
	for _, d := range v.Detectors {
		judged, turns := 0, 0
		for i, a := range v.Arms {
			judged += d.Evaluated[i]
			turns += a.Turns
		}
		if judged < turns {
			add("Detector %s judged %d of %d responses (it failed on the others, which count as clean for it): its counts are a lower bound.", d.Detector, judged, turns)
		}
	}
	for _, sv := range v.Sequential {
		if sv.Result.Significant && sv.Result.StoppedAt < len(sv.Design) {
			add("%s stopped early at look %d: the decision holds at alpha, but rates and differences estimated at an early stop tend to overstate the effect.", sv.Arm, sv.Result.StoppedAt)
			break
		}
	}
	if len(v.Arms) > 2 {
		add("%d arms were compared with the baseline; decisions use Holm-adjusted p-values over %d comparisons (family-wise error at alpha); the BH q-values bound the false discovery rate instead, for screening.", len(v.Arms), len(v.Arms)-1)
	}
}

// decision is the table cell for one comparison.
func (v *Verdict) decision(a ArmResult) string {
	c := a.Compare
	if c == nil {
		return ""
	}
	if c.Significant {
		return fmt.Sprintf("**%s** (p < %g)", c.Direction, v.Alpha)
	}
	return "no significant difference"
}

// sentence says one comparison in plain words, with the arm names in bold for markdown.
func (v *Verdict) sentence(a ArmResult) string {
	return v.sentenceMarked(a, "**")
}

func (v *Verdict) sentenceMarked(a ArmResult, mark string) string {
	base := v.Arms[v.Baseline]
	c := a.Compare
	s := fmt.Sprintf("%s%s%s corrupted %d of %d sessions (%s) against %d of %d (%s) for %s%s%s: a difference of %+.1f points (95%% CI %+.1f to %+.1f). ",
		mark, a.Name, mark, a.Corrupted, a.Sessions, pct(a.Rate), base.Corrupted, base.Sessions, pct(base.Rate), mark, base.Name, mark,
		100*c.Difference, 100*c.DiffCI.Lo, 100*c.DiffCI.Hi)
	switch {
	case c.Sequential:
		for _, sv := range v.Sequential {
			if sv.Arm == a.Name {
				return s + sv.Result.Decision
			}
		}
	case c.UnitDecides:
		test := fmt.Sprintf("Counting %ss, corrected for their clustering (Rao-Scott), gives p = %s", v.Unit, pval(c.AdjustedP))
		if c.Significant {
			return s + fmt.Sprintf("%s, below alpha = %g: %s's rate is significantly %s.", test, v.Alpha, a.Name, c.Direction)
		}
		return s + fmt.Sprintf("%s, not below alpha = %g: no significant difference was shown, which is not the same as showing there is none.", test, v.Alpha)
	}
	if c.Significant {
		return s + fmt.Sprintf("Fisher's exact test gives p = %s, below alpha = %g: %s's rate is significantly %s.", pval(c.AdjustedP), v.Alpha, a.Name, c.Direction)
	}
	return s + fmt.Sprintf("Fisher's exact test gives p = %s, not below alpha = %g: no significant difference was shown, which is not the same as showing there is none.", pval(c.AdjustedP), v.Alpha)
}

// interactionSentence names an interaction the data show, on either scale; empty when
// neither shows one.
func (v *Verdict) interactionSentence(ai AdditiveInteraction, mark string) string {
	var logOdds *float64
	for _, t := range v.Factorial.Result.Terms {
		if len(t.Factors) == 2 && ((t.Factors[0] == ai.A && t.Factors[1] == ai.B) || (t.Factors[0] == ai.B && t.Factors[1] == ai.A)) {
			p := t.P
			logOdds = &p
		}
	}
	r := ai.Result
	ref := v.Factorial.Reference
	name := fmt.Sprintf("%s%s x %s interaction%s", mark, ai.A, ai.B, mark)
	switch {
	case r.Significant:
		s := fmt.Sprintf("The factorial analysis finds a %s: %s=%s changes the corruption rate by %+.1f points with %s=%s and by %+.1f points with %s=%s (difference %+.1f points, %.0f%% CI %+.1f to %+.1f).",
			name, ai.A, ref[ai.A][1], 100*r.EffectAt[1], ai.B, ref[ai.B][1], 100*r.EffectAt[0], ai.B, ref[ai.B][0],
			100*r.Estimate, 100*(1-v.Alpha), 100*r.CI.Lo, 100*r.CI.Hi)
		if logOdds != nil {
			if *logOdds < v.Alpha {
				s += fmt.Sprintf(" The Firth logistic model agrees on the log-odds scale (p = %s).", pval(*logOdds))
			} else {
				s += fmt.Sprintf(" On the log-odds scale (Firth model) it is not significant (p = %s): cells without any corrupted session leave the odds scale uninformative.", pval(*logOdds))
			}
		}
		return s
	case logOdds != nil && *logOdds < v.Alpha:
		return fmt.Sprintf("The Firth logistic model finds a %s on the log-odds scale (penalized likelihood-ratio p = %s), though not on the risk-difference scale.", name, pval(*logOdds))
	}
	return ""
}

// Headline is the verdict in a few plain lines, for the terminal.
func (v *Verdict) Headline() []string { return v.headline("") }

func (v *Verdict) headline(mark string) []string {
	var lines []string
	// A factorial experiment is run to find which combination matters: say that first.
	if f := v.Factorial; f != nil {
		for _, ai := range f.Additive {
			if line := v.interactionSentence(ai, mark); line != "" {
				lines = append(lines, line)
			}
		}
	}
	for _, a := range v.Arms {
		if a.Compare == nil {
			continue
		}
		lines = append(lines, v.sentenceMarked(a, mark))
	}
	for _, ni := range v.NonInferiority {
		lines = append(lines, v.niSentence(ni, mark))
	}
	if len(lines) == 0 {
		var parts []string
		for _, a := range v.Arms {
			parts = append(parts, fmt.Sprintf("%s %d of %d sessions corrupted (%d lost)", a.Name, a.Corrupted, a.Sessions, a.Lost))
		}
		what := "No comparison was possible"
		if len(v.Arms) == 1 {
			what = "One arm, nothing to compare"
		}
		lines = append(lines, fmt.Sprintf("%s: %s.", what, strings.Join(parts, "; ")))
	}
	return lines
}

// niSentence says a non-inferiority judgement in the arms' names.
func (v *Verdict) niSentence(ni NIView, mark string) string {
	r := ni.Result
	base := v.Arms[v.Baseline].Name
	level := fmt.Sprintf("%g%%", 100*(1-r.Alpha))
	if r.NonInferior {
		return fmt.Sprintf("%s%s is non-inferior to %s%s: its corruption rate is at most %+.1f points above %s's (one-sided %s upper bound), inside the margin of %.1f points.",
			mark, ni.Arm, base, mark, 100*r.Upper, base, level, 100*r.Margin)
	}
	return fmt.Sprintf("Non-inferiority of %s%s%s to %s not shown: its corruption rate may be up to %+.1f points above %s's (one-sided %s upper bound), beyond the margin of %.1f points; this is not evidence that it is worse, only that these sessions cannot rule it out.",
		mark, ni.Arm, mark, base, 100*r.Upper, base, level, 100*r.Margin)
}

// Summary is the verdict's machine-readable form (`--json`).
func (v *Verdict) Summary() map[string]any {
	arms := []map[string]any{}
	for _, a := range v.Arms {
		m := map[string]any{"name": a.Name, "pins": a.Pins, "sessions": a.Sessions, "lost": a.Lost,
			"corrupted": a.Corrupted, "rate": nanNil(a.Rate), "wilson95": []any{nanNil(a.Wilson.Lo), nanNil(a.Wilson.Hi)},
			"clopper_pearson95": []any{nanNil(a.Exact.Lo), nanNil(a.Exact.Hi)}, "baseline": a.Name == v.Arms[v.Baseline].Name}
		if a.Levels != nil {
			m["levels"] = a.Levels
		}
		if c := a.Compare; c != nil {
			m["vs_baseline"] = map[string]any{"difference": c.Difference, "newcombe95": []float64{c.DiffCI.Lo, c.DiffCI.Hi},
				"fisher_p": c.FisherP, "adjusted_p": c.AdjustedP, "significant": c.Significant, "direction": c.Direction}
		}
		arms = append(arms, m)
	}
	return map[string]any{"experiment_id": v.Experiment.ID, "name": v.Experiment.Name, "status": v.Experiment.Status,
		"unit": v.Unit, "alpha": v.Alpha, "arms": arms, "caveats": append([]string{}, v.Caveats...)}
}

func nanNil(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

var gates = map[string]string{
	"regression": "an arm's corruption rate is significantly higher than the baseline's",
	"difference": "an arm's corruption rate differs significantly from the baseline's, either way",
	"corruption": "any session of any arm was corrupted",
	"loss":       "any session was lost, or any run crashed, wedged or failed",
}

// Gates lists the names --fail-on accepts.
func Gates() []string {
	var names []string
	for n := range gates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// IsGate reports whether name is a gate.
func IsGate(name string) bool { _, ok := gates[name]; return ok }

// Gate reports whether the verdict fails the named gate, and why.
func (v *Verdict) Gate(name string) (bool, string) {
	switch name {
	case "regression", "difference":
		// A gate that cannot compare must not pass: no data is not a clean result.
		for i, a := range v.Arms {
			if i != v.Baseline && a.Compare == nil {
				return true, fmt.Sprintf("%s could not be compared with %s (%d and %d analysed sessions)", a.Name, v.Arms[v.Baseline].Name, a.Sessions, v.Arms[v.Baseline].Sessions)
			}
		}
		for _, a := range v.Arms {
			if c := a.Compare; c != nil && c.Significant && (name == "difference" || c.Direction == "higher") {
				return true, v.sentence(a)
			}
		}
	case "corruption":
		for _, a := range v.Arms {
			if a.Corrupted > 0 {
				return true, fmt.Sprintf("%s: %d of %d sessions corrupted", a.Name, a.Corrupted, a.Sessions)
			}
		}
	case "loss":
		for _, r := range v.Runs {
			if r.Status != "done" && !r.Superseded {
				return true, fmt.Sprintf("run %s/b%d %s", r.Arm, r.Block, r.Status)
			}
		}
		for _, a := range v.Arms {
			if a.Lost > 0 {
				return true, fmt.Sprintf("%s lost %d sessions", a.Name, a.Lost)
			}
		}
	}
	return false, ""
}
