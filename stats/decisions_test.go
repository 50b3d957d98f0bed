package stats

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// decisionsReference is stats/testdata/decisions/reference.json, written by gen.py with
// numpy, scipy and statsmodels.
type decisionsReference struct {
	Donner []struct {
		A, B        [][2]int
		ICC         *float64
		CorrectionA float64 `json:"correction_a"`
		CorrectionB float64 `json:"correction_b"`
		Adjusted, P float64
	}
	LaunchT []struct {
		A, B                         [][2]int
		Conf                         float64
		DF                           int
		Difference, SE, T, P, Lo, Hi float64
	} `json:"launch_t"`
	MoverP []struct {
		Cells [4][2]int
		P     float64
	} `json:"mover_p"`
}

func loadDecisions(t *testing.T) decisionsReference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "decisions", "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref decisionsReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestDonnerAdjustedReference(t *testing.T) {
	ref := loadDecisions(t)
	if len(ref.Donner) < 200 {
		t.Fatalf("only %d reference cases", len(ref.Donner))
	}
	for i, c := range ref.Donner {
		r, err := DonnerAdjusted(sessionsOf(c.A), sessionsOf(c.B))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		for _, ch := range []struct {
			name      string
			got, want float64
		}{
			{"pooled ICC", r.ICC, orNaN(c.ICC)},
			{"correction A", r.CorrectionA, c.CorrectionA},
			{"correction B", r.CorrectionB, c.CorrectionB},
			{"adjusted chi-square", r.Adjusted, c.Adjusted},
			{"p", r.P, c.P},
		} {
			if !closeTo(ch.got, ch.want, 1e-6, 1e-12) {
				t.Errorf("case %d %s: got %.12g, want %.12g", i, ch.name, ch.got, ch.want)
			}
		}
	}
}

func TestInteractionPReference(t *testing.T) {
	ref := loadDecisions(t)
	if len(ref.MoverP) < 150 {
		t.Fatalf("only %d reference cases", len(ref.MoverP))
	}
	for _, c := range ref.MoverP {
		cells := [2][2]Cell{{{c.Cells[0][0], c.Cells[0][1]}, {c.Cells[1][0], c.Cells[1][1]}},
			{{c.Cells[2][0], c.Cells[2][1]}, {c.Cells[3][0], c.Cells[3][1]}}}
		r := Interaction(cells, 0.95)
		if !closeTo(r.P, c.P, 1e-6, 1e-13) {
			t.Errorf("%v: p %.10g, want %.10g", c.Cells, r.P, c.P)
		}
		// The p-value and the interval make the same decision.
		if excludes := r.CI.Lo > 0 || r.CI.Hi < 0; excludes != (r.P < 0.05) && math.Abs(r.P-0.05) > 1e-9 {
			t.Errorf("%v: interval [%g, %g] and p %g disagree", c.Cells, r.CI.Lo, r.CI.Hi, r.P)
		}
	}
}
