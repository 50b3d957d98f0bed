package bisect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// withRefserve is a bisection spec's text with its engine run from a refserve built for
// the tests, by path: the tests run in parallel, so none changes $PATH.
func withRefserve(t *testing.T, src string) string {
	t.Helper()
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	out := strings.Replace(src, "preset: refserve", fmt.Sprintf("preset: refserve, command: [%q]", bin), 1)
	if strings.Contains(src, "engine:\n  preset: refserve\n") {
		out = strings.Replace(src, "engine:\n  preset: refserve\n", fmt.Sprintf("engine:\n  preset: refserve\n  command: [%q]\n", bin), 1)
	}
	if out == src {
		t.Fatal("the spec has no refserve engine to run from a path")
	}
	return out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The acceptance story on real refserve processes, as a user runs it: the release of
// examples/bisect differs from the good configuration in 8 settings, and corrupts only
// through BF16_INDEX_K=1 together with --enable-hierarchical-cache. arbiter bisect is
// interrupted (Ctrl-C) part way through its fourth step and resumed: it keeps the three
// steps it judged, resumes the fourth's experiment, and names exactly the pair, confirmed
// by a final A/B of good + the pair against good, in at most 12 steps. (The bisection
// runs in the built binary, not under the race detector: bisect.Run's own paths run
// in-process in the other tests here.)
func TestBisectNamesThePairOnRefserve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bisection of real refserve processes")
	}
	t.Parallel()
	arbiter := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	const example = "../examples/bisect/tuesday-release.yaml"
	src, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	// Tokens at half the example's pace: refserve's counts do not depend on it (its fault
	// model draws against the sessions it serves, never the clock), and rounds of 0.5 ms
	// tokens still outlast the start of 40 clients by far.
	paced := strings.Replace(string(src), "--inter-token-delay, 1ms", "--inter-token-delay, 500us", 1)
	if paced == string(src) {
		t.Fatal("the example no longer sets --inter-token-delay 1ms")
	}
	dir := t.TempDir()
	path, db, report := filepath.Join(dir, "tuesday-release.yaml"), filepath.Join(dir, "b.db"), filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(withRefserve(t, paced)), 0o644); err != nil {
		t.Fatal(err)
	}

	first := exec.Command(arbiter, "bisect", path, "--db", db)
	var firstErr bytes.Buffer
	first.Dir, first.Stderr = dir, &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { first.Wait(); close(exited) }()
	t.Cleanup(func() { first.Process.Kill(); <-exited })
	// Ctrl-C once step 4's experiment has recorded 30 sessions.
	step4 := ExperimentName("tuesday-release", 1, 4)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for sessionsOf(db, step4) < 30 {
		select {
		case <-exited:
			t.Fatalf("arbiter bisect ended (exit %d) before step 4 was under way:\n%s", first.ProcessState.ExitCode(), firstErr.String())
		case <-tick.C:
		}
	}
	first.Process.Signal(os.Interrupt)
	<-exited
	if code := first.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("arbiter bisect exited %d after Ctrl-C, want 130:\n%s", code, firstErr.String())
	}
	steps := bisectionSteps(t, db)
	if len(steps) != 4 || steps[3].Outcome.Valid || !steps[3].ExperimentID.Valid {
		t.Fatalf("stopped after %d steps: %+v", len(steps), steps)
	}
	interrupted := steps[3].ExperimentID.Int64

	resumed := exec.Command(arbiter, "bisect", "--resume", "1", "--db", db, "-o", report)
	var out, errb bytes.Buffer
	resumed.Dir, resumed.Stdout, resumed.Stderr = dir, &out, &errb
	if err := resumed.Run(); err != nil {
		t.Fatalf("arbiter bisect --resume: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	// The three judged steps are kept, the fourth is run on.
	for i := 1; i <= 4; i++ {
		if kept := strings.Contains(errb.String(), fmt.Sprintf("step %d (", i)) && strings.Contains(errb.String(), fmt.Sprintf("step %d (%s, recorded before the resume)", i, steps[i-1].Role)); kept != (i < 4) {
			t.Errorf("step %d kept = %v, want %v:\n%s", i, kept, i < 4, errb.String())
		}
	}

	summary := exec.Command(arbiter, "bisect", "--verdict", "1", "--db", db, "--json")
	js, err := summary.Output()
	var sum struct {
		Conclusion string `json:"conclusion"`
		Culprit    []int  `json:"culprit"`
		Confirmed  int    `json:"confirmed_by"`
		Steps      []struct {
			Role    store.StepRole `json:"role"`
			Outcome string         `json:"outcome"`
			Applied []int          `json:"applied"`
		} `json:"steps"`
	}
	if err != nil || json.Unmarshal(js, &sum) != nil {
		t.Fatalf("bisect --verdict --json: %v\n%s", err, js)
	}
	if sum.Conclusion != "culprit" || !slices.Equal(sum.Culprit, []int{2, 6}) || len(sum.Steps) > 12 || sum.Confirmed < 1 || sum.Confirmed > len(sum.Steps) {
		t.Fatalf("summary %+v; want changes 2 and 6 named and confirmed within 12 steps", sum)
	}
	if confirm := sum.Steps[sum.Confirmed-1]; confirm.Role != store.RoleConfirm || !slices.Equal(confirm.Applied, []int{2, 6}) || confirm.Outcome != "corrupts" {
		t.Fatalf("confirmation %+v", confirm)
	}
	t.Logf("culprit changes 2 and 6 in %d steps, confirmed by step %d", len(sum.Steps), sum.Confirmed)

	// Every step is one experiment, linked to its bisection; none was run twice, and the
	// fourth is the one the Ctrl-C interrupted.
	steps = bisectionSteps(t, db)
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var exps int
	if err := ro.Get(&exps, `SELECT count(*) FROM experiments`); err != nil {
		t.Fatal(err)
	}
	if exps != len(sum.Steps) || len(steps) != len(sum.Steps) {
		t.Fatalf("%d experiments and %d steps recorded for %d steps", exps, len(steps), len(sum.Steps))
	}
	if steps[3].ExperimentID.Int64 != interrupted {
		t.Errorf("step 4 ran experiment %d, the interrupted one was %d", steps[3].ExperimentID.Int64, interrupted)
	}
	for _, st := range steps {
		if !st.ExperimentID.Valid || !st.Outcome.Valid || st.ExperimentName != ExperimentName("tuesday-release", 1, st.Step) {
			t.Errorf("step %+v", st)
		}
	}
	// The report the resume wrote, and the one rebuilt from the database alone.
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	r, err := verdict.BuildBisection(context.Background(), ro, 1)
	if err != nil {
		t.Fatal(err)
	}
	var rebuilt strings.Builder
	if err := r.Markdown(&rebuilt); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{string(md), rebuilt.String()} {
		for _, want := range []string{"The culprit is `BF16_INDEX_K: 0 → 1` and `--enable-hierarchical-cache: absent → set`, together",
			fmt.Sprintf("Confirmed by step %d", sum.Confirmed), "## Search tree", "=> 6 (--enable-hierarchical-cache) belongs to the culprit",
			"=> 2 (BF16_INDEX_K) belongs to the culprit", "## The culprit and its confirming test", "## What remains uncertain"} {
			if !strings.Contains(text, want) {
				t.Errorf("report does not say %q:\n%s", want, text)
			}
		}
	}
}

// sessionsOf counts the sessions the experiment named recorded so far; 0 while the
// database or the experiment does not exist yet.
func sessionsOf(db, experiment string) int {
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		return 0
	}
	defer ro.Close()
	var n int
	ro.Get(&n, `SELECT count(*) FROM sessions s JOIN experiments e ON e.id = s.experiment_id WHERE e.name = ?`, experiment)
	return n
}

