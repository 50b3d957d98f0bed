package verdict

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// TestScoreLaunchByHand checks the scores against counts worked out by hand. Eight
// requests: the reference calls on 1-5; the arm calls on 1, 2, 3 (3 with another tool,
// 2 with a schema break), 6 (where the reference answered) and not on 4, 5; request 8
// the arm did not complete, so it is not compared.
// TP = {1,2,3} = 3, FP = {6} = 1, FN = {4,5} = 2: precision 3/4, recall 3/5,
// F1 = 2·3 / (2·3 + 1 + 2) = 6/9. Schema: 4 calling responses, 1 broken: 3/4.
// Names: 2 of the 3 TP the same tool. Finish: the arm said "tool_calls" on 1, 2, 3, 6
// and "stop" elsewhere; the reference "tool_calls" on 1-5 and "stop" on 6, 7: agree on
// 1, 2, 3, 7 = 4 of 7. Prompt tokens equal on all but request 7: 6 of 7.
func TestScoreLaunchByHand(t *testing.T) {
	call := func(tool string) VerifyAnswer {
		return VerifyAnswer{Called: true, Tool: tool, Finish: "tool_calls", PromptTokens: 100}
	}
	text := VerifyAnswer{Finish: "stop", PromptTokens: 100}
	ref := map[int]VerifyAnswer{1: call("a"), 2: call("b"), 3: call("a"), 4: call("a"), 5: call("c"), 6: text, 7: text, 8: call("a")}
	broken := call("b")
	broken.SchemaBroken = true
	longer := text
	longer.PromptTokens = 104
	got := map[int]VerifyAnswer{1: call("a"), 2: broken, 3: call("b"), 4: text, 5: text, 6: call("a"), 7: longer}
	s := ScoreLaunch(ref, got)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if s.Compared != 7 || s.TP != 3 || s.FP != 1 || s.FN != 2 {
		t.Fatalf("counts %+v", s)
	}
	near("precision", s.Precision(), 0.75)
	near("recall", s.Recall(), 0.6)
	near("F1", s.F1(), 6.0/9)
	near("schema accuracy", s.SchemaAccuracy(), 0.75)
	near("tool-name accuracy", s.NameAccuracy(), 2.0/3)
	near("finish agreement", s.FinishAgreement(), 4.0/7)
	near("prompt match", s.PromptMatch(), 6.0/7)
	if f := (VerifyScore{Compared: 3}).F1(); f != 1 {
		t.Errorf("F1 with no call on either side = %v, want 1", f)
	}
	if sa := (VerifyScore{Compared: 3}).SchemaAccuracy(); !math.IsNaN(sa) {
		t.Errorf("schema accuracy with no call = %v, want NaN", sa)
	}
}

// TestVerifyDecide: a fixed bar fails an arm on any launch below it; without a bar the
// arm's launches are tested against the reference's A/A, and too few launches decide
// nothing.
func TestVerifyDecide(t *testing.T) {
	good := VerifyScore{Compared: 10, TP: 5, Calls: 5, SchemaValid: 5}         // F1 1, schema 1
	lowF1 := VerifyScore{Compared: 10, TP: 3, FN: 2, Calls: 3, SchemaValid: 3} // F1 6/8 = 0.75
	badSchema := VerifyScore{Compared: 10, TP: 5, Calls: 5, SchemaValid: 4}    // schema 0.8
	bar := &VerifyView{Bar: arms.VerifyBar{F1Min: 0.8, SchemaMin: 0.95}, Level: 0.025}
	if d, why := bar.decide([]VerifyScore{good, lowF1}, nil); d != "FAIL" || !strings.Contains(why, "launch 2 F1 0.75 < 0.80") {
		t.Errorf("bar, low F1: %s, %s", d, why)
	}
	if d, why := bar.decide([]VerifyScore{badSchema}, nil); d != "FAIL" || !strings.Contains(why, "schema accuracy 0.80 < 0.95") {
		t.Errorf("bar, low schema: %s, %s", d, why)
	}
	if d, _ := bar.decide([]VerifyScore{good, good}, nil); d != "pass" {
		t.Errorf("bar, good: %s", d)
	}
	aa := &VerifyView{Level: 0.025}
	// 5 launches at F1 0.75 against 4 A/A at 1: only the observed labelling is as
	// extreme, p = 1/C(9,4) = 1/126.
	if d, why := aa.decide([]VerifyScore{lowF1, lowF1, lowF1, lowF1, lowF1}, []VerifyScore{good, good, good, good}); d != "FAIL" || !strings.Contains(why, "F1 0.75 against the reference's A/A 1.00: below its spread (randomization test on launches, two-sided p 0.008") {
		t.Errorf("A/A, low F1: %s, %s", d, why)
	}
	if d, _ := aa.decide([]VerifyScore{good, good, good, good, good}, []VerifyScore{good, good, good, good}); d != "pass" {
		t.Errorf("A/A, good: %s", d)
	}
	if d, _ := aa.decide([]VerifyScore{lowF1, lowF1}, []VerifyScore{good}); d != "not decided" {
		t.Errorf("A/A, 2 against 1: %s", d)
	}
	if d, _ := aa.decide([]VerifyScore{lowF1}, nil); d != "not decided" {
		t.Errorf("one reference launch: %s", d)
	}
}

// The verify gate fails on a failed arm, cannot decide an undecided one or an experiment
// that verified nothing, and passes when every arm passed.
func TestVerifyGate(t *testing.T) {
	view := func(decisions ...string) *Verdict {
		v := &Verdict{Verify: &VerifyView{Reference: "reference"}}
		for i, d := range decisions {
			v.Verify.Arms = append(v.Verify.Arms, VerifyArm{Name: fmt.Sprintf("arm%d", i), Decision: d, Why: "F1 0.50"})
		}
		return v
	}
	for _, c := range []struct {
		v    *Verdict
		want GateResult
		why  string
	}{
		{&Verdict{}, GateUndecided, "no verify workload"},
		{view("reference", "pass"), GatePass, ""},
		{view("reference", "not decided", "FAIL"), GateFail, "arm2 failed verification against reference: F1 0.50"},
		{view("reference", "pass", "not decided"), GateUndecided, "arm2's verification against reference was not decided"},
	} {
		got, why := c.v.CheckGate("verify", GateOptions{})
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("verify gate: %v %q; want %v with %q", got, why, c.want, c.why)
		}
	}
	if !IsGate("verify") {
		t.Error("--fail-on does not know verify")
	}
}
