package verdict

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// judge computes every arm's intervals, its comparison with the baseline, the
// response-level view, the design's analyses, which decisions are inconclusive, and the
// caveats.
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
		c.Significant = stats.Reject(c.AdjustedP, v.Alpha)
		if c.Significant {
			c.Direction = "higher"
			if c.Difference < 0 {
				c.Direction = "lower"
			}
		}
	}
	v.responseView()
	v.analyseDesign(v.sessions, v.index)
	// After the design's analyses, which may replace a decision (a sequential boundary,
	// a clustered unit): an arm whose engine crashed, wedged or lost too much has no
	// decision, whatever the tests say about what survived.
	for i := range v.Arms {
		c := v.Arms[i].Compare
		if c == nil {
			continue
		}
		c.Inconclusive, c.Why = v.inconclusive(i)
		c.Tipping = v.tipping(i)
		c.Faults = v.launchComparison(i)
	}
	v.judgeLaunches()
	v.caveats()
}

// inconclusive says whether the comparison of arm i with the baseline can decide, and
// why not.
func (v *Verdict) inconclusive(i int) (bool, string) {
	var why []string
	for _, k := range []int{i, v.Baseline} {
		a := v.Arms[k]
		if len(a.Problems) > 0 && !(k == v.Baseline && k == i) {
			why = append(why, a.Name+": "+strings.Join(a.Problems, "; "))
		}
	}
	return len(why) > 0, strings.Join(why, "; ")
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

// TippingPoint is how far the lost sessions could move a decision: Fisher's exact test
// re-run with every lost session of both arms counted, labelled against the decision, and
// the fewest lost sessions that must be corrupted to change it.
type TippingPoint struct {
	LostArm, LostBase int
	// LossP is Fisher's exact p of lost against planned sessions, arm against baseline:
	// lost sessions are missing at random only if the arms lose alike.
	LossP float64
	// Bounds are the extremes of the rate difference over every planned session: Lo with
	// every lost arm session clean and every lost baseline session corrupted, Hi the
	// reverse.
	Bounds stats.Interval
	// From is the exact test's decision on the analysed sessions ("higher", "lower",
	// "none"), at the level the comparison was decided at.
	From string
	// Sessions is the fewest lost sessions of Side that, counted corrupted while every
	// other lost session is counted clean, change the decision to To; -1 when no
	// labelling of the lost sessions changes it.
	Sessions int
	Side     string
	To       string
}

// tipping computes the tipping point of arm i against the baseline; nil when neither
// lost a session.
func (v *Verdict) tipping(i int) *TippingPoint {
	a, b := v.Arms[i], v.Arms[v.Baseline]
	c := a.Compare
	if a.Lost == 0 && b.Lost == 0 {
		return nil
	}
	// The level the decision was taken at: Holm multiplies an arm's p by its rank's
	// factor, so the exact test alone decides at alpha·p/p_adjusted.
	level := v.Alpha
	if c.AdjustedP > 0 && c.FisherP > 0 && c.AdjustedP > c.FisherP {
		level = v.Alpha * c.FisherP / c.AdjustedP
	}
	decide := func(base, arm, baseN, armN int) string {
		p := stats.FisherExact(base, baseN, arm, armN).PTwoSided
		if !stats.Reject(p, level) {
			return "none"
		}
		if float64(arm)/float64(armN) > float64(base)/float64(baseN) {
			return "higher"
		}
		return "lower"
	}
	t := &TippingPoint{LostArm: a.Lost, LostBase: b.Lost, Sessions: -1,
		From: decide(b.Corrupted, a.Corrupted, b.Sessions, a.Sessions)}
	nb, na := b.Sessions+b.Lost, a.Sessions+a.Lost
	t.LossP = stats.FisherExact(b.Lost, nb, a.Lost, na).PTwoSided
	t.Bounds = stats.Interval{
		Lo: float64(a.Corrupted)/float64(na) - float64(b.Corrupted+b.Lost)/float64(nb),
		Hi: float64(a.Corrupted+a.Lost)/float64(na) - float64(b.Corrupted)/float64(nb),
	}
	// armSide: the arm's lost sessions are counted corrupted (k of them), the baseline's
	// clean; otherwise the reverse.
	search := func(armSide bool, stop func(string) bool) (int, string) {
		lost := b.Lost
		if armSide {
			lost = a.Lost
		}
		for k := 0; k <= lost; k++ {
			d := decide(b.Corrupted+k, a.Corrupted, nb, na)
			if armSide {
				d = decide(b.Corrupted, a.Corrupted+k, nb, na)
			}
			if stop(d) {
				return k, d
			}
		}
		return -1, ""
	}
	switch t.From {
	case "higher":
		t.Side = b.Name
		t.Sessions, t.To = search(false, func(d string) bool { return d != "higher" })
	case "lower":
		t.Side = a.Name
		t.Sessions, t.To = search(true, func(d string) bool { return d != "lower" })
	default:
		ka, da := search(true, func(d string) bool { return d == "higher" })
		kb, db := search(false, func(d string) bool { return d == "lower" })
		switch {
		case ka >= 0 && (kb < 0 || ka <= kb):
			t.Side, t.Sessions, t.To = a.Name, ka, da
		case kb >= 0:
			t.Side, t.Sessions, t.To = b.Name, kb, db
		}
	}
	if t.Sessions < 0 {
		t.Side, t.To = "", ""
	}
	return t
}

// Sentence says the tipping point in plain words; arm is the compared arm's name. It
// speaks of what the exact test would find, never of a decision, since it describes
// sessions that carry no label.
func (t *TippingPoint) Sentence(arm string) string {
	switch {
	case t.Sessions < 0 && t.From == "none":
		return "no labelling of the lost sessions would make the difference significant"
	case t.Sessions < 0:
		return "no labelling of the lost sessions would change the decision"
	case t.Sessions == 0:
		return "counted as clean, the lost sessions alone would already " + t.outcome(arm)
	}
	n := t.LostBase
	if t.Side == arm {
		n = t.LostArm
	}
	return fmt.Sprintf("%d of the %d lost %s sessions would have to be corrupted (every other lost session counted clean) to %s",
		t.Sessions, n, t.Side, t.outcome(arm))
}

// outcome is what the re-run exact test would then find.
func (t *TippingPoint) outcome(arm string) string {
	switch t.To {
	case "higher":
		return fmt.Sprintf("make the exact test find %s's rate higher", arm)
	case "lower":
		return fmt.Sprintf("make the exact test find %s's rate lower", arm)
	}
	return "take the difference below significance"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// launchComparison tests arm i's crashed or wedged launches against the baseline's.
// Interrupted launches are left out: the user, not the engine, ended them.
func (v *Verdict) launchComparison(i int) LaunchComparison {
	a, b := v.Arms[i].Launches, v.Arms[v.Baseline].Launches
	lc := LaunchComparison{Faulted: a.Faulted(), Launches: a.Judged(),
		BaseFaulted: b.Faulted(), BaseLaunches: b.Judged(), FisherP: math.NaN()}
	if lc.Launches > 0 && lc.BaseLaunches > 0 {
		lc.FisherP = stats.FisherExact(lc.BaseFaulted, lc.BaseLaunches, lc.Faulted, lc.Launches).PTwoSided
		lc.Significant = stats.Reject(lc.FisherP, v.Alpha)
	}
	return lc
}

func (v *Verdict) responseView() {
	if len(v.Arms) != 2 {
		return
	}
	base, other := v.Arms[v.Baseline], v.Arms[1-v.Baseline]
	if len(base.clusters) < 2 || len(other.clusters) < 2 {
		return
	}
	don, err := stats.DonnerAdjusted(base.clusters, other.clusters)
	if err != nil {
		return
	}
	nb, no := sumResponses(base.clusters), sumResponses(other.clusters)
	f := stats.FisherExact(base.CorruptedTurns, nb, other.CorruptedTurns, no)
	v.Responses = &ResponseView{
		Responses: []int{nb, no}, Corrupted: []int{base.CorruptedTurns, other.CorruptedTurns},
		FisherP: f.PTwoSided, ICC: don.ICC, DesignEffect: don.DesignEffect, DonnerP: don.P,
		Available: base.CorruptedTurns+other.CorruptedTurns > 0 && !math.IsNaN(don.ICC),
	}
}

func sumResponses(cs []stats.ClusterCounts) int {
	n := 0
	for _, c := range cs {
		n += c.Responses
	}
	return n
}

// Caveats are ranked: what can overturn the verdict first, what qualifies a number last.
const (
	rankProblem      = iota // an arm crashed, wedged or lost too much
	rankStatus              // the experiment did not finish
	rankLoss                // lost sessions and what they could change
	rankDesign              // the design's own warnings
	rankDetector            // a detector that did not judge every response
	rankPower               // not significant, but not ruled out either
	rankBound               // no corrupted session: a bound, not a zero
	rankMultiplicity        // how several comparisons were adjusted
)

type caveat struct {
	rank int
	text string
}

// caveats merges what every analysis noted into one ranked list, each point once.
func (v *Verdict) caveats() {
	var cs []caveat
	add := func(rank int, format string, args ...any) {
		cs = append(cs, caveat{rank, fmt.Sprintf(format, args...)})
	}
	// The design's analyses (design.go) noted theirs as plain text, ranked with the
	// design. Its two notes on lost sessions (unequal losses, a decision that labelling
	// them could change) say over recorded sessions what lossCaveat says over planned ones,
	// in the same point as the tipping point; they are left to it.
	for _, text := range v.Caveats {
		if strings.Contains(text, "lost significantly more or fewer sessions") || strings.Contains(text, "had the lost sessions been labelled") {
			continue
		}
		if !strings.HasSuffix(text, ".") {
			text += "."
		}
		cs = append(cs, caveat{rankDesign, text})
	}
	if len(v.Design.PinsUnverified) > 0 {
		add(rankProblem, "Pins not verified: the engines that already ran did not report %s, so the arms are taken to run as declared there.", strings.Join(v.Design.PinsUnverified, "; "))
	}
	if u := v.unverifiedPins(); u != "" && len(v.Design.PinsUnverified) == 0 {
		add(rankProblem, "Pins not verified: no report of the engines confirmed %s, so those arms are taken to run as pinned.", u)
	}
	var faulted []string
	for _, r := range v.Runs {
		if r.Superseded {
			continue
		}
		if r.Status.EngineFault() || r.Status == store.RunFailed {
			faulted = append(faulted, fmt.Sprintf("%s/b%d %s (%s)", r.Arm, r.Block, r.Status, dash(r.Error)))
		}
	}
	if len(faulted) > 0 {
		add(rankProblem, "Launches that did not finish: %s. Their unfinished sessions count as lost, not as clean, and are not analysed.", strings.Join(faulted, "; "))
	}
	v.placementCaveats(add)
	switch st := v.Experiment.State(); st {
	case store.ExperimentDone:
	case store.ExperimentAbandoned:
		add(rankStatus, "The experiment is **abandoned**: the arbiter running it stopped renewing its lease (killed, or its machine went away); the counts cover only what was recorded before that. `%s` finishes it.", Command(fmt.Sprintf("resume %d", v.Experiment.ID), v.DB))
	default:
		add(rankStatus, "The experiment is **%s**: the counts cover only what was recorded before it stopped.", st)
	}
	for _, a := range v.Arms {
		if a.Sessions == 0 {
			add(rankProblem, "Arm %s has no analysed session: nothing can be said about its corruption.", a.Name)
		}
	}
	v.lossCaveat(add)
	for _, sv := range v.Sequential {
		if sv.Stopped > 0 && sv.Stopped < sv.Looks {
			add(rankDesign, "The experiment stopped early at look %d: rates and differences estimated at an early stop tend to overstate the effect.", sv.Stopped)
			break
		}
	}
	for _, d := range v.Detectors {
		judged, turns := 0, 0
		for i, a := range v.Arms {
			judged += d.Evaluated[i]
			turns += a.Turns
		}
		if judged < turns {
			add(rankDetector, "Detector %s judged %d of %d responses (it failed on the others, which count as clean for it): its counts are a lower bound.", d.Detector, judged, turns)
		}
	}
	v.powerCaveat(add)
	v.boundCaveat(add)
	v.outcomeCaveats(add)
	v.conditionsCaveat(add)
	v.launchCaveat(add)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].rank < cs[j].rank })
	seen := map[string]bool{}
	v.Caveats = v.Caveats[:0]
	for _, c := range cs {
		if !seen[c.text] {
			seen[c.text] = true
			v.Caveats = append(v.Caveats, c.text)
		}
	}
}

