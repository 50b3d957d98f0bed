package verdict

import (
	"fmt"
	"math"
	"slices"
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
		c.NoBaseline = c.Inconclusive && len(v.Arms[i].Problems) == 0
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
			// Only the side searched takes k more corrupted sessions: the other side's
			// counts may not hold k more (an arm that lost more sessions than the
			// baseline has clean ones).
			var d string
			if armSide {
				d = decide(b.Corrupted, a.Corrupted+k, nb, na)
			} else {
				d = decide(b.Corrupted+k, a.Corrupted, nb, na)
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
		Clustered: don.DesignEffect > clusteredDesignEffect,
	}
}

func sumResponses(cs []stats.ClusterCounts) int {
	n := 0
	for _, c := range cs {
		n += c.Responses
	}
	return n
}

// CaveatKind is what a caveat is about, and ranks it: what can overturn the verdict
// first, what qualifies a number last.
type CaveatKind int

const (
	CaveatProblem      CaveatKind = iota // an arm crashed, wedged, lost too much, or ran unverified
	CaveatStatus                         // the experiment did not finish
	CaveatLoss                           // lost sessions and what they could change
	CaveatDesign                         // the design's own warnings
	CaveatUntested                       // claims the launches could not test, and what would
	CaveatDetector                       // a detector that did not judge every response
	CaveatPower                          // not significant, but not ruled out either
	CaveatBound                          // no corrupted session: a bound, not a zero
	CaveatMultiplicity                   // how several comparisons were adjusted
)

var caveatKinds = [...]string{"problem", "status", "loss", "design", "untested", "detector", "power", "bound", "multiplicity"}

func (k CaveatKind) String() string {
	if k < 0 || int(k) >= len(caveatKinds) {
		return fmt.Sprintf("CaveatKind(%d)", int(k))
	}
	return caveatKinds[k]
}

// Caveat is one point of the verdict's caveats: its kind and its sentence.
type Caveat struct {
	Kind CaveatKind
	Text string
}

// note records a caveat of the design's analyses (design.go), which run before the
// caveats are merged; caveats ranks it with the others.
func (v *Verdict) note(kind CaveatKind, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(text, ".") {
		text += "."
	}
	v.notes = append(v.notes, Caveat{kind, text})
}

// faultedLaunches says which launches did not finish, and how: launches of one arm that
// ended alike, with the same error, are said once ("overlap-on/b0, b1, b2 and b3 wedged
// (...)"), so that an arm that wedges every time reads as one finding, not a list.
func (v *Verdict) faultedLaunches() []string {
	type end struct{ arm, status, err string }
	var order []end
	blocks := map[end][]string{}
	for _, r := range v.Runs {
		if r.Superseded || !(r.Status.EngineFault() || r.Status == store.RunFailed) {
			continue
		}
		k := end{r.Arm, string(r.Status), dash(r.Error)}
		if _, seen := blocks[k]; !seen {
			order = append(order, k)
		}
		blocks[k] = append(blocks[k], fmt.Sprintf("b%d", r.Block))
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%s/%s %s (%s)", k.arm, joinAnd(blocks[k]), k.status, k.err))
	}
	return out
}

