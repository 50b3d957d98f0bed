//go:build linux

package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// dockerNodesSpec is the four-arm factorial (index-K dtype x HiCache) on the given
// engine and runtime lines: long enough a workload (12 sessions x 3 rounds) that a
// daemon can be stopped while it runs.
func dockerNodesSpec(t *testing.T, engine, runtimeSection string) *arms.Spec {
	t.Helper()
	src := fmt.Sprintf(`version: 1
name: docker-nodes
engine:
  preset: refserve
%s
  args: [--tool-call-parser, deepseekv4]
factors:
  k: {env: BF16_INDEX_K, levels: ["0", "1"]}
  hicache:
    off: {}
    on: {args: [--enable-hierarchical-cache]}
workload: {kind: toolcall-agent, sessions: 12, rounds: 3, concurrency: 12, seed: 5, temperature: 0}
detectors: [dsml-leak]
timeouts: {startup: 60s, request: 30s, stall: 20s}
%s`, engine, runtimeSection)
	s, err := arms.Parse("docker-nodes.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func twoDaemonRuntime(ds []*dockertest.Daemon) string {
	var b strings.Builder
	b.WriteString("runtime:\n  kind: docker\n  nodes:\n")
	for _, d := range ds {
		fmt.Fprintf(&b, "    - {name: %s, host: %q, slots: 2, network: host}\n", d.Name, d.Host)
	}
	return b.String()
}

// seenContainer is what the Engine API said of one arm's container while it ran.
type seenContainer struct {
	node   string
	env    []string
	cmd    []string
	labels map[string]string
}

// containerWatch hears the experiment's progress; when a run starts its workload, it
// asks every daemon, through the Engine API, for the containers that run then. Each
// run's container is there at its own start, so every one is seen. at, when set, is
// called at the nth workload start.
type containerWatch struct {
	t       *testing.T
	daemons []*dockertest.Daemon

	mu      sync.Mutex
	started int
	seen    map[string]seenContainer // by run id
	at      func(n int)
}

func (w *containerWatch) RunStarted(string, int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started++
	for _, d := range w.daemons {
		if !d.Running() {
			continue
		}
		cli, err := client.New(client.WithHost(d.Host))
		if err != nil {
			w.t.Error(err)
			continue
		}
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{})
		if err != nil {
			w.t.Errorf("%s: list containers: %v", d.Name, err)
		}
		for _, c := range list.Items {
			insp, err := cli.ContainerInspect(context.Background(), c.ID, client.ContainerInspectOptions{})
			if err != nil {
				continue // ended since the list
			}
			cfg := insp.Container.Config
			w.seen[cfg.Labels[runtime.LabelRun]] = seenContainer{node: d.Name, env: cfg.Env,
				cmd: slices.Concat(cfg.Entrypoint, cfg.Cmd), labels: cfg.Labels}
		}
		cli.Close()
	}
	if w.at != nil {
		w.at(w.started)
	}
}

func (w *containerWatch) SessionDone(string, int, store.SessionStatus, bool) {}
func (w *containerWatch) RunEnded(string, int, store.RunStatus)              {}

// armCounts are each arm's analysed and corrupted sessions as the verdict counts them.
func verdictCounts(t *testing.T, db string, exp int64) (map[string][2]int, string) {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	v, err := verdict.Build(context.Background(), ro, exp)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int{}
	for _, a := range v.Arms {
		out[a.Name] = [2]int{a.Sessions, a.Corrupted}
	}
	var md bytes.Buffer
	if err := v.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	return out, md.String()
}

