package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// refserveSpec is a four-arm spec whose engine is refserve, run as a real process by
// the default runtime, with the given runtime section.
func refserveSpec(t *testing.T, runtimeSection string, blocks int) *arms.Spec {
	t.Helper()
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	src := fmt.Sprintf(`version: 1
name: placement
engine:
  preset: refserve
  command: [%q]
  args: [--tool-call-parser, deepseekv4]
factors:
  k: {env: BF16_INDEX_K, levels: ["0", "1"]}
  hicache:
    off: {}
    on: {args: [--enable-hierarchical-cache]}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 6, seed: 5, temperature: 0}
detectors: [dsml-leak]
blocks: %d
timeouts: {startup: 60s, request: 30s, stall: 20s}
%s`, bin, blocks, runtimeSection)
	s, err := arms.Parse("placement.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// placedRun is a stored run with its placement and times.
type placedRun struct {
	Arm      string `db:"name"`
	Block    int    `db:"block"`
	Node     string `db:"node"`
	Slot     int    `db:"slot"`
	Wave     int    `db:"wave"`
	Instance string `db:"instance"`
	Status   string `db:"status"`
	Started  string `db:"started_at"`
	Ready    string `db:"ready_at"`
	WStart   string `db:"workload_started_at"`
	WEnd     string `db:"workload_ended_at"`
	Ended    string `db:"ended_at"`
}

func placedRuns(t *testing.T, db string, exp int64) []placedRun {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var rows []placedRun
	if err := ro.Select(&rows, `SELECT a.name, r.block, r.node, r.slot, r.wave, r.instance, r.status, r.started_at,
		coalesce(r.ready_at, '') AS ready_at, coalesce(r.workload_started_at, '') AS workload_started_at,
		coalesce(r.workload_ended_at, '') AS workload_ended_at, coalesce(r.ended_at, '') AS ended_at
		FROM runs r JOIN arms a ON a.id = r.arm_id WHERE r.experiment_id = ? ORDER BY r.id`, exp); err != nil {
		t.Fatal(err)
	}
	return rows
}

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("timestamp %q: %v", s, err)
	}
	return v
}

// noSlotServesTwo checks that the runs of one slot never overlap in time, from launch
// to end.
func noSlotServesTwo(t *testing.T, runs []placedRun) {
	t.Helper()
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.Node != b.Node || a.Slot != b.Slot {
				continue
			}
			if ts(t, a.Started).Before(ts(t, b.Ended)) && ts(t, b.Started).Before(ts(t, a.Ended)) {
				t.Errorf("slot %s/%d served %s (block %d) and %s (block %d) at once", a.Node, a.Slot, a.Arm, a.Block, b.Arm, b.Block)
			}
		}
	}
}

func TestFourArmsOnTwoNodesRunAtTheSameTime(t *testing.T) {
	t.Parallel()
	spec := refserveSpec(t, "runtime:\n  nodes:\n    - {name: node-a, slots: 2}\n    - {name: node-b, slots: 2}\n", 1)
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4", len(runs))
	}
	perNode := map[string]int{}
	slots := map[string]bool{}
	var lastStart, firstEnd time.Time
	for _, r := range runs {
		if r.Status != "done" || r.Wave != 0 || !strings.HasPrefix(r.Instance, "pid ") {
			t.Errorf("run %+v: want done, wave 0, a pid", r)
		}
		perNode[r.Node]++
		slots[fmt.Sprint(r.Node, r.Slot)] = true
		ready, ws, we := ts(t, r.Ready), ts(t, r.WStart), ts(t, r.WEnd)
		if ws.Before(ready) || we.Before(ws) || ts(t, r.Ended).Before(we) {
			t.Errorf("run %s: ready %s, workload %s to %s, ended %s out of order", r.Arm, r.Ready, r.WStart, r.WEnd, r.Ended)
		}
		if ws.After(lastStart) {
			lastStart = ws
		}
		if firstEnd.IsZero() || we.Before(firstEnd) {
			firstEnd = we
		}
	}
	if perNode["node-a"] != 2 || perNode["node-b"] != 2 || len(slots) != 4 {
		t.Errorf("placement: %v per node, %d distinct slots; want 2 and 2 on four slots", perNode, len(slots))
	}
	// The start barrier: every workload started before any ended, so all four windows
	// overlap.
	if !lastStart.Before(firstEnd) {
		t.Errorf("workload windows do not all overlap: last start %s, first end %s", lastStart, firstEnd)
	}
	// Every workload started after the last arm was ready.
	for _, r := range runs {
		for _, o := range runs {
			if ts(t, r.WStart).Before(ts(t, o.Ready)) {
				t.Errorf("%s started its workload at %s, before %s was ready at %s", r.Arm, r.WStart, o.Arm, o.Ready)
			}
		}
	}
	noSlotServesTwo(t, runs)
}

