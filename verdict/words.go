package verdict

// The verdict's sentences: what the judge decided (judge.go), in words. A sentence that
// emphasises takes the writer's mark ("**" for markdown, "" for the terminal), so the
// markdown verdict, arbiter's own lines and the JSON summary say the same thing.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

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

// decision is the table cell for one comparison: the direction when significant, `~`
// when nothing was shown (benchstat's mark), or why no decision is possible.
func (v *Verdict) decision(a ArmResult) string {
	c := a.Compare
	if c == nil {
		return "no comparison"
	}
	switch c.Decision() {
	case "inconclusive", "not compared":
		return c.Decision()
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
	test := "The randomization test on the launches' corruption rates"
	if lc := c.Launch; lc != nil {
		switch {
		case lc.Test == testWelch:
			test = "Welch's t test on the launches' corruption rates"
		case strings.HasPrefix(lc.Test, "contrast against noise floor") && v.Floor != nil:
			test = fmt.Sprintf("Weighed against the launch spread A/A experiment %d (%s) measured, the corruption rates' difference", v.Floor.Experiment, v.Floor.Name)
		}
	}
	return fmt.Sprintf("%s gives p %s", test, pEq(c.AdjustedP))
}

// levelClause is how a claim's p is weighed: "≤ 0.03, this claim's share of alpha 0.05".
func (v *Verdict) levelClause(lc *LaunchClaim) string {
	op := ">"
	if stats.Reject(lc.P, lc.Level) {
		op = "≤"
	}
	looks := ""
	if lc.Level < v.claimShare(lc)*(1-1e-9) {
		charged := 0
		for _, l := range stats.SequentialLookLevels(v.Alpha, max(len(v.Sequential), 1), v.Design.Looks) {
			if l > 0 {
				charged++
			}
		}
		looks = fmt.Sprintf(", spread over the %d of its %d looks that can reach it", charged, v.Design.Looks)
	}
	return fmt.Sprintf("%s %s, this claim's share of alpha %g%s", op, levelText(lc.Level), v.Alpha, looks)
}

// claimShare is a claim's share of alpha before a sequential design divides it over
// its looks.
func (v *Verdict) claimShare(lc *LaunchClaim) float64 {
	return math.Max(lc.Share, lc.Level)
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
		return fmt.Sprintf("%s, over %d and %d launches: the launches' rates differ by %s points (%s).",
			lead, lc.LaunchesArm, lc.LaunchesBase, signedNum(100*lc.Estimate), labelled(label, pointsAfter(lo, hi)))
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
		return lc.CI.Lo, lc.CI.Hi, intervalLabel(lc.Level)
	}
	return c.DiffCI.Lo, c.DiffCI.Hi, "95% CI"
}