// caveats merges what every analysis noted into one ranked list, each point once.
func (v *Verdict) caveats() {
	cs := slices.Clone(v.notes) // caveats may run again; the notes stay as the analyses left them
	add := func(kind CaveatKind, format string, args ...any) {
		cs = append(cs, Caveat{kind, fmt.Sprintf(format, args...)})
	}
	if len(v.Design.PinsUnverified) > 0 {
		add(CaveatProblem, "Pins not verified: the engines that already ran did not report %s, so the arms are taken to run as declared there.", strings.Join(v.Design.PinsUnverified, "; "))
	}
	if u := v.unverifiedPins(); u != "" && len(v.Design.PinsUnverified) == 0 {
		add(CaveatProblem, "Pins not verified: no report of the engines confirmed %s, so those arms are taken to run as pinned.", u)
	}
	faulted := v.faultedLaunches()
	v.refusedCaveat(add)
	if len(faulted) > 0 {
		add(CaveatProblem, "Launches that did not finish: %s. Their unfinished sessions count as lost, not as clean, and are not analysed.", strings.Join(faulted, "; "))
	}
	v.placementCaveats(add)
	switch st := v.Experiment.State(); st {
	case store.ExperimentDone:
	case store.ExperimentAbandoned:
		add(CaveatStatus, "The experiment is **abandoned**: the arbiter running it stopped renewing its lease (killed, or its machine went away); the counts cover only what was recorded before that.%s", v.cutShortText())
	case store.ExperimentFailed:
		why := ""
		if e := v.Experiment.Error; e.Valid && e.String != "" {
			why = " (" + e.String + ")"
		}
		add(CaveatStatus, "The experiment **failed**%s: the counts cover only what was recorded before it stopped.%s", why, v.cutShortText())
	default:
		add(CaveatStatus, "The experiment is **%s**: the counts cover only what was recorded before it stopped.%s", st, v.cutShortText())
	}
	for _, a := range v.Arms {
		if a.Sessions == 0 {
			add(CaveatProblem, "Arm %s has no analysed session: nothing can be said about its corruption.", a.Name)
		}
	}
	v.lossCaveat(add)
	for _, sv := range v.Sequential {
		if sv.Stopped > 0 && sv.Stopped < sv.Looks {
			add(CaveatDesign, "The experiment stopped early at look %d: rates and differences estimated at an early stop tend to overstate the effect.", sv.Stopped)
			break
		}
	}
	said := v.detectorCaveats(add)
	for _, d := range v.Detectors {
		if said[d.Detector] {
			continue
		}
		judged, turns := 0, 0
		for i, a := range v.Arms {
			judged += d.Evaluated[i]
			turns += a.Turns
		}
		if judged < turns {
			add(CaveatDetector, "Detector %s judged %d of %d responses (it failed on the others, which count as clean for it): its counts are a lower bound.", d.Detector, judged, turns)
		}
	}
	v.powerCaveat(add)
	v.boundCaveat(add)
	v.outcomeCaveats(add)
	v.conditionsCaveat(add)
	v.telemetryCaveat(add)
	v.launchCaveat(add)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Kind < cs[j].Kind })
	seen := map[string]bool{}
	v.Caveats = v.Caveats[:0]
	for _, c := range cs {
		if !seen[c.Text] {
			seen[c.Text] = true
			v.Caveats = append(v.Caveats, c)
		}
	}
}

// lossCaveat says, in one point, which arms lost sessions, whether they lost alike, and
// what labelling the lost sessions could change.
func (v *Verdict) lossCaveat(add func(CaveatKind, string, ...any)) {
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
	add(CaveatLoss, "%s", text)
}

// powerCaveat says once that comparisons without a significant difference did not show
// the arms equal, with the largest difference each cannot rule out.
func (v *Verdict) powerCaveat(add func(CaveatKind, string, ...any)) {
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
		// The bounds as the Claims table prints them: an interval past ±100 points, which
		// no two rates can differ by, is too wide to inform there and here.
		in := pointsAfter(lc.CI.Lo, lc.CI.Hi)
		if in == tooWide {
			parts = append(parts, fmt.Sprintf("%s's by any amount (its interval is %s)", a.Name, tooWide))
		} else {
			parts = append(parts, fmt.Sprintf("%s's by anything from %s points", a.Name, in))
		}
	}
	if len(parts) == 0 {
		return
	}
	add(CaveatPower, "No difference shown is not the same as no difference: at each claim's level, the launches leave room for a corruption rate that differs from %s's: %s. `arbiter plan`, given the rates to tell apart (`--p0`, `--p1`, or `analysis.plan`), says how many launches per arm would tell such differences apart.",
		v.Arms[v.Baseline].Name, joinAnd(parts))
}

// boundCaveat says once, for every arm without a corrupted session, that zero seen is a
// bound and not a zero.
func (v *Verdict) boundCaveat(add func(CaveatKind, string, ...any)) {
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
			add(CaveatBound, "%s had no corrupted session in %d: that bounds its rate below %s (95%% exact upper bound); it does not show the rate is zero.", g.arms[0], g.n, g.bound)
			continue
		}
		add(CaveatBound, "%s had no corrupted session in %d each: that bounds each rate below %s (95%% exact upper bound); it does not show the rates are zero.", joinAnd(g.arms), g.n, g.bound)
	}
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

