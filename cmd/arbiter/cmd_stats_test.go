package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// statsRun runs the CLI in process and returns its exit code, stdout and stderr.
func statsRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestStatsCompareJSON(t *testing.T) {
	code, out, errs := statsRun(t, "stats", "compare", "0/60", "11/60", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		A struct {
			Events, N int
			Rate      float64
			Wilson95  []float64 `json:"wilson95"`
			CP95      []float64 `json:"clopper_pearson95"`
		}
		B struct {
			Events, N int
			Rate      float64
		}
		Difference struct {
			Estimate   float64
			Newcombe95 []float64 `json:"newcombe95"`
		}
		FisherExact struct {
			PTwoSided float64 `json:"p_two_sided"`
		} `json:"fisher_exact"`
		Significant bool
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out)
	}
	if math.Abs(v.FisherExact.PTwoSided-6.0e-4) > 0.1e-4 {
		t.Errorf("p_two_sided = %g, want 6.0e-4", v.FisherExact.PTwoSided)
	}
	if v.A.Events != 0 || v.A.N != 60 || v.B.Events != 11 || len(v.A.Wilson95) != 2 || len(v.A.CP95) != 2 {
		t.Errorf("arms = %+v %+v", v.A, v.B)
	}
	if v.A.CP95[0] != 0 || math.Abs(v.A.CP95[1]-0.0596) > 0.0001 {
		t.Errorf("Clopper-Pearson 0/60 = %v, want [0, 0.0596]", v.A.CP95)
	}
	if len(v.Difference.Newcombe95) != 2 || !(v.Difference.Newcombe95[0] > 0) || !v.Significant {
		t.Errorf("difference %+v, significant %v", v.Difference, v.Significant)
	}
	if errs != "" {
		t.Errorf("stderr should be empty on success: %q", errs)
	}
}

func TestStatsCompareReadable(t *testing.T) {
	code, out, _ := statsRun(t, "stats", "compare", "0/60", "7/60", "--alpha", "0.01")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"0/60", "7/60", "p = 0.013", "not significant at alpha 0.01", "chance alone could produce a difference this large", "Newcombe", "zero events in arm A", "mid-p"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "explains") {
		t.Errorf("a non-significant result must not say chance explains the difference:\n%s", out)
	}
}

// Two tables whose exact p is 1/20 are decided alike at alpha 0.05, whatever the
// rounding of the tail sums.
func TestStatsCompareDecidesTiesAtAlphaAlike(t *testing.T) {
	for _, pair := range [][2]string{{"0/1", "19/19"}, {"0/2", "12/14"}} {
		code, out, errs := statsRun(t, "stats", "compare", pair[0], pair[1], "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var v struct{ Significant bool }
		if err := json.Unmarshal([]byte(out), &v); err != nil || !v.Significant {
			t.Errorf("%s vs %s (p = 1/20) at alpha 0.05: significant = %v (%v)", pair[0], pair[1], v.Significant, err)
		}
		_, text, _ := statsRun(t, "stats", "compare", pair[0], pair[1])
		if !strings.Contains(text, "significant at alpha 0.05") || strings.Contains(text, "not significant") {
			t.Errorf("%s vs %s reads:\n%s", pair[0], pair[1], text)
		}
	}
}

// With no event in either arm only one table is possible: there is no mid-p to report.
func TestStatsCompareHasNoMidPWithoutEvents(t *testing.T) {
	_, out, _ := statsRun(t, "stats", "compare", "0/60", "0/60")
	if strings.Contains(out, "mid-p 0.5") || !strings.Contains(out, "no mid-p") {
		t.Errorf("0/60 vs 0/60:\n%s", out)
	}
	_, js, _ := statsRun(t, "stats", "compare", "0/60", "0/60", "--json")
	var v struct {
		FisherExact map[string]any `json:"fisher_exact"`
	}
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	if mid, ok := v.FisherExact["mid_p"]; !ok || mid != nil {
		t.Errorf("mid_p in JSON = %v (present %v), want null", mid, ok)
	}
}

func TestStatsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"stats", "compare", "11/6", "1/6"},
		{"stats", "compare", "x/60", "1/60"},
		{"stats", "compare", "1/60"},
		{"stats", "compare", "1/0", "1/60"},
		{"stats", "compare", "1/60", "2/60", "--conf", "95"},
		{"stats", "power", "--p0", "0", "--p1", "0.12"},
		{"stats", "power", "--p0", "0", "--p1", "1.2", "--n", "60"},
		{"stats", "power", "--p0", "0", "--p1", "0.1", "--n", "six"},
		{"stats", "cmh", "0/30-4/30"},
		{"stats", "cmh"},
		{"stats", "mcnemar", "--b", "3"},
		{"stats", "mcnemar", "--b", "-1", "--c", "2"},
		{"stats", "median"},
	} {
		code, out, errs := statsRun(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, errs)
		}
		if out != "" || errs == "" {
			t.Errorf("%q: stdout %q, stderr %q: the reason belongs on stderr", args, out, errs)
		}
	}
	_, _, errs := statsRun(t, "stats", "compare", "11/6", "1/6")
	if !strings.Contains(errs, `"11/6"`) || !strings.Contains(errs, "between 0 and 6") {
		t.Errorf("message %q does not say what is wrong", errs)
	}
}