// The acceptance of running arms across Docker nodes: four arms on two daemons of two
// slots each run at the same time, one per slot, each container carrying exactly its
// arm's pins (as the Engine API reports them), with the counts and verdict that the
// same experiment gives on one node.
func TestFourArmsOnTwoDockerDaemons(t *testing.T) {
	t.Parallel()
	ds := dockertest.Start(t, 2)
	image := dockertest.RefserveImage(t, ds...)
	spec := dockerNodesSpec(t, "  image: "+image, twoDaemonRuntime(ds))
	db := filepath.Join(t.TempDir(), "docker.db")
	watch := &containerWatch{t: t, daemons: ds, seen: map[string]seenContainer{}}
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir(), Progress: watch})
	if err != nil {
		t.Fatal(err)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4", len(runs))
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	var ids []struct {
		ID  int64  `db:"id"`
		Arm string `db:"name"`
	}
	if err := ro.Select(&ids, `SELECT r.id, a.name FROM runs r JOIN arms a ON a.id = r.arm_id ORDER BY r.id`); err != nil {
		t.Fatal(err)
	}
	ro.Close()
	armList, _ := spec.Expand()
	pins := map[string]arms.Arm{}
	for _, a := range armList {
		pins[a.Name] = a
	}
	perNode, slots := map[string]int{}, map[string]bool{}
	lastStart, firstEnd := ts(t, runs[0].WStart), ts(t, runs[0].WEnd)
	for i, r := range runs {
		if r.Status != "done" || r.Wave != 0 || !strings.HasPrefix(r.Instance, "container ") {
			t.Errorf("run %+v: want done, wave 0, a container", r)
		}
		perNode[r.Node]++
		slots[fmt.Sprint(r.Node, "/", r.Slot)] = true
		if ws := ts(t, r.WStart); ws.After(lastStart) {
			lastStart = ws
		}
		if we := ts(t, r.WEnd); we.Before(firstEnd) {
			firstEnd = we
		}
		// What the daemon itself held for this run.
		c, ok := watch.seen[strconv.FormatInt(ids[i].ID, 10)]
		if !ok {
			t.Errorf("run %d (%s): no container of it was seen on any daemon", ids[i].ID, r.Arm)
			continue
		}
		if c.node != r.Node {
			t.Errorf("run %s: recorded on %s, but its container ran on %s", r.Arm, r.Node, c.node)
		}
		if c.labels[runtime.LabelManaged] != "1" || c.labels[runtime.LabelExperiment] != strconv.FormatInt(res.ExperimentID, 10) {
			t.Errorf("run %s: labels %v", r.Arm, c.labels)
		}
		a := pins[r.Arm]
		var got []string
		for _, e := range c.env {
			if strings.HasPrefix(e, "BF16_INDEX_K=") {
				got = append(got, e)
			}
		}
		if want := "BF16_INDEX_K=" + a.Pins.Env["BF16_INDEX_K"]; len(got) != 1 || got[0] != want {
			t.Errorf("run %s: container env has %v, want exactly %s", r.Arm, got, want)
		}
		hicache := slices.Contains(c.cmd, "--enable-hierarchical-cache")
		if want := a.Levels["hicache"] == "on"; hicache != want {
			t.Errorf("run %s: container command %v; HiCache flag present %v, want %v", r.Arm, c.cmd, hicache, want)
		}
		if c.cmd[0] != "refserve" || !slices.Contains(c.cmd, "--tool-call-parser") {
			t.Errorf("run %s: container command %v lacks the engine's own", r.Arm, c.cmd)
		}
	}
	if perNode[ds[0].Name] != 2 || perNode[ds[1].Name] != 2 || len(slots) != 4 {
		t.Errorf("placement: %v per node on %d slots; want two per daemon on four slots", perNode, len(slots))
	}
	if !lastStart.Before(firstEnd) {
		t.Errorf("workload windows do not all overlap: last start %s, first end %s", lastStart, firstEnd)
	}
	noSlotServesTwo(t, runs)

	// The same experiment on one node, arm after arm, as local processes: the same
	// counts and the same judgement.
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	one := dockerNodesSpec(t, fmt.Sprintf("  command: [%q]", bin), "")
	oneDB := filepath.Join(t.TempDir(), "one.db")
	oneRes, err := Run(context.Background(), Options{Spec: one, DBPath: oneDB, Logger: quietLogger(), GPULockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got, md := verdictCounts(t, db, res.ExperimentID)
	want, oneMD := verdictCounts(t, oneDB, oneRes.ExperimentID)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("per arm (analysed, corrupted): %v on two daemons, %v on one node", got, want)
	}
	if h, oneH := firstLine(md, "**"), firstLine(oneMD, "**"); h != oneH {
		t.Errorf("headline on two daemons:\n%s\non one node:\n%s", h, oneH)
	}
}

// firstLine is the first line of text that starts with prefix.
func firstLine(text, prefix string) string {
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// A daemon stopped while its arms run loses those runs (recorded lost, with the
// node's error); the other daemon's arms finish, the lost arms run again there, and the
// verdict shows the lost runs.
func TestStoppedDaemonLosesItsRuns(t *testing.T) {
	t.Parallel()
	ds := dockertest.Start(t, 2)
	image := dockertest.RefserveImage(t, ds...)
	spec := dockerNodesSpec(t, "  image: "+image, twoDaemonRuntime(ds))
	// Workloads of several seconds: node-0's arms must still be running when their daemon
	// goes away, however long a loaded host takes to start the last arm.
	spec.Engine.Args = append(spec.Engine.Args, "--inter-token-delay", "20ms")
	db := filepath.Join(t.TempDir(), "docker.db")
	watch := &containerWatch{t: t, daemons: ds, seen: map[string]seenContainer{}, at: func(n int) {
		if n == 4 {
			// Every arm's workload has started: node-0 goes away under two of them.
			ds[0].Kill()
		}
	}}
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir(), Progress: watch})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != store.ExperimentDone {
		t.Errorf("experiment %s, want done", res.Status)
	}
	runs := placedRuns(t, db, res.ExperimentID)
	lost, doneOn1, again := 0, 0, 0
	for _, r := range runs {
		switch {
		case r.Node == ds[0].Name && r.Status == "lost" && r.Wave == 0:
			lost++
		case r.Node == ds[1].Name && r.Status == "done" && r.Wave == 0:
			doneOn1++
		case r.Node == ds[1].Name && r.Status == "done" && r.Wave > 0:
			again++
		default:
			t.Errorf("run %+v", r)
		}
	}
	if lost != 2 || doneOn1 != 2 || again != 2 {
		t.Errorf("%d lost on %s, %d done on %s, %d run again; want 2, 2 and 2", lost, ds[0].Name, doneOn1, ds[1].Name, again)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	if err := ro.Select(&errs, `SELECT error FROM runs WHERE status = 'lost'`); err != nil {
		t.Fatal(err)
	}
	ro.Close()
	for _, e := range errs {
		if !strings.Contains(e, "node "+ds[0].Name) || !strings.Contains(e, "node unreachable") {
			t.Errorf("lost run's error = %q; want the node and why", e)
		}
	}
	counts, md := verdictCounts(t, db, res.ExperimentID)
	for arm, c := range counts {
		if c[0] != 12 {
			t.Errorf("arm %s: %d sessions analysed, want all 12 (the lost runs' replacements count)", arm, c[0])
		}
	}
	if n := len(regexp.MustCompile(`(?m)^\|.*\| lost \|.*node `+ds[0].Name+`:`).FindAllString(md, -1)); n != 2 {
		t.Errorf("the verdict's runs show %d lost runs, want 2:\n%s", n, md)
	}
}
