package stats

import (
	"encoding/json"
	"math"
	"testing"
)

func TestMcNemarMatchesStatsmodels(t *testing.T) {
	ref := loadCoreReference(t)
	if len(ref.McNemar) < 200 {
		t.Fatalf("only %d reference pairs", len(ref.McNemar))
	}
	for _, c := range ref.McNemar {
		if got := McNemar(c.AOnly, c.BOnly, 0).P; !coreClose(got, c.P) {
			t.Errorf("McNemar %d, %d = %.12g, statsmodels %.12g", c.AOnly, c.BOnly, got, c.P)
		}
	}
}

func TestMcNemarOddsRatio(t *testing.T) {
	r := McNemar(2, 14, 0.95)
	if r.OddsRatio != 7 || !(r.OddsRatioCI.Lo > 1) || !(r.OddsRatioCI.Hi > 7) {
		t.Errorf("McNemar(2, 14) = %+v", r)
	}
	// The interval is the Clopper-Pearson interval of 14/16 mapped to odds.
	cp := ClopperPearson(14, 16, 0.95)
	if !coreClose(r.OddsRatioCI.Lo, cp.Lo/(1-cp.Lo)) {
		t.Errorf("lower %g, want %g", r.OddsRatioCI.Lo, cp.Lo/(1-cp.Lo))
	}
	z := McNemar(0, 9, 0)
	if !math.IsInf(z.OddsRatio, 1) || !math.IsInf(z.OddsRatioCI.Hi, 1) || len(z.Warnings) == 0 {
		t.Errorf("McNemar(0, 9) = %+v", z)
	}
	if _, err := json.Marshal(z); err != nil {
		t.Error(err)
	}
	if e := McNemar(0, 0, 0); e.P != 1 || len(e.Warnings) == 0 {
		t.Errorf("McNemar(0, 0) = %+v", e)
	}
}

// FuzzMcNemar checks the exact p against a direct sum of the binomial(n, 1/2) pmf.
func FuzzMcNemar(f *testing.F) {
	f.Add(uint16(0), uint16(9))
	f.Add(uint16(500), uint16(560))
	f.Fuzz(func(t *testing.T, a, b uint16) {
		if int(a)+int(b) > 2000 {
			return
		}
		r := McNemar(int(a), int(b), 0)
		n, k := int(a)+int(b), min(int(a), int(b))
		s := 0.0
		for x := 0; x <= k; x++ {
			s += math.Exp(coreLogChoose(n, x) - float64(n)*math.Ln2)
		}
		if want := min(1, 2*s); !coreClose(r.P, want) && math.Abs(r.P-want) > 1e-9 {
			t.Fatalf("McNemar(%d, %d) = %g, direct sum %g", a, b, r.P, want)
		}
	})
}
