package verdict

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/store"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixture writes a recorded experiment into a real SQLite file: per arm, how many of its
// sessions are corrupted (in which round) and how many were lost.
type fixtureArm struct {
	name, pins        string
	sessions, lost    int
	corruptedByRound  []int // corrupted sessions whose first bad turn is in round r
	runStatus, runErr string
}

func writeFixture(t *testing.T, name string, arms []fixtureArm, rounds int) (*sqlx.DB, int64) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(filepath.Join(dir, "v.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: name, SpecPath: "examples/" + name + ".yaml", Spec: "version: 1",
		Seed: 42, Unit: "session", Alpha: 0.05, Baseline: arms[0].name, Version: "test", Host: "h", Created: t0})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(store.WriterOptions{})
	for ai, a := range arms {
		armID, err := s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: a.name, Position: ai, Pins: a.pins, Command: `["refserve"]`, Env: "{}"})
		if err != nil {
			t.Fatal(err)
		}
		start := t0.Add(time.Duration(ai) * time.Minute)
		runID, _ := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: armID, Runtime: "process", Status: "starting", Started: start})
		status := a.runStatus
		if status == "" {
			status = "done"
		}
		code := 0
		s.UpdateRun(ctx, store.Run{ID: runID, Status: store.RunStatus(status), Error: a.runErr, Started: start, Ready: start.Add(300 * time.Millisecond),
			Ended: start.Add(20 * time.Second), ExitCode: &code, ServerInfo: fmt.Sprintf(`{"version":"0.1","BF16_INDEX_K":"%d"}`, ai)})
		// Corrupted sessions come first, by round; then clean ones; then lost ones.
		var firstBad []int
		for r, n := range a.corruptedByRound {
			for i := 0; i < n; i++ {
				firstBad = append(firstBad, r)
			}
		}
		for si := 0; si < a.sessions+a.lost; si++ {
			lost := si >= a.sessions
			bad := -1
			if si < len(firstBad) {
				bad = firstBad[si]
			}
			turns := 0
			for r := 0; r < rounds; r++ {
				if lost && r > 0 {
					break
				}
				for k := 0; k < 2; k++ {
					corrupted := bad >= 0 && r >= bad && k == 1
					w.Turn(store.Turn{ExperimentID: exp, RunID: runID, ArmID: armID, Session: si, Index: turns, Round: r,
						Started: start.Add(time.Duration(turns) * time.Second), StatusCode: 200, FinishReason: "stop",
						TTFT: time.Duration(20+si%7) * time.Millisecond, Latency: time.Duration(120+si%11) * time.Millisecond,
						CompletionTokens: 40, Content: "ok", Corrupted: corrupted, Request: "{}", Response: "{}",
						Labels: []store.Label{{Detector: "dsml-leak", Corrupted: corrupted, Reason: map[bool]string{true: "deepseek-v4 markup in content: <｜DSML｜tool_calls>"}[corrupted]}}})
					turns++
				}
			}
			st := store.SessionOK
			if lost {
				st = store.SessionError
			}
			row := store.Session{ExperimentID: exp, RunID: runID, ArmID: armID, Index: si, Status: st, Turns: turns, Corrupted: bad >= 0}
			if bad >= 0 {
				ft := 2*bad + 1
				row.FirstCorruptedTurn = &ft
			}
			w.Session(row)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s.FinishExperiment(ctx, exp, "done", "", t0.Add(time.Hour))
	s.Close()
	db, err := store.OpenReadOnly(filepath.Join(dir, "v.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, exp
}

func decisiveFixture(t *testing.T) (*sqlx.DB, int64) {
	return writeFixture(t, "decisive", []fixtureArm{
		{name: "control", pins: `{"env":{"BF16_INDEX_K":"0"},"args":[]}`, sessions: 60},
		{name: "treatment", pins: `{"env":{"BF16_INDEX_K":"1"},"args":[]}`, sessions: 60, corruptedByRound: []int{1, 3, 3, 4}},
	}, 4)
}

func TestDecisiveVerdict(t *testing.T) {
	db, exp := decisiveFixture(t)
	v, err := Build(context.Background(), db, fmt.Sprint(exp))
	if err != nil {
		t.Fatal(err)
	}
	base, tr := v.Arms[0], v.Arms[1]
	if base.Corrupted != 0 || tr.Corrupted != 11 || tr.Sessions != 60 {
		t.Fatalf("counts: control %d/%d, treatment %d/%d", base.Corrupted, base.Sessions, tr.Corrupted, tr.Sessions)
	}
	c := tr.Compare
	// FACTS.md: 0/60 vs 11/60 gives a two-sided Fisher p of 6e-4.
	if c == nil || math.Abs(c.FisherP-6.0e-4) > 0.5e-4 || !c.Significant || c.Direction != "higher" {
		t.Fatalf("comparison = %+v", c)
	}
	if failed, _ := v.Gate("regression"); !failed {
		t.Error("regression gate passed on a significant regression")
	}
	if v.Responses == nil || !v.Responses.Available || v.Responses.FisherP >= c.FisherP {
		t.Errorf("response view = %+v: counting responses should look (wrongly) more certain", v.Responses)
	}
	var r4 RoundRow
	for _, r := range v.Rounds {
		if r.Round == 3 {
			r4 = r
		}
	}
	if r4.Corrupted[1] != 11 || r4.Sessions[1] != 60 {
		t.Errorf("round 4 of treatment: %d/%d, want every corrupted session, 11/60", r4.Corrupted[1], r4.Sessions[1])
	}
	checkGolden(t, v, "decisive")
}

func TestAAVerdictFindsNoDifferenceAndSaysWhatThatMeans(t *testing.T) {
	db, _ := writeFixture(t, "aa", []fixtureArm{
		{name: "a1", pins: `{"env":{"BF16_INDEX_K":"0"}}`, sessions: 60},
		{name: "a2", pins: `{"env":{"BF16_INDEX_K":"0"}}`, sessions: 58, lost: 2, runStatus: "crashed", runErr: "engine exited during the workload (exit code 139)"},
	}, 2)
	v, err := Build(context.Background(), db, "aa")
	if err != nil {
		t.Fatal(err)
	}
	c := v.Arms[1].Compare
	if c == nil || c.Significant || c.FisherP != 1 {
		t.Fatalf("A/A comparison = %+v, want p = 1, not significant", c)
	}
	for _, g := range []string{"regression", "difference", "corruption"} {
		if failed, why := v.Gate(g); failed {
			t.Errorf("gate %s failed on an A/A: %s", g, why)
		}
	}
	if failed, _ := v.Gate("loss"); !failed {
		t.Error("loss gate passed although a run crashed")
	}
	var md bytes.Buffer
	v.Markdown(&md)
	for _, want := range []string{"not the same as showing there is none", "crashed", "a2 2 of 60", "bounds its rate below"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("A/A verdict lacks %q", want)
		}
	}
}

func TestWriteFilesWritesChartsBesideTheMarkdown(t *testing.T) {
	db, exp := decisiveFixture(t)
	v, err := Build(context.Background(), db, fmt.Sprint(exp))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "out", "verdict.md")
	if err := v.WriteFiles(path); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(path)
	for _, chart := range []string{"verdict-rates.svg", "verdict-rounds.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, "out", chart))
		if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("treatment")) {
			t.Errorf("%s: %v (%d bytes)", chart, err, len(b))
		}
		if !bytes.Contains(md, []byte("("+chart+")")) {
			t.Errorf("markdown does not link %s", chart)
		}
	}
}

func TestBuildUnknownExperiment(t *testing.T) {
	db, _ := decisiveFixture(t)
	if _, err := Build(context.Background(), db, "no-such"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func checkGolden(t *testing.T, v *Verdict, name string) {
	t.Helper()
	var got bytes.Buffer
	if err := v.Markdown(&got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden.md")
	if *update {
		os.WriteFile(path, got.Bytes(), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./verdict -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("verdict differs from %s (go test ./verdict -update rewrites it):\n%s", path, got.String())
	}
}
