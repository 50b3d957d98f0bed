package stats

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func TestFirthReference(t *testing.T) {
	ref := loadExtra(t)
	if len(ref.Firth) < 200 {
		t.Fatalf("only %d Firth reference cases", len(ref.Firth))
	}
	for i, c := range ref.Firth {
		fit, err := Firth(c.X, c.Y, c.W)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !closeTo(fit.LogLik, c.LogLik, 1e-6, 1e-9) {
			t.Errorf("case %d penalized loglik: got %.12g, want %.12g", i, fit.LogLik, c.LogLik)
		}
		for j := range c.Coef {
			if !closeTo(fit.Coef[j], c.Coef[j], 1e-6, 1e-8) {
				t.Errorf("case %d coef %d: got %.12g, want %.12g", i, j, fit.Coef[j], c.Coef[j])
			}
			if !closeTo(fit.SE[j], c.SE[j], 1e-6, 1e-9) {
				t.Errorf("case %d SE %d: got %.12g, want %.12g", i, j, fit.SE[j], c.SE[j])
			}
			if !closeTo(fit.LRT[j], c.LRT[j], 1e-6, 1e-8) {
				t.Errorf("case %d LRT %d: got %.12g, want %.12g", i, j, fit.LRT[j], c.LRT[j])
			}
			if !closeTo(fit.P[j], c.P[j], 1e-6, 1e-9) {
				t.Errorf("case %d p %d: got %.12g, want %.12g", i, j, fit.P[j], c.P[j])
			}
		}
	}
}

func TestFactorialReference(t *testing.T) {
	ref := loadExtra(t)
	if len(ref.Factorial) < 200 {
		t.Fatalf("only %d factorial reference cases", len(ref.Factorial))
	}
	zeroCells, multimodal := 0, 0
	for i, c := range ref.Factorial {
		cells := make([]FactorialCell, len(c.Cells))
		for j, cc := range c.Cells {
			cells[j] = FactorialCell{Levels: cc.Levels, Events: cc.Events, N: cc.N}
			if cc.N > 0 && (cc.Events == 0 || cc.Events == cc.N) {
				zeroCells++
			}
		}
		res := Factorial(cells)
		if len(res.Terms) != len(c.Coef)-1 {
			t.Fatalf("case %d: %d terms, want %d (warnings %v)", i, len(res.Terms), len(c.Coef)-1, res.Warnings)
		}
		if !closeTo(res.Fit.LogLik, c.LogLik, 1e-6, 1e-9) {
			t.Errorf("case %d penalized loglik: got %.12g, want %.12g", i, res.Fit.LogLik, c.LogLik)
		}
		if hasWarning(res.Warnings, "more than one maximum") {
			// Two maxima of equal height: the reference may sit on the other one, so
			// only the height is comparable. The warning must stay rare.
			multimodal++
			t.Logf("case %d: %v", i, res.Warnings)
			continue
		}
		if !closeTo(res.Intercept, c.Coef[0], 1e-6, 1e-8) {
			t.Errorf("case %d intercept: got %.12g, want %.12g", i, res.Intercept, c.Coef[0])
		}
		for j, term := range res.Terms {
			k := j + 1
			checks := []struct {
				name      string
				got, want float64
			}{
				{"estimate", term.Estimate, c.Coef[k]},
				{"SE", term.SE, c.SE[k]},
				{"LRT", term.LRT, c.LRT[k]},
				{"p", term.P, c.P[k]},
				{"CI low", term.CI.Lo, c.CILo[k]},
				{"CI high", term.CI.Hi, c.CIHi[k]},
			}
			for _, ch := range checks {
				if !closeTo(ch.got, ch.want, 1e-6, 1e-8) {
					t.Errorf("case %d %s %s: got %.12g, want %.12g", i, term.Name, ch.name, ch.got, ch.want)
				}
			}
			if term.CIMethod != "profile" {
				t.Errorf("case %d %s: CI method %q", i, term.Name, term.CIMethod)
			}
		}
	}
	if multimodal > 5 {
		t.Errorf("%d of %d designs reported more than one maximum", multimodal, len(ref.Factorial))
	}
	if zeroCells < 100 {
		t.Errorf("reference has only %d cells with 0%% or 100%% events; it must exercise them", zeroCells)
	}
}

