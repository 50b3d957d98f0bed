package stats

import (
	"encoding/json"
	"math"
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
		got := ExcessUpperBound(c.A, c.N1, c.B, c.N2, c.Level, 1)
		if !closeTo(got, c.Upper, 1e-7, 1e-10) {
			t.Errorf("ExcessUpperBound(%d/%d, %d/%d, level %g) = %.12g, scipy %.12g", c.A, c.N1, c.B, c.N2, c.Level, got, c.Upper)
		}
	}
}

// With launches of equal sessions, a design effect of 2 on doubled counts is the bound
// of the counts themselves: the bound works on the effective sample.
func TestExcessUpperBoundShrinksByTheDesignEffect(t *testing.T) {
	for _, c := range []struct{ a, n1, b, n2 int }{{0, 40, 0, 40}, {1, 40, 5, 40}, {3, 120, 0, 60}, {10, 50, 20, 50}} {
		plain := ExcessUpperBound(c.a, c.n1, c.b, c.n2, 0.001, 1)
		shrunk := ExcessUpperBound(2*c.a, 2*c.n1, 2*c.b, 2*c.n2, 0.001, 2)
		if !closeTo(plain, shrunk, 1e-9, 1e-12) {
			t.Errorf("%+v: bound %g, on doubled counts with design effect 2 %g", c, plain, shrunk)
		}
		if wider := ExcessUpperBound(c.a, c.n1, c.b, c.n2, 0.001, 3); !(wider > plain) {
			t.Errorf("%+v: a design effect of 3 gives %g, not wider than %g", c, wider, plain)
		}
	}
}

