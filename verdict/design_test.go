package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// fixtureRun is one launch of one arm in one block: its sessions, how many were
// corrupted (each in every turn from its second on) and how many were lost.
type fixtureRun struct {
	arm                       string
	levels                    map[string]string
	block                     int
	sessions, corrupted, lost int
	turnsPerSession           int
	lostCorrupted             int // of the lost sessions, how many were corrupted first
}

func record(t *testing.T, name, unit string, design store.Design, runs []fixtureRun) *sqlx.DB {
	t.Helper()
	return recordSpec(t, name, unit, "version: 1", design, runs)
}

// recordSpec is record with the spec text stored with the experiment.
func recordSpec(t *testing.T, name, unit, spec string, design store.Design, runs []fixtureRun) *sqlx.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dj, _ := json.Marshal(design)
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: name, SpecPath: name + ".yaml", Spec: spec, Seed: 1,
		Unit: unit, Alpha: 0.05, Baseline: runs[0].arm, Version: "test", Host: "h", Created: t0, Design: string(dj)})
	if err != nil {
		t.Fatal(err)
	}
	armIDs := map[string]int64{}
	w := s.NewWriter(store.WriterOptions{})
	for _, r := range runs {
		id, ok := armIDs[r.arm]
		if !ok {
			var levels []byte
			if r.levels != nil {
				levels, _ = json.Marshal(r.levels)
			}
			id, err = s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: r.arm, Position: len(armIDs), Pins: "{}", Levels: string(levels), Command: "[]", Env: "{}"})
			if err != nil {
				t.Fatal(err)
			}
			armIDs[r.arm] = id
		}
		runID, _ := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: id, Block: r.block, Runtime: "process", Status: "done", Started: t0})
		tps := max(r.turnsPerSession, 2)
		for si := 0; si < r.sessions+r.lost; si++ {
			lost := si >= r.sessions
			bad := si < r.corrupted || (lost && si-r.sessions < r.lostCorrupted)
			for k := 0; k < tps; k++ {
				w.Turn(store.Turn{ExperimentID: exp, RunID: runID, ArmID: id, Session: r.block*1000 + si, Index: k, Round: k / 2,
					Started: t0, StatusCode: 200, FinishReason: "stop", Corrupted: bad && k > 0, Request: "{}", Response: "{}"})
			}
			st := store.SessionOK
			if lost {
				st = store.SessionTimeout
			}
			w.Session(store.Session{ExperimentID: exp, RunID: runID, ArmID: id, Index: r.block*1000 + si, Block: r.block, Status: st, Turns: tps, Corrupted: bad})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s.FinishExperiment(ctx, exp, "done", "", t0.Add(time.Hour))
	s.Close()
	db, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func build(t *testing.T, db *sqlx.DB, name string) (*Verdict, string) {
	t.Helper()
	v, err := Build(context.Background(), db, experimentOf(t, db, name))
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := v.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	return v, md.String()
}

func TestFactorialVerdictDescribesTheInteraction(t *testing.T) {
	design := store.Design{Blocks: 1, Factors: []store.DesignFactor{
		{Name: "bf16_index_k", Levels: []string{"0", "1"}}, {Name: "hicache", Levels: []string{"off", "on"}}}}
	lv := func(k, h string) map[string]string { return map[string]string{"bf16_index_k": k, "hicache": h} }
	// Corruption needs both bf16 index-K and HiCache: only one cell corrupts.
	db := record(t, "factorial", "session", design, []fixtureRun{
		{arm: "bf16_index_k=0,hicache=off", levels: lv("0", "off"), sessions: 60},
		{arm: "bf16_index_k=0,hicache=on", levels: lv("0", "on"), sessions: 60},
		{arm: "bf16_index_k=1,hicache=off", levels: lv("1", "off"), sessions: 60},
		{arm: "bf16_index_k=1,hicache=on", levels: lv("1", "on"), sessions: 60, corrupted: 14},
	})
	v, md := build(t, db, "factorial")
	if v.Factorial == nil {
		t.Fatal("no factorial model for a 2x2 design")
	}
	if len(v.Factorial.Additive) != 1 || !v.Factorial.Additive[0].Result.Significant {
		t.Fatalf("additive interaction = %+v, want significant", v.Factorial.Additive)
	}
	// The interaction is described on sessions, but no factorial term is claimed on
	// launches: the headline names the largest difference and what the launches allow.
	head := strings.Join(v.Headline(), "\n")
	if strings.Contains(head, "interaction") || !strings.Contains(head, "bf16_index_k=1,hicache=on's: 14 of 60") || !strings.Contains(head, "cannot be told apart") {
		t.Errorf("headline:\n%s", head)
	}
	if !strings.Contains(md, "<summary>Factorial model</summary>") || !strings.Contains(md, "bf16_index_k x hicache") {
		t.Errorf("markdown lacks the factorial section")
	}
	// The interaction's claim is on the risk-difference scale: the table shows that p
	// beside its adjusted one, which Holm can only raise. Shown beside the log-odds p
	// alone, the adjusted p read as smaller than its own raw p.
	ai := v.Factorial.Additive[0]
	row := fmt.Sprintf("| +23.3 pts | %s | %s | ", interactionInterval(ai.Result.CI.Lo, ai.Result.CI.Hi), pval(ai.Result.P))
	if !strings.Contains(md, row) || !strings.Contains(md, "| p (risk difference) |") || ai.AdjustedP < ai.Result.P {
		t.Errorf("the interaction's row lacks its own p %q (adjusted %g):\n%s", row, ai.AdjustedP, md)
	}
	if strings.Contains(md, "Holm-adjusted as") {
		t.Errorf("the family's description says Holm-adjusted twice:\n%s", md)
	}
}

// A sequential arm is judged on launches at every look, at its share spread over the
// looks that can reach it: of four looks only the last can (2/70 ≤ 0.03), so looks 1-3
// are not charged and the last gets the whole 0.03; after two looks nothing is tested.
func TestSequentialVerdictJudgesOnLaunches(t *testing.T) {
	design := store.Design{Blocks: 4, Looks: 4, Sessions: 20}
	db := record(t, "seq", "session", design, []fixtureRun{
		{arm: "control", block: 0, sessions: 20},
		{arm: "treatment", block: 0, sessions: 20, corrupted: 5},
		{arm: "control", block: 1, sessions: 20},
		{arm: "treatment", block: 1, sessions: 20, corrupted: 1},
	})
	v, md := build(t, db, "seq")
	if len(v.Sequential) != 1 {
		t.Fatalf("sequential views = %d", len(v.Sequential))
	}
	sv := v.Sequential[0]
	if len(sv.Taken) != 2 || sv.Taken[0].Crossed || sv.Taken[1].Crossed || sv.Stopped != 0 || math.Abs(sv.Level-0.03) > 1e-12 {
		t.Fatalf("sequential view %+v", sv)
	}
	c := v.Arms[1].Compare
	if !c.Sequential || c.Significant || c.Launch == nil || c.Launch.Level != 0 || math.Abs(c.Launch.Share-0.03) > 1e-12 || c.Launch.Testable {
		t.Errorf("comparison %+v, claim %+v", c, c.Launch)
	}
	if !strings.Contains(md, "<summary>Sequential design</summary>") || !strings.Contains(md, "| 1 | 1 vs 1 | 1.000 |") {
		t.Errorf("markdown lacks the look table:\n%s", md)
	}
	var runs []fixtureRun
	for b := range 6 {
		runs = append(runs, fixtureRun{arm: "control", block: b, sessions: 20}, fixtureRun{arm: "treatment", block: b, sessions: 20, corrupted: 5})
	}
	db = record(t, "seq6", "session", store.Design{Blocks: 6, Looks: 6, Sessions: 20}, runs)
	v, _ = build(t, db, "seq6")
	sv = v.Sequential[0]
	// Of 6 looks, 0.03 is spread over the last two (0.015 each): 4 launches (2/70) cannot
	// reach it, 5 (2/252) can.
	if sv.Stopped != 5 || sv.Taken[3].Crossed || !sv.Taken[4].Crossed || !v.Arms[1].Compare.Significant {
		t.Errorf("six consistent launches: %+v, comparison %+v", sv, v.Arms[1].Compare)
	}
	if h := v.headline(""); !strings.Contains(h, "spread over the 2 of its 6 looks that can reach it") || !strings.Contains(h, "significantly higher") {
		t.Errorf("headline: %s", h)
	}
}

func TestBlocksAreStratifiedAndSessionsPaired(t *testing.T) {
	design := store.Design{Blocks: 2, Sessions: 30}
	db := record(t, "blocks", "session", design, []fixtureRun{
		{arm: "control", block: 0, sessions: 30},
		{arm: "treatment", block: 0, sessions: 30, corrupted: 5},
		{arm: "control", block: 1, sessions: 30, corrupted: 1},
		{arm: "treatment", block: 1, sessions: 30, corrupted: 6},
	})
	v, md := build(t, db, "blocks")
	if len(v.Strata) != 1 || v.Strata[0].Result.Strata != 2 || !(v.Strata[0].Result.CMHP < 0.05) {
		t.Fatalf("strata = %+v", v.Strata)
	}
	if len(v.Pairs) != 1 || v.Pairs[0].Pairs != 60 || v.Pairs[0].Result.BOnly != 10 || v.Pairs[0].Result.AOnly != 0 {
		t.Fatalf("pairs = %+v", v.Pairs)
	}
	for _, want := range []string{"<summary>Stratified by block</summary>", "<summary>Paired sessions</summary>"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestNonInferiorityAndLosses(t *testing.T) {
	design := store.Design{Blocks: 4, Margin: 0.1}
	db := record(t, "ni", "session", design, inBlocks(4,
		fixtureRun{arm: "baseline", sessions: 200, corrupted: 2},
		fixtureRun{arm: "fixed", sessions: 200, corrupted: 1, lost: 12}))
	v, md := build(t, db, "ni")
	if len(v.NonInferiority) != 1 || !v.NonInferiority[0].Result.NonInferior {
		t.Fatalf("non-inferiority = %+v, claim %+v", v.NonInferiority, v.NonInferiority[0].Launch)
	}
	if !strings.Contains(strings.Join(v.Headline(), " "), "fixed is non-inferior") {
		t.Errorf("headline does not say the fix is safe: %q", v.Headline())
	}
	if len(v.Losses) != 1 || v.Losses[0].Result.LossP >= 0.05 {
		t.Fatalf("losses = %+v", v.Losses)
	}
	if !strings.Contains(md, "<summary>Lost sessions</summary>") || !strings.Contains(md, "not compared on equal footing") {
		t.Errorf("markdown does not warn about unequal losses")
	}
}

func TestResponseUnitShowsTheClusteredTest(t *testing.T) {
	db := record(t, "resp", "response", store.Design{Blocks: 1}, []fixtureRun{
		{arm: "control", sessions: 60, turnsPerSession: 8},
		{arm: "treatment", sessions: 60, corrupted: 3, turnsPerSession: 8},
	})
	v, md := build(t, db, "resp")
	uv := v.UnitView
	if uv == nil || uv.Events[1] != 3*7 || uv.N[1] != 480 {
		t.Fatalf("unit view = %+v", uv)
	}
	c := v.Arms[1].Compare
	// 21 of 480 responses against 0 looks overwhelming as if independent; clustered in 3
	// sessions it is not much more than the session-level 3/60 against 0/60.
	if !(uv.NaiveP[1] < 1e-5) || !(uv.P[1] > uv.NaiveP[1]*100) || math.IsNaN(uv.DE[1]) || uv.DE[1] < 2 {
		t.Fatalf("response unit: %+v, naive p %g, Donner p %g, DE %g", c, uv.NaiveP[1], uv.P[1], uv.DE[1])
	}
	if !strings.Contains(md, "<summary>Unit of analysis: response</summary>") || uv.Test != "Donner's adjusted chi-square" {
		t.Errorf("markdown lacks the response-unit section")
	}
}

// A session corrupted and then lost is not analysed: counting it while a lost session
// that stayed clean is not would keep only the corrupted ones of a crash. It is counted
// beside the analysis, and the corruption gate still sees it.
func TestCorruptedThenLostSessionsAreReportedNotAnalysed(t *testing.T) {
	db := record(t, "lostbad", "session", store.Design{Blocks: 1}, []fixtureRun{
		{arm: "control", sessions: 30},
		{arm: "treatment", sessions: 20, lost: 10, lostCorrupted: 6},
	})
	v, _ := build(t, db, "lostbad")
	tr := v.Arms[1]
	if tr.Sessions != 20 || tr.Corrupted != 0 || tr.Lost != 10 || tr.CorruptedThenLost != 6 {
		t.Fatalf("treatment: %d analysed, %d corrupted, %d lost, %d corrupted then lost; want 20, 0, 10, 6",
			tr.Sessions, tr.Corrupted, tr.Lost, tr.CorruptedThenLost)
	}
	if failed, _ := v.Gate("corruption"); !failed {
		t.Error("corruption gate passed with corrupted sessions")
	}
}

func TestNoComparisonFailsTheGatesAndSaysSo(t *testing.T) {
	db := record(t, "nodata", "session", store.Design{Blocks: 1}, []fixtureRun{
		{arm: "control", sessions: 30},
		{arm: "treatment", sessions: 0, lost: 30},
	})
	v, _ := build(t, db, "nodata")
	for _, g := range []string{"regression", "difference"} {
		if failed, why := v.Gate(g); !failed || !strings.Contains(why, "could not be compared") {
			t.Errorf("gate %s on no data: %v %q", g, failed, why)
		}
	}
	if h := strings.Join(v.Headline(), " "); !strings.Contains(h, "No comparison was possible") || !strings.Contains(h, "treatment 0 of 0 sessions corrupted (30 lost)") {
		t.Errorf("headline = %q", h)
	}
}

// inBlocks repeats runs in blocks 0 to n−1: identical launches of each arm.
func inBlocks(n int, runs ...fixtureRun) []fixtureRun {
	var out []fixtureRun
	for b := range n {
		for _, r := range runs {
			r.block = b
			out = append(out, r)
		}
	}
	return out
}

// Several arms share the corruption claims' part of alpha: with two arms against the
// baseline and no other claim that can be tested, each is tested at 0.025, which 5
// launches per arm can reach (2/252) and 4 cannot (2/70).
func TestSeveralArmsShareTheirLevel(t *testing.T) {
	db := record(t, "arms3", "session", store.Design{Blocks: 5}, inBlocks(5,
		fixtureRun{arm: "control", sessions: 60},
		fixtureRun{arm: "b", sessions: 60, corrupted: 12},
		fixtureRun{arm: "c", sessions: 60}))
	v, _ := build(t, db, "arms3")
	b, c := v.Arms[1].Compare, v.Arms[2].Compare
	if b.Launch == nil || math.Abs(b.Launch.Level-0.025) > 1e-12 || !b.Launch.Testable || !b.Significant || c.Significant {
		t.Fatalf("b %+v (claim %+v), c %+v", b, b.Launch, c)
	}
	if h := v.headline(""); !strings.Contains(h, "ignificantly higher than control: b") {
		t.Errorf("headline: %s", h)
	}
	db = record(t, "arms3x4", "session", store.Design{Blocks: 4}, inBlocks(4,
		fixtureRun{arm: "control", sessions: 60},
		fixtureRun{arm: "b", sessions: 60, corrupted: 12},
		fixtureRun{arm: "c", sessions: 60}))
	v, _ = build(t, db, "arms3x4")
	if b := v.Arms[1].Compare; b.Significant || b.Launch.Testable || b.Launch.Needed != 5 {
		t.Errorf("4 launches per arm reached 0.015: %+v", b.Launch)
	}
}

// The factorial verdict decides its arms and interactions in one Holm family: the
// function the simulation checks (stats.FactorialFamily) is the one the verdict uses.
func TestFactorialFamilyDecidesTheVerdictsClaims(t *testing.T) {
	design := store.Design{Blocks: 1, Factors: []store.DesignFactor{
		{Name: "bf16_index_k", Levels: []string{"0", "1"}}, {Name: "hicache", Levels: []string{"off", "on"}}}}
	lv := func(k, h string) map[string]string { return map[string]string{"bf16_index_k": k, "hicache": h} }
	// 7 of 60 in the one cell: p = 0.013 for that arm alone, but not in a family of 6.
	db := record(t, "fam", "session", design, []fixtureRun{
		{arm: "bf16_index_k=0,hicache=off", levels: lv("0", "off"), sessions: 60},
		{arm: "bf16_index_k=0,hicache=on", levels: lv("0", "on"), sessions: 60},
		{arm: "bf16_index_k=1,hicache=off", levels: lv("1", "off"), sessions: 60},
		{arm: "bf16_index_k=1,hicache=on", levels: lv("1", "on"), sessions: 60, corrupted: 7},
	})
	v, _ := build(t, db, "fam")
	f := v.Factorial
	if f == nil || f.Family.Tested != 6 {
		t.Fatalf("factorial family: %+v", f)
	}
	var cells []stats.FactorialCell
	var names []string
	for _, a := range v.Arms {
		lvl := map[string]int{"bf16_index_k": 0, "hicache": 0}
		if a.Levels["bf16_index_k"] == "1" {
			lvl["bf16_index_k"] = 1
		}
		if a.Levels["hicache"] == "on" {
			lvl["hicache"] = 1
		}
		cells = append(cells, stats.FactorialCell{Levels: lvl, Events: a.Corrupted, N: a.Sessions})
		names = append(names, a.Name)
	}
	want, err := stats.FactorialFamily(stats.FactorialFamilyInput{Cells: cells, Arms: names, Baseline: v.Baseline, Alpha: v.Alpha})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range want.Claims {
		got := f.Family.Claims[i]
		if got.Name != c.Name || got.Scale != c.Scale || !sameFloat(got.P, c.P) || !sameFloat(got.AdjustedP, c.AdjustedP) || got.Reject != c.Reject {
			t.Errorf("claim %d: verdict %+v, stats.FactorialFamily %+v", i, got, c)
		}
	}
	cmp := v.Arms[3].Compare
	if !(cmp.FisherP < 0.05) || cmp.Significant || math.Abs(cmp.AdjustedP-6*cmp.FisherP) > 1e-12 {
		t.Errorf("the corrupted arm: Fisher p %g, adjusted %g, significant %v; want Holm over 6 claims", cmp.FisherP, cmp.AdjustedP, cmp.Significant)
	}
	ai := f.Additive[0]
	if !ai.Result.Significant || ai.Reject || !(ai.AdjustedP > 0.05) {
		t.Errorf("interaction: unadjusted %v, adjusted p %g, reject %v", ai.Result.Significant, ai.AdjustedP, ai.Reject)
	}
	if cl, ok := f.Claim(stats.ClaimInteraction, "bf16_index_k x hicache", stats.ScaleLogOdds); ok {
		t.Errorf("log-odds interaction is a claim: %+v", cl)
	}
}

func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// Every claim is decided on launches, whatever the unit: two launches per arm are
// weighed by Welch's t test on their rates (the randomization test cannot reach the
// level), four by the randomization test, and the session counts never decide on their
// own.
func TestCorruptionIsDecidedOnLaunches(t *testing.T) {
	db := record(t, "launch2", "launch", store.Design{Blocks: 2}, []fixtureRun{
		{arm: "control", block: 0, sessions: 60},
		{arm: "treatment", block: 0, sessions: 60, corrupted: 9},
		{arm: "control", block: 1, sessions: 60},
		{arm: "treatment", block: 1, sessions: 60, corrupted: 7},
	})
	v, _ := build(t, db, "launch2")
	uv := v.UnitView
	if uv == nil || uv.Test != testRandomization || uv.Launch[1] == nil || !uv.Inconclusive || uv.MinLaunchesPerArm != 4 {
		t.Fatalf("unit view %+v", uv)
	}
	if lt := uv.Launch[1]; lt.LaunchesA != 2 || lt.LaunchesB != 2 || math.Abs(lt.P-1.0/3) > 1e-12 {
		t.Errorf("launch test %+v", lt)
	}
	c := v.Arms[1].Compare
	// Launch rates 0, 0 against 0.15, 0.1167: Welch's t = 8.0 on 1 degree of freedom,
	// p = 0.0792 (scipy.stats.ttest_ind(equal_var=False)).
	if c.Significant || c.Launch == nil || !c.Launch.Testable || c.Launch.Test != testWelch || math.Abs(c.Launch.P-0.07917) > 1e-5 || !(c.FisherP < 0.001) {
		t.Errorf("two launches per arm: %+v, claim %+v", c, c.Launch)
	}
	if h := v.headline(""); !strings.Contains(h, "Welch's t test on the launches' corruption rates gives p = 0.079 > 0.05") || !strings.Contains(h, "no difference between the arms' launches is shown") {
		t.Errorf("headline does not say how two launches were weighed: %s", h)
	}

	var runs []fixtureRun
	for b, k := range []int{9, 7, 8, 10} {
		runs = append(runs, fixtureRun{arm: "control", block: b, sessions: 60}, fixtureRun{arm: "treatment", block: b, sessions: 60, corrupted: k})
	}
	db = record(t, "launch4", "session", store.Design{Blocks: 4}, runs)
	v, _ = build(t, db, "launch4")
	c = v.Arms[1].Compare
	lc := c.Launch
	if lc == nil || !lc.Testable || !c.Significant || c.Direction != "higher" || math.Abs(lc.P-2.0/70) > 1e-12 || math.Abs(lc.Level-0.05) > 1e-12 {
		t.Fatalf("four launches per arm: %+v, claim %+v", c, lc)
	}
	if !(lc.CI.Lo > 0) || c.AdjustedP != lc.P {
		t.Errorf("the interval %+v must exclude 0 with the claim, and AdjustedP %g be its p", lc.CI, c.AdjustedP)
	}
	if h := v.headline(""); !strings.Contains(h, "significantly higher") || !strings.Contains(h, "95% CI") {
		t.Errorf("headline: %s", h)
	}
}

// After an early stop the arm's interval is the repeated confidence interval, and what
// the stop saved is measured against the fixed design with the spec's own power.
