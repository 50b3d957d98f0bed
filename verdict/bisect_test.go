package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// stepFixture is one step of a recorded bisection: its role, the changes it applied, and
// per block the corrupted sessions of good and of the arm with the changes (40 sessions
// each), with lost sessions of the applied arm.
type stepFixture struct {
	role    store.StepRole
	applied []int
	blocks  [][2]int
	lost    int
	outcome stats.StepOutcome
}

// The example's eight changes, as the bisection stores them.
var exampleChanges = []store.BisectionChange{
	{Kind: "env", Name: "SGLANG_HEALTH_CHECK_TIMEOUT", Label: "SGLANG_HEALTH_CHECK_TIMEOUT: unset → 30", Good: "unset", Bad: "30"},
	{Kind: "env", Name: "BF16_INDEX_K", Label: "BF16_INDEX_K: 0 → 1", Good: "0", Bad: "1"},
	{Kind: "flag", Name: "--page-size", Label: "--page-size: 1 → 16", Good: "1", Bad: "16"},
	{Kind: "flag", Name: "--chunked-prefill-size", Label: "--chunked-prefill-size: 8192 → 4096", Good: "8192", Bad: "4096"},
	{Kind: "flag", Name: "--max-running-requests", Label: "--max-running-requests: absent → 128", Good: "absent", Bad: "128"},
	{Kind: "flag", Name: "--enable-hierarchical-cache", Label: "--enable-hierarchical-cache: absent → set", Good: "absent", Bad: "set"},
	{Kind: "flag", Name: "--mem-fraction-static", Label: "--mem-fraction-static: absent → 0.85", Good: "absent", Bad: "0.85"},
	{Kind: "flag", Name: "--enable-metrics", Label: "--enable-metrics: absent → set", Good: "absent", Bad: "set"},
}

const (
	fixturePerLook = 40
	fixtureLooks   = 10
)

