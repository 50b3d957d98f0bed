package stats

import (
	"math"
	"testing"
)

func TestMultipleMatchesStatsmodels(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.Multiple) < 200 {
		t.Fatalf("only %d reference vectors", len(ref.Multiple))
	}
	for _, c := range ref.Multiple {
		holm, err := Holm(c.P)
		if err != nil {
			t.Fatal(err)
		}
		bh, err := BenjaminiHochberg(c.P)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.P {
			if !coreClose(holm[i], c.Holm[i]) || !coreClose(bh[i], c.BH[i]) {
				t.Errorf("%v: Holm %v (want %v), BH %v (want %v)", c.P, holm, c.Holm, bh, c.BH)
				break
			}
		}
	}
	if _, err := Holm([]float64{0.2, math.NaN()}); err == nil {
		t.Error("Holm accepted NaN")
	}
	if _, err := BenjaminiHochberg([]float64{1.5}); err == nil {
		t.Error("BH accepted 1.5")
	}
}

func TestHolmAndBHOrdering(t *testing.T) {
	// Adjusted p-values keep the order of the raw ones, never fall below them, and BH
	// is never more conservative than Holm.
	p := []float64{0.04, 0.001, 0.03, 0.2, 0.001}
	holm, _ := Holm(p)
	bh, _ := BenjaminiHochberg(p)
	for i := range p {
		if holm[i] < p[i] || bh[i] < p[i] || bh[i] > holm[i] {
			t.Errorf("p %g: Holm %g, BH %g", p[i], holm[i], bh[i])
		}
		for j := range p {
			if p[i] < p[j] && (holm[i] > holm[j] || bh[i] > bh[j]) {
				t.Errorf("order broken between %g and %g: Holm %v BH %v", p[i], p[j], holm, bh)
			}
		}
	}
	if h, err := Holm(nil); err != nil || len(h) != 0 {
		t.Errorf("Holm(nil) = %v, %v", h, err)
	}
}
