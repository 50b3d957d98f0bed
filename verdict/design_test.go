package verdict

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

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
	path := filepath.Join(t.TempDir(), "d.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dj, _ := json.Marshal(design)
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: name, SpecPath: name + ".yaml", Spec: "version: 1", Seed: 1,
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
	v, err := Build(context.Background(), db, name)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := v.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	return v, md.String()
}

func TestFactorialVerdictNamesTheInteraction(t *testing.T) {
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
	head := strings.Join(v.Headline(), "\n")
	if !strings.Contains(head, "bf16_index_k x hicache interaction") {
		t.Errorf("headline does not name the interaction:\n%s", head)
	}
	if !strings.Contains(md, "## Factorial model") || !strings.Contains(md, "Holm-adjusted") {
		t.Errorf("markdown lacks the factorial section or the multiplicity adjustment")
	}
}

func TestSequentialVerdictJudgesByTheBoundary(t *testing.T) {
	design := store.Design{Blocks: 4, Looks: 4, Sessions: 20}
	// Look 1: 0/20 vs 5/20 (Fisher p = 0.047): significant for a fixed test, but far
	// above O'Brien-Fleming's first threshold; the experiment went on to look 2.
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
	r := v.Sequential[0].Result
	if len(r.Looks) != 2 || r.Looks[0].Crossed {
		t.Fatalf("looks = %+v", r.Looks)
	}
	c := v.Arms[1].Compare
	if !c.Sequential || c.Significant != r.Significant {
		t.Errorf("comparison %+v does not follow the sequential decision %+v", c, r)
	}
	if !strings.Contains(md, "## Sequential design") || !strings.Contains(md, "| 1 | 25% |") {
		t.Errorf("markdown lacks the look table:\n%s", md)
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
	for _, want := range []string{"## Stratified by block", "## Paired sessions"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestNonInferiorityAndLosses(t *testing.T) {
	design := store.Design{Blocks: 1, Margin: 0.1}
	db := record(t, "ni", "session", design, []fixtureRun{
		{arm: "baseline", sessions: 200, corrupted: 2},
		{arm: "fixed", sessions: 200, corrupted: 1, lost: 12},
	})
	v, md := build(t, db, "ni")
	if len(v.NonInferiority) != 1 || !v.NonInferiority[0].Result.NonInferior {
		t.Fatalf("non-inferiority = %+v", v.NonInferiority)
	}
	if !strings.Contains(strings.Join(v.Headline(), " "), "fixed is non-inferior") {
		t.Errorf("headline does not say the fix is safe: %q", v.Headline())
	}
	if len(v.Losses) != 1 || v.Losses[0].Result.LossP >= 0.05 {
		t.Fatalf("losses = %+v", v.Losses)
	}
	if !strings.Contains(md, "## Lost sessions") || !strings.Contains(md, "not compared on equal footing") {
		t.Errorf("markdown does not warn about unequal losses")
	}
}

func TestResponseUnitIsDecidedByTheClusteredTest(t *testing.T) {
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
	if !c.UnitDecides || !(uv.NaiveP[1] < 1e-5) || !(uv.P[1] > uv.NaiveP[1]*100) || math.IsNaN(uv.DE[1]) || uv.DE[1] < 2 {
		t.Fatalf("response unit: %+v, naive p %g, Rao-Scott p %g, DE %g", c, uv.NaiveP[1], uv.P[1], uv.DE[1])
	}
	if !strings.Contains(md, "## Unit of analysis: response") || !strings.Contains(md, "Rao-Scott") {
		t.Errorf("markdown lacks the response-unit section")
	}
}

func TestCorruptedThenLostSessionsCountAsCorrupted(t *testing.T) {
	db := record(t, "lostbad", "session", store.Design{Blocks: 1}, []fixtureRun{
		{arm: "control", sessions: 30},
		{arm: "treatment", sessions: 20, lost: 10, lostCorrupted: 6},
	})
	v, _ := build(t, db, "lostbad")
	tr := v.Arms[1]
	if tr.Sessions != 26 || tr.Corrupted != 6 || tr.Lost != 4 {
		t.Fatalf("treatment: %d analysed, %d corrupted, %d lost; want 26, 6, 4", tr.Sessions, tr.Corrupted, tr.Lost)
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

func TestResponseUnitHolmAdjustsAcrossArms(t *testing.T) {
	db := record(t, "resp3", "response", store.Design{Blocks: 1}, []fixtureRun{
		{arm: "control", sessions: 60, turnsPerSession: 8},
		{arm: "b", sessions: 60, corrupted: 3, turnsPerSession: 8},
		{arm: "c", sessions: 60, turnsPerSession: 8},
	})
	v, _ := build(t, db, "resp3")
	uv := v.UnitView
	c := v.Arms[1].Compare
	if !c.UnitDecides || c.AdjustedP <= uv.P[1] || math.Abs(c.AdjustedP-math.Min(1, 2*uv.P[1])) > 1e-12 {
		t.Errorf("arm b: Rao-Scott p %g, adjusted %g; want Holm's 2p", uv.P[1], c.AdjustedP)
	}
}
