package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// A verify workload scores each arm's answers against the reference arm's, request by
// request, as a vendor verifier does, and decides on launches: the reference's first
// launch gives the reference decisions; each launch of an arm is one F1 and one schema
// accuracy against them, and the reference's other launches, scored the same way, are
// its A/A (how far one launch of the reference departs from another).

// VerifyScore is one launch's (or an arm's pooled) scores against the reference
// decisions.
type VerifyScore struct {
	// Compared are the requests both sides completed.
	Compared int
	// TP, FP and FN count requests by tool call: both called, only this side, only the
	// reference.
	TP, FP, FN int
	// Calls are this side's responses with tool calls, SchemaValid those whose calls
	// toolcall-schema passed.
	Calls, SchemaValid int
	// SameName counts TP requests whose first call names the reference's tool.
	SameName int
	// SameFinish and SamePrompt count compared requests with the reference's finish
	// reason and usage.prompt_tokens.
	SameFinish, SamePrompt int
}

// F1 is the tool-call F1; 1 when neither side called a tool on any request.
func (s VerifyScore) F1() float64 {
	if d := 2*s.TP + s.FP + s.FN; d > 0 {
		return float64(2*s.TP) / float64(d)
	}
	return 1
}

// Precision and Recall of the tool-call decisions; NaN when undefined.
func (s VerifyScore) Precision() float64 { return ratio(s.TP, s.TP+s.FP) }

// Recall is the share of the reference's calls this side also made.
func (s VerifyScore) Recall() float64 { return ratio(s.TP, s.TP+s.FN) }

// SchemaAccuracy is the share of this side's tool-calling responses whose calls are
// valid; NaN when it made none.
func (s VerifyScore) SchemaAccuracy() float64 { return ratio(s.SchemaValid, s.Calls) }

// NameAccuracy is the share of requests both called a tool on where the tool was the
// reference's.
func (s VerifyScore) NameAccuracy() float64 { return ratio(s.SameName, s.TP) }

// FinishAgreement and PromptMatch are shares of the compared requests.
func (s VerifyScore) FinishAgreement() float64 { return ratio(s.SameFinish, s.Compared) }

// PromptMatch is the share of compared requests whose prompt counted as many tokens as
// the reference's (a chat template that differs shows here).
func (s VerifyScore) PromptMatch() float64 { return ratio(s.SamePrompt, s.Compared) }

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func (s *VerifyScore) add(o VerifyScore) {
	s.Compared += o.Compared
	s.TP, s.FP, s.FN = s.TP+o.TP, s.FP+o.FP, s.FN+o.FN
	s.Calls, s.SchemaValid, s.SameName = s.Calls+o.Calls, s.SchemaValid+o.SchemaValid, s.SameName+o.SameName
	s.SameFinish, s.SamePrompt = s.SameFinish+o.SameFinish, s.SamePrompt+o.SamePrompt
}

// VerifyAnswer is one request's answer as scoring reads it.
type VerifyAnswer struct {
	Called       bool
	Tool         string // the first call's function name
	SchemaBroken bool
	Finish       string
	PromptTokens int
}

// ScoreLaunch scores one launch's answers against the reference's, by request.
func ScoreLaunch(ref, got map[int]VerifyAnswer) VerifyScore {
	var s VerifyScore
	for req, g := range got {
		r, ok := ref[req]
		if !ok {
			continue
		}
		s.Compared++
		switch {
		case g.Called && r.Called:
			s.TP++
			if g.Tool == r.Tool {
				s.SameName++
			}
		case g.Called:
			s.FP++
		case r.Called:
			s.FN++
		}
		if g.Called {
			s.Calls++
			if !g.SchemaBroken {
				s.SchemaValid++
			}
		}
		if g.Finish == r.Finish {
			s.SameFinish++
		}
		if g.PromptTokens == r.PromptTokens {
			s.SamePrompt++
		}
	}
	return s
}

