package stats

import (
	"encoding/json"
	"math"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

func TestOneRateIntervalsMatchStatsmodels(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.Intervals) < 200 {
		t.Fatalf("only %d reference intervals", len(ref.Intervals))
	}
	for _, c := range ref.Intervals {
		for _, m := range []struct {
			name string
			fn   func(x, n int, conf float64) Interval
			want []*float64
		}{
			{"Wilson", Wilson, c.Wilson},
			{"Clopper-Pearson", ClopperPearson, c.ClopperPearson},
			{"Jeffreys", Jeffreys, c.Jeffreys},
		} {
			got := m.fn(c.X, c.N, c.Conf)
			lo, hi := coreBound(m.want[0], math.Inf(-1)), coreBound(m.want[1], math.Inf(1))
			if !coreClose(got.Lo, lo) || !coreClose(got.Hi, hi) {
				t.Errorf("%s %d/%d at %g = [%.12g, %.12g], statsmodels [%.12g, %.12g]", m.name, c.X, c.N, c.Conf, got.Lo, got.Hi, lo, hi)
			}
		}
	}
}

func TestClopperPearsonZeroOf240(t *testing.T) {
	// Reference value: "no corruption seen" in 240 responses is a bound of 1.53%, not a zero.
	iv := ClopperPearson(0, 240, 0.95)
	if iv.Lo != 0 || math.Abs(iv.Hi-0.0153) > 0.00005 {
		t.Errorf("CP 0/240 = %v, want [0, 0.0153]", iv)
	}
}

func TestTwoSampleIntervalsMatchStatsmodels(t *testing.T) {
	ref := loadCoreReference(t)
	koopman := 0
	for _, c := range ref.TwoSample {
		nc := Newcombe(c.A, c.N1, c.B, c.N2, c.Conf)
		if !coreClose(nc.Lo, *c.Newcombe[0]) || !coreClose(nc.Hi, *c.Newcombe[1]) {
			t.Errorf("Newcombe %d/%d vs %d/%d = %v, statsmodels [%.12g, %.12g]", c.A, c.N1, c.B, c.N2, nc, *c.Newcombe[0], *c.Newcombe[1])
		}
		if c.Koopman == nil {
			continue
		}
		koopman++
		kp, err := KoopmanRatio(c.A, c.N1, c.B, c.N2, c.Conf)
		if err != nil {
			t.Fatal(err)
		}
		if !coreClose(kp.Lo, *c.Koopman[0]) || !coreClose(kp.Hi, *c.Koopman[1]) {
			t.Errorf("Koopman %d/%d vs %d/%d = [%.12g, %.12g], statsmodels [%.12g, %.12g]", c.A, c.N1, c.B, c.N2, kp.Lo, kp.Hi, *c.Koopman[0], *c.Koopman[1])
		}
		kz, err := KatzRatio(c.A, c.N1, c.B, c.N2, c.Conf)
		if err != nil {
			t.Fatal(err)
		}
		if !coreClose(kz.Lo, *c.Katz[0]) || !coreClose(kz.Hi, *c.Katz[1]) {
			t.Errorf("Katz %d/%d vs %d/%d = %v, statsmodels %v", c.A, c.N1, c.B, c.N2, kz, c.Katz)
		}
	}
	if koopman < 200 {
		t.Errorf("only %d Koopman reference intervals", koopman)
	}
}

func TestRiskRatioZeroCells(t *testing.T) {
	for _, c := range []struct {
		a, n1, b, n2 int
		wantLo0      bool // interval starts at 0
		wantHiInf    bool // interval has no upper bound
	}{
		{0, 60, 11, 60, false, true},
		{11, 60, 0, 60, true, false},
		{0, 60, 0, 60, true, true},
	} {
		r := RiskRatio(c.a, c.n1, c.b, c.n2, 0)
		if (r.CI.Lo == 0) != c.wantLo0 || math.IsInf(r.CI.Hi, 1) != c.wantHiInf || len(r.Warnings) == 0 {
			t.Errorf("RiskRatio %d/%d vs %d/%d = %+v", c.a, c.n1, c.b, c.n2, r)
		}
		if !c.wantLo0 && !(r.CI.Lo > 1) || !c.wantHiInf && !(r.CI.Hi < 1) {
			t.Errorf("RiskRatio %d/%d vs %d/%d: interval %v should exclude 1", c.a, c.n1, c.b, c.n2, r.CI)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Errorf("RiskRatio %d/%d vs %d/%d does not marshal: %v", c.a, c.n1, c.b, c.n2, err)
		}
	}
	// The score interval from zero events must agree with the limit of small counts:
	// 0/60 vs 11/60 has a lower bound above that of 1/60 vs 11/60.
	z, _ := KoopmanRatio(0, 60, 11, 60, 0)
	one, _ := KoopmanRatio(1, 60, 11, 60, 0)
	if !(z.Lo > one.Lo) {
		t.Errorf("Koopman lower bound 0/60: %g, 1/60: %g", z.Lo, one.Lo)
	}
	if _, err := KatzRatio(0, 60, 11, 60, 0); err == nil {
		t.Error("Katz with a zero cell should fail")
	}
	if r := RiskRatio(0, 0, 2, 5, 0); r.Method != "katz" || !math.IsNaN(r.CI.Lo) || len(r.Warnings) == 0 {
		t.Errorf("ratio with an empty arm = %+v", r)
	}
}