func TestFewerSlotsThanArmsRunInWaves(t *testing.T) {
	t.Parallel()
	spec := refserveSpec(t, "runtime:\n  nodes:\n    - {name: solo, slots: 2}\n", 2)
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	if len(runs) != 8 {
		t.Fatalf("%d runs, want 8", len(runs))
	}
	waves := map[[2]int][]placedRun{}
	for _, r := range runs {
		if r.Status != "done" {
			t.Errorf("run %+v not done", r)
		}
		k := [2]int{r.Block, r.Wave}
		waves[k] = append(waves[k], r)
	}
	for b := range 2 {
		first, second := waves[[2]int{b, 0}], waves[[2]int{b, 1}]
		if len(first) != 2 || len(second) != 2 {
			t.Fatalf("block %d: waves of %d and %d runs, want 2 and 2", b, len(first), len(second))
		}
		for _, f := range first {
			for _, s := range second {
				if !ts(t, f.Ended).Before(ts(t, s.Started)) {
					t.Errorf("block %d: %s of wave 1 started at %s, before %s of wave 0 ended at %s", b, s.Arm, s.Started, f.Arm, f.Ended)
				}
			}
		}
	}
	noSlotServesTwo(t, runs)
}

// A node that cannot be reached loses its runs (recorded lost, with the error) and gets
// no further arms; the experiment finishes on the other node.
func TestLostNodeLosesOnlyItsRuns(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "blocks: 2\nruntime:\n  nodes:\n    - {name: good}\n    - {name: gone}\n")
	db := filepath.Join(t.TempDir(), "a.db")
	good := engines(func(string) *engine { return newEngine(t, nil) })
	gone := runtimeFunc(func(context.Context, runtime.Launch) (runtime.Instance, error) {
		return nil, fmt.Errorf("docker runtime: no daemon answers at unix:///gone.sock (%w)", runtime.ErrNodeLost)
	})
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		NodeRuntime: oneNodeApart(good, "gone", gone)})
	if err != nil {
		t.Fatal(err)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	lost := 0
	for _, r := range runs {
		switch {
		case r.Node == "gone" && r.Status == "lost":
			lost++
		case r.Node == "good" && r.Status == "done":
		default:
			t.Errorf("run %+v", r)
		}
	}
	// Block 0 put one arm on each node and ran the lost one again on the good node, in
	// a second wave; block 1 ran both on the good node, in two waves.
	if lost != 1 || len(runs) != 5 {
		t.Errorf("%d runs, %d lost; want 5 and 1", len(runs), lost)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var lostRun struct {
		Error string `db:"error"`
		Arm   int64  `db:"arm_id"`
		By    int64  `db:"superseded_by"`
	}
	if err := ro.Get(&lostRun, `SELECT error, arm_id, superseded_by FROM runs WHERE status = 'lost'`); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lostRun.Error, "node gone") || !strings.Contains(lostRun.Error, "no daemon answers") {
		t.Errorf("lost run's error = %q", lostRun.Error)
	}
	var again struct {
		Arm   int64  `db:"arm_id"`
		Block int    `db:"block"`
		Node  string `db:"node"`
		Wave  int    `db:"wave"`
	}
	if err := ro.Get(&again, `SELECT arm_id, block, node, wave FROM runs WHERE id = ?`, lostRun.By); err != nil {
		t.Fatal(err)
	}
	if again.Arm != lostRun.Arm || again.Block != 0 || again.Node != "good" || again.Wave != 1 {
		t.Errorf("the lost run was replaced by %+v; want the same arm in block 0, wave 1, on node good", again)
	}
}