func TestStepDesignSpendsAlphaWhereLaunchesCanReachIt(t *testing.T) {
	alpha := 0.05 / 9
	d, err := NewStepDesign(10, alpha, 0.10, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	// 6 launches a side reach 2/924 = 0.0022, above alpha/5; 7 reach 2/3432, below alpha/4.
	if d.FirstLook != 7 || !closeTo(d.CleanLevel, alpha/10, 1e-12, 0) {
		t.Fatalf("first look %d, clean level %g", d.FirstLook, d.CleanLevel)
	}
	sum := 0.0
	for k, l := range d.Levels {
		sum += l
		if (k+1 < d.FirstLook) != (l == 0) || (l > 0 && !Reject(MinAttainableP(k+1, k+1), l)) {
			t.Errorf("look %d: level %g", k+1, l)
		}
	}
	if !closeTo(sum, alpha, 1e-12, 0) {
		t.Errorf("levels sum to %g, not the step's alpha %g", sum, alpha)
	}
	// Too few looks to reach the alpha at all: refused, with the launches it needs.
	if _, err := NewStepDesign(5, alpha, 0.10, 0.05); err == nil || !strings.Contains(err.Error(), "at least 6 launches a side") {
		t.Errorf("5 looks at alpha %g: %v", alpha, err)
	}
}

func TestStepDecisionOutcomes(t *testing.T) {
	d, err := NewStepDesign(10, 0.05/9, 0.10, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	blocks := func(k int, a, n1, b, n2 int) []LookCounts {
		out := make([]LookCounts, k)
		for i := range out {
			out[i] = LookCounts{EventsA: a, SessionsA: n1, EventsB: b, SessionsB: n2}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		blocks []LookCounts
		want   StepOutcome
		at     int
	}{
		// Launches that all agree are no evidence: 1/60 twice against 0/60 twice is two
		// launches a side, whose test cannot reach any level.
		{"agreeing launches are no evidence", blocks(2, 0, 60, 1, 60), StepContinue, 0},
		// Every launch of the subset above every launch of good, from the first look
		// whose launches can show it.
		{"corrupts at the first look that can", blocks(9, 0, 40, 6, 40), StepCorrupts, 7},
		// A subset that corrupts less than good holds no culprit: its excess is negative,
		// and the bound shows it (at look 5, 0/200 bounds the subset at 11 points and
		// 30/200 puts good above 4) before the launch test could call it lower.
		{"less than good is clean", blocks(9, 6, 40, 0, 40), StepClean, 5},
		// 0/240 a side with a design effect of 1 + 39 × 0.05 = 2.95 bounds the excess at
		// 9.6 points; 0/200 at 11.3.
		{"clean when enough launches bound the excess", blocks(8, 0, 40, 0, 40), StepClean, 6},
		// Launches whose rates scatter from 0 to 20%: no level reached and no bound below
		// the effect after all ten looks.
		{"inconclusive after the budget", append(blocks(5, 0, 40, 8, 40), blocks(5, 0, 40, 0, 40)...), StepInconclusive, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := StepDecision(tc.blocks, d)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.want || r.DecidedAt != tc.at {
				t.Fatalf("outcome %s at look %d, want %s at %d (%s)", r.Outcome, r.DecidedAt, tc.want, tc.at, r.Sentence)
			}
			if r.Sentence == "" {
				t.Error("no sentence")
			}
			if tc.want == StepClean && !strings.Contains(r.Sentence, "below the effect of 10.0 points") {
				t.Errorf("clean sentence does not name the effect: %s", r.Sentence)
			}
			if tc.want == StepCorrupts && !strings.Contains(r.Sentence, "over 7 and 7 launches") {
				t.Errorf("corrupts sentence does not count launches: %s", r.Sentence)
			}
		})
	}
}

// A subset whose launches scatter widely is not clean because its sessions are many:
// the launches' own spread bounds the excess where it is wider than the design's.
func TestStepCleanBoundHeedsTheLaunchesSpread(t *testing.T) {
	if got := spreadUpperBound([]float64{0}, []float64{0, 0.1}, 0.01); got != 1 {
		t.Errorf("one launch of good: bound %g, want 1", got)
	}
	if got := spreadUpperBound([]float64{0, 0}, []float64{0.05, 0.05}, 0.01); !closeTo(got, 0.05, 1e-12, 0) {
		t.Errorf("launches that agree: bound %g, want their difference 0.05", got)
	}
	d, err := NewStepDesign(10, 0.05, 0.10, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	// Ten launches a side of 200 sessions: good at 0, the subset at 0 or 12%, 6% on
	// average. On sessions (design effect 1 + 199 × 0.05) the bound would be about 9
	// points; the spread of 0 and 12% puts it well above 10.
	var blocks []LookCounts
	for k := range 10 {
		blocks = append(blocks, LookCounts{SessionsA: 200, SessionsB: 200, EventsB: 24 * (k % 2)})
	}
	sl, o := d.Look(blocks)
	if o == StepClean || !(sl.Upper > 0.10) {
		t.Fatalf("a subset at 0 or 12%% a launch: %s, excess bound %g", o, sl.Upper)
	}
}

func TestStepDecisionRefusesBadInput(t *testing.T) {
	d, _ := NewStepDesign(6, 0.05, 0.1, 0.05)
	for _, looks := range [][]LookCounts{
		nil,
		{{EventsA: 2, SessionsA: 1}},
		{{EventsA: 0, SessionsA: 10, EventsB: 11, SessionsB: 10}},
		make([]LookCounts, 7),
	} {
		if _, err := StepDecision(looks, d); err == nil {
			t.Errorf("%v: accepted", looks)
		}
	}
	for _, bad := range []struct {
		looks              int
		alpha, effect, icc float64
	}{{0, 0.01, 0.1, 0}, {6, 0, 0.1, 0}, {6, 0.5, 0.1, 0}, {6, 0.01, 0, 0}, {6, 0.01, 1, 0}, {6, 0.05, 0.1, -0.1}, {6, 0.05, 0.1, 1}} {
		if _, err := NewStepDesign(bad.looks, bad.alpha, bad.effect, bad.icc); err == nil {
			t.Errorf("NewStepDesign(%d, %g, %g, %g) accepted", bad.looks, bad.alpha, bad.effect, bad.icc)
		}
	}
}

// Simulated steps whose launches differ: a clean subset is called corrupting at most
// alpha of the time at every intra-launch correlation (the randomization test holds
// whatever launches do), and a subset at the effect is called clean at most alpha of
// the time while launches differ no more than the design allows for.
func TestSimulatedStepsKeepTheirAlpha(t *testing.T) {
	const alpha = 0.05
	d, err := NewStepDesign(8, alpha, 0.10, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	reps := 2000
	if testing.Short() {
		reps = 500
	}
	seed := uint64(1)
	for _, icc := range []float64{0, 0.05, 0.2} {
		for _, base := range []float64{0, 0.02, 0.10} {
			seed++
			null, err := SimulateStep(base, base, icc, 40, d, reps, seed)
			if err != nil {
				t.Fatal(err)
			}
			wrong := int(math.Round((null.Corrupts + null.Lower) * float64(reps)))
			if hi := ClopperPearson(wrong, reps, 0.90).Hi; hi > alpha {
				t.Errorf("icc %g, both at %g: called corrupting %d of %d (bound %.4f) above alpha", icc, base, wrong, reps, hi)
			}
			if icc > d.LaunchICC {
				continue
			}
			alt, err := SimulateStep(base, base+d.Effect, icc, 40, d, reps, seed+100)
			if err != nil {
				t.Fatal(err)
			}
			clean := int(math.Round(alt.Clean * float64(reps)))
			if hi := ClopperPearson(clean, reps, 0.90).Hi; hi > alpha {
				t.Errorf("icc %g, %g against %g: called clean %d of %d (bound %.4f) above alpha", icc, base+d.Effect, base, clean, reps, hi)
			}
		}
	}
}

// A step's clean bound allows for launches that differ, so however many sessions a
// launch runs, a launch counts for at most 1/ICC: at the default budget of 8 changes and
// effect 10 points, launches of 40 sessions that never corrupt are called clean at look
// 6 when they may differ up to ICC 0.05, at look 10 up to 0.1, and never within 10 looks
// up to 0.2; 240 sessions a launch gain one look at ICC 0.1.
func TestEarliestClean(t *testing.T) {
	for _, c := range []struct {
		icc      float64
		sessions int
		want     int
	}{{0.05, 40, 6}, {0.1, 40, 10}, {0.1, 240, 9}, {0.2, 240, 0}} {
		d, err := NewStepDesign(10, 0.05/9, 0.10, c.icc)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.EarliestClean(c.sessions); got != c.want {
			t.Errorf("ICC %g, %d sessions: clean at look %d, want %d", c.icc, c.sessions, got, c.want)
		}
	}
}
