package verdict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/outfile"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// StepJudgement is one bisection step judged: its experiment's verdict (good against
// good with some changes applied) and the step's three-way decision on the same
// sessions, look by look.
type StepJudgement struct {
	Verdict *Verdict
	// Good and Applied index the arms of Verdict: the baseline (changes=good) and the
	// arm that applies the changes.
	Good, Applied int
	// Blocks are each recorded block's own counts (one launch a side), good as A.
	Blocks []stats.LookCounts
	// Result is the decision on Looks; zero when no session was recorded.
	Result stats.StepResult
	// Outcome is Result's, unless the step cannot be judged: inconclusive when an
	// arm's engine crashed, wedged, failed to start or lost more sessions than the
	// spec allows (Why says which), or when its experiment failed. StepContinue means
	// the step's experiment has more looks to run.
	Outcome stats.StepOutcome
	Why     string
}

// JudgeStep judges the step whose experiment is id with the step design of its
// bisection.
func JudgeStep(ctx context.Context, db *sqlx.DB, id int64, d stats.StepDesign) (*StepJudgement, error) {
	v, err := Build(ctx, db, id)
	if err != nil {
		return nil, err
	}
	if len(v.Arms) != 2 {
		return nil, fmt.Errorf("experiment %d has %d arms; a bisection step has two", v.Experiment.ID, len(v.Arms))
	}
	j := &StepJudgement{Verdict: v, Good: v.Baseline, Applied: 1 - v.Baseline}
	maxBlock := -1
	perBlock := map[int][2]stats.LookCounts{}
	for _, s := range v.sessions {
		maxBlock = max(maxBlock, s.Block)
		if !analysed(s) {
			continue
		}
		c := perBlock[s.Block]
		k := 0
		if v.index[s.ArmID] == j.Applied {
			k = 1
		}
		if k == 0 {
			c[0].SessionsA++
			if s.Corrupted {
				c[0].EventsA++
			}
		} else {
			c[1].SessionsB++
			if s.Corrupted {
				c[1].EventsB++
			}
		}
		perBlock[s.Block] = c
	}
	for b := 0; b <= maxBlock && b < d.Looks; b++ {
		c := perBlock[b]
		j.Blocks = append(j.Blocks, stats.LookCounts{EventsA: c[0].EventsA, SessionsA: c[0].SessionsA, EventsB: c[1].EventsB, SessionsB: c[1].SessionsB})
	}
	if maxBlock+1 > d.Looks {
		return nil, fmt.Errorf("experiment %d recorded %d blocks, more than the %d looks of its bisection's steps", v.Experiment.ID, maxBlock+1, d.Looks)
	}
	j.Outcome = stats.StepContinue
	if len(j.Blocks) > 0 {
		if j.Result, err = stats.StepDecision(j.Blocks, d); err != nil {
			return nil, err
		}
		j.Outcome = j.Result.Outcome
	}
	exp := v.Experiment
	done := exp.Status == store.ExperimentDone
	switch c := v.Arms[j.Applied].Compare; {
	case c != nil && c.Inconclusive:
		j.Outcome, j.Why = stats.StepInconclusive, c.Why
	case exp.Status == store.ExperimentFailed:
		j.Outcome, j.Why = stats.StepInconclusive, "its experiment failed: "+exp.Error.String
	case done && !j.Outcome.Decided():
		// Every planned look ran and none decided; or fewer blocks were recorded than
		// planned, and the arms' faults above say why.
		j.Outcome = stats.StepInconclusive
		if len(j.Blocks) < d.Looks && j.Why == "" {
			j.Why = fmt.Sprintf("only %d of %d looks were recorded", len(j.Blocks), d.Looks)
		}
	}
	return j, nil
}

// Sentence says the step's decision with its numbers.
func (j *StepJudgement) Sentence() string {
	switch {
	case j.Why != "":
		return "inconclusive: " + j.Why
	case len(j.Result.Looks) == 0:
		return "no session recorded"
	}
	return j.Result.Sentence
}

// BisectionReport is a bisection judged from the database: its changes, every step with
// its counts and decision, and what the search concluded.
type BisectionReport struct {
	Bisection store.BisectionRow
	Changes   []store.BisectionChange
	Design    stats.StepDesign
	Steps     []StepReport
	// Conclusion is nil while the search has not ended.
	Conclusion *store.BisectionConclusion
	// DB is the results database as the user named it, for the commands the report
	// suggests (see Verdict.DB).
	DB string
}

