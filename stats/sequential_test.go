package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// DeMets & Lan (1994); R's ldbounds and gsDesign print the same to four decimals.
// The loss comparison and the bisection steps rest on the shared Fisher exact p.
func TestFisherReference(t *testing.T) {
	ref := loadExtra(t)
	for _, c := range ref.Fisher {
		if got := FisherExact(c.A, c.N1, c.B, c.N2).PTwoSided; !closeTo(got, c.P, 1e-9, 1e-15) {
			t.Errorf("Fisher %d/%d vs %d/%d: %.12g, want %.12g", c.A, c.N1, c.B, c.N2, got, c.P)
		}
	}
}

// binomialDraw and binomialPMF are test helpers: a Bernoulli sum and a binomial pmf.
func binomialDraw(rng *rand.Rand, n int, p float64) int {
	var x int
	for i := 0; i < n; i++ {
		if rng.Float64() < p {
			x++
		}
	}
	return x
}

func binomialPMF(n int, p float64) []float64 {
	out := make([]float64, n+1)
	switch p {
	case 0:
		out[0] = 1
		return out
	case 1:
		out[n] = 1
		return out
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	ln, _ := math.Lgamma(float64(n + 1))
	for x := 0; x <= n; x++ {
		lx, _ := math.Lgamma(float64(x + 1))
		ly, _ := math.Lgamma(float64(n - x + 1))
		out[x] = math.Exp(ln - lx - ly + float64(x)*lp + float64(n-x)*lq)
	}
	return out
}