// wedgeGate is --fail-on regression (or difference) for a wedge experiment: an arm shown
// to wedge more than the baseline fails it (one that wedged more in launches too few to
// tell is for the undecided gate); so does an arm shown to corrupt more. An arm
// whose corruption is inconclusive because the baseline wedged does not: the question
// was wedging, and the baseline wedging is no regression of the arm.
func (v *Verdict) wedgeGate(name string) (GateResult, string) {
	base := v.Arms[v.Baseline].Name
	for i, a := range v.Arms {
		w := v.wedgeClaim(i)
		if w == nil {
			continue
		}
		bad := w.Estimate > 0 || (name == "difference" && w.Estimate != 0)
		switch {
		case w.Claimed && bad:
			how := "more often"
			if w.Estimate < 0 {
				how = "less often"
			}
			return GateFail, fmt.Sprintf("%s wedged %s than %s (%s points of their launches), launch p %s ≤ %s.", a.Name, how, base, signedNum(100*w.Estimate), pEq(w.P), levelText(w.Level))
		}
		if c := a.Compare; c != nil && !c.Inconclusive && c.Significant && (name == "difference" || c.Direction == "higher") {
			return GateFail, v.evidence(a, "") + " " + v.decisionSentence(a, "")
		}
	}
	return GatePass, ""
}

// speedPrimary reports whether the verdict's primary claims are speeds: a throughput
// experiment's tok/s per request, load by load.
func (v *Verdict) speedPrimary() bool {
	return v.Claims != nil && v.Claims.Primary == MetricThroughput
}

// familyGate is --fail-on regression (or difference) for a throughput experiment and
// for an A/A check: a claim of the launch family fails it when the launches support it,
// the claims their headline and show decide: any speed or latency shown worse
// (difference: shown worse or better), at any load, or corruption shown higher
// (difference: either way). An A/A check whose headline says it failed on a claimed
// difference thus fails the difference gate. A speed not shown non-inferior is the
// throughput gate's, and one its launches could not test the undecided gate's.
func (v *Verdict) familyGate(name string) (GateResult, string) {
	for _, c := range v.Claims.Differences() {
		if name == "regression" && c.Decision != "worse" && c.Decision != "higher" {
			continue
		}
		return GateFail, claimEvidence(c)
	}
	return GatePass, ""
}

// claimEvidence says what a decided claim of the launch family claims, with what stands
// behind it: "a2's TTFT at c=32 against a1 is worse: +8.1% (99.8% CI +3.2% to
// +13.3%), launch p = 0.0004 ≤ 0.00167."
func claimEvidence(c *LaunchClaim) string {
	where := ""
	if c.Group != "" {
		where = " at " + c.Group
	}
	return fmt.Sprintf("%s's %s%s against %s is %s: %s (%s), launch p %s ≤ %s.", c.Arm, outcomeWords(c.Outcome), where,
		c.Against, c.Decision, claimEstimate(c), labelled(intervalLabel(c.Level), claimInterval(c)), pEq(c.P), levelText(c.Level))
}

// untestedSpeed names arm i's first speed claim its launches could not test, and what
// would; empty when every one was tested, or faulted (more launches of a configuration
// that faults every time would not supply it).
func (v *Verdict) untestedSpeed(i int) string {
	for _, c := range v.speedClaims(i) {
		if c.Testable || c.Faulted != "" {
			continue
		}
		n := min(c.LaunchesArm, c.LaunchesBase)
		why := fmt.Sprintf("%s's tok/s against %s could not be tested at %s: %d launch%s per arm", c.Arm, c.Against, c.Group, n, pluralEs(n))
		if c.Needed > 0 {
			why += " (" + v.canTestWords(c.Needed)
			if c.FloorWouldTest {
				why += ", or one per arm weighed against an A/A noise floor, `--noise-floor`"
			}
			why += ")"
		}
		return why
	}
	return ""
}

// Placement says in a few lines where the arms ran and how much their workloads
// overlapped, block by block; nothing for launches recorded before placement was.
func (v *Verdict) Placement() []string { return v.placementLines() }

