package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// nullFactorial draws one 2^k experiment with every cell at the same rate.
func nullFactorial(rng *rand.Rand, k, perCell int, rate float64) ([]FactorialCell, []string) {
	var cells []FactorialCell
	var names []string
	factors := []string{"bf16_index_k", "hicache", "overlap", "gate"}[:k]
	for m := 0; m < 1<<k; m++ {
		c := FactorialCell{Levels: map[string]int{}, N: perCell, Events: binomialDraw(rng, perCell, rate)}
		name := ""
		for i, f := range factors {
			c.Levels[f] = (m >> i) & 1
			name += fmt.Sprintf("%s=%d,", f, c.Levels[f])
		}
		cells = append(cells, c)
		names = append(names, name[:len(name)-1])
	}
	return cells, names
}

// In a null 2^3 factorial (all eight cells equal, 60 sessions each), the family must
// headline anything at all in at most 5% of experiments.
func TestFactorialFamilyHoldsTheFamilyWiseError(t *testing.T) {
	t.Parallel()
	const reps = 2000
	for _, rate := range []float64{0.05, 0.1, 0.2} {
		t.Run(fmt.Sprintf("rate %.2f", rate), func(t *testing.T) {
			t.Parallel()
			nullFactorialRate(t, rate, reps)
		})
	}
}

// nullFactorialRate simulates reps null 2^3 experiments at one rate through
// FactorialFamily, the function the verdict picks its factorial claims with.
func nullFactorialRate(t *testing.T, rate float64, reps int) {
	rng := rand.New(rand.NewPCG(7, math.Float64bits(rate)))
	headlined, unadjusted := 0, 0
	for r := 0; r < reps; r++ {
		cells, names := nullFactorial(rng, 3, 60, rate)
		f, err := FactorialFamily(FactorialFamilyInput{Cells: cells, Arms: names, Baseline: 0, Alpha: 0.05})
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Headlined()) > 0 {
			headlined++
		}
		for _, c := range f.Claims {
			if Reject(c.P, 0.05) && c.Kind == ClaimInteraction {
				unadjusted++
				break
			}
		}
	}
	share := float64(headlined) / float64(reps)
	t.Logf("null 2^3 factorial at %.2f, 60 per cell, %d experiments: headlines something in %.4f (an unadjusted interaction on either scale in %.4f)",
		rate, reps, share, float64(unadjusted)/float64(reps))
	if share > 0.05 {
		t.Errorf("rate %.2f: false headline rate %.4f exceeds 0.05", rate, share)
	}
}