// StepReport is one step as the report shows it.
type StepReport struct {
	store.BisectionStep
	Applied []int
	// Judgement is nil for a step whose experiment was never recorded.
	Judgement *StepJudgement
	// Recorded is the outcome the search acted on.
	Recorded stats.StepOutcome
}

// BuildBisection judges bisection id from a read-only database.
func BuildBisection(ctx context.Context, db *sqlx.DB, id int64) (*BisectionReport, error) {
	b, err := store.BisectionByID(ctx, db, id)
	if err != nil {
		return nil, err
	}
	r := &BisectionReport{Bisection: b}
	if err := json.Unmarshal([]byte(b.Changes), &r.Changes); err != nil {
		return nil, fmt.Errorf("bisection %d: its changes do not read: %w", b.ID, err)
	}
	if !b.LaunchICC.Valid {
		return nil, fmt.Errorf("bisection %d was recorded by an arbiter whose steps decided on sessions, which this one no longer judges: its steps' experiments are in the database (`arbiter show`), or run the bisection again", b.ID)
	}
	if r.Design, err = stats.NewStepDesign(b.Looks, b.StepAlpha, b.Effect, b.LaunchICC.Float64); err != nil {
		return nil, fmt.Errorf("bisection %d: %w", b.ID, err)
	}
	if b.Conclusion.Valid {
		var c store.BisectionConclusion
		if err := json.Unmarshal([]byte(b.Conclusion.String), &c); err != nil {
			return nil, fmt.Errorf("bisection %d: its conclusion does not read: %w", b.ID, err)
		}
		r.Conclusion = &c
	}
	steps, err := store.BisectionSteps(ctx, db, b.ID)
	if err != nil {
		return nil, err
	}
	for _, st := range steps {
		sr := StepReport{BisectionStep: st, Recorded: stats.StepOutcome(st.Outcome.String)}
		if err := json.Unmarshal([]byte(st.Applied), &sr.Applied); err != nil {
			return nil, fmt.Errorf("bisection %d step %d: %w", b.ID, st.Step, err)
		}
		j, err := judgeRecordedStep(ctx, db, st, r.Design)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("bisection %d step %d: %w", b.ID, st.Step, err)
		default:
			sr.Judgement = j
		}
		r.Steps = append(r.Steps, sr)
	}
	return r, nil
}

// Sessions is the sessions of both arms over every step.
func (r *BisectionReport) Sessions() int {
	n := 0
	for _, s := range r.Steps {
		if s.Judgement != nil {
			for _, a := range s.Judgement.Verdict.Arms {
				n += a.Started
			}
		}
	}
	return n
}

// Launches is the engine launches of both arms over every step: one a side per look.
func (r *BisectionReport) Launches() int {
	n := 0
	for _, s := range r.Steps {
		if s.Judgement != nil {
			for _, c := range s.Judgement.Blocks {
				if c.SessionsA > 0 {
					n++
				}
				if c.SessionsB > 0 {
					n++
				}
			}
		}
	}
	return n
}

// changeName is a change by its number and setting: "6 (--enable-hierarchical-cache)".
func (r *BisectionReport) changeName(i int) string {
	if i < 0 || i >= len(r.Changes) {
		return fmt.Sprint(i + 1)
	}
	return fmt.Sprintf("%d (%s)", i+1, r.Changes[i].Name)
}

func (r *BisectionReport) changeNames(idx []int) string {
	words := make([]string, len(idx))
	for k, i := range idx {
		words[k] = r.changeName(i)
	}
	return joinAnd(words)
}