// decisionSentence says how one comparison was decided, ending with the decision.
func (v *Verdict) decisionSentence(a ArmResult, mark string) string {
	c := a.Compare
	lc := c.Launch
	if lc == nil {
		return "No launch of one of the arms has an analysed session: nothing can be compared."
	}
	if !lc.Testable {
		return v.attributionSentence(lc, c.Difference == 0)
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

// PValueWords says what a p-value means at level alpha, without claiming equality when
// the test does not reject: `arbiter stats`' reading of a test on counts typed by hand.
func PValueWords(p, alpha float64) string {
	if math.IsNaN(p) {
		return "undefined for these counts"
	}
	if stats.Reject(p, alpha) {
		return fmt.Sprintf("p %s: significant at alpha %g; a difference at least this large would arise by chance about %s if the arms were the same",
			FormatPEq(p), alpha, OnceIn(p))
	}
	return fmt.Sprintf("p %s: not significant at alpha %g; chance alone could produce a difference this large, which is not evidence that the arms are equal (see the interval)",
		FormatPEq(p), alpha)
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
	stopped := map[store.ExperimentStatus]string{store.ExperimentInterrupted: "Interrupted",
		store.ExperimentAbandoned: "Abandoned (its arbiter was killed, or its machine went away)"}[v.Experiment.State()]
	resume := Command(fmt.Sprintf("resume %d", v.Experiment.ID), v.DB)
	if stopped != "" {
		return fmt.Sprintf("%s before its plan was done (%d of its launches were cut short or never ran): this judges the launches that finished, and `%s` finishes it. ",
			stopped, v.interruptedLaunches(), resume) + v.uninterruptedHeadline(mark)
	}
	// A failure (the store, a pin the engine did not hold) may stop the plan too; its
	// resume runs the rest only once the cause is gone, which the caveat names.
	if n := v.interruptedLaunches(); v.Experiment.State() == store.ExperimentFailed && n > 0 {
		return fmt.Sprintf("Failed before its plan was done (%d of its launches were cut short or never ran; the caveats say why): this judges the launches that finished, and `%s` runs the rest once the cause is fixed. ",
			n, resume) + v.uninterruptedHeadline(mark)
	}
	return v.uninterruptedHeadline(mark)
}

// aaOutcomeHeadline leads an outcome headline (throughput, cascades) of an A/A check with
// how the check ended, as a corruption headline's is: an A/A check answers whether the
// pipeline claims a difference between identical arms before anything else.
func (v *Verdict) aaOutcomeHeadline(s string) string {
	aa, outcome := v.aaOutcome()
	if !aa {
		return s
	}
	switch outcome {
	case aaPassed:
		return "A/A check passed: no difference is claimed between the identical arms. " + s
	case aaUntested:
		return "A/A check not decided: these launches are too few to test the identical arms. " + s
	}
	if d := v.aaDifferences(); d != "" {
		return "A/A check FAILED: " + d + " " + s
	}
	return "A/A check FAILED: " + s
}

// aaDifferences names the differences claimed between an A/A check's identical arms: "the
// pipeline claims a difference between identical arms (a2's TTFT worse)."; empty for none.
func (v *Verdict) aaDifferences() string {
	var named []string
	for _, c := range v.Claims.Differences() {
		named = append(named, fmt.Sprintf("%s's %s %s", c.Arm, outcomeWords(c.Outcome), c.Decision))
	}
	if len(named) == 0 {
		return ""
	}
	return fmt.Sprintf("the pipeline claims a difference between identical arms (%s).", joinAnd(named))
}

// interruptedLaunches counts the launches cut short, and those the
// plan had yet to start.
func (v *Verdict) interruptedLaunches() int {
	n := 0
	for _, a := range v.Arms {
		n += a.Launches.CutShort() + max(0, max(v.Design.Blocks, 1)-a.Launches.Total)
	}
	return n
}

// uninterruptedHeadline is the headline of what was recorded.
func (v *Verdict) uninterruptedHeadline(mark string) string {
	if s := v.verifyHeadline(mark); s != "" {
		return s + " " + v.otherHeadline(mark)
	}
	return v.otherHeadline(mark)
}

// otherHeadline is the headline of every claim but verification's.
func (v *Verdict) otherHeadline(mark string) string {
	if s := v.floorHeadline(mark); s != "" {
		return v.divergenceHeadline(s, mark)
	}
	return v.corruptionHeadline(mark)
}

// divergenceHeadline is the headline of an experiment judged against an A/A floor of
// divergence, in at most three sentences that lead with what got worse: the arms that
// crashed, wedged or lost too much, then divergence beyond the floor, or corruption
// decided higher when no arm diverged beyond it; then the rest of corruption. Corruption
// keeps two sentences (its evidence and its decision), one beside a sentence of
// problems, where the decision stays when it claims a difference.
func (v *Verdict) divergenceHeadline(floor, mark string) string {
	if s := v.outcomeHeadline(mark); s != "" {
		return floor + " " + s
	}
	problems := v.problemSentence(mark)
	evidence := v.multiEvidence("in corrupted sessions ", mark)
	decision := v.multiDecision(mark)
	corruption := []string{evidence, decision}
	decided := func(decisions ...string) bool {
		return slices.ContainsFunc(v.others(), func(i int) bool { return slices.Contains(decisions, v.Arms[i].Compare.Decision()) })
	}
	claimed := decided("higher", "lower")
	if problems != "" || evidence == "" {
		corruption = []string{decision}
		if !claimed && evidence != "" {
			corruption = []string{evidence}
		}
	}
	// A decision said without its evidence says what it decides: after divergence,
	// "inconclusive: q8_0" would read as divergence's.
	if len(corruption) == 1 && corruption[0] == decision && decision != "" && !strings.Contains(decision, "corrupt") {
		corruption[0] = "In corrupted sessions, " + lowerFirst(decision, mark)
	}
	sentences := append([]string{problems, floor}, corruption...)
	if !v.divergesBeyondFloor() && decided("higher") {
		sentences = append(append([]string{problems}, corruption...), floor)
	}
	var out []string
	for _, s := range sentences {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, " ")
}

// divergesBeyondFloor says whether any arm diverges beyond the A/A floor.
func (v *Verdict) divergesBeyondFloor() bool {
	return slices.ContainsFunc(v.Divergence, func(d DivergenceRow) bool { return d.Floor != nil && d.Floor.Beyond })
}

// corruptionHeadline is the headline of what the workload's detectors found.
func (v *Verdict) corruptionHeadline(mark string) string {
	if s := v.outcomeHeadline(mark); s != "" {
		return v.aaOutcomeHeadline(s)
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
		sentences = append(sentences, problems, v.multiEvidence("", mark), v.multiDecision(mark))
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
			return "A/A check FAILED: " + v.aaDifferences() + " " + text
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
	return fmt.Sprintf("Next: `%s` says how likely these launches were to find such a difference, and how many per arm would.", v.planCommand(a))
}

// planCommand is the `arbiter plan` of this experiment's spec at the rates arm a and the
// baseline showed, or, where they showed none to tell apart, with the rates left to the
// reader.
func (v *Verdict) planCommand(a ArmResult) string {
	return v.planCommandAt(v.Arms[v.Baseline].Rate, a.Rate)
}

// planCommandAt is the `arbiter plan` of this experiment's spec at rates p0 (the
// baseline's) and p1, or with the rates left to the reader where they do not differ.
func (v *Verdict) planCommandAt(p0, p1 float64) string {
	spec := v.Experiment.SpecPath
	if spec == "" {
		spec = "SPEC"
	}
	if p0 == p1 || math.IsNaN(p0) || math.IsNaN(p1) {
		return Command(fmt.Sprintf("plan %s --p0 P0 --p1 P1", shellWord(spec)), v.DB)
	}
	return Command(fmt.Sprintf("plan %s --p0 %.3g --p1 %.3g", shellWord(spec), p0, p1), v.DB)
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
		return fmt.Sprintf("The corruption of %s is not compared with the baseline %s: the baseline's surviving sessions are not a fair sample of its sessions.",
			joinAnd(names), v.Arms[v.Baseline].Name)
	}
	if len(names) == 1 {
		return fmt.Sprintf("The corruption of %s is inconclusive: the sessions that survived are not a fair sample of its sessions.", names[0])
	}
	return fmt.Sprintf("The corruption of %s is inconclusive: the sessions that survived are not a fair sample of theirs.", joinAnd(names))
}

// multiEvidence is the evidence sentence of a design with several arms: the interaction
// the factorial analysis shows, else the comparison closest to a decision. what names
// the outcome ("in corrupted sessions "), where the headline has spoken of another.
func (v *Verdict) multiEvidence(what, mark string) string {
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
	if s := v.sameEvidence(mark); s != "" {
		return s
	}
	a := v.Arms[best]
	c := a.Compare
	lo, hi, label := v.diffInterval(a)
	return fmt.Sprintf("The largest difference %sfrom the baseline %s (%d of %d, %s) is %s's: %s, a difference of %s points (%s; %s).",
		what, bold(v.Arms[v.Baseline].Name, mark), v.Arms[v.Baseline].Corrupted, v.Arms[v.Baseline].Sessions, pct(v.Arms[v.Baseline].Rate),
		bold(a.Name, mark), counted(a), signedNum(100*c.Difference), labelled(label, pointsAfter(lo, hi)), v.shortP(c))
}

// sameEvidence is the evidence sentence of several arms that all corrupted the same
// share of their sessions as the baseline, each named with its counts; "" when any arm's
// share differs (then the largest difference is the evidence). An arm that cannot be
// judged (crashed, lost too much) is left to the sentence on problems: "the largest
// difference is p1-again's: +0.0 points" said nothing.
func (v *Verdict) sameEvidence(mark string) string {
	var parts []string
	skipped := false
	for _, i := range v.others() {
		a := v.Arms[i]
		switch {
		case a.Compare.Inconclusive:
			skipped = true
			continue
		case a.Compare.Difference != 0:
			return ""
		}
		parts = append(parts, bold(a.Name, mark)+" "+counted(a))
	}
	if len(parts) == 0 || len(parts) == 1 && !skipped {
		return ""
	}
	base := v.Arms[v.Baseline]
	who := "Every arm's share of corrupted sessions equals"
	if skipped {
		who = "Every other arm that can be judged corrupted the same share of its sessions as"
	}
	return fmt.Sprintf("%s the baseline %s's (%d of %d, %s): %s.",
		who, bold(base.Name, mark), base.Corrupted, base.Sessions, pct(base.Rate), joinAnd(parts))
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
			return fmt.Sprintf("wedges: not attributable (%d launch%s per arm; %s)", n, pluralEs(n), v.canTestWords(w.Needed))
		case w.Claimed:
			return fmt.Sprintf("wedges %s (launch p %s ≤ %s)", w.Decision, pEq(w.P), levelText(w.Level))
		}
		return fmt.Sprintf("wedges: no difference shown (launch p %s > %s)", pEq(w.P), levelText(w.Level))
	}
	if s := v.speedDecisionWords(i); s != "" {
		return s
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
		return fmt.Sprintf("not attributable (%d launch%s per arm; %s)", n, pluralEs(n), v.canTestWords(lc.Needed))
	}
	return d + " (" + v.shortP(c) + ")"
}