// VerifyArm is one arm's scores and decision.
type VerifyArm struct {
	Name      string
	Reference bool
	// Launches are the arm's launches' scores (the reference's: its launches after the
	// first, against the first); Pooled adds them up.
	Launches []VerifyScore
	Pooled   VerifyScore
	// Decision is "pass", "FAIL" or "not decided"; Why says on what.
	Decision, Why string
}

// VerifyView is a verify workload's scores and decisions.
type VerifyView struct {
	Reference string
	// Bar is the spec's fixed bar; unset when the arms are judged against the
	// reference's A/A.
	Bar arms.VerifyBar
	// Level is what each launch test is tested at.
	Level float64
	Arms  []VerifyArm
}

// Failing names the arms that failed.
func (v *VerifyView) Failing() []string {
	var out []string
	for _, a := range v.Arms {
		if a.Decision == "FAIL" {
			out = append(out, a.Name)
		}
	}
	return out
}

// summary is the verify view for --json: the reference, the bar, and each arm's pooled
// scores (null where there was nothing to score) and decision.
func (vv *VerifyView) summary() map[string]any {
	var out []map[string]any
	for _, a := range vv.Arms {
		p := a.Pooled
		decision := a.Decision
		if a.Reference {
			decision = "reference"
		}
		out = append(out, map[string]any{"arm": a.Name, "reference": a.Reference, "launches": len(a.Launches), "requests": p.Compared,
			"f1": nanNil(p.F1()), "precision": nanNil(p.Precision()), "recall": nanNil(p.Recall()),
			"schema_accuracy": nanNil(p.SchemaAccuracy()), "tool_name_accuracy": nanNil(p.NameAccuracy()),
			"finish_reason_agreement": nanNil(p.FinishAgreement()), "prompt_tokens_match": nanNil(p.PromptMatch()),
			"decision": decision, "why": a.Why})
	}
	s := map[string]any{"reference": vv.Reference, "level": nanNil(vv.Level), "arms": out}
	if vv.Bar.F1Min > 0 || vv.Bar.SchemaMin > 0 {
		s["bar"] = map[string]any{"f1_min": vv.Bar.F1Min, "schema_min": vv.Bar.SchemaMin}
	}
	return s
}

// verifyGate decides the verify gate: it fails on an arm that failed verification, and
// cannot decide where an arm was not decided or the experiment verified nothing.
func (v *Verdict) verifyGate() (GateResult, string) {
	if v.Verify == nil {
		return GateUndecided, "the experiment has no verify workload: nothing was verified against a reference"
	}
	for _, a := range v.Verify.Arms {
		if a.Decision == "FAIL" {
			return GateFail, fmt.Sprintf("%s failed verification against %s: %s", a.Name, v.Verify.Reference, a.Why)
		}
	}
	for _, a := range v.Verify.Arms {
		if a.Decision == "not decided" {
			return GateUndecided, fmt.Sprintf("%s's verification against %s was not decided: %s", a.Name, v.Verify.Reference, a.Why)
		}
	}
	return GatePass, ""
}

// verifySpec is what the verify view reads of the stored spec: read on its own, so a
// request file moved since the run does not stop the verdict.
type verifySpec struct {
	Workload struct {
		Kind string `yaml:"kind"`
	} `yaml:"workload"`
	Verify struct {
		F1Min     float64 `yaml:"f1_min"`
		SchemaMin float64 `yaml:"schema_min"`
	} `yaml:"verify"`
}

