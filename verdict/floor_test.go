package verdict

import (
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// departRow is an arm's divergence: early sessions depart at the first turn (depth 2
// characters), late ones at the third (depth 40), and alike ones never within 3 turns.
func departRow(arm string, early, late, alike int) DivergenceRow {
	d := DivergenceRow{Arm: arm, Compared: early + late + alike, Diverged: early + late}
	for range early {
		d.departures = append(d.departures, stats.Departure{Turn: 0, Departed: true})
		d.depths = append(d.depths, 2)
	}
	for range late {
		d.departures = append(d.departures, stats.Departure{Turn: 2, Departed: true})
		d.depths = append(d.depths, 40)
	}
	for range alike {
		d.departures = append(d.departures, stats.Departure{Turn: 2})
	}
	if early+late > 0 {
		d.Depth = d.depths[(early+late)/2]
	}
	return d
}

// An arm is beyond the floor when its sessions depart sooner than the floor's, though
// the floor departs in most sessions too; an arm that departs as the floor does is not.
func TestDivergenceJudgedAgainstTheFloor(t *testing.T) {
	v := &Verdict{Alpha: 0.05, Design: store.Design{DivergenceFloor: "again"},
		Arms: []ArmResult{{Name: "base"}, {Name: "again"}, {Name: "q8"}, {Name: "q4"}, {Name: "same"}}}
	v.Divergence = []DivergenceRow{departRow("again", 0, 6, 2), departRow("q8", 0, 8, 0), departRow("q4", 8, 0, 0), departRow("same", 0, 6, 2)}
	v.Divergence[1].Depth, v.Divergence[1].depths = 30, []float64{25, 28, 30, 30, 31, 33, 35, 36}
	v.judgeFloor()
	byArm := map[string]*FloorComparison{}
	for _, d := range v.Divergence {
		byArm[d.Arm] = d.Floor
	}
	if byArm["again"] != nil {
		t.Errorf("the floor was judged against itself: %+v", byArm["again"])
	}
	if c := byArm["q4"]; c == nil || !c.Beyond || c.OnLaunches || c.Level != 0.05/3 {
		t.Errorf("q4 departs at the first turn, the floor two turns later: %+v", c)
	}
	if c := byArm["same"]; c == nil || c.Beyond || c.P < 0.4 {
		t.Errorf("an arm that departs as the floor does: %+v", c)
	}
	h := v.floorHeadline("**")
	for _, want := range []string{"**q4** diverges from base beyond the A/A floor: q4 8 of 8 sessions (100.0%), p = ",
		"departing a median 2 characters into the turn", "do not diverge from base more than the A/A floor",
		"The floor is again, which repeats base's pins: 6 of 8 sessions (75.0%) departed from base's, a median 40 characters into the turn"} {
		if !strings.Contains(h, want) {
			t.Errorf("headline lacks %q:\n%s", want, h)
		}
	}
	// Of two arms beyond the floor, the one whose departing turns stay alike longer is
	// said to change the replies less.
	if s := v.depthSentence([]DivergenceRow{v.Divergence[2], v.Divergence[1]}); !strings.Contains(s, "q8's departing turns stay alike longer than q4's (a median 30 against 2 characters; Mann-Whitney p = ") ||
		!strings.HasSuffix(s, "so q8 changes the replies less.") {
		t.Errorf("depth sentence: %q", s)
	}
}

func TestGrowthClause(t *testing.T) {
	d := DivergenceRow{Arm: "again", ByTurn: [][2]int{{0, 8}, {3, 8}, {2, 5}, {1, 3}}}
	if got := growthClause(d); !strings.HasPrefix(got, "again departed at the first turn in 0 of 8 (0.0%), at the later ones in 6 of 16 (37.5%), p = 0.06") {
		t.Errorf("%q", got)
	}
	if got := growthClause(DivergenceRow{Arm: "q4", ByTurn: [][2]int{{8, 8}}}); got != "" {
		t.Errorf("one turn: %q", got)
	}
}
