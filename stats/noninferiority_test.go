package stats

import (
	"strings"
	"testing"
)

func TestNonInferiorityReference(t *testing.T) {
	ref := loadExtra(t)
	if len(ref.Noninf) < 200 {
		t.Fatalf("only %d non-inferiority reference cases", len(ref.Noninf))
	}
	for _, c := range ref.Noninf {
		res, err := NonInferiority(c.A, c.N1, c.B, c.N2, 0.05, c.Alpha)
		if err != nil {
			t.Fatal(err)
		}
		if !closeTo(res.Upper, c.Upper, 1e-6, 1e-12) {
			t.Errorf("%d/%d vs %d/%d at one-sided %g: upper bound %.12g, want %.12g (statsmodels)", c.A, c.N1, c.B, c.N2, c.Alpha, res.Upper, c.Upper)
		}
		if res.NonInferior != (res.Upper < 0.05) {
			t.Errorf("decision %v inconsistent with bound %.4f", res.NonInferior, res.Upper)
		}
	}
}

func TestNonInferiorityWording(t *testing.T) {
	// 0 of 240 vs 0 of 240: B is shown no worse than A by more than 2 points.
	ok, err := NonInferiority(0, 240, 0, 240, 0.02, 0.025)
	if err != nil {
		t.Fatal(err)
	}
	if !ok.NonInferior || !strings.HasPrefix(ok.Sentence, "B is non-inferior") {
		t.Errorf("0/240 vs 0/240 at a 2-point margin: %+v", ok)
	}
	// 0 of 20 vs 0 of 20: nothing seen, yet far too few sessions to bound a 2-point margin.
	few, _ := NonInferiority(0, 20, 0, 20, 0.02, 0.025)
	if few.NonInferior || !strings.Contains(few.Sentence, "not shown") || strings.Contains(few.Sentence, "no difference") {
		t.Errorf("0/20 vs 0/20: %+v", few)
	}
	if !hasWarning(few.Warnings, "too few") {
		t.Errorf("0/20 vs 0/20 should warn that the sessions are too few: %v", few.Warnings)
	}
	for _, bad := range [][6]float64{{0, 0, 0, 10, 0.05, 0.05}, {3, 2, 0, 10, 0.05, 0.05}, {0, 10, 0, 10, 0, 0.05}, {0, 10, 0, 10, 0.05, 0.5}} {
		if _, err := NonInferiority(int(bad[0]), int(bad[1]), int(bad[2]), int(bad[3]), bad[4], bad[5]); err == nil {
			t.Errorf("NonInferiority%v accepted", bad)
		}
	}
}

func FuzzNonInferiority(f *testing.F) {
	f.Add(0, 60, 7, 60, 0.05)
	f.Add(0, 1, 1, 1, 0.5)
	f.Add(30, 30, 0, 30, 0.01)
	f.Fuzz(func(t *testing.T, a, n1, b, n2 int, margin float64) {
		res, err := NonInferiority(a, n1, b, n2, margin, 0.025)
		if err != nil {
			return
		}
		if !(res.Upper >= res.Difference-1e-12 && res.Upper <= 1+1e-12) {
			t.Fatalf("bound %.6g outside [difference %.6g, 1]", res.Upper, res.Difference)
		}
		tighter, _ := NonInferiority(a, n1, b, n2, margin, 0.1)
		if tighter.Upper > res.Upper+1e-12 {
			t.Fatalf("a 90%% bound %.6g above the 97.5%% bound %.6g", tighter.Upper, res.Upper)
		}
	})
}
