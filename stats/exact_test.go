package stats

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// coreReference is stats/testdata/core/reference.json, written by gen.py from scipy and
// statsmodels.
type coreReference struct {
	Fisher []struct {
		A, N1, B, N2  int
		TwoSided      float64 `json:"two_sided"`
		Less, Greater float64
		MidP          *float64 `json:"mid_p"` // null where the margins allow one table
	}
	Boschloo []struct {
		A, N1, B, N2 int
		P            float64
	}
	Intervals []struct {
		X, N             int
		Conf             float64
		Wilson, Jeffreys []*float64
		ClopperPearson   []*float64 `json:"clopper_pearson"`
	}
	TwoSample []struct {
		A, N1, B, N2            int
		Conf                    float64
		Newcombe, Koopman, Katz []*float64
	} `json:"two_sample"`
	Strata []struct {
		Strata        [][4]int
		CMH           float64
		CMHP          float64 `json:"cmh_p"`
		CMHCorrected  float64 `json:"cmh_corrected"`
		CMHCorrectedP float64 `json:"cmh_corrected_p"`
		OR            *float64
		ORCI          []*float64 `json:"or_ci"`
		BD, Tarone    *float64
		BDP           *float64 `json:"bd_p"`
		TaroneP       *float64 `json:"tarone_p"`
		RD            float64
		RDCI          []*float64 `json:"rd_ci"`
	}
	McNemar []struct {
		AOnly int `json:"a_only"`
		BOnly int `json:"b_only"`
		P     float64
	}
	Multiple []struct {
		P, Holm, BH []float64
	}
	Power []struct {
		P0, P1, Alpha, Power float64
		N1, N2               int
	}
}

var (
	coreRefOnce sync.Once
	coreRef     coreReference
	coreRefErr  error
)

func loadCoreReference(t *testing.T) *coreReference {
	t.Helper()
	coreRefOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join("testdata", "core", "reference.json"))
		if err != nil {
			coreRefErr = err
			return
		}
		coreRefErr = json.Unmarshal(b, &coreRef)
	})
	if coreRefErr != nil {
		t.Fatalf("reference values: %v", coreRefErr)
	}
	return &coreRef
}

// coreClose accepts a relative error of 1e-6, or an absolute one of 1e-12 near zero.
func coreClose(got, want float64) bool {
	if math.IsInf(want, 0) || math.IsNaN(want) {
		return got == want || (math.IsNaN(want) && math.IsNaN(got))
	}
	d := math.Abs(got - want)
	return d <= 1e-12 || d <= 1e-6*math.Abs(want)
}

// coreBound reads a reference bound, where null stands for an infinite one.
func coreBound(v *float64, inf float64) float64 {
	if v == nil {
		return inf
	}
	return *v
}

func TestFisherExactMatchesScipy(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.Fisher) < 200 {
		t.Fatalf("only %d reference tables", len(ref.Fisher))
	}
	for _, c := range ref.Fisher {
		got := FisherExact(c.A, c.N1, c.B, c.N2)
		for _, v := range []struct {
			name      string
			got, want float64
		}{
			{"two-sided", got.PTwoSided, c.TwoSided},
			{"less", got.PLess, c.Less},
			{"greater", got.PGreater, c.Greater},
			{"mid-p (Fay)", got.MidP, orNaN(c.MidP)},
		} {
			if !coreClose(v.got, v.want) {
				t.Errorf("Fisher %d/%d vs %d/%d %s = %.12g, scipy %.12g", c.A, c.N1, c.B, c.N2, v.name, v.got, v.want)
			}
		}
	}
}

func TestFisherFieldFacts(t *testing.T) {
	// Reference values from the field: choosing sessions or responses as the unit moves p by 10^6.
	for _, c := range []struct {
		a, n1, b, n2 int
		want         float64 // to two significant digits
	}{
		{0, 240, 29, 240, 1.5e-9},
		{0, 60, 7, 60, 0.013},
		{0, 60, 11, 60, 6.0e-4},
	} {
		got := FisherExact(c.a, c.n1, c.b, c.n2).PTwoSided
		if math.Abs(got-c.want) > 0.05*c.want {
			t.Errorf("Fisher %d/%d vs %d/%d = %.3g, want %.2g", c.a, c.n1, c.b, c.n2, got, c.want)
		}
	}
}

