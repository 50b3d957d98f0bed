package stats

import (
	"encoding/json"
	"math"
	"testing"
)

func TestStratifiedMatchesStatsmodels(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.Strata) < 200 {
		t.Fatalf("only %d reference strata sets", len(ref.Strata))
	}
	bd := 0
	for _, c := range ref.Strata {
		strata := make([]Stratum, len(c.Strata))
		for i, s := range c.Strata {
			strata[i] = Stratum{A: s[0], N1: s[1], B: s[2], N2: s[3]}
		}
		got := Stratified(strata, 0.95)
		check := func(name string, g, w float64) {
			t.Helper()
			if !coreClose(g, w) {
				t.Errorf("%v: %s = %.12g, reference %.12g", c.Strata, name, g, w)
			}
		}
		check("CMH", got.CMH, c.CMH)
		check("CMH p", got.CMHP, c.CMHP)
		check("CMH corrected", got.CMHCorrected, c.CMHCorrected)
		check("CMH corrected p", got.CMHCorrectedP, c.CMHCorrectedP)
		check("MH odds ratio", got.OddsRatio, coreBound(c.OR, math.Inf(1)))
		if c.ORCI[0] != nil && c.ORCI[1] != nil && !math.IsInf(got.OddsRatio, 0) && got.OddsRatio > 0 {
			check("RBG lower", got.OddsRatioCI.Lo, *c.ORCI[0])
			check("RBG upper", got.OddsRatioCI.Hi, *c.ORCI[1])
		}
		check("MH risk difference", got.RiskDifference, c.RD)
		if c.RDCI != nil {
			check("Sato lower", got.RiskDifferenceCI.Lo, *c.RDCI[0])
			check("Sato upper", got.RiskDifferenceCI.Hi, *c.RDCI[1])
		}
		if c.BD != nil {
			bd++
			check("Breslow-Day", got.BreslowDay, *c.BD)
			check("Breslow-Day p", got.BreslowDayP, *c.BDP)
			check("Tarone", got.Tarone, *c.Tarone)
			check("Tarone p", got.TaroneP, *c.TaroneP)
			if got.DF != len(strata)-1 {
				t.Errorf("%v: DF = %d", c.Strata, got.DF)
			}
		}
	}
	if bd < 150 {
		t.Errorf("only %d Breslow-Day references", bd)
	}
}

func TestStratifiedOneStratum(t *testing.T) {
	// With one stratum the MH risk difference is the plain difference, and Sato's
	// variance reduces to the unpooled binomial variance: an independent check of the
	// formula.
	a, n1, b, n2 := 10, 100, 30, 100
	r := Stratified([]Stratum{{a, n1, b, n2}}, 0.95)
	pa, pb := 0.1, 0.3
	se := math.Sqrt(pa*(1-pa)/float64(n1) + pb*(1-pb)/float64(n2))
	z := coreZ(0.95)
	if !coreClose(r.RiskDifference, pb-pa) || !coreClose(r.RiskDifferenceCI.Lo, pb-pa-z*se) || !coreClose(r.RiskDifferenceCI.Hi, pb-pa+z*se) {
		t.Errorf("one stratum: RD %g %v, want %g ± %g", r.RiskDifference, r.RiskDifferenceCI, pb-pa, z*se)
	}
	// The MH odds ratio of one stratum is the sample odds ratio.
	if want := (30.0 / 70) / (10.0 / 90); !coreClose(r.OddsRatio, want) {
		t.Errorf("OR = %g, want %g", r.OddsRatio, want)
	}
	if !math.IsNaN(r.BreslowDay) {
		t.Errorf("Breslow-Day needs two strata, got %g", r.BreslowDay)
	}
}

func TestStratifiedIdenticalStrata(t *testing.T) {
	// Splitting one table into identical strata must not change the pooled estimates,
	// and the odds ratios are homogeneous by construction.
	one := Stratified([]Stratum{{4, 60, 12, 60}}, 0)
	four := Stratified([]Stratum{{1, 15, 3, 15}, {1, 15, 3, 15}, {1, 15, 3, 15}, {1, 15, 3, 15}}, 0)
	if !coreClose(one.OddsRatio, four.OddsRatio) || !coreClose(one.RiskDifference, four.RiskDifference) {
		t.Errorf("one: OR %g RD %g; four: OR %g RD %g", one.OddsRatio, one.RiskDifference, four.OddsRatio, four.RiskDifference)
	}
	if four.BreslowDay > 1e-9 || four.BreslowDayP < 1-1e-9 || four.DF != 3 {
		t.Errorf("homogeneous strata: Breslow-Day %g p %g df %d", four.BreslowDay, four.BreslowDayP, four.DF)
	}
}

func TestStratifiedSparse(t *testing.T) {
	r := Stratified([]Stratum{{0, 30, 4, 30}, {0, 0, 2, 10}, {0, 20, 0, 20}}, 0)
	if r.Strata != 2 {
		t.Errorf("used %d strata, want 2 (one has an empty arm)", r.Strata)
	}
	if !math.IsInf(r.OddsRatio, 1) || !math.IsInf(r.OddsRatioCI.Hi, 1) {
		t.Errorf("no events in arm A anywhere: OR %g %v, want +Inf", r.OddsRatio, r.OddsRatioCI)
	}
	if !(r.CMHP < 0.06) || len(r.Warnings) < 3 {
		t.Errorf("CMH p %g, warnings %q", r.CMHP, r.Warnings)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("sparse result does not marshal: %v", err)
	}
	if e := Stratified(nil, 0); !math.IsNaN(e.CMHP) || len(e.Warnings) == 0 {
		t.Errorf("no strata: %+v", e)
	}
}

// FuzzStratified checks that any strata give probabilities or NaN, never a panic, and
// that the result always marshals.
func FuzzStratified(f *testing.F) {
	f.Add([]byte{0, 30, 4, 30, 1, 30, 6, 30})
	f.Add([]byte{5, 5, 0, 5, 0, 0, 0, 0, 3, 9, 3, 9})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var strata []Stratum
		for i := 0; i+3 < len(raw) && len(strata) < 20; i += 4 {
			n1, n2 := int(raw[i+1]), int(raw[i+3])
			strata = append(strata, Stratum{int(raw[i]) % (n1 + 1), n1, int(raw[i+2]) % (n2 + 1), n2})
		}
		r := Stratified(strata, 0.95)
		for _, p := range []float64{r.CMHP, r.CMHCorrectedP, r.BreslowDayP} {
			if !math.IsNaN(p) && !(p >= 0 && p <= 1) {
				t.Fatalf("%v: p %g", strata, p)
			}
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("%v: %v", strata, err)
		}
	})
}