// The field's factorial: only the cell with both factors on corrupts. Alone, its arm
// would read p = 0.013; in the family of six claims the headline must not claim it,
// while 14 of 60 (the field's rate) is claimed on every scale that shows it.
func TestFactorialFamilyAdjustsEveryClaimTogether(t *testing.T) {
	cells := func(e int) []FactorialCell {
		return []FactorialCell{
			{Levels: map[string]int{"bf16_index_k": 0, "hicache": 0}, N: 60},
			{Levels: map[string]int{"bf16_index_k": 0, "hicache": 1}, N: 60},
			{Levels: map[string]int{"bf16_index_k": 1, "hicache": 0}, N: 60},
			{Levels: map[string]int{"bf16_index_k": 1, "hicache": 1}, Events: e, N: 60},
		}
	}
	names := []string{"00", "01", "10", "11"}
	f, err := FactorialFamily(FactorialFamilyInput{Cells: cells(7), Arms: names, Alpha: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	if f.Tested != 6 || len(f.Claims) != 6 || f.Method != "Holm" || !strings.Contains(f.Description, "6 claims") {
		t.Fatalf("family of a 2x2 design: %+v", f)
	}
	arm, _ := f.Find(ClaimArm, "11", ScaleRiskDifference)
	rd, _ := f.Find(ClaimInteraction, "bf16_index_k x hicache", ScaleRiskDifference)
	if !closeTo(arm.P, FisherExact(0, 60, 7, 60).PTwoSided, 1e-12, 0) || !Reject(arm.P, 0.05) || arm.Reject {
		t.Errorf("7/60 alone: %+v", arm)
	}
	if !Reject(rd.P, 0.05) || rd.Reject || len(f.Headlined()) != 0 {
		t.Errorf("interaction on the risk-difference scale: %+v; headlined %v", rd, f.Headlined())
	}
	ps := make([]float64, len(f.Claims))
	for i, c := range f.Claims {
		ps[i] = c.P
	}
	holm, _ := Holm(ps)
	for i, c := range f.Claims {
		if c.AdjustedP != holm[i] {
			t.Errorf("%s %s: adjusted %g, Holm %g", c.Kind, c.Name, c.AdjustedP, holm[i])
		}
	}

	f, _ = FactorialFamily(FactorialFamilyInput{Cells: cells(14), Arms: names, Alpha: 0.05})
	head := f.Headlined()
	if len(head) < 2 || head[0].Kind != ClaimArm || head[0].Name != "11" {
		t.Fatalf("14/60: headlined %+v", head)
	}
	if rd, _ := f.Find(ClaimInteraction, "bf16_index_k x hicache", ScaleRiskDifference); !rd.Reject {
		t.Errorf("14/60: the risk-difference interaction %+v is not claimed", rd)
	}
	if lo, ok := f.Find(ClaimInteraction, "bf16_index_k x hicache", ScaleLogOdds); ok {
		t.Errorf("the log-odds interaction %+v is a claim: only the risk difference is declared for interactions", lo)
	}

	// An arm decided elsewhere (NaN) leaves the family; a bad input is an error.
	f, _ = FactorialFamily(FactorialFamilyInput{Cells: cells(14), Arms: names, Alpha: 0.05, ArmP: []float64{0, math.NaN(), math.NaN(), 0.01}, ArmTest: "t test on launch rates"})
	if arm, ok := f.Find(ClaimArm, "11", ScaleRiskDifference); f.Tested != 4 || !ok || arm.Test != "t test on launch rates" || arm.P != 0.01 {
		t.Errorf("arm p-values from another test: %+v", f)
	}
	if _, err := FactorialFamily(FactorialFamilyInput{Cells: cells(1), Arms: names[:3], Alpha: 0.05}); err == nil {
		t.Error("three names for four cells accepted")
	}
	if _, err := FactorialFamily(FactorialFamilyInput{Cells: cells(1), Arms: names, Alpha: 0}); err == nil {
		t.Error("alpha 0 accepted")
	}
}

// When only the cell with every factor on corrupts, the data cannot tell the factors
// apart: the Firth model's main effects are identical to each other, and so are its
// interactions, down to the interval and the p-value. A verdict table showing three
// identical rows is then right, not a bug.
func TestFactorialTermsOfSymmetricDataAreIdentical(t *testing.T) {
	var cells []FactorialCell
	for m := 0; m < 8; m++ {
		c := FactorialCell{Levels: map[string]int{"dtype": m & 1, "hicache": (m >> 1) & 1, "gate_off": (m >> 2) & 1}, N: 60}
		if m == 7 {
			c.Events = 12
		}
		cells = append(cells, c)
	}
	r := Factorial(cells)
	var mains, inters []FactorialTerm
	for _, term := range r.Terms {
		if len(term.Factors) == 1 {
			mains = append(mains, term)
		} else {
			inters = append(inters, term)
		}
	}
	for _, group := range [][]FactorialTerm{mains, inters} {
		for _, term := range group[1:] {
			if !closeTo(term.Estimate, group[0].Estimate, 1e-6, 1e-9) || !closeTo(term.P, group[0].P, 1e-6, 1e-12) ||
				!closeTo(term.CI.Lo, group[0].CI.Lo, 1e-5, 1e-8) || !closeTo(term.CI.Hi, group[0].CI.Hi, 1e-5, 1e-8) {
				t.Errorf("%s %+v differs from %s %+v", term.Name, term, group[0].Name, group[0])
			}
		}
	}
	// Move the corruption to the cell with the gate on: the gate's terms now differ.
	cells[7].Events, cells[3].Events = 0, 12
	r = Factorial(cells)
	byName := map[string]FactorialTerm{}
	for _, term := range r.Terms {
		byName[term.Name] = term
	}
	if closeTo(byName["gate_off"].Estimate, byName["dtype"].Estimate, 1e-3, 1e-6) {
		t.Errorf("asymmetric data, yet gate_off and dtype agree: %+v %+v", byName["gate_off"], byName["dtype"])
	}
}