func TestFisherSymmetry(t *testing.T) {
	// Swapping the arms keeps the two-sided p and swaps the one-sided ones.
	for _, c := range [][4]int{{3, 17, 9, 21}, {0, 1000, 12, 900}, {40, 41, 2, 3}} {
		f := FisherExact(c[0], c[1], c[2], c[3])
		g := FisherExact(c[2], c[3], c[0], c[1])
		if !coreClose(f.PTwoSided, g.PTwoSided) || !coreClose(f.PLess, g.PGreater) || !coreClose(f.PGreater, g.PLess) {
			t.Errorf("%v: %+v vs swapped %+v", c, f, g)
		}
	}
}

func TestBoschlooMatchesScipy(t *testing.T) {
	ref := loadCoreReference(t)
	for _, c := range ref.Boschloo {
		got := BoschlooExact(c.A, c.N1, c.B, c.N2)
		if !coreClose(got, c.P) {
			t.Errorf("Boschloo %d/%d vs %d/%d = %.12g, scipy %.12g", c.A, c.N1, c.B, c.N2, got, c.P)
		}
		if f := FisherExact(c.A, c.N1, c.B, c.N2).PTwoSided; got > f*(1+1e-9) && got < 1 {
			// Boschloo's test is uniformly more powerful than Fisher's, with scipy's
			// doubling of the one-sided p it is still never larger than twice Fisher's
			// one-sided p.
			if one := 2 * min(FisherExact(c.A, c.N1, c.B, c.N2).PLess, FisherExact(c.A, c.N1, c.B, c.N2).PGreater); got > one*(1+1e-9) {
				t.Errorf("Boschloo %d/%d vs %d/%d = %g exceeds doubled one-sided Fisher %g", c.A, c.N1, c.B, c.N2, got, one)
			}
		}
	}
}

func TestComparePanicsOnImpossibleCounts(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Compare(11, 6, ...) did not panic")
		}
	}()
	Compare(11, 6, 0, 6, 0)
}

func TestCompare(t *testing.T) {
	c := Compare(0, 60, 11, 60, 0)
	if !coreClose(c.Fisher.PTwoSided, FisherExact(0, 60, 11, 60).PTwoSided) || c.Conf != 0.95 {
		t.Fatalf("Compare = %+v", c)
	}
	if c.Boschloo == nil || !(c.Boschloo.PTwoSided < c.Fisher.PTwoSided) {
		t.Errorf("Boschloo = %+v, want a p below Fisher's %g", c.Boschloo, c.Fisher.PTwoSided)
	}
	if !(c.Difference.Newcombe.Lo > 0) || c.Difference.Estimate != 11.0/60 {
		t.Errorf("difference = %+v, want a positive Newcombe interval around 11/60", c.Difference)
	}
	if !math.IsInf(c.Ratio.Estimate, 1) || !math.IsInf(c.Ratio.CI.Hi, 1) || !(c.Ratio.CI.Lo > 1) {
		t.Errorf("ratio = %+v, want +Inf with an interval (>1, +Inf)", c.Ratio)
	}
	var zeroWarned bool
	for _, w := range c.Warnings {
		if len(w) > 20 && w[:20] == "zero events in arm A" {
			zeroWarned = true
		}
	}
	if !zeroWarned {
		t.Errorf("warnings %q lack the zero-events caveat for arm A", c.Warnings)
	}
	if Compare(3, 1000, 2, 1000, 0.9).Boschloo != nil {
		t.Error("Boschloo computed beyond BoschlooMaxN")
	}
}

func TestCompareJSON(t *testing.T) {
	b, err := json.Marshal(Compare(0, 60, 11, 60, 0))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		A struct {
			Events, N int
			Rate      float64
			Wilson    []float64 `json:"wilson95"`
			CP        []float64 `json:"clopper_pearson95"`
		}
		Difference struct {
			Estimate float64
			Newcombe []float64 `json:"newcombe95"`
		}
		Fisher struct {
			P float64 `json:"p_two_sided"`
		} `json:"fisher_exact"`
		Ratio map[string]any
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if v.A.Events != 0 || v.A.N != 60 || len(v.A.Wilson) != 2 || len(v.A.CP) != 2 || len(v.Difference.Newcombe) != 2 {
		t.Errorf("JSON lacks the contract fields: %s", b)
	}
	if math.Abs(v.Fisher.P-6.0e-4) > 0.1e-4 {
		t.Errorf("p_two_sided = %g, want 6.0e-4", v.Fisher.P)
	}
	if v.Ratio["ci95"].([]any)[1] != nil || v.Ratio["estimate"] != nil {
		t.Errorf("infinite ratio bounds must be null: %v", v.Ratio)
	}
	b90, _ := json.Marshal(Compare(1, 10, 2, 10, 0.9))
	var m map[string]map[string]any
	_ = json.Unmarshal(b90, &m)
	if _, ok := m["a"]["wilson90"]; !ok {
		t.Errorf("a 90%% comparison should label its intervals 90: %s", b90)
	}
}