func TestEveryNodeLostFailsTheExperiment(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "")
	gone := runtimeFunc(func(context.Context, runtime.Launch) (runtime.Instance, error) {
		return nil, runtime.ErrNodeLost
	})
	_, err := Run(context.Background(), Options{Spec: spec, DBPath: filepath.Join(t.TempDir(), "a.db"), Logger: quietLogger(), Runtime: gone})
	if !errors.Is(err, ErrNoSlot) {
		t.Fatalf("err = %v, want ErrNoSlot", err)
	}
}

// An engine whose node goes away during the workload loses its run (recorded lost, with
// what the runtime said), and its arm runs again on the node still answering.
func TestNodeLostMidRunRunsTheArmAgainElsewhere(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "runtime:\n  nodes:\n    - {name: good}\n    - {name: flaky}\n")
	db := filepath.Join(t.TempDir(), "a.db")
	good := engines(func(string) *engine { return newEngine(t, nil) })
	flaky := engines(func(string) *engine {
		e := newEngine(t, func(n int64, e *engine, r *http.Request) bool {
			if n >= 3 {
				e.crash()
				panic(http.ErrAbortHandler)
			}
			return false
		})
		e.lost = "lost track of the container: Cannot connect to the Docker daemon"
		return e
	})
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		NodeRuntime: oneNodeApart(good, "flaky", flaky)})
	if err != nil {
		t.Fatal(err)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	var got []string
	for _, r := range runs {
		got = append(got, fmt.Sprintf("%s/%d %s", r.Node, r.Wave, r.Status))
	}
	if strings.Join(got, " ") != "good/0 done flaky/0 lost good/1 done" && strings.Join(got, " ") != "flaky/0 lost good/0 done good/1 done" {
		t.Errorf("runs = %v; want one lost on flaky and both arms done on good", got)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var why string
	ro.Get(&why, `SELECT error FROM runs WHERE status = 'lost'`)
	if !strings.Contains(why, "node flaky") || !strings.Contains(why, "Cannot connect to the Docker daemon") {
		t.Errorf("lost run's error = %q", why)
	}
}

// oneNodeApart gives the node named other its own runtime, and every other node good.
func oneNodeApart(good runtime.Runtime, other string, rt runtime.Runtime) func(*arms.Spec, arms.Node) (runtime.Runtime, error) {
	return func(_ *arms.Spec, n arms.Node) (runtime.Runtime, error) {
		if n.Name == other {
			return rt, nil
		}
		return good, nil
	}
}

// polledEngine is an engine whose end its runtime learns by polling, as Slurm's: Done
// closes only when Refresh (or the poll) looks and finds the engine gone.
type polledEngine struct {
	*engine
	seen chan struct{}
	once sync.Once
}

func (p *polledEngine) Done() <-chan struct{} { return p.seen }

func (p *polledEngine) Refresh(context.Context) {
	select {
	case <-p.engine.done:
		p.once.Do(func() { close(p.seen) })
	default:
	}
}

func (p *polledEngine) Stop(ctx context.Context) error {
	p.engine.Stop(ctx)
	p.once.Do(func() { close(p.seen) })
	return nil
}

// An engine whose node goes down after its health answered but before it took traffic
// (between readiness and the workload) is lost, not failed, although its runtime has not
// polled its end yet: the arm runs again elsewhere and the experiment finishes.
func TestNodeLostBetweenHealthAndTrafficRunsTheArmAgain(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"/v1/models", "/v1/chat/completions", "/get_server_info"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			spec := testSpec(t, "runtime:\n  nodes:\n    - {name: good}\n    - {name: flaky}\n")
			db := filepath.Join(t.TempDir(), "a.db")
			good := engines(func(string) *engine { return newEngine(t, nil) })
			flaky := runtimeFunc(func(context.Context, runtime.Launch) (runtime.Instance, error) {
				e := newEngine(t, nil)
				e.lost = "Slurm job 7 ended: NODE_FAIL on n1 (its node failed)"
				e.dieAt.Store(&at)
				return &polledEngine{engine: e, seen: make(chan struct{})}, nil
			})
			wantFlakyLost(t, spec, db, good, flaky, "NODE_FAIL on n1")
		})
	}
}