// For a 2x2 table the Firth estimate of the log odds ratio is the log odds ratio with
// one half added to every cell (Firth 1993), a closed form independent of the iteration.
func TestFirthTwoByTwoIsHalfCorrected(t *testing.T) {
	for _, tc := range [][4]int{{0, 60, 7, 60}, {0, 60, 11, 60}, {3, 10, 0, 10}, {0, 5, 5, 5}, {12, 40, 20, 40}} {
		a, n1, b, n2 := tc[0], tc[1], tc[2], tc[3]
		X := [][]float64{{1, 0}, {1, 1}}
		fit, err := Firth(X, []float64{float64(a) / float64(n1), float64(b) / float64(n2)}, []float64{float64(n1), float64(n2)})
		if err != nil {
			t.Fatal(err)
		}
		want := math.Log((float64(b) + 0.5) * (float64(n1-a) + 0.5) / ((float64(n2-b) + 0.5) * (float64(a) + 0.5)))
		if !closeTo(fit.Coef[1], want, 1e-9, 1e-12) {
			t.Errorf("%v: log OR %.12g, want %.12g", tc, fit.Coef[1], want)
		}
		// Grouped and expanded 0/1 data are the same likelihood.
		var Xe [][]float64
		var ye []float64
		for arm, cnt := range [][2]int{{a, n1}, {b, n2}} {
			for r := 0; r < cnt[1]; r++ {
				Xe = append(Xe, []float64{1, float64(arm)})
				if r < cnt[0] {
					ye = append(ye, 1)
				} else {
					ye = append(ye, 0)
				}
			}
		}
		ex, err := Firth(Xe, ye, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !closeTo(ex.Coef[1], fit.Coef[1], 1e-9, 1e-12) || !closeTo(ex.LogLik, fit.LogLik, 1e-9, 1e-12) || !closeTo(ex.P[1], fit.P[1], 1e-7, 1e-12) {
			t.Errorf("%v: expanded fit %v/%v/%v differs from grouped %v/%v/%v", tc, ex.Coef[1], ex.LogLik, ex.P[1], fit.Coef[1], fit.LogLik, fit.P[1])
		}
	}
}

func storyCells(events [4]int, n int) []FactorialCell {
	var cells []FactorialCell
	i := 0
	for _, bf16 := range []int{0, 1} {
		for _, hicache := range []int{0, 1} {
			cells = append(cells, FactorialCell{Levels: map[string]int{"BF16_INDEX_K": bf16, "HiCache": hicache}, Events: events[i], N: n})
			i++
		}
	}
	return cells
}

func findTerm(t *testing.T, res FactorialResult, name string) FactorialTerm {
	t.Helper()
	for _, term := range res.Terms {
		t.Logf("%-24s %+.3f [%+.3f, %+.3f] p=%.3g (%s)", term.Name, term.Estimate, term.CI.Lo, term.CI.Hi, term.P, term.CIMethod)
	}
	for _, term := range res.Terms {
		if term.Name == name {
			return term
		}
	}
	t.Fatalf("no term %q among %+v", name, res.Terms)
	return FactorialTerm{}
}

// The story's factorial: corruption appears when bf16 index-K meets HiCache.
func TestFactorialInteractionStory(t *testing.T) {
	// With a small background rate in the other cells, the interaction is named,
	// estimated with a finite profile interval that excludes 0, and significant.
	res := Factorial(storyCells([4]int{2, 2, 2, 30}, 100))
	inter := findTerm(t, res, "BF16_INDEX_K x HiCache")
	if !(inter.CI.Lo > 0 && inter.CI.Lo < inter.Estimate && inter.Estimate < inter.CI.Hi) || inter.P >= 0.05 || inter.CIMethod != "profile" {
		t.Errorf("interaction %+v: want a positive, significant estimate inside a finite profile interval", inter)
	}
	// With 0% in three cells the log odds of those cells are barely bounded, so on the
	// logit scale the interaction cannot be told from the main effects: the model must
	// give finite numbers and an interval that admits 0, not invented precision.
	res = Factorial(storyCells([4]int{0, 0, 0, 9}, 60))
	inter = findTerm(t, res, "BF16_INDEX_K x HiCache")
	if math.IsInf(inter.CI.Hi, 0) || !(inter.CI.Lo < 0 && inter.CI.Hi > inter.Estimate) || inter.P < 0.05 {
		t.Errorf("interaction with three empty cells %+v: want a finite interval containing 0", inter)
	}
	if !hasWarning(res.Warnings, "3 cells have 0%") {
		t.Errorf("zero cells not reported: %v", res.Warnings)
	}
}

func TestFirthErrors(t *testing.T) {
	X := [][]float64{{1, 2}, {1, 2}, {1, 2}}
	if _, err := Firth(X, []float64{0, 1, 0}, nil); !errors.Is(err, ErrFirthSingular) {
		t.Errorf("collinear columns: err %v, want ErrFirthSingular", err)
	}
	if _, err := Firth(X, []float64{0, 2, 0}, nil); err == nil {
		t.Error("response 2 accepted as a proportion")
	}
	if _, err := Firth(X, []float64{0, 1}, nil); err == nil {
		t.Error("length mismatch accepted")
	}
	res := Factorial([]FactorialCell{{Levels: map[string]int{"A": 0}, Events: 0, N: 10}})
	if len(res.Terms) != 0 || len(res.Warnings) == 0 {
		t.Errorf("a one-cell design should not fit: %+v", res)
	}
}

func FuzzFirth(f *testing.F) {
	f.Add([]byte{0, 10, 3, 10, 0, 10, 9, 10})
	f.Add([]byte{0, 60, 0, 60, 0, 60, 9, 60})
	f.Add([]byte{5, 5, 0, 5, 5, 5, 0, 5})
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var cells []FactorialCell
		for i := 0; i+1 < len(data) && len(cells) < 8; i += 2 {
			n := int(data[i+1] % 80)
			ev := int(data[i]) % (n + 1)
			idx := len(cells)
			cells = append(cells, FactorialCell{Levels: map[string]int{"A": idx & 1, "B": idx >> 1 & 1, "C": idx >> 2 & 1}, Events: ev, N: n})
		}
		res := Factorial(cells)
		for _, term := range res.Terms {
			if math.IsNaN(term.Estimate) || math.IsInf(term.Estimate, 0) || !(term.P >= 0 && term.P <= 1) {
				t.Fatalf("term %+v not finite", term)
			}
			if term.CIMethod == "profile" && !(term.CI.Lo <= term.Estimate && term.Estimate <= term.CI.Hi) {
				t.Fatalf("estimate outside its profile interval: %+v", term)
			}
		}
	})
}

func BenchmarkFactorial3(b *testing.B) {
	var cells []FactorialCell
	for i := 0; i < 8; i++ {
		cells = append(cells, FactorialCell{Levels: map[string]int{"A": i & 1, "B": i >> 1 & 1, "C": i >> 2 & 1}, Events: (i * 3) % 7, N: 60})
	}
	for b.Loop() {
		if res := Factorial(cells); len(res.Terms) != 6 {
			b.Fatal(fmt.Sprint(res.Warnings))
		}
	}
}
