package stats

import (
	"math"
	"testing"
)

func TestRejectDecidesTiesAtAlphaTheSameWayWhateverTheRounding(t *testing.T) {
	// Both tables have an exact two-sided Fisher p of 1/20; floating point puts one a hair
	// above and the other a hair below 0.05. They must be decided alike.
	a := FisherExact(0, 1, 19, 19).PTwoSided
	b := FisherExact(0, 2, 12, 14).PTwoSided
	for _, p := range []float64{a, b} {
		if !Reject(p, 0.05) {
			t.Errorf("p = %.17g (exactly 1/20) not rejected at alpha 0.05", p)
		}
	}
	if Reject(0.0500001, 0.05) {
		t.Error("p = 0.0500001 rejected at alpha 0.05: the tolerance is wider than rounding")
	}
	if !Reject(0.049, 0.05) || Reject(0.2, 0.05) {
		t.Error("Reject gets a clear case wrong")
	}
}

// Power is the probability that the verdict's own rule rejects: summed by brute force
// over every table with Reject on the exact Fisher p, it must equal FisherPower, also
// for sizes whose support holds tables with p exactly at alpha (0/1 vs 19/19, 0/2 vs
// 12/14: both 1/20).
func TestFisherPowerUsesTheVerdictsRule(t *testing.T) {
	for _, c := range []struct {
		n1, n2 int
		p0, p1 float64
	}{{1, 19, 0.2, 0.9}, {2, 14, 0.1, 0.8}, {19, 1, 0.7, 0.3}, {14, 2, 0.5, 0.5}, {20, 20, 0.05, 0.4}, {7, 13, 0.3, 0.6}} {
		f0, f1 := binomialPMF(c.n1, c.p0), binomialPMF(c.n2, c.p1)
		brute := 0.0
		for x, px := range f0 {
			for y, py := range f1 {
				if Reject(FisherExact(x, c.n1, y, c.n2).PTwoSided, 0.05) {
					brute += px * py
				}
			}
		}
		if got := FisherPower(c.p0, c.p1, c.n1, c.n2, 0.05); math.Abs(got-brute) > 1e-12 {
			t.Errorf("%d vs %d at %g vs %g: FisherPower %.15g, brute force with Reject %.15g", c.n1, c.n2, c.p0, c.p1, got, brute)
		}
	}
}