// speedDecisionWords is the decision of a throughput experiment's arm, whose claim is a
// speed, load by load: "tok/s non-inferior at c=1 and c=32; not shown at poisson 16/s".
// Empty for the baseline and for an experiment whose primary claim is not a speed.
func (v *Verdict) speedDecisionWords(i int) string {
	var order []string
	loads := map[string][]string{}
	needed := 0
	for _, c := range v.speedClaims(i) {
		d := speedClaimDecision(c)
		if d == "untested" {
			needed = max(needed, c.Needed)
		}
		if _, seen := loads[d]; !seen {
			order = append(order, d)
		}
		loads[d] = append(loads[d], c.Group)
	}
	if len(order) == 0 {
		return ""
	}
	var parts []string
	for _, d := range order {
		switch d {
		case "untested":
			if needed > 0 {
				parts = append(parts, fmt.Sprintf("not attributable at %s (%s)", joinAnd(loads[d]), v.canTestWords(needed)))
			} else {
				parts = append(parts, fmt.Sprintf("not tested at %s", joinAnd(loads[d])))
			}
		default:
			parts = append(parts, fmt.Sprintf("%s at %s", d, joinAnd(loads[d])))
		}
	}
	return "tok/s " + strings.Join(parts, "; ")
}

// speedClaims are arm i's primary claims of a throughput experiment against the
// baseline, load by load; none for the baseline or another experiment.
func (v *Verdict) speedClaims(i int) []*LaunchClaim {
	if v.Claims == nil || v.Claims.Primary != MetricThroughput || i == v.Baseline {
		return nil
	}
	var out []*LaunchClaim
	for _, c := range v.Claims.Claims {
		if c.Primary && c.Arm == v.Arms[i].Name && c.Against == v.Arms[v.Baseline].Name {
			out = append(out, c)
		}
	}
	return out
}

// speedClaimDecision is a speed claim's decision: its own ("non-inferior", "better",
// "worse", "negligible"), "not shown" when tested without one, "untested" when its
// launches could not test it.
func speedClaimDecision(c *LaunchClaim) string {
	switch {
	case !c.Testable:
		return "untested"
	case !c.Claimed:
		return "not shown"
	}
	return c.Decision
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
		case "inconclusive", "not compared":
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
		smallest, tested, same := 1.0, false, true
		var untestable *LaunchClaim
		for _, i := range none {
			same = same && v.Arms[i].Compare.Difference == 0
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
			s = strings.TrimSuffix(v.attributionSentence(untestable, same), ".")
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
