package stats

import "testing"

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