// goneEngine is a polled engine whose job ends under its workload: its first failFast
// requests after the readiness generation fail fast, the rest hang, and its runtime has not polled its end yet when the
// watchdog sees the streak of failures.
type goneEngine struct {
	*engine
	gone, seen chan struct{}
	goneOnce   sync.Once
	seenOnce   sync.Once
	stoppedOK  atomic.Bool // stopped before its end was seen
}

func newGoneEngine(t *testing.T, failFast int64) *goneEngine {
	g := &goneEngine{gone: make(chan struct{}), seen: make(chan struct{})}
	g.engine = newEngine(t, func(n int64, e *engine, r *http.Request) bool {
		if n == 1 {
			return false // the readiness generation, answered
		}
		if n <= 1+failFast {
			g.goneOnce.Do(func() { close(g.gone) })
			panic(http.ErrAbortHandler)
		}
		<-r.Context().Done()
		return true
	})
	return g
}

func (g *goneEngine) Done() <-chan struct{} { return g.seen }

func (g *goneEngine) Refresh(context.Context) {
	select {
	case <-g.gone:
		g.seenOnce.Do(func() { close(g.seen) })
	default:
	}
}

func (g *goneEngine) Exit() runtime.Exit {
	select {
	case <-g.seen:
	default:
		return runtime.Exit{}
	}
	if g.stoppedOK.Load() {
		return runtime.Exit{Stopped: true}
	}
	return runtime.Exit{Code: -1, Lost: "Slurm job 9 CANCELLED on n1: cancelled by scancel"}
}

// Stop before a look has seen the job end is arbiter's own cancel, as Slurm records it:
// a job cancelled twice ends CANCELLED either way.
func (g *goneEngine) Stop(ctx context.Context) error {
	select {
	case <-g.seen:
	default:
		g.stoppedOK.Store(true)
	}
	g.engine.Stop(ctx)
	g.seenOnce.Do(func() { close(g.seen) })
	return nil
}

// An engine whose job is cancelled under its running workload fails its requests fast
// before its runtime's poll has seen the job end. The watchdog's streak of failures is
// the engine's end, not an erroring engine: the launch is lost and runs again.
func TestAnEngineGoneUnderItsWorkloadIsLostNotErroring(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "runtime:\n  nodes:\n    - {name: good}\n    - {name: flaky}\n")
	db := filepath.Join(t.TempDir(), "a.db")
	good := engines(func(string) *engine { return newEngine(t, nil) })
	// As many requests fail fast as the streak limit (the concurrency); the sessions
	// after them hang, so the workload is still running when the watchdog looks.
	flaky := runtimeFunc(func(context.Context, runtime.Launch) (runtime.Instance, error) {
		return newGoneEngine(t, int64(spec.Workload.Concurrency)), nil
	})
	wantFlakyLost(t, spec, db, good, flaky, "cancelled by scancel")
}

// wantFlakyLost runs spec with the node named flaky on its own runtime and the other on
// good, and checks that the flaky node's launch was lost, with why in its error, and that
// both arms then finished on good.
func wantFlakyLost(t *testing.T, spec *arms.Spec, db string, good, flaky runtime.Runtime, why string) {
	t.Helper()
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		NodeRuntime: oneNodeApart(good, "flaky", flaky)})
	if err != nil {
		t.Fatal(err)
	}
	var lost, done int
	for _, r := range placedRuns(t, db, res.ExperimentID) {
		switch {
		case r.Node == "flaky" && r.Status == "lost":
			lost++
		case r.Node == "good" && r.Status == "done":
			done++
		default:
			t.Errorf("run %+v", r)
		}
	}
	if lost != 1 || done != 2 {
		t.Fatalf("%d lost, %d done; want the flaky node's run lost and both arms done on good", lost, done)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var got string
	ro.Get(&got, `SELECT error FROM runs WHERE status = 'lost'`)
	if !strings.Contains(got, "node flaky") || !strings.Contains(got, why) {
		t.Errorf("lost run's error = %q; want the node and %q", got, why)
	}
}
