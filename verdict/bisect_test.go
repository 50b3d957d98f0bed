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
	role    string
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

const fixturePerLook = 40

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
		Spec: "version: 1", Changes: string(changes), ErrorBudget: 0.05, Effect: 0.10, Looks: 3, MaxSteps: 9, StepAlpha: 0.05 / 9,
		Sessions: fixturePerLook, Version: "test", Host: "h", Created: t0}, store.Owner{ID: "test", Host: "h", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	maxLoss := 0.1
	design, _ := json.Marshal(store.Design{Blocks: 3, Looks: 3, Sessions: fixturePerLook, Rounds: 2, Concurrency: fixturePerLook, MaxLoss: &maxLoss,
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
			s.StopEarly(ctx, exp, "Stopped clean at look 2 of 3.")
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

// The pair's bisection as refserve runs it: eight steps, each stopping at its second look.
var pairSteps = []stepFixture{
	{"reproduce", []int{0, 1, 2, 3, 4, 5, 6, 7}, [][2]int{{0, 7}, {0, 9}}, 0, stats.StepCorrupts},
	{"search", []int{0, 1, 2, 3}, [][2]int{{0, 0}, {0, 0}}, 0, stats.StepClean},
	{"search", []int{0, 1, 2, 3, 4, 5}, [][2]int{{0, 7}, {0, 9}}, 0, stats.StepCorrupts},
	{"search", []int{0, 1, 2, 3, 4}, [][2]int{{0, 0}, {0, 0}}, 0, stats.StepClean},
	{"confirm", []int{5}, [][2]int{{0, 0}, {0, 0}}, 0, stats.StepClean},
	{"search", []int{0, 1, 5}, [][2]int{{0, 7}, {0, 9}}, 0, stats.StepCorrupts},
	{"search", []int{0, 5}, [][2]int{{0, 0}, {0, 0}}, 0, stats.StepClean},
	{"confirm", []int{1, 5}, [][2]int{{0, 7}, {0, 9}}, 0, stats.StepCorrupts},
}

func TestBisectionReportGolden(t *testing.T) {
	db := recordBisection(t, pairSteps, &store.BisectionConclusion{Status: "culprit", Culprit: []int{1, 5}, ConfirmedBy: 8,
		Reason: "Step 8 confirms the culprit.", Steps: 8})
	r, err := BuildBisection(context.Background(), db, "")
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
		"Confirmed by step 8", "8 steps, 1280 sessions", "at most 5.0%"} {
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
		{"search", []int{0, 1, 2, 3, 4, 5}, [][2]int{{0, 1}, {0, 1}, {0, 2}}, 0, stats.StepInconclusive},
	}
	db := recordBisection(t, steps, &store.BisectionConclusion{Status: "uncertain", Candidates: []int{4, 5, 6, 7}, StoppedAt: 3,
		Reason: "Step 3 (a search step) could not decide.", Steps: 3})
	r, err := BuildBisection(context.Background(), db, "tuesday-release")
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	r.Markdown(&md)
	for _, want := range []string{"No culprit named: step 3 (a search step) could not decide. Step 3: inconclusive after all 3 looks", "Its next member is among changes 5-8.",
		"Step 3 was inconclusive: inconclusive after all 3 looks: 4/120 against 0/120", "=> stopped: no culprit named"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, md.String())
		}
	}
	// A bisection still running has no conclusion yet.
	db = recordBisection(t, pairSteps[:2], nil)
	r, err = BuildBisection(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	if h := strings.Join(r.Headline(), " "); !strings.Contains(h, "after 2 steps; `arbiter bisect --resume 1` continues it") {
		t.Errorf("headline of a running bisection: %s", h)
	}
}

func TestJudgeStep(t *testing.T) {
	d, err := stats.NewStepDesign(3, 0.05/9, 0.10)
	if err != nil {
		t.Fatal(err)
	}
	db := recordBisection(t, []stepFixture{
		pairSteps[0], // corrupts at look 2
		pairSteps[1], // clean at look 2
		// Five sessions of the applied arm lost in each block: 12.5%, above max_loss.
		{"search", []int{0, 1}, [][2]int{{0, 0}, {0, 0}}, 5, stats.StepInconclusive},
		{"search", []int{0, 1}, [][2]int{{0, 1}, {0, 1}, {0, 2}}, 0, stats.StepInconclusive},
	}, nil)
	for i, want := range []struct {
		outcome stats.StepOutcome
		why     string
	}{{stats.StepCorrupts, ""}, {stats.StepClean, ""}, {stats.StepInconclusive, "lost 10 of 80 sessions"}, {stats.StepInconclusive, ""}} {
		j, err := JudgeStep(context.Background(), db, fmt.Sprintf("tuesday-release-b1-s%02d", i+1), d)
		if err != nil {
			t.Fatal(err)
		}
		if j.Outcome != want.outcome || !strings.Contains(j.Why, want.why) || (want.why == "") != (j.Why == "") {
			t.Errorf("step %d: %s (%s), want %s (%s)", i+1, j.Outcome, j.Why, want.outcome, want.why)
		}
		if len(j.Looks) != len(pairStepsBlocks(i)) {
			t.Errorf("step %d: %d looks", i+1, len(j.Looks))
		}
	}
	if _, err := JudgeStep(context.Background(), db, "no-such-step", d); err == nil {
		t.Error("judged an experiment that does not exist")
	}
}

func pairStepsBlocks(i int) [][2]int {
	return [][][2]int{pairSteps[0].blocks, pairSteps[1].blocks, {{}, {}}, {{}, {}, {}}}[i]
}