// recordBisection writes a bisection of the example's changes with the given steps and
// conclusion into a fresh database, every step an experiment as the orchestrator records
// one, and returns the database opened read-only.
func recordBisection(t *testing.T, steps []stepFixture, conclusion *store.BisectionConclusion) *sqlx.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	changes, _ := json.Marshal(exampleChanges)
	bid, lease, err := s.StartBisection(ctx, store.Bisection{Name: "tuesday-release", SpecPath: "examples/bisect/tuesday-release.yaml",
		Spec: "version: 1", Changes: string(changes), ErrorBudget: 0.05, Effect: 0.10, Looks: fixtureLooks, MaxSteps: 9, StepAlpha: 0.05 / 9,
		LaunchICC: 0.05, Sessions: fixturePerLook, Version: "test", Host: "h", Created: t0}, store.Owner{ID: "test", Host: "h", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	maxLoss := 0.1
	design, _ := json.Marshal(store.Design{Blocks: fixtureLooks, Looks: fixtureLooks, Sessions: fixturePerLook, Rounds: 2, Concurrency: fixturePerLook, MaxLoss: &maxLoss,
		Factors: []store.DesignFactor{{Name: "changes", Levels: []string{"good", "applied"}}}})
	w := s.NewWriter(store.WriterOptions{})
	for k, st := range steps {
		n := k + 1
		name := fmt.Sprintf("tuesday-release-b%d-s%02d", bid, n)
		applied, _ := json.Marshal(st.applied)
		if err := s.AddBisectionStep(ctx, store.BisectionStep{BisectionID: bid, Step: n, Role: st.role, Applied: string(applied), ExperimentName: name}); err != nil {
			t.Fatal(err)
		}
		exp, err := s.CreateExperiment(ctx, store.Experiment{Name: name, SpecPath: "examples/bisect/tuesday-release.yaml", Spec: "version: 1",
			Seed: 42, Unit: "session", Alpha: 0.05 / 9, Baseline: "changes=good", Version: "test", Host: "h", Created: t0, Design: string(design)})
		if err != nil {
			t.Fatal(err)
		}
		var armIDs [2]int64
		for i, lvl := range []string{"good", "applied"} {
			if armIDs[i], err = s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: "changes=" + lvl, Position: i, Pins: "{}",
				Levels: `{"changes":"` + lvl + `"}`, Command: "[]", Env: "{}"}); err != nil {
				t.Fatal(err)
			}
		}
		for b, counts := range st.blocks {
			for i := range 2 {
				runID, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: armIDs[i], Block: b, Runtime: "process", Status: "done", Started: t0})
				if err != nil {
					t.Fatal(err)
				}
				lost := 0
				if i == 1 {
					lost = st.lost
				}
				for si := range fixturePerLook {
					status := store.SessionOK
					if si >= fixturePerLook-lost {
						status = store.SessionTimeout
					}
					bad := si < counts[i]
					w.Turn(store.Turn{ExperimentID: exp, RunID: runID, ArmID: armIDs[i], Session: b*fixturePerLook + si, Index: 0, Started: t0,
						StatusCode: 200, FinishReason: "stop", Corrupted: bad, Request: "{}", Response: "{}"})
					w.Session(store.Session{ExperimentID: exp, RunID: runID, ArmID: armIDs[i], Index: b*fixturePerLook + si, Block: b,
						Status: status, Turns: 1, Corrupted: bad})
				}
			}
		}
		if st.outcome == stats.StepClean {
			s.StopEarly(ctx, exp, fmt.Sprintf("Stopped clean at look %d of %d.", len(st.blocks), fixtureLooks))
		}
		s.FinishExperiment(ctx, exp, store.ExperimentDone, "", t0.Add(time.Minute))
		if err := s.SetBisectionStep(ctx, bid, n, exp, string(st.outcome)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if conclusion != nil {
		c, _ := json.Marshal(conclusion)
		if err := lease.Finish(ctx, store.ExperimentDone, string(c), "", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A corrupting step's launches: every launch of the applied side corrupts 7 or 9 of its
// 40 sessions and good none, which the launch test shows at look 7, the first whose
// launches can reach the step's level. A clean step's launches corrupt nothing, which
// bounds the excess below the effect at look 6.
var (
	corruptBlocks = [][2]int{{0, 7}, {0, 9}, {0, 7}, {0, 9}, {0, 7}, {0, 9}, {0, 7}}
	cleanBlocks   = [][2]int{{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}
)

// The pair's bisection as refserve runs it: eight steps, each stopping as soon as its
// launches decide.
var pairSteps = []stepFixture{
	{"reproduce", []int{0, 1, 2, 3, 4, 5, 6, 7}, corruptBlocks, 0, stats.StepCorrupts},
	{"search", []int{0, 1, 2, 3}, cleanBlocks, 0, stats.StepClean},
	{"search", []int{0, 1, 2, 3, 4, 5}, corruptBlocks, 0, stats.StepCorrupts},
	{"search", []int{0, 1, 2, 3, 4}, cleanBlocks, 0, stats.StepClean},
	{"confirm", []int{5}, cleanBlocks, 0, stats.StepClean},
	{"search", []int{0, 1, 5}, corruptBlocks, 0, stats.StepCorrupts},
	{"search", []int{0, 5}, cleanBlocks, 0, stats.StepClean},
	{"confirm", []int{1, 5}, corruptBlocks, 0, stats.StepCorrupts},
}

// An undecided step: the applied side's launches scatter between 0 and 3 of 40, too few
// above good for the launch test and too many to bound the excess below the effect.
var undecidedBlocks = [][2]int{{0, 2}, {0, 0}, {0, 3}, {0, 0}, {0, 2}, {0, 0}, {0, 3}, {0, 0}, {0, 2}, {0, 0}}

func TestBisectionReportGolden(t *testing.T) {
	db := recordBisection(t, pairSteps, &store.BisectionConclusion{Status: "culprit", Culprit: []int{1, 5}, ConfirmedBy: 8,
		Reason: "Step 8 confirms the culprit.", Steps: 8})
	r, err := BuildBisection(context.Background(), db, bisectionOf(t, db, ""))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range r.Steps {
		if s.Judgement == nil || s.Judgement.Outcome != s.Recorded {
			t.Fatalf("step %d judged %+v, recorded %s", i+1, s.Judgement, s.Recorded)
		}
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, []byte(md.String()), filepath.Join("testdata", "bisect.golden.md"))
	head := strings.Join(r.Headline(), " ")
	for _, want := range []string{"The culprit is `BF16_INDEX_K: 0 → 1` and `--enable-hierarchical-cache: absent → set`, together: changes 2 and 6, neither of which corrupts without the other.",
		"Confirmed by step 8", "8 steps, 104 launches, 4160 sessions", "at most 5.0%"} {
		if !strings.Contains(head, want) {
			t.Errorf("headline %q does not say %q", head, want)
		}
	}
	sum := r.Summary()
	if sum["conclusion"] != "culprit" || fmt.Sprint(sum["culprit"]) != "[2 6]" {
		t.Errorf("summary %v", sum)
	}
}

func TestBisectionReportUncertainAndRunning(t *testing.T) {
	steps := []stepFixture{
		pairSteps[0], pairSteps[1],
		{"search", []int{0, 1, 2, 3, 4, 5}, undecidedBlocks, 0, stats.StepInconclusive},
	}
	db := recordBisection(t, steps, &store.BisectionConclusion{Status: "uncertain", Candidates: []int{4, 5, 6, 7}, StoppedAt: 3,
		Reason: "Step 3 (a search step) could not decide.", Steps: 3})
	r, err := BuildBisection(context.Background(), db, bisectionOf(t, db, "tuesday-release"))
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	r.Markdown(&md)
	for _, want := range []string{"No culprit named: step 3 (a search step) could not decide. Step 3: inconclusive after all 10 looks", "Its next member is among changes 5-8.",
		"Step 3 was inconclusive: inconclusive after all 10 looks: 12/400 against 0/400 over 10 and 10 launches", "=> stopped: no culprit named"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, md.String())
		}
	}
	// A bisection still running has no conclusion yet.
	db = recordBisection(t, pairSteps[:2], nil)
	r, err = BuildBisection(context.Background(), db, bisectionOf(t, db, ""))
	if err != nil {
		t.Fatal(err)
	}
	if h := strings.Join(r.Headline(), " "); !strings.Contains(h, "after 2 steps; `arbiter bisect --resume 1` continues it") {
		t.Errorf("headline of a running bisection: %s", h)
	}
}

func TestJudgeStep(t *testing.T) {
	d, err := stats.NewStepDesign(fixtureLooks, 0.05/9, 0.10, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	db := recordBisection(t, []stepFixture{
		pairSteps[0], // corrupts at look 7
		pairSteps[1], // clean at look 6
		// Five sessions of the applied arm lost in each block: 12.5%, above max_loss.
		{"search", []int{0, 1}, [][2]int{{0, 0}, {0, 0}}, 5, stats.StepInconclusive},
		{"search", []int{0, 1}, undecidedBlocks, 0, stats.StepInconclusive},
	}, nil)
	for i, want := range []struct {
		outcome stats.StepOutcome
		why     string
	}{{stats.StepCorrupts, ""}, {stats.StepClean, ""}, {stats.StepInconclusive, "lost 10 of 80 sessions"}, {stats.StepInconclusive, ""}} {
		j, err := JudgeStep(context.Background(), db, experimentOf(t, db, fmt.Sprintf("tuesday-release-b1-s%02d", i+1)), d)
		if err != nil {
			t.Fatal(err)
		}
		if j.Outcome != want.outcome || !strings.Contains(j.Why, want.why) || (want.why == "") != (j.Why == "") {
			t.Errorf("step %d: %s (%s), want %s (%s)", i+1, j.Outcome, j.Why, want.outcome, want.why)
		}
		if len(j.Blocks) != len(pairStepsBlocks(i)) {
			t.Errorf("step %d: %d looks", i+1, len(j.Blocks))
		}
	}
	if _, err := JudgeStep(context.Background(), db, 1<<40, d); err == nil {
		t.Error("judged an experiment that does not exist")
	}
}

func pairStepsBlocks(i int) [][2]int {
	return [][][2]int{pairSteps[0].blocks, pairSteps[1].blocks, {{}, {}}, undecidedBlocks}[i]
}

// Good's launches, which every step runs, check the clean bound's allowance for launches
// that differ: launches of good that scatter between 0 and 8 of 40 are flagged.
func TestBisectionReportChecksHowMuchGoodsLaunchesDiffer(t *testing.T) {
	scatter := [][2]int{{8, 8}, {0, 0}, {8, 8}, {0, 0}, {8, 8}, {0, 0}, {8, 8}, {0, 0}, {8, 8}, {0, 0}}
	db := recordBisection(t, []stepFixture{{"reproduce", []int{0, 1, 2, 3, 4, 5, 6, 7}, scatter, 0, stats.StepInconclusive}},
		&store.BisectionConclusion{Status: "uncertain", StoppedAt: 1, Reason: "Step 1 (the reproduction) could not decide.", Steps: 1})
	r, err := BuildBisection(context.Background(), db, bisectionOf(t, db, ""))
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	r.Markdown(&md)
	if !strings.Contains(md.String(), "good's 10 launches vary with an intra-launch correlation of") ||
		!strings.Contains(md.String(), "above the 0.05 the clean bound allows for") {
		t.Errorf("report does not flag good's scattered launches:\n%s", md.String())
	}
}

// A bisection recorded when steps decided on sessions (no launch_icc) is not judged again
// by launch rules it did not run under: the refusal says so, and where its steps are.
func TestBisectionRecordedOnSessionsIsNotRejudged(t *testing.T) {
	db := recordBisection(t, pairSteps[:1], nil)
	var path string
	if err := db.Get(&path, `SELECT file FROM pragma_database_list WHERE name = 'main'`); err != nil {
		t.Fatal(err)
	}
	rw, err := sqlx.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.Exec(`UPDATE bisections SET launch_icc = NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildBisection(context.Background(), db, bisectionOf(t, db, "")); err == nil || !strings.Contains(err.Error(), "decided on sessions") {
		t.Fatalf("judged a bisection recorded on sessions: %v", err)
	}
}

// bisectionOf is the id of the bisection ref names (empty: the newest).
func bisectionOf(t *testing.T, db *sqlx.DB, ref string) int64 {
	t.Helper()
	b, err := store.FindBisection(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	return b.ID
}

// experimentOf is the id of the newest experiment named name.
func experimentOf(t *testing.T, db *sqlx.DB, name string) int64 {
	t.Helper()
	e, err := store.FindExperiment(context.Background(), db, name)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID
}