func TestBoundsJSON(t *testing.T) {
	b, err := json.Marshal(Bounds{0, math.Inf(1)})
	if err != nil || string(b) != "[0,null]" {
		t.Fatalf("Bounds = %s, %v", b, err)
	}
	var back Bounds
	if err := json.Unmarshal([]byte("[null, 0.25]"), &back); err != nil || !math.IsInf(back.Lo, -1) || back.Hi != 0.25 {
		t.Errorf("unmarshal = %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte("[1]"), &back); err == nil {
		t.Error("a one-element array should not read as bounds")
	}
}

// FuzzIntervals checks that every one-rate interval contains the observed rate, lies in
// [0, 1], and that Clopper-Pearson, the exact one, is never narrower than Wilson on
// both sides at once.
func FuzzIntervals(f *testing.F) {
	for _, c := range [][2]uint32{{0, 240}, {11, 60}, {1, 1}, {0, 0}, {99999, 100000}} {
		f.Add(c[0], c[1], 0.95)
	}
	f.Fuzz(func(t *testing.T, x, n uint32, conf float64) {
		if n > 1_000_000 {
			return
		}
		xi := int(x % (n + 1))
		ni := int(n)
		p := float64(xi) / math.Max(1, float64(ni))
		for name, fn := range map[string]func(int, int, float64) Interval{"Wilson": Wilson, "CP": ClopperPearson, "Jeffreys": Jeffreys} {
			iv := fn(xi, ni, conf)
			if !(iv.Lo >= 0 && iv.Hi <= 1 && iv.Lo <= iv.Hi) {
				t.Fatalf("%s %d/%d at %g = %v", name, xi, ni, conf, iv)
			}
			if ni > 0 && name != "Jeffreys" && (p < iv.Lo-1e-12 || p > iv.Hi+1e-12) {
				t.Fatalf("%s %d/%d at %g = %v excludes %g", name, xi, ni, conf, iv, p)
			}
		}
		w, cp := Wilson(xi, ni, conf), ClopperPearson(xi, ni, conf)
		if ni > 0 && cp.Lo > w.Lo+1e-9 && cp.Hi < w.Hi-1e-9 {
			t.Fatalf("%d/%d: CP %v inside Wilson %v", xi, ni, cp, w)
		}
	})
}

// FuzzRiskRatio checks that the ratio interval is ordered, non-negative and contains the
// estimate for any counts, and that the result marshals.
func FuzzRiskRatio(f *testing.F) {
	for _, c := range [][4]uint16{{0, 60, 11, 60}, {11, 60, 0, 60}, {5, 5, 5, 5}, {112, 112, 85, 91}, {1, 1, 0, 1}} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, a, n1, b, n2 uint16) {
		if n1 == 0 || n2 == 0 {
			return
		}
		ai, bi := int(a)%(int(n1)+1), int(b)%(int(n2)+1)
		r := RiskRatio(ai, int(n1), bi, int(n2), 0.95)
		if r.Method != "koopman" {
			t.Fatalf("%d/%d vs %d/%d: Koopman failed: %+v", ai, n1, bi, n2, r)
		}
		if !(r.CI.Lo >= 0 && r.CI.Lo <= r.CI.Hi) {
			t.Fatalf("%d/%d vs %d/%d: interval %v", ai, n1, bi, n2, r.CI)
		}
		if !math.IsNaN(r.Estimate) && (r.Estimate < r.CI.Lo*(1-1e-9) || r.Estimate > r.CI.Hi*(1+1e-9)) {
			t.Fatalf("%d/%d vs %d/%d: estimate %g outside %v", ai, n1, bi, n2, r.Estimate, r.CI)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	})
}

// Jeffreys is the equal-tailed Jeffreys interval (Beta(x+1/2, n-x+1/2) quantiles) for x
// events of n, unmodified at x = 0 and x = n, as statsmodels' proportion_confint. With
// n = 0 it is [0, 1].
func Jeffreys(x, n int, conf float64) Interval {
	coreCheckCounts("Jeffreys", x, n, 0, 0)
	if n == 0 {
		return Interval{0, 1}
	}
	tail := (1 - coreConf(conf)) / 2
	d := distuv.Beta{Alpha: float64(x) + 0.5, Beta: float64(n-x) + 0.5}
	return Interval{d.Quantile(tail), d.Quantile(1 - tail)}
}