// FuzzFisherExact checks invariants over arbitrary tables: p-values are probabilities,
// the one-sided tails overlap in exactly the observed table, and for tables small
// enough the two-sided p equals a brute-force sum over the whole support.
func FuzzFisherExact(f *testing.F) {
	for _, c := range [][4]uint16{{0, 60, 11, 60}, {0, 240, 29, 240}, {1, 1, 0, 1}, {0, 0, 0, 0}, {500, 1000, 480, 900}, {601, 979, 586, 854}} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, a, n1, b, n2 uint16) {
		if n1 > 5000 || n2 > 5000 {
			return
		}
		ai, bi := int(a)%(int(n1)+1), int(b)%(int(n2)+1)
		r := FisherExact(ai, int(n1), bi, int(n2))
		for _, p := range []float64{r.PTwoSided, r.PLess, r.PGreater} {
			if !(p >= 0 && p <= 1) {
				t.Fatalf("%d/%d vs %d/%d: %+v not probabilities", ai, n1, bi, n2, r)
			}
		}
		h := newCoreHyper(int(n1), int(n2), ai+bi)
		if single := h.lo == h.hi; single != !r.MidPDefined() || (!single && !(r.MidP >= 0 && r.MidP <= r.PTwoSided*(1+1e-9))) {
			t.Fatalf("%d/%d vs %d/%d: mid-p %g (one table possible: %v, two-sided p %g)", ai, n1, bi, n2, r.MidP, single, r.PTwoSided)
		}
		pobs := math.Exp(h.logPMF(ai))
		if d := r.PLess + r.PGreater - 1 - pobs; math.Abs(d) > 1e-9 {
			t.Fatalf("%d/%d vs %d/%d: less+greater-1 = %g, want P(obs) %g", ai, n1, bi, n2, r.PLess+r.PGreater-1, pobs)
		}
		if r.PTwoSided < min(r.PLess, r.PGreater)*(1-1e-9) {
			t.Fatalf("%d/%d vs %d/%d: two-sided %g below a one-sided p", ai, n1, bi, n2, r.PTwoSided)
		}
		if n1 > 400 || n2 > 400 {
			return
		}
		brute, less, tie := 0.0, 0.0, 0.0
		for x := h.lo; x <= h.hi; x++ {
			p := math.Exp(h.logPMF(x))
			if p <= pobs*(1+fisherTieTol) {
				brute += p
			}
			switch {
			case p < pobs/(1+fisherTieTol):
				less += p
			case p <= pobs*(1+fisherTieTol):
				tie += p
			}
		}
		if !coreClose(r.PTwoSided, min(1, brute)) && math.Abs(r.PTwoSided-brute) > 1e-9 {
			t.Fatalf("%d/%d vs %d/%d: two-sided %g, brute-force sum %g", ai, n1, bi, n2, r.PTwoSided, brute)
		}
		if mid := less + tie/2; r.MidPDefined() && !coreClose(r.MidP, min(1, mid)) && math.Abs(r.MidP-mid) > 1e-9 {
			t.Fatalf("%d/%d vs %d/%d: mid-p %g, brute-force Fay mid-p %g", ai, n1, bi, n2, r.MidP, mid)
		}
	})
}

func BenchmarkFisher100k(b *testing.B) {
	for i := 0; i < b.N; i++ {
		FisherExact(100, 100000, 160, 100000)
		FisherExact(50000, 100000, 50400, 100000)
	}
}

func BenchmarkBoschloo200(b *testing.B) {
	for i := 0; i < b.N; i++ {
		BoschlooExact(3, 200, 14, 200)
	}
}
