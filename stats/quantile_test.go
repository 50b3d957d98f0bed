package stats

import (
	"math"
	"testing"
)

// Reference values from numpy.quantile (method "linear", its default) and R's quantile
// (type 7).
func TestQuantileIsType7(t *testing.T) {
	xs := []float64{7, 1, 3, 9, 4}
	for _, c := range []struct{ q, want float64 }{
		{0, 1}, {0.25, 3}, {0.5, 4}, {0.9, 8.2}, {0.95, 8.6}, {1, 9},
	} {
		if got := Quantile(xs, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Quantile(%v, %g) = %g; want %g", xs, c.q, got, c.want)
		}
		if got := SortedQuantile([]float64{1, 3, 4, 7, 9}, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("SortedQuantile(1 3 4 7 9, %g) = %g; want %g", c.q, got, c.want)
		}
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median of an even count = %g; want 2.5, the mean of the middle two", got)
	}
	if xs[0] != 7 {
		t.Errorf("Quantile sorted its argument: %v", xs)
	}
	if !math.IsNaN(Quantile(nil, 0.5)) || !math.IsNaN(Mean(nil)) {
		t.Error("no values must give NaN")
	}
	if got := Mean([]float64{1, 2, 6}); got != 3 {
		t.Errorf("Mean = %g", got)
	}
}
