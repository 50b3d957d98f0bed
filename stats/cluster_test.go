package stats

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// extraReference is stats/testdata/extra/reference.json, written by gen.py.
type extraReference struct {
	Cluster []struct {
		A, B       [][2]int
		ICCA       *float64 `json:"icc_a"`
		ICCB       *float64 `json:"icc_b"`
		DeffA      float64  `json:"deff_a"`
		DeffB      float64  `json:"deff_b"`
		ICCPooled  *float64 `json:"icc_pooled"`
		DeffPooled float64  `json:"deff_pooled"`
		ChiSq      float64  `json:"chisq"`
		PNaive     float64  `json:"p_naive"`
	}
	Firth []struct {
		X        [][]float64
		Y, W     []float64
		Coef, SE []float64
		LogLik   float64
		LRT, P   []float64
	}
	Factorial []struct {
		Cells []struct {
			Levels map[string]int
			Events int
			N      int
		}
		Coef, SE []float64
		LogLik   float64
		LRT, P   []float64
		CILo     []float64 `json:"ci_lo"`
		CIHi     []float64 `json:"ci_hi"`
	}
	Noninf []struct {
		A, N1, B, N2 int
		Alpha, Upper float64
	}
	Fisher []struct {
		A, N1, B, N2 int
		P            float64
	}
}

var (
	extraOnce sync.Once
	extraRef  extraReference
	extraErr  error
)

func loadExtra(t testing.TB) *extraReference {
	t.Helper()
	extraOnce.Do(func() {
		var b []byte
		b, extraErr = os.ReadFile(filepath.Join("testdata", "extra", "reference.json"))
		if extraErr == nil {
			extraErr = json.Unmarshal(b, &extraRef)
		}
	})
	if extraErr != nil {
		t.Fatalf("reference values (regenerate with testdata/extra/gen.py): %v", extraErr)
	}
	return &extraRef
}

// closeTo reports whether got is within rel of want, relatively, or within abs.
func closeTo(got, want, rel, abs float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	d := math.Abs(got - want)
	return d <= abs || d <= rel*math.Abs(want)
}