func TestStatsPower(t *testing.T) {
	code, out, errs := statsRun(t, "stats", "power", "--p0", "0", "--p1", "0.12", "--n", "60", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Power *float64
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Power == nil {
		t.Fatalf("%v: %s", err, out)
	}
	if math.Round(*v.Power*100) != 74 {
		t.Errorf("power 0%% vs 12%% at 60 = %g, want 0.74", *v.Power)
	}
	code, out, _ = statsRun(t, "stats", "power", "--p0", "0", "--p1", "0.12", "--power", "0.8", "--design-effect", "2", "--json")
	var s struct {
		SessionsPerArm  int     `json:"sessions_per_arm"`
		ResponsesPerArm int     `json:"responses_per_arm"`
		AchievedPower   float64 `json:"achieved_power"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if s.SessionsPerArm <= 60 || s.ResponsesPerArm != 2*s.SessionsPerArm || s.AchievedPower < 0.8 {
		t.Errorf("sessions for 80%% = %+v", s)
	}
	code, out, _ = statsRun(t, "stats", "power", "--p0", "0.02", "--p1", "0.12", "--n", "60")
	if code != 0 || !strings.Contains(out, "power 0.426") {
		t.Errorf("exit %d: %s", code, out)
	}
}

func TestStatsCMHAndMcNemar(t *testing.T) {
	code, out, errs := statsRun(t, "stats", "cmh", "0/30:4/30", "1/30:6/30", "2/30:5/30", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var c struct {
		Strata int
		CMH    struct{ P float64 }
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Strata != 3 || !(c.CMH.P > 0 && c.CMH.P < 0.05) {
		t.Errorf("cmh = %+v (%v): %s", c, err, out)
	}
	code, out, _ = statsRun(t, "stats", "mcnemar", "--b", "1", "--c", "9")
	if code != 0 || !strings.Contains(out, "p = 0.021:") || !strings.Contains(out, "significant at alpha 0.05") {
		t.Errorf("exit %d: %s", code, out)
	}
}

// FuzzParseStatsCount checks that the EVENTS/N parser accepts exactly what it promises:
// any accepted count has 0 <= events <= n and n >= 1, and prints back to its input
// (modulo spaces around it).
func FuzzParseStatsCount(f *testing.F) {
	for _, s := range []string{"0/60", "11/60", "11/6", "x/60", "60", "/", "-1/5", "3/0", " 7/60 ", "+3/5", "1/2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseStatsCount(s)
		if err != nil {
			return
		}
		if c.events < 0 || c.n < 1 || c.events > c.n {
			t.Fatalf("%q accepted as %d/%d", s, c.events, c.n)
		}
		back, err := parseStatsCount(fmt.Sprintf("%d/%d", c.events, c.n))
		if err != nil || back != c {
			t.Fatalf("%q: %d/%d does not parse back (%v)", s, c.events, c.n, err)
		}
	})
}

// TestStatsNeverPrintsEqualsBeforeABound: a p below what a float carries reads
// "p < 1e-300", never "p = < 1e-300".
func TestStatsNeverPrintsEqualsBeforeABound(t *testing.T) {
	code, out, _ := statsRun(t, "stats", "compare", "0/5000", "5000/5000")
	if code != 0 || strings.Contains(out, "= <") || !strings.Contains(out, "p < 1e-300") || strings.Contains(out, "about never") {
		t.Errorf("exit %d: %s", code, out)
	}
}