// loadVerify scores a verify workload's arms; it leaves v.Verify nil for other kinds.
func (v *Verdict) loadVerify(ctx context.Context, db *sqlx.DB) error {
	var sp verifySpec
	if yaml.Unmarshal([]byte(v.Experiment.Spec), &sp) != nil || sp.Workload.Kind != arms.WorkloadVerify {
		return nil
	}
	turns, err := store.VerifyTurns(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	armRows, err := store.Arms(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	// A block's sessions are offset (block k runs the requests as sessions from k times
	// their number): a request is its session's place from the block's first.
	first := map[int]int{}
	for _, t := range turns {
		if f, ok := first[t.Block]; !ok || t.Session < f {
			first[t.Block] = t.Session
		}
	}
	// answers[arm][block][request]; a failed turn is no answer.
	answers := map[int64]map[int]map[int]VerifyAnswer{}
	for _, t := range turns {
		if t.Failed {
			continue
		}
		a := VerifyAnswer{SchemaBroken: t.SchemaBroken, Finish: t.FinishReason, PromptTokens: t.PromptTokens}
		var calls []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if t.ToolCalls.Valid && json.Unmarshal([]byte(t.ToolCalls.String), &calls) == nil && len(calls) > 0 {
			a.Called, a.Tool = true, calls[0].Function.Name
		}
		if answers[t.ArmID] == nil {
			answers[t.ArmID] = map[int]map[int]VerifyAnswer{}
		}
		if answers[t.ArmID][t.Block] == nil {
			answers[t.ArmID][t.Block] = map[int]VerifyAnswer{}
		}
		answers[t.ArmID][t.Block][t.Session-first[t.Block]] = a
	}
	ref := armRows[v.Baseline]
	view := &VerifyView{Reference: ref.Name, Bar: arms.VerifyBar{F1Min: sp.Verify.F1Min, SchemaMin: sp.Verify.SchemaMin}}
	view.Level = v.Alpha / float64(2*max(len(armRows)-1, 1))
	blocks := func(id int64) []int {
		var bs []int
		for b := range answers[id] {
			bs = append(bs, b)
		}
		sort.Ints(bs)
		return bs
	}
	refBlocks := blocks(ref.ID)
	if len(refBlocks) == 0 {
		v.Verify = view
		return nil
	}
	decisions := answers[ref.ID][refBlocks[0]]
	var aa []VerifyScore
	for _, b := range refBlocks[1:] {
		aa = append(aa, ScoreLaunch(decisions, answers[ref.ID][b]))
	}
	for i, a := range armRows {
		va := VerifyArm{Name: a.Name, Reference: i == v.Baseline}
		if va.Reference {
			va.Launches = aa
		} else {
			for _, b := range blocks(a.ID) {
				va.Launches = append(va.Launches, ScoreLaunch(decisions, answers[a.ID][b]))
			}
		}
		for _, l := range va.Launches {
			va.Pooled.add(l)
		}
		if !va.Reference {
			va.Decision, va.Why = view.decide(va.Launches, aa)
		}
		view.Arms = append(view.Arms, va)
	}
	v.Verify = view
	return nil
}

// decide judges an arm's launches: against the fixed bar on each launch when the spec
// sets one, otherwise against the reference's A/A launches by the randomization test.
func (view *VerifyView) decide(launches, aa []VerifyScore) (string, string) {
	if len(launches) == 0 {
		return "not decided", "no launch completed a request the reference did"
	}
	if b := view.Bar; b.Set() {
		var below []string
		for k, l := range launches {
			if b.F1Min > 0 && l.F1() < b.F1Min {
				below = append(below, fmt.Sprintf("launch %d F1 %.2f < %.2f", k+1, l.F1(), b.F1Min))
			}
			if sa := l.SchemaAccuracy(); b.SchemaMin > 0 && !math.IsNaN(sa) && sa < b.SchemaMin {
				below = append(below, fmt.Sprintf("launch %d schema accuracy %.2f < %.2f", k+1, sa, b.SchemaMin))
			}
		}
		if len(below) > 0 {
			return "FAIL", "against the fixed bar: " + strings.Join(below, "; ")
		}
		return "pass", fmt.Sprintf("against the fixed bar, on each of %d launches", len(launches))
	}
	if len(aa) == 0 {
		return "not decided", "the reference has one launch, so no A/A to weigh the arm against; set verify.f1_min or run 2 or more launches"
	}
	var why []string
	fail, decided := false, true
	for _, m := range []struct {
		name string
		of   func(VerifyScore) float64
	}{{"F1", VerifyScore.F1}, {"schema accuracy", VerifyScore.SchemaAccuracy}} {
		x, y := values(launches, m.of), values(aa, m.of)
		if len(x) == 0 || len(y) == 0 {
			continue
		}
		t, err := stats.LaunchPermutation(y, x, 0)
		if err != nil || t.MinP > view.Level {
			decided = false
			why = append(why, fmt.Sprintf("%s: %d launches against the reference's %d A/A cannot reach p ≤ %s", m.name, len(x), len(y), FormatP(view.Level)))
			continue
		}
		below := t.Difference < 0 && t.P <= view.Level
		fail = fail || below
		word := "within"
		if below {
			word = "below"
		}
		why = append(why, fmt.Sprintf("%s %.2f against the reference's A/A %.2f: %s its spread (randomization test on launches, two-sided p %s, level %s)",
			m.name, t.MeanB, t.MeanA, word, FormatP(t.P), FormatP(view.Level)))
	}
	switch {
	case fail:
		return "FAIL", strings.Join(why, "; ")
	case !decided:
		return "not decided", strings.Join(why, "; ")
	}
	return "pass", strings.Join(why, "; ")
}

func values(ls []VerifyScore, of func(VerifyScore) float64) []float64 {
	var out []float64
	for _, l := range ls {
		if x := of(l); !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// verifyHeadline opens the headline of a verify workload; empty for other kinds.
func (v *Verdict) verifyHeadline(mark string) string {
	vv := v.Verify
	if vv == nil {
		return ""
	}
	if f := vv.Failing(); len(f) > 0 {
		var parts []string
		for _, a := range vv.Arms {
			if a.Decision == "FAIL" {
				parts = append(parts, fmt.Sprintf("%s%s%s (tool-call F1 %s, schema accuracy %s)", mark, a.Name, mark, share(a.Pooled.F1()), share(a.Pooled.SchemaAccuracy())))
			}
		}
		return fmt.Sprintf("Verification against %s FAILED for %s.", vv.Reference, strings.Join(parts, ", "))
	}
	for _, a := range vv.Arms {
		if a.Decision == "not decided" {
			return fmt.Sprintf("Verification against %s not decided: %s.", vv.Reference, a.Why)
		}
	}
	return fmt.Sprintf("Verification against %s passed for every arm.", vv.Reference)
}

func share(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

// verifySection writes the verify workload's scores, one row per arm.
func (v markdownWriter) verifySection() {
	vv := v.Verify
	if vv == nil {
		return
	}
	b := v.b
	fmt.Fprintf(b, "\n## Verification against %s\n\n", vv.Reference)
	fmt.Fprintf(b, "Each request's answer against the reference's first launch, pooled over launches: tool-call F1 (did the arm call a tool where the reference did), schema accuracy (the arm's tool-calling responses whose calls `toolcall-schema` passed), tool-name accuracy (the reference's tool, where both called one), finish-reason agreement, and `usage.prompt_tokens` equal to the reference's. The reference's row is its own launches after the first: its A/A.\n\n")
	fmt.Fprintf(b, "| arm | launches | requests | F1 | precision | recall | schema accuracy | tool-name accuracy | finish reason agrees | prompt tokens match | decision |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, a := range vv.Arms {
		p := a.Pooled
		d := a.Decision
		if a.Reference {
			d = "reference"
		} else if d == "FAIL" {
			d = "**FAIL**"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", a.Name, len(a.Launches), p.Compared,
			share(p.F1()), share(p.Precision()), share(p.Recall()), share(p.SchemaAccuracy()), share(p.NameAccuracy()),
			share(p.FinishAgreement()), share(p.PromptMatch()), d)
	}
	fmt.Fprintf(b, "\n")
	for _, a := range vv.Arms {
		if !a.Reference {
			fmt.Fprintf(b, "- %s: %s, %s.\n", a.Name, a.Decision, a.Why)
		}
	}
}