func sessionsOf(pairs [][2]int) []ClusterCounts {
	out := make([]ClusterCounts, len(pairs))
	for i, p := range pairs {
		out[i] = ClusterCounts{Events: p[0], Responses: p[1]}
	}
	return out
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func TestClusterReference(t *testing.T) {
	ref := loadExtra(t)
	if len(ref.Cluster) < 200 {
		t.Fatalf("only %d clustering reference cases", len(ref.Cluster))
	}
	const rel = 1e-6
	for i, c := range ref.Cluster {
		a, b := sessionsOf(c.A), sessionsOf(c.B)
		sa, err := SummarizeClusters(a)
		if err != nil {
			t.Fatal(err)
		}
		sb, _ := SummarizeClusters(b)
		rs, err := DonnerAdjusted(a, b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		checks := []struct {
			name      string
			got, want float64
		}{
			{"ICC A", sa.ICC, orNaN(c.ICCA)},
			{"ICC B", sb.ICC, orNaN(c.ICCB)},
			{"design effect A", sa.DesignEffect, c.DeffA},
			{"design effect B", sb.DesignEffect, c.DeffB},
			{"pooled ICC", rs.ICC, orNaN(c.ICCPooled)},
			{"pooled design effect", rs.DesignEffect, c.DeffPooled},
			{"chi-square", rs.ChiSquare, c.ChiSq},
			{"naive p", rs.NaiveP, c.PNaive},
		}
		for _, ch := range checks {
			if !closeTo(ch.got, ch.want, rel, 1e-12) {
				t.Errorf("case %d %s: got %.12g, want %.12g (A %v B %v)", i, ch.name, ch.got, ch.want, c.A, c.B)
			}
		}
	}
}

func TestDonnerFieldStory(t *testing.T) {
	a := make([]ClusterCounts, 60)
	b := make([]ClusterCounts, 60)
	for i := range a {
		a[i] = ClusterCounts{0, 4}
		b[i] = ClusterCounts{0, 4}
		if i < 7 {
			b[i].Events = 4
		}
	}
	rs, err := DonnerAdjusted(a, b)
	if err != nil {
		t.Fatal(err)
	}
	sessions := pearson2x2(0, 60, 7, 60)
	t.Logf("ICC %.3f, design effect %.2f, naive p %.3g, Rao-Scott p %.3g, session-level chi-square p %.3g",
		rs.ICC, rs.DesignEffect, rs.NaiveP, rs.P, chiSquare1Survival(sessions))
	if rs.ICC < 0.99 || rs.DesignEffect < 3.9 {
		t.Errorf("all-or-nothing sessions: ICC %.3f and design effect %.2f, want ≈ 1 and ≈ 4", rs.ICC, rs.DesignEffect)
	}
	if rs.NaiveP > rs.P/100 {
		t.Errorf("response-level p %.3g should overstate the evidence by orders of magnitude against Rao-Scott %.3g", rs.NaiveP, rs.P)
	}
	if !closeTo(rs.Adjusted, sessions, 0.02, 0) {
		t.Errorf("adjusted chi-square %.4g should be close to the session-level %.4g", rs.Adjusted, sessions)
	}
	if !hasWarning(rs.Warnings, "honest unit") {
		t.Errorf("a design effect of %.1f should warn that the session is the unit: %v", rs.DesignEffect, rs.Warnings)
	}
	sa, _ := SummarizeClusters(a)
	if !math.IsNaN(sa.ICC) || sa.DesignEffect != 1 || !hasWarning(sa.Warnings, "undefined") {
		t.Errorf("all-zero arm: ICC %v, design effect %v, warnings %v; want NaN, 1 and a warning", sa.ICC, sa.DesignEffect, sa.Warnings)
	}
}

func TestClusterRejectsBadTallies(t *testing.T) {
	bad := []ClusterCounts{{Events: 5, Responses: 4}}
	if _, err := SummarizeClusters(bad); err == nil {
		t.Error("5 events of 4 responses accepted")
	}
	if _, err := DonnerAdjusted([]ClusterCounts{{0, 4}}, bad); err == nil || !strings.Contains(err.Error(), "arm B session 0") {
		t.Errorf("error %v should name arm B session 0", err)
	}
}

func hasWarning(ws []Warning, sub string) bool {
	for _, w := range ws {
		if strings.Contains(string(w), sub) {
			return true
		}
	}
	return false
}

// sessionsFromBytes turns fuzz input into a list of tallies of up to 9 responses.
func sessionsFromBytes(data []byte) []ClusterCounts {
	var out []ClusterCounts
	for _, c := range data {
		m := int(c>>4) % 10
		e := int(c & 15)
		if e > m {
			e = m
		}
		out = append(out, ClusterCounts{Events: e, Responses: m})
	}
	return out
}

func FuzzDonnerAdjusted(f *testing.F) {
	f.Add([]byte{0x40, 0x40, 0x40}, []byte{0x44, 0x40, 0x41})
	f.Add([]byte{0x10}, []byte{0x11})
	f.Add([]byte{}, []byte{0x33, 0x33})
	f.Add([]byte{0x92, 0x31, 0x00}, []byte{0x99, 0x99, 0x11, 0x10})
	f.Fuzz(func(t *testing.T, da, db []byte) {
		a, b := sessionsFromBytes(da), sessionsFromBytes(db)
		rs, err := DonnerAdjusted(a, b)
		if err != nil {
			return
		}
		if !(rs.P >= 0 && rs.P <= 1) || !(rs.NaiveP >= 0 && rs.NaiveP <= 1) {
			t.Fatalf("p-values out of [0, 1]: %+v", rs)
		}
		if !(rs.DesignEffect >= 1) || rs.NaiveP > rs.P+1e-15 {
			t.Fatalf("the correction must never strengthen the evidence: %+v", rs)
		}
	})
}