// bisectionSteps reads bisection 1's steps.
func bisectionSteps(t *testing.T, db string) []store.BisectionStep {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	steps, err := store.BisectionSteps(context.Background(), ro, 1)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

// A resume needs the bisection's own spec, and a done bisection has nothing to resume.
func TestBisectResumeRefusals(t *testing.T) {
	spec, err := arms.LoadBisect("../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "b.db")
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := Plan(spec)
	id, lease, err := st.StartBisection(context.Background(), store.Bisection{Name: spec.Name, SpecPath: spec.Path,
		Spec: "version: 1 # another spec", Changes: changesJSON(spec), MaxSteps: d.MaxSteps, StepAlpha: d.Step.Alpha}, store.ThisProcess())
	if err != nil {
		t.Fatal(err)
	}
	lease.Finish(context.Background(), store.ExperimentInterrupted, "", "", timeNow())
	st.Close()
	if _, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quiet(), Resume: id}); err == nil || !strings.Contains(err.Error(), "another spec") {
		t.Fatalf("resume with another spec: %v", err)
	}
	if _, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quiet(), Resume: id + 1}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("resume of an unknown bisection: %v", err)
	}
}

func timeNow() time.Time { return time.Now() }

// A change the engine refuses to start with leaves its step unjudgeable: the search
// stops there, says why, and names nothing.
func TestBisectStepWhoseEngineCannotStart(t *testing.T) {
	t.Parallel()
	src := `version: 1
name: bad-flag
engine: {preset: refserve, args: [--inter-token-delay, 1ms]}
good: {env: {BF16_INDEX_K: "0"}}
bad: {env: {BF16_INDEX_K: "1"}, args: [--no-such-flag]}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 6, seed: 1}
search: {effect: 0.1, error_budget: 0.4, looks: 3}
timeouts: {startup: 20s, request: 20s, stall: 10s}
`
	spec, err := arms.ParseBisect("bad-flag.yaml", []byte(withRefserve(t, src)))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "b.db")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Conclusion
	if res.Status != store.ExperimentDone || c.Status != store.ConclusionUncertain || c.StoppedAt != 1 || len(c.Culprit) != 0 {
		t.Fatalf("status %s, conclusion %+v", res.Status, c)
	}
	if !strings.Contains(res.Steps[0].Sentence, "no completed session") || res.Steps[0].Outcome != "inconclusive" {
		t.Fatalf("step 1: %s %s", res.Steps[0].Outcome, res.Steps[0].Sentence)
	}
}