// lossCaveat says, in one point, which arms lost sessions, whether they lost alike, and
// what labelling the lost sessions could change.
func (v *Verdict) lossCaveat(add func(int, string, ...any)) {
	var parts []string
	for _, a := range v.Arms {
		if a.Lost == 0 {
			continue
		}
		p := fmt.Sprintf("%s %d of %d", a.Name, a.Lost, a.Planned)
		if a.CorruptedThenLost > 0 {
			p += fmt.Sprintf(" (%d corrupted before %s lost)", a.CorruptedThenLost, map[bool]string{true: "it was", false: "they were"}[a.CorruptedThenLost == 1])
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return
	}
	text := fmt.Sprintf("Sessions lost (not analysed): %s. A lost session carries no verdict, and one corrupted before it was lost is not counted as corrupted, or every crash would leave only its corrupted sessions behind.", joinAnd(parts))
	base := v.Arms[v.Baseline]
	var tips []string
	for _, a := range v.Arms {
		c := a.Compare
		if c == nil || c.Tipping == nil {
			continue
		}
		t := c.Tipping
		if stats.Reject(t.LossP, v.Alpha) {
			text += fmt.Sprintf(" %s lost significantly %s sessions than %s (%d of %d against %d of %d, Fisher p %s): the arms are not compared on equal footing, and the lost sessions may be the fault itself.",
				a.Name, map[bool]string{true: "more", false: "fewer"}[lossShare(&a) > lossShare(&base)], base.Name,
				a.Lost, a.Planned, base.Lost, base.Planned, pEq(t.LossP))
		}
		if !c.Inconclusive {
			tips = append(tips, fmt.Sprintf("for %s, %s", a.Name, t.Sentence(a.Name)))
		}
	}
	if len(tips) > 0 {
		text += " Re-running the exact test with the lost sessions counted: " + strings.Join(tips, "; ") + "."
	}
	add(rankLoss, "%s", text)
}

// powerCaveat says once that comparisons without a significant difference did not show
// the arms equal, with the largest difference each cannot rule out.
func (v *Verdict) powerCaveat(add func(int, string, ...any)) {
	var parts []string
	for _, a := range v.Arms {
		c := a.Compare
		if c == nil || c.Significant || c.Inconclusive || c.Launch == nil || !c.Launch.Testable {
			continue
		}
		lc := c.Launch
		if math.Max(math.Abs(lc.CI.Lo), math.Abs(lc.CI.Hi)) < 0.001 {
			continue // an interval of zero width rules every difference out
		}
		parts = append(parts, fmt.Sprintf("%s (%s to %s points)", a.Name, signedNum(100*lc.CI.Lo), signedNum(100*lc.CI.Hi)))
	}
	if len(parts) == 0 {
		return
	}
	add(rankPower, "No difference shown is not the same as no difference: the launch intervals against %s, at each claim's level, still include differences as large as %s. `arbiter plan` says how many launches per arm would tell such differences apart.",
		v.Arms[v.Baseline].Name, joinAnd(parts))
}

// boundCaveat says once, for every arm without a corrupted session, that zero seen is a
// bound and not a zero.
func (v *Verdict) boundCaveat(add func(int, string, ...any)) {
	type group struct {
		n     int
		bound string
		arms  []string
	}
	var groups []*group
	for _, a := range v.Arms {
		if a.Sessions == 0 || a.Corrupted != 0 {
			continue
		}
		b := pct(a.Exact.Hi)
		var g *group
		for _, x := range groups {
			if x.n == a.Sessions && x.bound == b {
				g = x
			}
		}
		if g == nil {
			g = &group{n: a.Sessions, bound: b}
			groups = append(groups, g)
		}
		g.arms = append(g.arms, a.Name)
	}
	for _, g := range groups {
		if len(g.arms) == 1 {
			add(rankBound, "%s had no corrupted session in %d: that bounds its rate below %s (95%% exact upper bound); it does not show the rate is zero.", g.arms[0], g.n, g.bound)
			continue
		}
		add(rankBound, "%s had no corrupted session in %d each: that bounds each rate below %s (95%% exact upper bound); it does not show the rates are zero.", joinAnd(g.arms), g.n, g.bound)
	}
}

// decision is the table cell for one comparison: the direction when significant, `~`
// when nothing was shown (benchstat's mark), or why no decision is possible.
func (v *Verdict) decision(a ArmResult) string {
	c := a.Compare
	if c == nil {
		return "no comparison"
	}
	switch c.Decision() {
	case "inconclusive":
		return "**inconclusive**"
	case "higher", "lower":
		return fmt.Sprintf("**%s**", c.Direction)
	}
	if c.Launch == nil || !c.Launch.Testable {
		return "not attributable"
	}
	return "~"
}

// pLabel names the test that decided a comparison, for a sentence: "The randomization
// test on the launches' corruption rates gives p = 0.029".
func (v *Verdict) pLabel(c *Comparison) string {
	return fmt.Sprintf("The randomization test on the launches' corruption rates gives p %s", pEq(c.AdjustedP))
}

// levelClause is how a claim's p is weighed: "≤ 0.03, this claim's share of alpha 0.05".
func (v *Verdict) levelClause(lc *LaunchClaim) string {
	op := ">"
	if stats.Reject(lc.P, lc.Level) {
		op = "≤"
	}
	looks := ""
	if lc.Level < v.claimShare(lc)*(1-1e-9) {
		looks = fmt.Sprintf(", divided over %d looks", v.Design.Looks)
	}
	return fmt.Sprintf("%s %s, this claim's share of alpha %g%s", op, levelText(lc.Level), v.Alpha, looks)
}

// claimShare is a claim's share of alpha before a sequential design divides it over
// its looks.
func (v *Verdict) claimShare(lc *LaunchClaim) float64 {
	if v.Design.Looks > 1 {
		return lc.Level * float64(v.Design.Looks)
	}
	return lc.Level
}

// against compares p with alpha in symbols a reader checks at a glance.
// counted is "9 of 60 sessions (15.0%)".
func counted(a ArmResult) string {
	return fmt.Sprintf("%d of %d sessions (%s)", a.Corrupted, a.Sessions, pct(a.Rate))
}

// evidence is the sentence with one comparison's counts and difference: on launches
// when they can test it, else on the sessions of these launches, said as such.
func (v *Verdict) evidence(a ArmResult, mark string) string {
	base := v.Arms[v.Baseline]
	c := a.Compare
	lead := fmt.Sprintf("%s corrupted %s against %d of %d (%s) for %s", bold(a.Name, mark), counted(a), base.Corrupted, base.Sessions,
		pct(base.Rate), bold(base.Name, mark))
	if lc := c.Launch; lc != nil && lc.Testable {
		lo, hi, label := v.diffInterval(a)
		return fmt.Sprintf("%s, over %d and %d launches: the launches' rates differ by %s points (%s %s to %s).",
			lead, lc.LaunchesArm, lc.LaunchesBase, signedNum(100*lc.Estimate), label, signedNum(100*lo), signedNum(100*hi))
	}
	return fmt.Sprintf("%s: a difference of %+.1f points (Fisher's exact test on these sessions: p %s).", lead, 100*c.Difference, pEq(c.FisherP))
}

// diffInterval is the interval the headline gives for a difference, and its label: the
// launch test's own interval, at the level the claim is tested at, so that it excludes 0
// exactly when the claim is made (after a sequential stop too); the sessions' Newcombe
// interval when the launches cannot test the claim.
func (v *Verdict) diffInterval(a ArmResult) (lo, hi float64, label string) {
	c := a.Compare
	if lc := c.Launch; lc != nil && lc.Testable {
		return lc.CI.Lo, lc.CI.Hi, fmt.Sprintf("%s%% CI", confText(1-lc.Level))
	}
	return c.DiffCI.Lo, c.DiffCI.Hi, "95% CI"
}

// confText is a confidence level in percent, short: "97", "99.4".
func confText(conf float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", 100*conf), "0"), ".")
}

// decisionSentence says how one comparison was decided, ending with the decision.
func (v *Verdict) decisionSentence(a ArmResult, mark string) string {
	c := a.Compare
	lc := c.Launch
	if lc == nil {
		return "No launch of one of the arms has an analysed session: nothing can be compared."
	}
	if !lc.Testable {
		return attributionSentence(lc)
	}
	if c.Significant {
		return fmt.Sprintf("%s %s: %s's corruption rate is significantly %s.", v.pLabel(c), v.levelClause(lc), a.Name, c.Direction)
	}
	return fmt.Sprintf("%s %s: no difference between the arms' launches is shown; the launches alone could differ this much.", v.pLabel(c), v.levelClause(lc))
}

func bold(s, mark string) string { return mark + s + mark }

// interactionShown says whether the headline may claim an interaction. No factorial
// term is claimed on launches yet: an interaction of launch rates has no exact
// randomization test (its null leaves the main effects free), and a t test on launch
// rates rejects a true null too often with few launches and rare events. The factorial
// section shows the session-level model as a description; the headline claims only what
// the launches test (each arm against the baseline).
func (v *Verdict) interactionShown(AdditiveInteraction) bool { return false }

// inconclusiveArms names the arms whose corruption cannot be judged.
func (v *Verdict) inconclusiveArms() []string {
	var names []string
	for _, a := range v.Arms {
		if len(a.Problems) > 0 {
			names = append(names, a.Name)
		}
	}
	return names
}

// interactionEvidence is the headline sentence naming the interactions shown, each with
// its Holm-adjusted p over the factorial family.
func (v *Verdict) interactionEvidence(shown []AdditiveInteraction, mark string) string {
	ref := v.Factorial.Reference
	conf := fmt.Sprintf("%.0f%% CI", 100*(1-v.Alpha))
	adjusted := func(ai AdditiveInteraction) string {
		return fmt.Sprintf("Holm-adjusted p %s over %d claims", pEq(ai.AdjustedP), v.Factorial.Family.Tested)
	}
	if len(shown) == 1 {
		ai := shown[0]
		r := ai.Result
		return fmt.Sprintf("The factorial analysis finds a %s interaction: %s=%s changes the corruption rate by %+.1f points with %s=%s and by %+.1f points with %s=%s (difference %+.1f points, %s %+.1f to %+.1f; %s).",
			bold(ai.A+" x "+ai.B, mark), ai.A, ref[ai.A][1], 100*r.EffectAt[1], ai.B, ref[ai.B][1], 100*r.EffectAt[0], ai.B, ref[ai.B][0],
			100*r.Estimate, conf, 100*r.CI.Lo, 100*r.CI.Hi, adjusted(ai))
	}
	var parts []string
	for _, ai := range shown {
		parts = append(parts, fmt.Sprintf("%s (%+.1f points, %s %+.1f to %+.1f; %s)", bold(ai.A+" x "+ai.B, mark), 100*ai.Result.Estimate, conf, 100*ai.Result.CI.Lo, 100*ai.Result.CI.Hi, adjusted(ai)))
	}
	return fmt.Sprintf("The factorial analysis finds %d interactions: %s.", len(shown), joinAnd(parts))
}

// Headline is the verdict in at most three sentences, for the terminal: what went wrong
// with an arm (if anything) first, then the evidence, then the decision.
func (v *Verdict) Headline() []string { return []string{v.headline("")} }

// The outcomes of an A/A check.
const (
	aaPassed   = "passed"
	aaFailed   = "failed"
	aaUntested = "untested"
)

// aaOutcome reports whether the experiment was an A/A check and how it ended: passed (no
// claim of a difference, every primary claim testable), failed (a claimed difference, or
// an arm that crashed, wedged or lost too much), or untested (too few launches to test
// the primary outcome: identical arms whose launches differ would go unnoticed).
func (v *Verdict) aaOutcome() (aa bool, outcome string) {
	if !v.Design.AA {
		return false, ""
	}
	if len(v.Claims.Differences()) > 0 {
		return true, aaFailed
	}
	for i, a := range v.Arms {
		if len(a.Problems) > 0 {
			return true, aaFailed
		}
		if i != v.Baseline && (a.Compare == nil || a.Compare.Decision() != "none") {
			return true, aaFailed
		}
	}
	if v.Claims != nil {
		for _, c := range v.Claims.Claims {
			if c.Primary && !c.Testable {
				return true, aaUntested
			}
		}
	}
	return true, aaPassed
}

func (v *Verdict) headline(mark string) string {
	if v.Refused() {
		return v.refusedHeadline(mark)
	}
	if s := v.floorHeadline(mark); s != "" {
		if rest := v.corruptionHeadline(mark); rest != "" {
			return s + " " + rest
		}
		return s
	}
	return v.corruptionHeadline(mark)
}

// corruptionHeadline is the headline of what the workload's detectors found.
func (v *Verdict) corruptionHeadline(mark string) string {
	if s := v.outcomeHeadline(mark); s != "" {
		return s
	}
	var sentences []string
	problems := v.problemSentence(mark)
	aa, outcome := v.aaOutcome()
	others := v.others()
	switch {
	case len(others) == 0:
		var parts, names []string
		for i, a := range v.Arms {
			parts = append(parts, fmt.Sprintf("%s %d of %d sessions corrupted (%d lost)", a.Name, a.Corrupted, a.Sessions, a.Lost))
			if i != v.Baseline && len(v.Arms[i].Problems)+len(v.Arms[v.Baseline].Problems) > 0 {
				names = append(names, a.Name)
			}
		}
		what := "No comparison was possible"
		if len(v.Arms) == 1 {
			what = "One arm, nothing to compare"
		}
		sentences = append(sentences, problems, fmt.Sprintf("%s: %s.", what, strings.Join(parts, "; ")))
		if len(names) > 0 {
			// An arm died before any session finished: nothing can be judged.
			sentences = append(sentences, fmt.Sprintf("The corruption of %s is inconclusive.", joinAnd(names)))
		}
	case len(v.Arms) == 2:
		a := v.Arms[others[0]]
		c := a.Compare
		if c.Inconclusive {
			sentences = append(sentences, problems,
				fmt.Sprintf("Of the sessions that finished, %s corrupted %s against %d of %d (%s) for %s.", bold(a.Name, mark), counted(a),
					v.Arms[v.Baseline].Corrupted, v.Arms[v.Baseline].Sessions, pct(v.Arms[v.Baseline].Rate), bold(v.Arms[v.Baseline].Name, mark)),
				v.inconclusiveSentence([]int{others[0]}))
			break
		}
		sentences = append(sentences, problems, v.evidence(a, mark), v.decisionSentence(a, mark))
		switch {
		case len(v.NonInferiority) > 0 && problems == "":
			sentences = append(sentences, v.niSentence(v.NonInferiority[0], mark))
		case problems == "" && !v.Design.AA:
			sentences = append(sentences, v.nextStep(a, mark))
		}
	default:
		sentences = append(sentences, problems, v.multiEvidence(mark), v.multiDecision(mark))
	}
	var out []string
	for _, s := range sentences {
		if s != "" {
			out = append(out, s)
		}
	}
	text := strings.Join(out, " ")
	if aa {
		switch {
		case outcome == aaPassed:
			return "A/A check passed: " + lowerFirst(text, mark)
		case outcome == aaUntested:
			return "A/A check not decided: " + lowerFirst(text, mark)
		case problems == "":
			var named []string
			for _, c := range v.Claims.Differences() {
				named = append(named, fmt.Sprintf("%s's %s %s", c.Arm, outcomeWords(c.Outcome), c.Decision))
			}
			return fmt.Sprintf("A/A check FAILED: the pipeline claims a difference between identical arms (%s). %s", joinAnd(named), text)
		}
		return "A/A check FAILED: " + lowerFirst(text, mark)
	}
	return text
}

// nextStep says what a reader does with a two-arm corruption decision: keep the pins
// that corrupt less, gate on it, or run the launches that can tell. Empty where the
// decision sentence already says it (too few launches to test).
func (v *Verdict) nextStep(a ArmResult, mark string) string {
	c := a.Compare
	if c == nil || c.Launch == nil || !c.Launch.Testable {
		return ""
	}
	base := v.Arms[v.Baseline]
	switch lc := c.Launch; {
	case lc.Claimed && lc.Decision == "higher":
		return fmt.Sprintf("Next: keep %s's pins (%s), and `--fail-on regression` fails CI on a result like this.", bold(base.Name, mark), pinWords(base.Pins))
	case lc.Claimed:
		return fmt.Sprintf("Next: %s's pins (%s) may be kept; `--fail-on difference` fails CI on any change.", bold(a.Name, mark), pinWords(a.Pins))
	}
	return "Next: `arbiter plan` says what difference these launches could find, and how many more would find a smaller one."
}

// pinWords is an arm's pins as a sentence shows them.
func pinWords(pins string) string {
	if pins == "" || pins == "(none)" {
		return "none"
	}
	return "`" + pins + "`"
}

// lowerFirst lowercases the first letter of a sentence that now follows a colon, unless
// it starts with a name.
func lowerFirst(s, mark string) string {
	if mark != "" && strings.HasPrefix(s, mark) {
		return s
	}
	if len(s) > 1 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'a' && s[1] <= 'z' {
		return strings.ToLower(s[:1]) + s[1:]
	}
	return s
}

// problemSentence says, first, which arms crashed, wedged, failed or lost too much. It
// never starts with an arm's name, which must keep its case.
func (v *Verdict) problemSentence(mark string) string {
	var parts []string
	for _, a := range v.Arms {
		if len(a.Problems) == 0 {
			continue
		}
		var what []string
		for _, k := range faultKinds {
			if blocks, ok := a.faults[k.verb]; ok {
				what = append(what, fmt.Sprintf("%s (%s)", k.verb, blocks))
			}
		}
		var p string
		switch {
		case len(what) > 0 && a.lossOver:
			p = fmt.Sprintf("the engine of %s %s, and %d of its %d sessions were lost (%s; analysis.max_loss allows %s)",
				bold(a.Name, mark), joinAnd(what), a.Lost, a.Planned, pct(lossShare(&a)), pct(v.MaxLoss))
		case len(what) > 0 && a.Lost > 0:
			p = fmt.Sprintf("the engine of %s %s, and %d of its %d sessions were lost", bold(a.Name, mark), joinAnd(what), a.Lost, a.Planned)
		case len(what) > 0:
			p = fmt.Sprintf("the engine of %s %s", bold(a.Name, mark), joinAnd(what))
		default:
			p = fmt.Sprintf("arm %s lost %d of its %d sessions (%s), more than analysis.max_loss allows (%s)",
				bold(a.Name, mark), a.Lost, a.Planned, pct(lossShare(&a)), pct(v.MaxLoss))
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return capitalize(strings.Join(parts, "; ")) + "."
}

func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// inconclusiveSentence is the decision for arms whose comparison cannot decide.
func (v *Verdict) inconclusiveSentence(arms []int) string {
	var names []string
	for _, i := range arms {
		names = append(names, v.Arms[i].Name)
	}
	if len(v.Arms[v.Baseline].Problems) > 0 {
		return fmt.Sprintf("The corruption of %s against the baseline %s is inconclusive: the baseline's surviving sessions are not a fair sample of its sessions.",
			joinAnd(names), v.Arms[v.Baseline].Name)
	}
	if len(names) == 1 {
		return fmt.Sprintf("The corruption of %s is inconclusive: the sessions that survived are not a fair sample of its sessions.", names[0])
	}
	return fmt.Sprintf("The corruption of %s is inconclusive: the sessions that survived are not a fair sample of theirs.", joinAnd(names))
}

// multiEvidence is the evidence sentence of a design with several arms: the interaction
// the factorial analysis shows, else the comparison closest to a decision.
func (v *Verdict) multiEvidence(mark string) string {
	if f := v.Factorial; f != nil {
		var shown []AdditiveInteraction
		for _, ai := range f.Additive {
			if v.interactionShown(ai) {
				shown = append(shown, ai)
			}
		}
		if len(shown) > 0 {
			return v.interactionEvidence(shown, mark)
		}
	}
	best := -1
	for _, i := range v.others() {
		c := v.Arms[i].Compare
		if c.Inconclusive {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		// The smallest launch p; among equal or untested ones, the largest difference.
		bc := v.Arms[best].Compare
		p, bp := c.AdjustedP, bc.AdjustedP
		if math.IsNaN(p) {
			p = 2
		}
		if math.IsNaN(bp) {
			bp = 2
		}
		if p < bp || (p == bp && math.Abs(c.Difference) > math.Abs(bc.Difference)) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	a := v.Arms[best]
	c := a.Compare
	lo, hi, label := v.diffInterval(a)
	return fmt.Sprintf("The largest difference from the baseline %s (%d of %d, %s) is %s's: %s, a difference of %+.1f points (%s %+.1f to %+.1f; %s).",
		bold(v.Arms[v.Baseline].Name, mark), v.Arms[v.Baseline].Corrupted, v.Arms[v.Baseline].Sessions, pct(v.Arms[v.Baseline].Rate),
		bold(a.Name, mark), counted(a), 100*c.Difference, label, 100*lo, 100*hi, v.shortP(c))
}

// DecisionWords is arm i's corruption decision against the baseline for a table cell,
// the same as the verdict's: "higher (launch p = 0.029 ≤ 0.03)", "not attributable (1
// launch per arm; 4 can test it)", "inconclusive", or "–" without a comparison.
func (v *Verdict) DecisionWords(i int) string {
	// A wedge experiment asks whether arms wedge: its decision is that claim's, not the
	// corruption comparison's, which an arm that wedged leaves inconclusive.
	if w := v.wedgeClaim(i); w != nil {
		switch {
		case !w.Testable:
			n := min(w.LaunchesArm, w.LaunchesBase)
			return fmt.Sprintf("wedges: not attributable (%d launch%s per arm; %d can test it)", n, pluralEs(n), w.Needed)
		case w.Claimed:
			return fmt.Sprintf("wedges %s (launch p = %s ≤ %s)", w.Decision, FormatP(w.P), FormatP(w.Level))
		}
		return fmt.Sprintf("wedges: no difference shown (launch p = %s > %s)", FormatP(w.P), FormatP(w.Level))
	}
	c := v.Arms[i].Compare
	if c == nil {
		return "–"
	}
	d := c.Decision()
	if c.Inconclusive {
		return d
	}
	if lc := c.Launch; d == "none" && lc != nil && !lc.Testable {
		n := min(lc.LaunchesArm, lc.LaunchesBase)
		return fmt.Sprintf("not attributable (%d launch%s per arm; %d can test it)", n, pluralEs(n), lc.Needed)
	}
	return d + " (" + v.shortP(c) + ")"
}

// wedgePrimary reports whether wedged launches are the verdict's primary outcome: an
// abort-cascade experiment.
func (v *Verdict) wedgePrimary() bool {
	return v.Claims != nil && v.Claims.Primary == OutcomeWedge
}

// wedgeClaim is arm i's claim on wedged launches against the baseline in a verdict whose
// primary outcome they are; nil otherwise, or for the baseline.
func (v *Verdict) wedgeClaim(i int) *LaunchClaim {
	if !v.wedgePrimary() || i == v.Baseline {
		return nil
	}
	for _, c := range v.Claims.Claims {
		if c.Outcome == OutcomeWedge && c.Arm == v.Arms[i].Name && c.Against == v.Arms[v.Baseline].Name && c.Group == "" {
			return c
		}
	}
	return nil
}

// wedgeGate is --fail-on regression (or difference) for a wedge experiment: an arm that
// wedges more than the baseline fails it, or (without --allow-inconclusive) one that
// wedged more in launches too few to tell; so does an arm shown to corrupt more. An arm
// whose corruption is inconclusive because the baseline wedged does not: the question
// was wedging, and the baseline wedging is no regression of the arm.
func (v *Verdict) wedgeGate(name string, o GateOptions) (bool, string) {
	base := v.Arms[v.Baseline].Name
	for i, a := range v.Arms {
		w := v.wedgeClaim(i)
		if w == nil {
			continue
		}
		bad := w.Estimate > 0 || (name == "difference" && w.Estimate != 0)
		switch {
		case w.Claimed && bad:
			return true, fmt.Sprintf("%s wedged more often than %s (%+.0f points of their launches), launch p = %s ≤ %s.", a.Name, base, 100*w.Estimate, FormatP(w.P), FormatP(w.Level))
		case !w.Testable && bad && !o.AllowInconclusive:
			return true, fmt.Sprintf("%s wedged more often than %s (%+.0f points of their launches), in too few launches to tell (%d per arm; %d can test it); --allow-inconclusive lets it pass",
				a.Name, base, 100*w.Estimate, min(w.LaunchesArm, w.LaunchesBase), w.Needed)
		}
		if c := a.Compare; c != nil && !c.Inconclusive && c.Significant && (name == "difference" || c.Direction == "higher") {
			return true, v.evidence(a, "") + " " + v.decisionSentence(a, "")
		}
	}
	return false, ""
}

// shortP is the p that decided a comparison, with its level: "launch p = 0.003 ≤
// 0.015", or why none could: "1 launch per arm, not attributable".
func (v *Verdict) shortP(c *Comparison) string {
	lc := c.Launch
	switch {
	case lc == nil:
		return "no launches to compare"
	case !lc.Testable:
		n := min(lc.LaunchesArm, lc.LaunchesBase)
		return fmt.Sprintf("%d launch%s per arm: not attributable", n, pluralEs(n))
	}
	op := ">"
	if stats.Reject(lc.P, lc.Level) {
		op = "≤"
	}
	return fmt.Sprintf("launch p %s %s %s", pEq(lc.P), op, levelText(lc.Level))
}

// multiDecision is the decision sentence of a design with several arms.
func (v *Verdict) multiDecision(mark string) string {
	var higher, lower, none, inconclusive []int
	for _, i := range v.others() {
		switch v.Arms[i].Compare.Decision() {
		case "higher":
			higher = append(higher, i)
		case "lower":
			lower = append(lower, i)
		case "inconclusive":
			inconclusive = append(inconclusive, i)
		default:
			none = append(none, i)
		}
	}
	for i, a := range v.Arms {
		if i != v.Baseline && a.Compare == nil {
			inconclusive = append(inconclusive, i)
		}
	}
	list := func(ix []int) string {
		const most = 3
		var parts []string
		for k, i := range ix {
			if k == most {
				parts = append(parts, fmt.Sprintf("%d more", len(ix)-most))
				break
			}
			c := v.Arms[i].Compare
			parts = append(parts, fmt.Sprintf("%s (%+.1f points, %s)", bold(v.Arms[i].Name, mark), 100*c.Difference, v.shortP(c)))
		}
		return joinAnd(parts)
	}
	base := bold(v.Arms[v.Baseline].Name, mark)
	var clauses []string
	if len(higher) > 0 {
		clauses = append(clauses, fmt.Sprintf("significantly higher than %s: %s", base, list(higher)))
	}
	if len(lower) > 0 {
		clauses = append(clauses, fmt.Sprintf("significantly lower: %s", list(lower)))
	}
	if len(inconclusive) > 0 {
		var names []string
		for _, i := range inconclusive {
			names = append(names, bold(v.Arms[i].Name, mark))
		}
		clauses = append(clauses, "inconclusive: "+joinAnd(names))
	}
	if len(higher)+len(lower) == 0 {
		if len(none) == 0 {
			return capitalize(strings.Join(clauses, "; ")) + "."
		}
		smallest, tested := 1.0, false
		var untestable *LaunchClaim
		for _, i := range none {
			lc := v.Arms[i].Compare.Launch
			switch {
			case lc == nil:
			case lc.Testable:
				smallest, tested = math.Min(smallest, lc.P), true
			default:
				untestable = lc
			}
		}
		s := fmt.Sprintf("No arm's corruption rate differs from %s's beyond what its launches alone could do (smallest launch p %s)", base, pEq(smallest))
		if !tested && untestable != nil {
			s = strings.TrimSuffix(attributionSentence(untestable), ".")
		}
		if len(clauses) > 0 {
			s = capitalize(strings.Join(clauses, "; ")) + "; of the others, no arm's corruption rate differs significantly from " + base + "'s"
		}
		return s + v.niClause(mark) + "."
	}
	if len(none) > 0 {
		clauses = append(clauses, fmt.Sprintf("the other %d arms show no significant difference", len(none)))
	}
	return capitalize(strings.Join(clauses, "; ")) + v.niClause(mark) + "."
}

// niClause adds the non-inferiority decisions of several arms to the decision sentence.
func (v *Verdict) niClause(mark string) string {
	var yes, no []string
	for _, ni := range v.NonInferiority {
		if c := v.Arms[v.armIndex(ni.Arm)].Compare; c != nil && c.Inconclusive {
			continue
		}
		if ni.Result.NonInferior {
			yes = append(yes, bold(ni.Arm, mark))
		} else {
			no = append(no, bold(ni.Arm, mark))
		}
	}
	var parts []string
	if len(yes) > 0 {
		parts = append(parts, fmt.Sprintf("non-inferior within the %.1f-point margin: %s", 100*v.Design.Margin, joinAnd(yes)))
	}
	if len(no) > 0 {
		parts = append(parts, "non-inferiority not shown: "+joinAnd(no))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// niSentence says a non-inferiority judgement in the arms' names.
func (v *Verdict) niSentence(ni NIView, mark string) string {
	r := ni.Result
	base := v.Arms[v.Baseline].Name
	level := fmt.Sprintf("%g%%", 100*(1-r.Alpha))
	if r.NonInferior {
		return fmt.Sprintf("%s is non-inferior to %s: its corruption rate is at most %+.1f points above %s's (one-sided %s upper bound), inside the margin of %.1f points.",
			bold(ni.Arm, mark), bold(base, mark), 100*r.Upper, base, level, 100*r.Margin)
	}
	return fmt.Sprintf("Non-inferiority of %s to %s is not shown: its corruption rate may be up to %+.1f points above %s's (one-sided %s upper bound), beyond the margin of %.1f points, which is not evidence that it is worse.",
		bold(ni.Arm, mark), base, 100*r.Upper, base, level, 100*r.Margin)
}

// Placement says in a few lines where the arms ran and how much their workloads
// overlapped, block by block; nothing for launches recorded before placement was.
func (v *Verdict) Placement() []string { return v.placementLines() }

var gates = map[string]string{
	"regression": "an arm's corruption rate is significantly higher than the baseline's on launches, or is higher with too few launches to test it, or cannot be judged",
	"difference": "an arm's corruption rate differs significantly from the baseline's on launches, either way, or differs with too few launches to test it, or cannot be judged",
	"corruption": "any session of any arm was corrupted",
	"loss":       "any session was lost, or any run crashed, wedged or failed",
	"wedge":      "any launch of any arm crashed or wedged (an abort cascade's canary never completed)",
	"throughput": "an arm's throughput is not shown non-inferior within analysis.throughput_margin (without a margin: significantly lower)",
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

// GateOptions tune a gate. The zero value is the strict gate.
type GateOptions struct {
	// AllowInconclusive lets the regression and difference gates pass an arm whose
	// corruption cannot be judged (it crashed, wedged, lost too much, or has no analysed
	// session). By default such an arm fails them: a CI gate must not pass on a crash.
	AllowInconclusive bool
}

// Gate reports whether the verdict fails the named gate, and why; an arm whose corruption
// cannot be judged fails the regression and difference gates (GateWith can allow it).
func (v *Verdict) Gate(name string) (bool, string) { return v.GateWith(name, GateOptions{}) }

// GateWith is Gate with options.
func (v *Verdict) GateWith(name string, o GateOptions) (bool, string) {
	if fail, why, ok := v.outcomeGate(name); ok {
		return fail, why
	}
	switch name {
	case "regression", "difference":
		if v.wedgePrimary() {
			return v.wedgeGate(name, o)
		}
		for _, a := range v.Arms {
			if c := a.Compare; c != nil && !c.Inconclusive && c.Significant && (name == "difference" || c.Direction == "higher") {
				return true, v.evidence(a, "") + " " + v.decisionSentence(a, "")
			}
		}
		if o.AllowInconclusive {
			return false, ""
		}
		for i, a := range v.Arms {
			if i == v.Baseline {
				continue
			}
			switch c := a.Compare; {
			case c == nil:
				return true, fmt.Sprintf("%s could not be compared with %s (%d and %d analysed sessions); --allow-inconclusive lets it pass",
					a.Name, v.Arms[v.Baseline].Name, a.Sessions, v.Arms[v.Baseline].Sessions)
			case c.Inconclusive:
				return true, fmt.Sprintf("%s's corruption is inconclusive (%s); --allow-inconclusive lets it pass", a.Name, c.Why)
			case c.Launch != nil && !c.Launch.Testable && (c.Difference > 0 || (name == "difference" && c.Difference != 0)):
				// A difference seen but not attributable: a gate must not pass what it
				// could not test.
				return true, v.evidence(a, "") + " " + v.decisionSentence(a, "") + " --allow-inconclusive lets it pass"
			}
		}
	case "corruption":
		for _, a := range v.Arms {
			if a.Corrupted+a.CorruptedThenLost > 0 {
				return true, fmt.Sprintf("%s: %d of %d analysed sessions corrupted, %d more corrupted before they were lost", a.Name, a.Corrupted, a.Sessions, a.CorruptedThenLost)
			}
		}
	case "loss":
		for _, r := range v.Runs {
			if r.Status != store.RunDone && !r.Superseded {
				return true, fmt.Sprintf("run %s/b%d %s", r.Arm, r.Block, r.Status)
			}
		}
		for _, a := range v.Arms {
			if a.Lost > 0 {
				return true, fmt.Sprintf("%s lost %d of %d sessions", a.Name, a.Lost, a.Planned)
			}
		}
	}
	return false, ""
}
