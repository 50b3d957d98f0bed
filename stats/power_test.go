package stats

import (
	"math"
	"testing"
)

func TestFisherPowerMatchesEnumeration(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.Power) < 200 {
		t.Fatalf("only %d reference power cases", len(ref.Power))
	}
	for _, c := range ref.Power {
		got := FisherPower(c.P0, c.P1, c.N1, c.N2, c.Alpha)
		if math.Abs(got-c.Power) > 1e-9 && !coreClose(got, c.Power) {
			t.Errorf("power %g vs %g, %d vs %d, alpha %g = %.12g, enumeration %.12g", c.P0, c.P1, c.N1, c.N2, c.Alpha, got, c.Power)
		}
	}
}

func TestFisherPowerFieldFacts(t *testing.T) {
	// Reference values: exact Fisher power at alpha 0.05.
	for _, c := range []struct {
		p0, p1 float64
		n      int
		want   float64
	}{
		{0, 0.12, 60, 0.74}, {0, 0.18, 60, 0.97}, {0.02, 0.12, 60, 0.43}, {0, 0.12, 30, 0.14},
	} {
		if got := FisherPower(c.p0, c.p1, c.n, c.n, 0.05); math.Round(got*100)/100 != c.want {
			t.Errorf("power %g vs %g at %d per arm = %.4f, want %.2f", c.p0, c.p1, c.n, got, c.want)
		}
	}
}

func TestFisherPowerEdges(t *testing.T) {
	if p := FisherPower(0.1, 0.1, 50, 50, 0.05); !(p > 0 && p <= 0.05) {
		t.Errorf("size under the null = %g, want in (0, 0.05]", p)
	}
	if p := FisherPower(0, 1, 10, 10, 0.05); p != 1 {
		t.Errorf("0%% vs 100%% at 10 per arm = %g, want 1", p)
	}
	if p := FisherPower(-0.1, 0.5, 10, 10, 0.05); !math.IsNaN(p) {
		t.Errorf("negative rate gave %g", p)
	}
	// Power grows with the effect at a fixed size.
	if a, b := FisherPower(0.05, 0.15, 100, 100, 0.05), FisherPower(0.05, 0.25, 100, 100, 0.05); !(a < b) {
		t.Errorf("power 5%% vs 15%% = %g, vs 25%% = %g", a, b)
	}
}

func TestSessionsFor(t *testing.T) {
	n := SessionsFor(0, 0.12, 0.05, 0.8, 1)
	if FisherPower(0, 0.12, n, n, 0.05) < 0.8 || FisherPower(0, 0.12, n-1, n-1, 0.05) >= 0.8 {
		t.Errorf("SessionsFor(0 vs 12%%, 80%%) = %d: power %g there, %g one below", n, FisherPower(0, 0.12, n, n, 0.05), FisherPower(0, 0.12, n-1, n-1, 0.05))
	}
	// 60 sessions give 0.74 (above), so 80% needs more.
	if n <= 60 {
		t.Errorf("SessionsFor(0 vs 12%%, 80%%) = %d, want > 60", n)
	}
	if r := SessionsFor(0, 0.12, 0.05, 0.8, 4); r != 4*n {
		t.Errorf("design effect 4: %d, want %d", r, 4*n)
	}
	if r := SessionsFor(0.1, 0.1, 0.05, 0.8, 1); r != 0 {
		t.Errorf("equal rates: %d, want 0", r)
	}
}

func BenchmarkFisherPower500(b *testing.B) {
	for i := 0; i < b.N; i++ {
		FisherPower(0.3, 0.4, 500, 500, 0.05)
	}
}

func TestFisherPowerAgreesWithFisherExact(t *testing.T) {
	// The power's precomputed rejection regions must reject exactly the tables whose
	// FisherExact p is at most alpha.
	p0, p1, n1, n2, alpha := 0.1, 0.3, 47, 61, 0.05
	want := 0.0
	for x := 0; x <= n1; x++ {
		for y := 0; y <= n2; y++ {
			if FisherExact(x, n1, y, n2).PTwoSided <= alpha {
				px := math.Exp(coreLogChoose(n1, x) + float64(x)*math.Log(p0) + float64(n1-x)*math.Log1p(-p0))
				py := math.Exp(coreLogChoose(n2, y) + float64(y)*math.Log(p1) + float64(n2-y)*math.Log1p(-p1))
				want += px * py
			}
		}
	}
	if got := FisherPower(p0, p1, n1, n2, alpha); math.Abs(got-want) > 1e-12 {
		t.Errorf("FisherPower = %.15g, enumeration with FisherExact %.15g", got, want)
	}
}
