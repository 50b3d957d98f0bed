package bisect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
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
