//go:build linux

package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// experimentContainers lists, through the Engine API, the containers of experiment 1
// on a daemon: all of them, or the running ones.
func experimentContainers(t *testing.T, cli *client.Client, running bool) []string {
	t.Helper()
	f := client.Filters{}.Add("label", runtime.LabelExperiment+"=1")
	if running {
		f.Add("status", "running")
	}
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: !running, Filters: f})
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// slotWatch asks the daemon, as every launch of the resume is about to start in the
// node's one slot, which containers of the experiment run there.
type slotWatch struct {
	t   *testing.T
	cli *client.Client

	mu       sync.Mutex
	launches int
	running  [][]string // per launch, the experiment's containers running at its start
}

func (w *slotWatch) EngineStarting(LaunchInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.launches++
	w.running = append(w.running, experimentContainers(w.t, w.cli, true))
}
func (w *slotWatch) RunStarted(string, int, int)                        {}
func (w *slotWatch) SessionDone(string, int, store.SessionStatus, bool) {}
func (w *slotWatch) RunEnded(string, int, store.RunStatus)              {}
func (w *slotWatch) EngineReady(string, int)                            {}
func (w *slotWatch) EngineFailed(string, int, string, string)           {}
func (w *slotWatch) EngineRefused(string, int, string)                  {}
func (w *slotWatch) TurnDone(string, int, int)                          {}

// An arbiter killed with SIGKILL mid-experiment leaves its engine's container running:
// nothing of it is left to stop it. `resume` removes it, and every container of the
// experiment that the killed arbiter left, before any launch takes the slot: the slot's
// GPUs (its one engine at a time) are never held by the old engine and the new one.
func TestResumeRemovesTheContainersOfAKilledArbiter(t *testing.T) {
	t.Parallel()
	ds := dockertest.Start(t, 1)
	image := dockertest.RefserveImage(t, ds...)
	arbiter := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	dir := t.TempDir()
	specPath := filepath.Join(dir, "spec.yaml")
	src := fmt.Sprintf(`version: 1
name: killed-docker
engine:
  preset: refserve
  image: %s
  args: [--tool-call-parser, deepseekv4, --inter-token-delay, 20ms]
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 6, seed: 3, temperature: 0}
detectors: [dsml-leak]
timeouts: {startup: 60s, request: 30s, stall: 20s}
runtime:
  kind: docker
  nodes:
    - {name: %s, host: %q, slots: 1, network: host}
`, image, ds[0].Name, ds[0].Host)
	if err := os.WriteFile(specPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "a.db")
	cli, err := client.New(client.WithHost(ds[0].Host))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// The first arbiter runs until its first engine's container runs, and is killed.
	var out bytes.Buffer
	first := exec.Command(arbiter, "run", specPath, "--db", db)
	first.Env = append(os.Environ(), "ARBITER_GPU_LOCK_DIR="+t.TempDir())
	first.Stdout, first.Stderr = &out, &out
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var left []string
	for deadline := time.Now().Add(90 * time.Second); len(left) == 0; {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatalf("no container of the experiment ran within 90s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
		left = experimentContainers(t, cli, true)
	}
	first.Process.Kill()
	first.Wait()
	time.Sleep(time.Second) // long enough for anything that would end the container to act
	if running := experimentContainers(t, cli, true); len(running) != 1 || running[0] != left[0] {
		t.Fatalf("after the kill, containers %v run; the test needs the killed arbiter's %v still running", running, left)
	}

	spec, err := arms.Load(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	watch := &slotWatch{t: t, cli: cli}
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: logger, Resume: 1, Progress: watch,
		GPULockDir: t.TempDir()})
	if err != nil || res.Status != store.ExperimentDone {
		t.Fatalf("resume: %v, %s\n%s", err, res.Status, logs.String())
	}
	if watch.launches == 0 {
		t.Fatal("the resume launched nothing")
	}
	for i, running := range watch.running {
		if len(running) != 0 {
			t.Errorf("launch %d of the resume started in the node's one slot while containers %v of the experiment ran there (the killed arbiter's: %v)",
				i+1, running, left)
		}
	}
	_, err = cli.ContainerInspect(context.Background(), left[0], client.ContainerInspectOptions{})
	if !cerrdefs.IsNotFound(err) {
		t.Errorf("the killed arbiter's container %s is still there after the resume (inspect: %v)", left[0], err)
	}
	if all := experimentContainers(t, cli, false); len(all) != 0 {
		t.Errorf("containers %v of the experiment remain after the resume", all)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "removed a container a killed arbiter left") {
		t.Errorf("the resume did not say what it removed:\n%s", logs.String())
	}
}
