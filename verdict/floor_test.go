package verdict

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
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
	for _, want := range []string{"**q4** diverges from base beyond the A/A floor: 8 of 8 sessions (100.0%), p = ",
		"departing a median 2 characters into the turn", "; the floor, again, which repeats base's pins, departed in 6 of 8 sessions (75.0%); within it: q8 8 of 8 sessions (100.0%), p = "} {
		if !strings.Contains(h, want) {
			t.Errorf("headline lacks %q:\n%s", want, h)
		}
	}
	if n := len(sentences(h)); n != 1 {
		t.Errorf("the floor's headline takes %d sentences, want 1:\n%s", n, h)
	}
	test := v.floorTest()
	for _, want := range []string{"The floor's sessions departed a median 40 characters into the turn.",
		"Each arm was tested against it at 0.0167, on sessions by how soon they depart, a one-sided log-rank permutation test (q8, q4 and same)."} {
		if !strings.Contains(test, want) {
			t.Errorf("the divergence section lacks %q:\n%s", want, test)
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

// rounds is n sessions corrupted (and so departing) from round r.
func rounds(n, r int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// A headline about divergence against the A/A floor leads with what got worse (the arms
// beyond the floor, with the floor's own rate beside them) and keeps to three sentences:
// the corruption that follows says it is corruption, and how the floor was tested is
// left to the divergence section.
func TestDivergenceHeadlineLeadsWithTheLosses(t *testing.T) {
	for name, c := range map[string]struct {
		f     fixture
		first string
	}{
		"beyond": {fixture{example: "ollama-kv-cache", divergence: true, runs: []launch{
			{arm: "f16", sessions: finished(48)},
			{arm: "f16-again", sessions: finished(48, rounds(6, 1)...)},
			{arm: "q8_0", sessions: finished(48, rounds(30, 0)...)},
			{arm: "q4_0", sessions: finished(48, rounds(48, 0)...)},
		}}, "**q4_0 and q8_0** diverge from f16 beyond the A/A floor: q4_0 48 of 48 sessions (100.0%)"},
		"crashed": {fixture{example: "ollama-kv-cache", divergence: true, runs: []launch{
			{arm: "f16", sessions: finished(48)},
			{arm: "f16-again", sessions: finished(48, rounds(6, 1)...)},
			{arm: "q8_0", sessions: finished(48, rounds(30, 0)...)},
			{arm: "q4_0", status: "crashed", err: "engine exited on its own during the workload (exit code 139)", sessions: join(finished(20, rounds(20, 0)...), lostAt("aborted", 28, 0, 1))},
		}}, "The engine of **q4_0** crashed"},
		"within": {fixture{example: "ollama-parallel", divergence: true, runs: []launch{
			{arm: "p16", sessions: finished(32)}, {arm: "p16-again", sessions: finished(32)}, {arm: "p1", sessions: finished(32)},
		}}, "**p1** does not diverge from p16 more than the A/A floor: 0 of 32 sessions (0.0%), p = 1.000; the floor, p16-again, which repeats p16's pins, departed in 0 of 32 sessions (0.0%)."},
	} {
		t.Run(name, func(t *testing.T) {
			db, ref := recordFixture(t, c.f)
			v, err := Build(context.Background(), db, ref)
			if err != nil {
				t.Fatal(err)
			}
			md := markdown(t, v)
			checkStructure(t, md)
			head := headlineOf(md)
			if !strings.HasPrefix(head, c.first) {
				t.Errorf("the headline does not lead with %q:\n%s", c.first, head)
			}
			if !strings.Contains(head, "which repeats") || !strings.Contains(head, "corrupted sessions") {
				t.Errorf("the headline does not say what the floor is and what corruption was:\n%s", head)
			}
			for _, body := range []string{"a one-sided log-rank permutation test"} {
				if strings.Contains(head, body) || !strings.Contains(md, body) {
					t.Errorf("%q belongs to the divergence section, not the headline:\n%s", body, md)
				}
			}
			if strings.Join(v.Headline(), " ") != strings.ReplaceAll(head, "**", "") {
				t.Errorf("the terminal's headline is not the markdown's:\n%s\n%s", v.Headline(), head)
			}
		})
	}
}

// ResolveFloor: a database or an experiment that is not there is store.ErrNotFound; an
// experiment that is not an A/A check is refused as a floor, with the reason.
func TestResolveFloorRefusesWhatCannotServe(t *testing.T) {
	ctx := context.Background()
	spec, err := arms.Load("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveFloor(ctx, filepath.Join(t.TempDir(), "none.db"), "aa", spec, "h"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "no results database at") {
		t.Errorf("no database: %v", err)
	}
	db, _ := recordFixture(t, examples["quickstart"])
	var seq int
	var name, path string
	if err := db.QueryRowx("PRAGMA database_list").Scan(&seq, &name, &path); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveFloor(ctx, path, "no-such", spec, "h"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("no such experiment: %v", err)
	}
	_, err = ResolveFloor(ctx, path, "1", spec, "h")
	if !errors.Is(err, ErrFloorRefused) || !strings.Contains(err.Error(), "noise floor 1 refused: experiment 1 (bf16-index-k-decisive) is not an A/A check") {
		t.Errorf("an A/B experiment as a floor: %v", err)
	}
}