// ChangeNumbers writes change numbers (0-based indices, written 1-based) compactly, as
// the report and arbiter's messages do: "1-4, 6"; "none" for none.
func ChangeNumbers(idx []int) string {
	s := slices.Clone(idx)
	slices.Sort(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(s[i]+1))
		case j == i+1:
			parts = append(parts, strconv.Itoa(s[i]+1), strconv.Itoa(s[j]+1))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", s[i]+1, s[j]+1))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Headline is the bisection's conclusion in a few sentences.
func (r *BisectionReport) Headline() []string {
	b := r.Bisection
	c := r.Conclusion
	if c == nil {
		return []string{fmt.Sprintf("Bisection %d (%s) is %s after %d steps; `%s` continues it.", b.ID, b.Name, b.State(), len(r.Steps),
			Command(fmt.Sprintf("bisect --resume %d", b.ID), r.DB))}
	}
	var out []string
	switch c.Status {
	case store.ConclusionCulprit:
		labels := make([]string, len(c.Culprit))
		for k, i := range c.Culprit {
			labels[k] = r.label(i)
		}
		nums := make([]string, len(c.Culprit))
		for k, i := range c.Culprit {
			nums[k] = strconv.Itoa(i + 1)
		}
		what := "The culprit is " + joinAnd(labels)
		switch len(c.Culprit) {
		case 1:
			what += fmt.Sprintf(" (change %s)", nums[0])
		case 2:
			what += fmt.Sprintf(", together: changes %s, neither of which corrupts without the other", joinAnd(nums))
		default:
			what += fmt.Sprintf(", together: changes %s, none of which can be left out", joinAnd(nums))
		}
		out = append(out, what+".")
		if s := r.step(c.ConfirmedBy); s != nil && s.Judgement != nil {
			out = append(out, fmt.Sprintf("Confirmed by step %d, good with the culprit applied against good: %s.", c.ConfirmedBy, s.Judgement.Sentence()))
		}
	case store.ConclusionNotReproduced:
		out = append(out, "The bad configuration does not corrupt more than good: no culprit to find.")
		if s := r.step(1); s != nil && s.Judgement != nil {
			out = append(out, "Step 1: "+s.Judgement.Sentence()+".")
		}
	default:
		out = append(out, "No culprit named: "+lowerFirst(c.Reason, ""))
		if s := r.step(c.StoppedAt); s != nil && s.Judgement != nil {
			out = append(out, fmt.Sprintf("Step %d: %s.", s.Step, s.Judgement.Sentence()))
		}
		if len(c.Known) > 0 {
			out = append(out, fmt.Sprintf("Shown to belong to the culprit: %s.", r.changeNames(c.Known)))
		}
		if len(c.Candidates) > 0 {
			out = append(out, fmt.Sprintf("Its next member is among changes %s.", ChangeNumbers(c.Candidates)))
		}
		return out
	}
	out = append(out, fmt.Sprintf("%d steps, %d launches, %d sessions; the chance that a bisection like this names a wrong culprit or calls the bad configuration clean is at most %s.",
		c.Steps, r.Launches(), r.Sessions(), pct(b.ErrorBudget)))
	return out
}

func (r *BisectionReport) label(i int) string {
	if i < 0 || i >= len(r.Changes) {
		return fmt.Sprint(i + 1)
	}
	return "`" + r.Changes[i].Label + "`"
}

func (r *BisectionReport) step(n int) *StepReport {
	for k := range r.Steps {
		if r.Steps[k].Step == n {
			return &r.Steps[k]
		}
	}
	return nil
}

// Markdown writes the bisection's report.
func (r *BisectionReport) Markdown(w io.Writer) error {
	var b strings.Builder
	bi := r.Bisection
	fmt.Fprintf(&b, "# Bisection %d: %s\n\n", bi.ID, bi.Name)
	for _, line := range r.Headline() {
		b.WriteString(line + " ")
	}
	b.WriteString("\n\n")

	b.WriteString("## What was searched\n\n")
	fmt.Fprintf(&b, "Spec `%s`, status **%s**. The bad configuration differs from the good one in %d settings, numbered in search order:\n\n",
		bi.SpecPath, bi.State(), len(r.Changes))
	b.WriteString("| # | setting | good | bad |\n|---|---|---|---|\n")
	for i, c := range r.Changes {
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s |\n", i+1, mdCell(c.Name), mdCell(c.Good), mdCell(c.Bad))
	}
	d := r.Design
	fmt.Fprintf(&b, "\nEvery step is an experiment: good against good with some of the changes applied, each look one launch of each side with %d sessions, up to %d looks. "+
		"The launch is the unit: a step **corrupts** when the randomization test of the launches' corruption rates reaches the look's level (the step's alpha %.3g split over looks %d to %d, "+
		"the first whose launches can reach it), and is **clean** when the upper bound of its excess over good (one-sided level %.3g per look, allowing launches to differ up to an intra-launch correlation of %.2g, or by their own spread where that is larger) "+
		"falls below the effect, %.1f points; with neither after every look it is **inconclusive**. "+
		"Each step errs with probability at most its alpha; the error budget %s is split over at most %d steps, so the whole search names a wrong culprit, or calls the bad "+
		"configuration clean, with probability at most %s, provided every subset holding the culprit corrupts at least %.1f points more than good and launches of one configuration differ no more than the clean bound allows for.\n\n",
		bi.Sessions, d.Looks, d.Alpha, d.FirstLook, d.Looks, d.CleanLevel, d.LaunchICC, 100*d.Effect, pct(bi.ErrorBudget), bi.MaxSteps, pct(bi.ErrorBudget), 100*d.Effect)

	b.WriteString("## Search tree\n\n")
	b.WriteString("Round by round: the search applies growing prefixes of the candidate changes (on top of the culprit found so far) until one more change makes the difference between clean and corrupting; that change belongs to the culprit, and the round ends by testing the culprit alone, the confirmation.\n\n")
	b.WriteString("```\n")
	r.tree(&b)
	b.WriteString("```\n\n")
	b.WriteString("| step | role | changes applied | good | with changes | decision | experiment |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		good, applied, decision, exp := "–", "–", string(s.Recorded), s.ExperimentName
		if s.Judgement != nil {
			j := s.Judgement
			a, g := j.Verdict.Arms[j.Applied], j.Verdict.Arms[j.Good]
			good = fmt.Sprintf("%d/%d", g.Corrupted, g.Sessions)
			applied = fmt.Sprintf("%d/%d", a.Corrupted, a.Sessions)
			decision = j.short()
			exp = fmt.Sprintf("%d (%s)", j.Verdict.Experiment.ID, j.Verdict.Experiment.State())
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", s.Step, s.Role, ChangeNumbers(s.Applied), good, applied, mdCell(dash(decision)), exp)
	}
	b.WriteString("\n")
	for _, s := range r.Steps {
		if s.Judgement != nil {
			fmt.Fprintf(&b, "- Step %d: %s.\n", s.Step, s.Judgement.Sentence())
		}
	}
	b.WriteString("\n")

	if c := r.Conclusion; c != nil && c.Status == store.ConclusionCulprit {
		b.WriteString("## The culprit and its confirming test\n\n")
		for _, i := range c.Culprit {
			fmt.Fprintf(&b, "- change %d: %s\n", i+1, r.label(i))
		}
		if s := r.step(c.ConfirmedBy); s != nil && s.Judgement != nil {
			j := s.Judgement
			a, g := j.Verdict.Arms[j.Applied], j.Verdict.Arms[j.Good]
			fmt.Fprintf(&b, "\nStep %d (experiment %d) ran good with exactly these changes applied against good: %d of %d sessions corrupted against %d of %d. %s. "+
				"`%s` shows that experiment in full.\n\n",
				s.Step, j.Verdict.Experiment.ID, a.Corrupted, a.Sessions, g.Corrupted, g.Sessions, capitalize(j.Sentence()), Command(fmt.Sprintf("verdict %d", j.Verdict.Experiment.ID), r.DB))
		}
	}

	b.WriteString("## What remains uncertain\n\n")
	for _, u := range r.uncertain() {
		fmt.Fprintf(&b, "- %s\n", u)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// short is a step's decision in a table cell.
func (j *StepJudgement) short() string {
	switch {
	case j.Why != "":
		return "inconclusive (" + j.Why + ")"
	case len(j.Result.Looks) == 0:
		return string(j.Outcome)
	}
	last := j.Result.Looks[len(j.Result.Looks)-1]
	switch j.Outcome {
	case stats.StepCorrupts, stats.StepLower:
		return fmt.Sprintf("%s at look %d (p %s)", j.Outcome, last.Look, pEq(last.P))
	case stats.StepClean:
		return fmt.Sprintf("clean at look %d (excess ≤ %+.1f pts)", last.Look, 100*last.Upper)
	case stats.StepContinue:
		return fmt.Sprintf("running (look %d)", last.Look)
	}
	return fmt.Sprintf("inconclusive after %d looks (p %s, excess ≤ %+.1f pts)", last.Look, pEq(last.P), 100*last.Upper)
}

// tree writes the steps round by round: the reproduction, then each round's prefixes,
// the change they pin down, and the confirmation that ends the round.
func (r *BisectionReport) tree(b *strings.Builder) {
	var culprit []int
	round := 0
	line := func(indent string, s StepReport, what string) {
		outcome := string(s.Recorded)
		counts := ""
		if s.Judgement != nil {
			j := s.Judgement
			a, g := j.Verdict.Arms[j.Applied], j.Verdict.Arms[j.Good]
			counts = fmt.Sprintf("  %d/%d vs good %d/%d", a.Corrupted, a.Sessions, g.Corrupted, g.Sessions)
			if outcome == "" {
				outcome = string(j.Outcome)
			}
		}
		if outcome == "" {
			outcome = "not run"
		}
		text := fmt.Sprintf("%sstep %d  %s", indent, s.Step, what)
		fmt.Fprintf(b, "%-44s %-12s%s\n", text, outcome, counts)
	}
	for k, s := range r.Steps {
		switch s.Role {
		case store.RoleReproduce:
			line("", s, "bad ("+ChangeNumbers(s.Applied)+")")
		case store.RoleSearch:
			if k == 0 || r.Steps[k-1].Role != store.RoleSearch {
				round++
				fmt.Fprintf(b, "round %d: which change completes the culprit?\n", round)
			}
			prefix := without(s.Applied, culprit)
			what := ChangeNumbers(prefix)
			if len(culprit) > 0 {
				what = ChangeNumbers(culprit) + " + " + what
			}
			line("  ", s, what)
		case store.RoleConfirm:
			found := without(s.Applied, culprit)
			if len(found) > 0 {
				fmt.Fprintf(b, "  => %s belongs to the culprit\n", r.changeNames(found))
			}
			culprit = s.Applied
			line("", s, "confirm "+ChangeNumbers(s.Applied))
		case store.RoleRevert:
			line("", s, "revert: all but "+ChangeNumbers(culprit))
		}
	}
	if c := r.Conclusion; c != nil {
		switch c.Status {
		case store.ConclusionCulprit:
			fmt.Fprintf(b, "=> culprit: changes %s\n", ChangeNumbers(c.Culprit))
		case store.ConclusionNotReproduced:
			b.WriteString("=> not reproduced\n")
		default:
			b.WriteString("=> stopped: no culprit named\n")
		}
	}
}

func without(set, remove []int) []int {
	var out []int
	for _, x := range set {
		if !slices.Contains(remove, x) {
			out = append(out, x)
		}
	}
	return out
}

// uncertain lists what the bisection did not settle.
func (r *BisectionReport) uncertain() []string {
	c := r.Conclusion
	var out []string
	if c == nil {
		return []string{"The search has not ended: everything after the last recorded step."}
	}
	for _, s := range r.Steps {
		switch j := s.Judgement; {
		case j == nil || j.Outcome != stats.StepInconclusive:
		case j.Why != "":
			out = append(out, fmt.Sprintf("Step %d could not be judged: %s. `%s` shows its launches.", s.Step, j.Why, Command(fmt.Sprintf("verdict %d", j.Verdict.Experiment.ID), r.DB)))
		default:
			out = append(out, fmt.Sprintf("Step %d was inconclusive: %s. More looks (search.looks: launches a side) give a step more power, more sessions per launch (workload.sessions) less so; a step with an excess between 0 and the effect may never decide.", s.Step, j.Sentence()))
		}
	}
	switch c.Status {
	case store.ConclusionCulprit:
		switch stats.StepOutcome(c.Revert) {
		case stats.StepClean:
			out = append(out, fmt.Sprintf("Other culprits: step %d applied every change but the culprit's and was clean, so none of the other changes corrupts with the rest of them.", c.RevertStep))
		case stats.StepCorrupts:
			out = append(out, fmt.Sprintf("Other culprits: step %d applied every change but the culprit's and still corrupted: another culprit remains among changes %s. Bisect them again with the culprit left out.", c.RevertStep, ChangeNumbers(without(allIdx(len(r.Changes)), c.Culprit))))
		case "":
			out = append(out, "Other culprits: the search names one minimal culprit. Whether the other changes hold one of their own was not tested; search.check_revert adds a step that applies every change but the culprit's.")
		default:
			out = append(out, fmt.Sprintf("Other culprits: the revert check (step %d) was %s.", c.RevertStep, c.Revert))
		}
		if s := r.step(c.ConfirmedBy); s != nil && s.Judgement != nil && len(s.Judgement.Result.Looks) > 0 {
			j := s.Judgement
			conf := 1 - r.Design.Alpha
			a, b := blockRates(j.Blocks[:len(j.Result.Looks)])
			if t, err := stats.LaunchPermutation(a, b, conf); err == nil && !math.IsInf(t.CI.Lo, 0) && !math.IsInf(t.CI.Hi, 0) {
				out = append(out, fmt.Sprintf("How much it corrupts: the confirmation's launches put the excess at %+.1f points, %s (the launch test inverted at the step's alpha, %s); the decision, not this estimate, is what the error budget covers.",
					100*t.Difference, pointsInterval(t.CI.Lo, t.CI.Hi), levelText(r.Design.Alpha)))
			}
		}
		if clean := r.largestClean(); clean != nil {
			out = append(out, fmt.Sprintf("Harmless, as far as tested: good with changes %s applied together was clean (step %d); each of those is shown harmless in that company, not in every combination.", ChangeNumbers(clean.Applied), clean.Step))
		}
	case store.ConclusionNotReproduced:
		out = append(out, fmt.Sprintf("Clean means the excess is shown below %.1f points: a regression smaller than the effect is not ruled out; lower search.effect (at the price of more sessions) to look for one.", 100*r.Design.Effect))
	default:
		if c.StoppedAt == 0 {
			out = append(out, fmt.Sprintf("The budget of %d steps ran out: a culprit of more changes than it allows needs a larger search.max_steps (and each step then gets a smaller share of the error budget).", r.Bisection.MaxSteps))
		}
		if len(c.Known) > 0 {
			out = append(out, fmt.Sprintf("Shown to belong to the culprit: %s; whether they are the whole culprit is not known.", r.changeNames(c.Known)))
		}
		if len(c.Candidates) > 0 {
			out = append(out, fmt.Sprintf("The culprit's next member is among changes %s.", ChangeNumbers(c.Candidates)))
		}
	}
	if line := r.goodLaunchSpread(); line != "" {
		out = append(out, line)
	}
	out = append(out, fmt.Sprintf("The model: every subset of the changes that holds the culprit corrupts at least %.1f points more than good, and every other subset no more than good. A change that only adds a little corruption, or that masks another, breaks it; a step called lower, or steps that contradict each other, are the signs.", 100*r.Design.Effect))
	return out
}

// goodLaunchSpread checks the clean bound's assumption against the one configuration
// every step launches: good. Its launches over all steps show how much launches of one
// configuration differ on this engine and host.
func (r *BisectionReport) goodLaunchSpread() string {
	var clusters []stats.ClusterCounts
	events := 0
	for _, s := range r.Steps {
		if s.Judgement == nil {
			continue
		}
		for _, c := range s.Judgement.Blocks {
			if c.SessionsA > 0 {
				clusters = append(clusters, stats.ClusterCounts{Events: c.EventsA, Responses: c.SessionsA})
				events += c.EventsA
			}
		}
	}
	d := r.Design
	switch icc := stats.LaunchICC(clusters); {
	case len(clusters) < 2:
		return ""
	case events == 0:
		return fmt.Sprintf("Launches that differ: good's %d launches corrupted nothing, so they show no spread to check the clean bound's allowance (an intra-launch correlation of %.2g) against; an A/A experiment of the engine measures it.", len(clusters), d.LaunchICC)
	case math.IsNaN(icc):
		return ""
	case icc > d.LaunchICC:
		return fmt.Sprintf("Launches that differ: good's %d launches vary with an intra-launch correlation of %.2g, above the %.2g the clean bound allows for, so a step called clean may have missed a culprit more often than its alpha says: set search.launch_icc to %.2g and bisect again (`arbiter bisect --plan` shows what that costs).",
			len(clusters), icc, d.LaunchICC, icc)
	default:
		return fmt.Sprintf("Launches that differ: good's %d launches vary with an intra-launch correlation of %.2g, within the %.2g the clean bound allows for.", len(clusters), icc, d.LaunchICC)
	}
}

// blockRates are the good side's and the applied side's launch rates, one per block
// that had sessions on that side.
func blockRates(blocks []stats.LookCounts) (good, applied []float64) {
	for _, c := range blocks {
		if c.SessionsA > 0 {
			good = append(good, float64(c.EventsA)/float64(c.SessionsA))
		}
		if c.SessionsB > 0 {
			applied = append(applied, float64(c.EventsB)/float64(c.SessionsB))
		}
	}
	return good, applied
}

func allIdx(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// largestClean is the clean step that applied the most changes.
func (r *BisectionReport) largestClean() *StepReport {
	var best *StepReport
	for k := range r.Steps {
		s := &r.Steps[k]
		if s.Recorded == stats.StepClean && (best == nil || len(s.Applied) > len(best.Applied)) {
			best = s
		}
	}
	return best
}

// Summary is the report as JSON for --json.
func (r *BisectionReport) Summary() map[string]any {
	type stepJSON struct {
		Step       int    `json:"step"`
		Role       string `json:"role"`
		Applied    []int  `json:"applied"`
		Experiment any    `json:"experiment_id"`
		Outcome    string `json:"outcome"`
		Good       []int  `json:"good,omitempty"`
		With       []int  `json:"with_changes,omitempty"`
		Sentence   string `json:"decision,omitempty"`
		Launches   int    `json:"launches_per_side,omitempty"`
	}
	var steps []stepJSON
	for _, s := range r.Steps {
		sj := stepJSON{Step: s.Step, Role: string(s.Role), Applied: oneBased(s.Applied), Outcome: string(s.Recorded)}
		if s.Judgement != nil {
			j := s.Judgement
			sj.Experiment = j.Verdict.Experiment.ID
			a, g := j.Verdict.Arms[j.Applied], j.Verdict.Arms[j.Good]
			sj.Good, sj.With = []int{g.Corrupted, g.Sessions}, []int{a.Corrupted, a.Sessions}
			sj.Sentence = j.Sentence()
			sj.Launches = len(j.Result.Looks)
		}
		steps = append(steps, sj)
	}
	out := map[string]any{
		"bisection_id": r.Bisection.ID, "name": r.Bisection.Name, "status": r.Bisection.State(),
		"changes": r.Changes, "steps": steps, "error_budget": r.Bisection.ErrorBudget, "effect": r.Bisection.Effect,
		"step_alpha": r.Bisection.StepAlpha, "max_steps": r.Bisection.MaxSteps, "looks": r.Design.Looks,
		"launch_icc": r.Design.LaunchICC, "launches": r.Launches(), "headline": r.Headline(),
	}
	if c := r.Conclusion; c != nil {
		out["conclusion"] = string(c.Status)
		out["culprit"] = oneBased(c.Culprit)
		out["confirmed_by"] = c.ConfirmedBy
		out["reason"] = c.Reason
		if len(c.Known) > 0 || len(c.Candidates) > 0 {
			out["known"], out["candidates"] = oneBased(c.Known), oneBased(c.Candidates)
		}
	}
	return out
}

// oneBased numbers changes as the report does.
func oneBased(idx []int) []int {
	out := make([]int, len(idx))
	for i, x := range idx {
		out[i] = x + 1
	}
	return out
}

// WriteFile writes the report to path, atomically through keep, which also keeps the
// bisection's own spec.
func (r *BisectionReport) WriteFile(path string, keep outfile.Guard) error {
	keep.Specs = append(slices.Clip(keep.Specs), r.Bisection.SpecPath)
	if err := keep.Check(path); err != nil {
		return err
	}
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		return err
	}
	return keep.Write(path, []byte(b.String()))
}

// judgeRecordedStep judges a recorded step's experiment: the one it is linked to, or an
// older arbiter's, found by its name. It wraps store.ErrNotFound when the step ran none.
func judgeRecordedStep(ctx context.Context, db *sqlx.DB, st store.BisectionStep, d stats.StepDesign) (*StepJudgement, error) {
	e, err := st.Experiment(ctx, db)
	if err != nil {
		return nil, err
	}
	return JudgeStep(ctx, db, e.ID, d)
}
