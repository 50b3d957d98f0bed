package stats

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

func TestInteractionAgainstReference(t *testing.T) {
	b, err := os.ReadFile("testdata/interaction/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Cells            [4][2]int
			Conf             float64
			Estimate, Lo, Hi float64
		} `json:"mover_interaction"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 200 {
		t.Fatalf("only %d reference cases", len(ref.Cases))
	}
	close := func(got, want float64) bool {
		return math.Abs(got-want) <= 1e-12 || math.Abs(got-want) <= 1e-6*math.Abs(want)
	}
	for _, c := range ref.Cases {
		cells := [2][2]Cell{{{c.Cells[0][0], c.Cells[0][1]}, {c.Cells[1][0], c.Cells[1][1]}},
			{{c.Cells[2][0], c.Cells[2][1]}, {c.Cells[3][0], c.Cells[3][1]}}}
		r := Interaction(cells, c.Conf)
		if !close(r.Estimate, c.Estimate) || !close(r.CI.Lo, c.Lo) || !close(r.CI.Hi, c.Hi) {
			t.Errorf("%v at %g: got %g [%g, %g], want %g [%g, %g]", c.Cells, c.Conf, r.Estimate, r.CI.Lo, r.CI.Hi, c.Estimate, c.Lo, c.Hi)
		}
	}
}

func TestInteractionFindsWhatTheOddsScaleCannot(t *testing.T) {
	// Corruption only with both factors on: three cells at zero. The log-odds interaction
	// is not identifiable from zero cells; the risk-difference one is plain.
	r := Interaction([2][2]Cell{{{0, 60}, {0, 60}}, {{0, 60}, {14, 60}}}, 0.95)
	if !r.Significant || r.CI.Lo <= 0 || math.Abs(r.Estimate-14.0/60) > 1e-12 {
		t.Fatalf("interaction = %+v", r)
	}
	if r.EffectAt[0] != 0 || math.Abs(r.EffectAt[1]-14.0/60) > 1e-12 {
		t.Errorf("simple effects = %v", r.EffectAt)
	}
	none := Interaction([2][2]Cell{{{0, 40}, {0, 40}}, {{0, 40}, {0, 40}}}, 0.95)
	if none.Significant || none.Estimate != 0 {
		t.Errorf("all-zero table: %+v", none)
	}
	if r := Interaction([2][2]Cell{{{0, 0}, {0, 1}}, {{0, 1}, {0, 1}}}, 0.95); !math.IsNaN(r.Estimate) {
		t.Errorf("empty cell: %+v", r)
	}
}
