package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type bisectReference struct {
	ExcessUpper []struct {
		A, N1, B, N2 int
		Level, Upper float64
	} `json:"excess_upper"`
	Fisher []struct {
		A, N1, B, N2 int
		P            float64
	} `json:"fisher"`
}

func loadBisectReference(t *testing.T) bisectReference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "bisect", "reference.json"))
	if err != nil {
		t.Fatalf("reference values (regenerate with testdata/bisect/gen.py): %v", err)
	}
	var ref bisectReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestExcessUpperBoundReference(t *testing.T) {
	ref := loadBisectReference(t)
	if len(ref.ExcessUpper) < 300 {
		t.Fatalf("only %d reference cases", len(ref.ExcessUpper))
	}
	for _, c := range ref.ExcessUpper {
		got := ExcessUpperBound(c.A, c.N1, c.B, c.N2, c.Level)
		if !closeTo(got, c.Upper, 1e-7, 1e-10) {
			t.Errorf("ExcessUpperBound(%d/%d, %d/%d, level %g) = %.12g, scipy %.12g", c.A, c.N1, c.B, c.N2, c.Level, got, c.Upper)
		}
	}
}

// A step's corrupts boundary reads the same Fisher p as every other exact test.
func TestStepLooksUseFisherReference(t *testing.T) {
	ref := loadBisectReference(t)
	d, err := NewStepDesign(1, 0.01, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ref.Fisher {
		r, err := StepDecision([]LookCounts{{EventsA: c.A, SessionsA: c.N1, EventsB: c.B, SessionsB: c.N2}}, d)
		if err != nil {
			t.Fatal(err)
		}
		if !closeTo(r.Looks[0].P, c.P, 1e-8, 1e-14) {
			t.Errorf("%d/%d vs %d/%d: p = %.12g, scipy %.12g", c.A, c.N1, c.B, c.N2, r.Looks[0].P, c.P)
		}
	}
}

func TestStepDecisionOutcomes(t *testing.T) {
	d, err := NewStepDesign(3, 0.05/9, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	if !closeTo(d.CleanLevel, 0.05/27, 1e-12, 0) {
		t.Fatalf("clean level %g, want alpha/looks", d.CleanLevel)
	}
	look := func(a, n1, b, n2 int) LookCounts {
		return LookCounts{EventsA: a, SessionsA: n1, EventsB: b, SessionsB: n2}
	}
	for _, tc := range []struct {
		name  string
		looks []LookCounts
		want  StepOutcome
		at    int
	}{
		// 40 clean sessions a side bound nothing below 10 points; 80 do (the bound of
		// 0/80 at one-sided 0.0019/2 is 8.3 points).
		{"clean needs sessions", []LookCounts{look(0, 40, 0, 40)}, StepContinue, 0},
		{"clean at look 2", []LookCounts{look(0, 40, 0, 40), look(0, 80, 0, 80)}, StepClean, 2},
		{"corrupts at look 2", []LookCounts{look(0, 40, 5, 40), look(0, 80, 12, 80)}, StepCorrupts, 2},
		{"lower is its own outcome", []LookCounts{look(5, 40, 0, 40), look(12, 80, 0, 80)}, StepLower, 2},
		// 0/120 against 4/120: neither the exact test nor the bound decides.
		{"inconclusive after the budget", []LookCounts{look(0, 40, 1, 40), look(0, 80, 3, 80), look(0, 120, 4, 120)}, StepInconclusive, 0},
		// A boundary crossed at look 1 decides; later looks are not read.
		{"first decision stands", []LookCounts{look(0, 40, 30, 40), look(0, 80, 30, 80)}, StepCorrupts, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := StepDecision(tc.looks, d)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.want || r.DecidedAt != tc.at {
				t.Fatalf("outcome %s at look %d, want %s at %d (%s)", r.Outcome, r.DecidedAt, tc.want, tc.at, r.Sentence)
			}
			if tc.want.Decided() != r.Outcome.Decided() || r.Sentence == "" {
				t.Errorf("sentence %q", r.Sentence)
			}
			if tc.want == StepClean && !strings.Contains(r.Sentence, "below the effect of 10.0 points") {
				t.Errorf("clean sentence does not name the effect: %s", r.Sentence)
			}
		})
	}
}

func TestStepDecisionRefusesBadInput(t *testing.T) {
	d, _ := NewStepDesign(2, 0.01, 0.1)
	for _, looks := range [][]LookCounts{
		nil,
		{{EventsA: 2, SessionsA: 1}},
		{{EventsA: 0, SessionsA: 10, EventsB: 1, SessionsB: 10}, {EventsA: 0, SessionsA: 5, EventsB: 1, SessionsB: 10}},
		{{SessionsA: 1, SessionsB: 1}, {SessionsA: 2, SessionsB: 2}, {SessionsA: 3, SessionsB: 3}},
	} {
		if _, err := StepDecision(looks, d); err == nil {
			t.Errorf("%v: accepted", looks)
		}
	}
	for _, bad := range []struct {
		looks         int
		alpha, effect float64
	}{{0, 0.01, 0.1}, {2, 0, 0.1}, {2, 0.5, 0.1}, {2, 0.01, 0}, {2, 0.01, 1}} {
		if _, err := NewStepDesign(bad.looks, bad.alpha, bad.effect); err == nil {
			t.Errorf("NewStepDesign(%d, %g, %g) accepted", bad.looks, bad.alpha, bad.effect)
		}
	}
}

// The exact operating figures agree with steps simulated through StepDecision, and a
// clean subset is never called corrupting, nor a culprit's clean, above the step's alpha.
func TestStepOperatingExactAgreesWithSimulation(t *testing.T) {
	d, err := NewStepDesign(3, 0.05/9, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	const n, reps = 40, 4000
	rng := rand.New(rand.NewPCG(7, 11))
	for _, rates := range [][2]float64{{0, 0}, {0, 0.12}, {0.03, 0.03}, {0.02, 0.15}} {
		ex, err := StepOperatingExact(rates[0], rates[1], n, d)
		if err != nil {
			t.Fatal(err)
		}
		if s := ex.Corrupts + ex.Clean + ex.Lower + ex.Inconclusive; math.Abs(s-1) > 1e-9 {
			t.Fatalf("rates %v: outcome probabilities sum to %g", rates, s)
		}
		counts := map[StepOutcome]int{}
		var sessions float64
		for range reps {
			var looks []LookCounts
			var cum LookCounts
			var r StepResult
			for k := 0; k < d.Looks; k++ {
				cum.EventsA += binomialDraw(rng, n, rates[0])
				cum.EventsB += binomialDraw(rng, n, rates[1])
				cum.SessionsA += n
				cum.SessionsB += n
				looks = append(looks, cum)
				if r, err = StepDecision(looks, d); err != nil {
					t.Fatal(err)
				}
				if r.Outcome.Decided() {
					break
				}
			}
			counts[r.Outcome]++
			sessions += float64(r.Sessions)
		}
		for o, want := range map[StepOutcome]float64{StepCorrupts: ex.Corrupts, StepClean: ex.Clean, StepInconclusive: ex.Inconclusive, StepLower: ex.Lower} {
			got := float64(counts[o]) / reps
			se := math.Sqrt(want*(1-want)/reps) + 1e-3
			if math.Abs(got-want) > 4*se {
				t.Errorf("rates %v: %s in %.4f of simulated steps, exactly %.4f", rates, o, got, want)
			}
		}
		if mean := sessions / reps; math.Abs(mean-ex.MeanSessions) > 0.03*ex.MeanSessions {
			t.Errorf("rates %v: %.1f sessions on average in simulation, exactly %.1f", rates, mean, ex.MeanSessions)
		}
		switch {
		case rates[0] == rates[1] && ex.Corrupts+ex.Lower > d.Alpha:
			t.Errorf("rates %v: a clean subset is called corrupting or lower with probability %g > alpha %g", rates, ex.Corrupts+ex.Lower, d.Alpha)
		case rates[1]-rates[0] >= d.Effect && ex.Clean > d.Alpha:
			t.Errorf("rates %v: a culprit is called clean with probability %g > alpha %g", rates, ex.Clean, d.Alpha)
		}
	}
}

// The clean error is bounded for every rate at or beyond the effect, not only at the
// rates a test happens to pick: the worst case over a grid of baselines.
func TestStepCleanErrorBoundedAcrossRates(t *testing.T) {
	d, err := NewStepDesign(3, 0.01, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for _, pA := range []float64{0, 0.01, 0.05, 0.2, 0.45} {
		for _, n := range []int{20, 60} {
			op, err := StepOperatingExact(pA, pA+d.Effect, n, d)
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, op.Clean)
		}
	}
	if worst > d.Alpha {
		t.Fatalf("a subset at the effect is called clean with probability up to %g, above the step's alpha %g", worst, d.Alpha)
	}
}