var gates = map[string]string{
	"regression": "an arm's corruption rate is significantly higher than the baseline's on launches; in a throughput experiment, any tok/s or latency of an arm shown worse at any load, or its corruption shown higher; in an abort cascade, its wedges (exit 3); an arm that cannot be judged (crashed, wedged, lost too much) is undecided (exit 6)",
	"difference": "as regression, either way: an arm's corruption rate (in a throughput experiment or an A/A check, any tok/s or latency too) differs significantly from the baseline's on launches (exit 3); an arm that cannot be judged is undecided (exit 6)",
	"undecided":  "the verdict cannot decide an arm's primary comparison (corruption; a throughput experiment's tok/s at every load; an abort cascade's wedges): too few launches and no noise floor to test it, or the arm cannot be judged (exit 6)",
	"corruption": "any session of any arm was corrupted",
	"loss":       "any session was lost, or any run crashed, wedged or failed",
	"wedge":      "any launch of any arm crashed or wedged (an abort cascade's canary never completed)",
	"throughput": "an arm's tok/s per request is shown lower than the baseline's by more than analysis.throughput_margin at some load (without a margin: significantly lower) (exit 3); with a margin, a load shown neither non-inferior nor below it is undecided (exit 6)",
	"detector":   "a detector left responses unjudged: it failed, crashed, or ran past timeouts.detector",
	"verify":     "an arm failed verification against the reference (tool-call F1 or schema accuracy below the reference's own spread, or the spec's verify bar) (exit 3); an arm its launches could not decide, or an experiment with no verify workload, is undecided (exit 6)",
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

// Gate reports whether the verdict does not pass the named gate (it fails it, or cannot
// decide it), and why; CheckGate tells the two apart.
func (v *Verdict) Gate(name string) (bool, string) { return v.GateWith(name, GateOptions{}) }

// GateWith is Gate with options.
func (v *Verdict) GateWith(name string, o GateOptions) (bool, string) {
	g, why := v.CheckGate(name, o)
	return g != GatePass, why
}

// GateResult is what a gate says of a verdict.
type GateResult int

// A gate passes, fails (the verdict claims what the gate guards against, or counted it:
// `arbiter` exits 3), or cannot decide (exit 6): an arm whose corruption cannot be
// judged (it crashed, wedged or lost too much) under the regression and difference
// gates, and under the undecided gate any comparison the launches could not test.
const (
	GatePass GateResult = iota
	GateFail
	GateUndecided
)

// CheckGate decides the named gate. The regression and difference gates fail only on a
// claim the launches support; a difference too few launches could not test passes them
// (the undecided gate is for a team that wants such a run to fail).
func (v *Verdict) CheckGate(name string, o GateOptions) (GateResult, string) {
	if g, why, ok := v.outcomeGate(name); ok {
		return g, why
	}
	if name == "detector" {
		if fail, why := v.detectorGate(); fail {
			return GateFail, why
		}
		return GatePass, ""
	}
	if name == "verify" {
		return v.verifyGate()
	}
	switch name {
	case "regression", "difference":
		// The primary claim first, in its own words; then, for an A/A check, any other
		// difference its family claims.
		g, why := GatePass, ""
		switch {
		case v.wedgePrimary():
			g, why = v.wedgeGate(name)
		case v.speedPrimary():
			g, why = v.familyGate(name)
		default:
			for _, a := range v.Arms {
				if c := a.Compare; c != nil && !c.Inconclusive && c.Significant && (name == "difference" || c.Direction == "higher") {
					g, why = GateFail, v.evidence(a, "")+" "+v.decisionSentence(a, "")
					break
				}
			}
		}
		if g == GatePass && v.Design.AA {
			g, why = v.familyGate(name)
		}
		if g == GateFail || v.wedgePrimary() {
			return g, why
		}
		if o.AllowInconclusive {
			return GatePass, ""
		}
		if why := v.inconclusiveWhy(); why != "" {
			return GateUndecided, why + "; --allow-inconclusive lets it pass"
		}
		return GatePass, ""
	case "undecided":
		// An abort cascade asks whether arms wedge: an arm whose corruption a wedged
		// baseline leaves inconclusive is decided by its wedge claim.
		if why := v.inconclusiveWhy(); why != "" && !v.wedgePrimary() {
			return GateUndecided, why
		}
		for i, a := range v.Arms {
			if i == v.Baseline {
				continue
			}
			if v.speedPrimary() {
				if why := v.untestedSpeed(i); why != "" {
					return GateUndecided, why
				}
				continue
			}
			if v.wedgePrimary() {
				if w := v.wedgeClaim(i); w != nil && !w.Testable {
					return GateUndecided, fmt.Sprintf("%s's wedges against %s could not be tested: %d launch%s per arm (%d can test it)", a.Name, v.Arms[v.Baseline].Name, min(w.LaunchesArm, w.LaunchesBase), pluralEs(min(w.LaunchesArm, w.LaunchesBase)), w.Needed)
				}
				continue
			}
			if c := a.Compare; c != nil && c.Launch != nil && !c.Launch.Testable {
				return GateUndecided, v.evidence(a, "") + " " + v.decisionSentence(a, "")
			}
		}
		return GatePass, ""
	}
	fail, why := v.countGate(name)
	if fail {
		return GateFail, why
	}
	return GatePass, ""
}

// inconclusiveWhy names the first arm whose corruption cannot be judged, and why; empty
// when every arm can be.
func (v *Verdict) inconclusiveWhy() string {
	for i, a := range v.Arms {
		if i == v.Baseline {
			continue
		}
		switch c := a.Compare; {
		case c == nil:
			return fmt.Sprintf("%s could not be compared with %s (%d and %d analysed sessions)",
				a.Name, v.Arms[v.Baseline].Name, a.Sessions, v.Arms[v.Baseline].Sessions)
		case c.Inconclusive && c.NoBaseline:
			return fmt.Sprintf("%s's corruption is not compared: the baseline has no fair sample (%s)", a.Name, c.Why)
		case c.Inconclusive:
			return fmt.Sprintf("%s's corruption is inconclusive (%s)", a.Name, c.Why)
		}
	}
	return ""
}

// countGate decides the gates that count what happened, whatever the statistics.
func (v *Verdict) countGate(name string) (bool, string) {
	switch name {
	case "corruption":
		for _, a := range v.Arms {
			if a.Corrupted+a.CorruptedThenLost+a.CorruptedThenCut() > 0 {
				why := fmt.Sprintf("%s: %d of %d analysed sessions corrupted", a.Name, a.Corrupted, a.Sessions)
				if a.CorruptedThenLost > 0 {
					why += fmt.Sprintf(", %d more corrupted before they were lost", a.CorruptedThenLost)
				}
				switch {
				case a.CorruptedThenCut() > 0 && a.CorruptedThenLost > 0:
					why += fmt.Sprintf(", %d in launches cut short", a.CorruptedThenCut())
				case a.CorruptedThenCut() > 0:
					why += fmt.Sprintf(", %d more corrupted in launches cut short", a.CorruptedThenCut())
				}
				return true, why
			}
		}
	case "loss":
		for _, r := range v.Runs {
			if r.Status != store.RunDone && !r.Superseded {
				return true, fmt.Sprintf("run %s %s", store.LaunchName(r.Arm, r.Block), r.Status)
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

// cutShortText says, after the caveat of an experiment that stopped before its plan was
// done, which launches were cut short and what they held: they are left out of the
// analysis whole, because the sessions a launch finishes first are its shortest.
func (v *Verdict) cutShortText() string {
	var names []string
	for _, r := range v.Runs {
		if r.cutShort() {
			names = append(names, store.LaunchName(r.Arm, r.Block))
		}
	}
	if len(names) == 0 {
		return ""
	}
	var c store.SessionCounts
	for _, a := range v.Arms {
		c = c.Add(a.CutShort)
	}
	which, it := "The launch cut short, "+names[0]+", is", "it"
	if len(names) > 1 {
		which, it = fmt.Sprintf("The %d launches cut short, %s, are", len(names), joinAnd(names)), "they"
	}
	held := fmt.Sprintf("the %d session%s %s finished (%d corrupted)", c.Analysed, plural(c.Analysed), it, c.Corrupted)
	switch {
	case c.CorruptedThenLost > 0:
		held += fmt.Sprintf(" and the %d %s left unfinished (%d with a corrupted response)", c.Lost, it, c.CorruptedThenLost)
	case c.Lost > 0:
		held += fmt.Sprintf(" and the %d %s left unfinished", c.Lost, it)
	}
	return fmt.Sprintf(" %s left out of the analysis, with %s: the sessions a launch finishes first need not be a fair sample of its sessions, since whatever makes a session shorter, a fault among them (a tool call leaked into a reply ends its round), is over-represented.",
		which, held)
}
