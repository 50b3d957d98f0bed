package bisect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// stopAt cancels a bisection part way through step n, once its experiment has recorded
// some sessions: as a Ctrl-C, or an arbiter killed, would leave it.
type stopAt struct {
	n, after int
	cancel   context.CancelFunc
	step     atomic.Int64
	sessions atomic.Int64
	once     sync.Once
}

func (s *stopAt) StepStarted(p Probe, _ string, _ int)          { s.step.Store(int64(p.Step)) }
func (s *stopAt) StepEnded(Probe, *verdict.StepJudgement, bool) {}
func (s *stopAt) RunStarted(string, int, int)                   {}
func (s *stopAt) RunEnded(string, int, store.RunStatus)         {}
func (s *stopAt) SessionDone(arm string, block int, _ store.SessionStatus, bad bool) {
	if s.step.Load() == int64(s.n) && s.sessions.Add(1) == int64(s.after) {
		s.once.Do(s.cancel)
	}
}

// The acceptance story on real refserve processes: the release of examples/bisect
// differs from the good configuration in 8 settings, and corrupts only through
// BF16_INDEX_K=1 together with --enable-hierarchical-cache. The bisection is stopped part
// way through its fourth step and resumed: it keeps the three steps it judged, resumes
// the fourth's experiment, and names exactly the pair, confirmed by a final A/B of good +
// the pair against good, in at most 12 steps.
func TestBisectNamesThePairOnRefserve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bisection of real refserve processes")
	}
	t.Parallel()
	const path = "../examples/bisect/tuesday-release.yaml"
	src, err := os.ReadFile(path)
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
	spec, err := arms.ParseBisect(path, []byte(withRefserve(t, paced)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "b.db")
	ctx, cancel := context.WithCancel(context.Background())
	stop := &stopAt{n: 4, after: 30, cancel: cancel}
	res, err := Run(ctx, Options{Spec: spec, DBPath: db, LogDir: filepath.Join(dir, "logs"), Logger: quiet(), Progress: stop, Runs: stop})
	if !errors.Is(err, context.Canceled) || res.Status != store.ExperimentInterrupted {
		t.Fatalf("stopped run: %v, status %s", err, res.Status)
	}
	if len(res.Steps) != 4 || res.Steps[3].Outcome != "" || res.Steps[3].ExperimentID == 0 {
		t.Fatalf("stopped after %d steps: %+v", len(res.Steps), res.Steps)
	}
	interrupted := res.Steps[3].ExperimentID

	res, err = Run(context.Background(), Options{Spec: spec, DBPath: db, LogDir: filepath.Join(dir, "logs"), Logger: quiet(), Resume: res.BisectionID})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Conclusion
	if c.Status != store.ConclusionCulprit || !slices.Equal(c.Culprit, []int{1, 5}) {
		t.Fatalf("conclusion %+v", c)
	}
	if spec.Changes[1].Label() != "BF16_INDEX_K: 0 → 1" || spec.Changes[5].Label() != "--enable-hierarchical-cache: absent → set" {
		t.Fatalf("changes 2 and 6 are %s and %s", spec.Changes[1].Label(), spec.Changes[5].Label())
	}
	if c.Steps > 12 || len(res.Steps) != c.Steps {
		t.Fatalf("%d steps (%d in the resumed run)", c.Steps, len(res.Steps))
	}
	confirm := res.Steps[c.ConfirmedBy-1]
	if confirm.Probe.Role != store.RoleConfirm || !slices.Equal(confirm.Probe.Changes, []int{1, 5}) || confirm.Outcome != "corrupts" {
		t.Fatalf("confirmation %+v", confirm)
	}
	for i, s := range res.Steps {
		if kept := i < 3; s.Kept != kept {
			t.Errorf("step %d kept = %v, want %v", i+1, s.Kept, kept)
		}
	}
	if res.Steps[3].ExperimentID != interrupted {
		t.Errorf("step 4 ran experiment %d, the interrupted one was %d", res.Steps[3].ExperimentID, interrupted)
	}
	t.Logf("culprit changes 2 and 6 in %d steps, confirmed by step %d: %s", c.Steps, c.ConfirmedBy, confirm.Sentence)

	// Every step is one experiment, linked to its bisection; none was run twice.
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var exps int
	if err := ro.Get(&exps, `SELECT count(*) FROM experiments`); err != nil {
		t.Fatal(err)
	}
	steps, err := store.BisectionSteps(context.Background(), ro, res.BisectionID)
	if err != nil {
		t.Fatal(err)
	}
	if exps != c.Steps || len(steps) != c.Steps {
		t.Fatalf("%d experiments and %d steps recorded for %d steps", exps, len(steps), c.Steps)
	}
	for _, st := range steps {
		if !st.ExperimentID.Valid || !st.Outcome.Valid || st.ExperimentName != ExperimentName("tuesday-release", res.BisectionID, st.Step) {
			t.Errorf("step %+v", st)
		}
	}
	// The report rebuilt from the database alone.
	r, err := verdict.BuildBisection(context.Background(), ro, res.BisectionID)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The culprit is `BF16_INDEX_K: 0 → 1` and `--enable-hierarchical-cache: absent → set`, together",
		"Confirmed by step 8", "## Search tree", "=> 6 (--enable-hierarchical-cache) belongs to the culprit",
		"=> 2 (BF16_INDEX_K) belongs to the culprit", "## The culprit and its confirming test", "## What remains uncertain"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report does not say %q:\n%s", want, md.String())
		}
	}
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
