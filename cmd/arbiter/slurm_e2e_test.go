package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/slurmtest"
	"github.com/arbiterlab/arbiter/store"
)

// slurmSpec turns the quickstart into a spec for the slurm runtime: one GPU per arm, on
// the test cluster's partition; extra is appended (blocks, a smaller workload).
func slurmSpec(t *testing.T, c *slurmtest.Cluster, extra string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The quickstart's own runtime block (local slots) gives way to the cluster's.
	var kept []string
	inRuntime := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "runtime:") {
			inRuntime = true
			continue
		}
		if inRuntime && (strings.HasPrefix(line, " ") || line == "") {
			continue
		}
		inRuntime = false
		kept = append(kept, line)
	}
	spec := strings.Replace(strings.Join(kept, "\n"), "engine:\n", "engine:\n  gpus: 1\n", 1)
	spec += "\nruntime: {kind: slurm, partition: " + c.Partition + ", time: \"10:00\"}\n" + extra
	path := filepath.Join(t.TempDir(), "slurm.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// jobWatch records, while jobs run, what Slurm itself says each arbiter job was given:
// `scontrol show job -d` (node, GPU indices) and the batch script Slurm keeps (the pins).
type jobWatch struct {
	mu      sync.Mutex
	show    map[string]string // job name -> scontrol show job -d -o
	script  map[string]string // job name -> batch script
	stop    chan struct{}
	stopped chan struct{}
}

func watchJobs(c *slurmtest.Cluster) *jobWatch {
	w := &jobWatch{show: map[string]string{}, script: map[string]string{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		ctx := context.Background()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			out, _ := c.Command(ctx, "squeue", "-h", "-t", "RUNNING", "-o", "%i|%j")
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				id, name, ok := strings.Cut(line, "|")
				if !ok || !strings.HasPrefix(name, "arbiter-") {
					continue
				}
				w.mu.Lock()
				_, seen := w.script[name]
				w.mu.Unlock()
				if seen {
					continue
				}
				show, err1 := c.Command(ctx, "scontrol", "show", "job", "-d", "-o", id)
				script, err2 := c.Command(ctx, "scontrol", "write", "batch_script", id, "-")
				if err1 != nil || err2 != nil {
					continue
				}
				w.mu.Lock()
				w.show[name], w.script[name] = show, script
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *jobWatch) close() { close(w.stop); <-w.stopped }

type runRow struct {
	Arm    string `db:"arm"`
	Block  int    `db:"block"`
	Status string `db:"status"`
	Node   string `db:"node"`
	GPUs   string `db:"gpus"`
	Error  string `db:"error"`
	Super  bool   `db:"superseded"`
}

func readRuns(t *testing.T, db string) (string, []runRow) {
	t.Helper()
	id, rows, err := tryReadRuns(db)
	if err != nil {
		t.Fatal(err)
	}
	return id, rows
}

func tryReadRuns(db string) (string, []runRow, error) {
	x, err := store.OpenReadOnly(db)
	if err != nil {
		return "", nil, err
	}
	defer x.Close()
	id, err := store.DatabaseID(context.Background(), x)
	if err != nil {
		return "", nil, err
	}
	var rows []runRow
	err = x.Select(&rows, `SELECT a.name AS arm, r.block, r.status, r.node, r.gpus, coalesce(r.error, '') AS error,
		r.superseded_by IS NOT NULL AS superseded FROM runs r JOIN arms a ON a.id = r.arm_id ORDER BY r.id`)
	return id, rows, err
}

// TestSlurmQuickstart runs the quickstart A/B as Slurm jobs on a real cluster of two
// nodes in their own network namespaces, and checks through Slurm's own records that
// each arm's job ran where arbiter recorded it, with its pins and its GPU.
func TestSlurmQuickstart(t *testing.T) {
	t.Parallel()
	c := slurmtest.Start(t, slurmtest.Options{})
	buildRefserve(t)
	db := filepath.Join(t.TempDir(), "arbiter.db")
	w := watchJobs(c)
	code, stdout, stderr := runBinary(t, c.Env(), "run", slurmSpec(t, c, ""), "--db", db)
	w.close()
	if code != 0 {
		t.Fatalf("arbiter run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	dbID, runs := readRuns(t, db)
	if len(runs) != 2 {
		t.Fatalf("runs: %+v", runs)
	}
	jobs, err := c.Completions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]string{"control": "export BF16_INDEX_K='0'", "treatment": "export BF16_INDEX_K='1'"}
	// Both arms of the block ran at once: Slurm must have given them different GPUs.
	if runs[0].Node == runs[1].Node && runs[0].GPUs == runs[1].GPUs {
		t.Errorf("both arms ran on %s GPU %s", runs[0].Node, runs[0].GPUs)
	}
	for _, r := range runs {
		name := "arbiter-" + store.ShortID(dbID) + "-exp1-" + r.Arm + "-b0"
		w.mu.Lock()
		show, script := w.show[name], w.script[name]
		w.mu.Unlock()
		if r.Status != "done" || r.Node == "" || (r.GPUs != "0" && r.GPUs != "1") {
			t.Errorf("run %+v; want done on a node of the cluster, with one of its two GPUs", r)
		}
		if !strings.Contains(show, " BatchHost="+r.Node+" ") || !strings.Contains(show, "GRES=gpu:1(IDX:"+r.GPUs+")") {
			t.Errorf("%s: Slurm says %q; arbiter recorded node %s, GPUs %s", name, show, r.Node, r.GPUs)
		}
		if !strings.Contains(script, pins[r.Arm]) || !strings.Contains(script, "'--enable-hierarchical-cache'") {
			t.Errorf("%s: batch script lacks the arm's pins:\n%s", name, script)
		}
		found := false
		for _, j := range jobs {
			if j["JobName"] == name {
				found = true
				if j["NodeList"] != r.Node {
					t.Errorf("%s: sacct -c says node %s, arbiter recorded %s", name, j["NodeList"], r.Node)
				}
			}
		}
		if !found {
			t.Errorf("%s not in Slurm's job completions: %v", name, jobs)
		}
	}
	// The verdict's Runs section shows where each job ran and how long it queued.
	_, path, _ := strings.Cut(stdout, "verdict: ")
	verdict, err := os.ReadFile(strings.TrimSpace(path))
	if err != nil {
		t.Fatalf("no verdict file (%v) in:\n%s", err, stdout)
	}
	for _, r := range runs {
		if cell := r.Node + "/"; !strings.Contains(string(verdict), cell) || !strings.Contains(string(verdict), "(GPUs "+r.GPUs+")") {
			t.Errorf("the verdict does not show %s's placement %s (GPUs %s)", r.Arm, r.Node, r.GPUs)
		}
	}
	if !strings.Contains(string(verdict), "slurm job ") || !strings.Contains(string(verdict), "(queued ") {
		t.Errorf("the verdict does not name the jobs and their queue waits:\n%s", verdict)
	}
}

// runBinary runs the built arbiter with args and env added to this process's
// environment: the Slurm tests run in parallel, each with a cluster of its own, so none
// may set the test process's SLURM_CONF.
func runBinary(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(buildArbiter(t), args...)
	var out, errb bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// runBinaryInBackground is runBinary in a goroutine; its result comes on the channel.
func runBinaryInBackground(t *testing.T, env []string, args ...string) <-chan cliResult {
	done := make(chan cliResult, 1)
	bin := buildArbiter(t)
	go func() {
		cmd := exec.Command(bin, args...)
		var out, errb bytes.Buffer
		cmd.Env, cmd.Stdout, cmd.Stderr = append(os.Environ(), env...), &out, &errb
		cmd.Run()
		done <- cliResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
	}()
	return done
}

// waitForRun polls the database until a run of arm reaches status (or fails the test).
func waitForRun(t *testing.T, db, arm, status string, limit time.Duration) runRow {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		// The database may still be being created: an error is not final.
		if _, runs, err := tryReadRuns(db); err == nil {
			for _, r := range runs {
				if r.Arm == arm && r.Status == status {
					return r
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no run of %s reached %s within %s", arm, status, limit)
	return runRow{}
}

// TestSlurmCancelledAndLeftover: a job cancelled with scancel mid-run is recorded lost with
// Slurm's reason while the other arm finishes; a killed arbiter's job is cancelled by
// arbiter gc, and resume submits the launch again.
func TestSlurmCancelledAndLeftover(t *testing.T) {
	t.Parallel()
	c := slurmtest.Start(t, slurmtest.Options{})
	buildRefserve(t)
	ctx := context.Background()
	// Slow tokens, so that the workload is still running when its job is cancelled: about
	// 16 s a launch. At 5 ms a token (5 s a launch) a loaded CI machine once took longer
	// than the whole workload from the launch's ready to Slurm's kill, and the launch
	// finished every session first.
	slow := "blocks: 1\n"
	spec := slurmSpec(t, c, slow)
	b, _ := os.ReadFile(spec)
	small := strings.NewReplacer("args: [--enable-hierarchical-cache", "args: [--inter-token-delay, 15ms, --enable-hierarchical-cache",
		"sessions: 60", "sessions: 20", "concurrency: 60", "concurrency: 20").Replace(string(b))
	if err := os.WriteFile(spec, []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("scancel mid-run", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "arbiter.db")
		done := runBinaryInBackground(t, c.Env(), "run", spec, "--db", db)
		waitForRun(t, db, "treatment", "ready", 60*time.Second)
		dbID, _ := readRuns(t, db)
		name := "arbiter-" + store.ShortID(dbID) + "-exp1-treatment-b0"
		if _, err := c.Command(ctx, "scancel", "--jobname="+name); err != nil {
			t.Fatal(err)
		}
		res := <-done
		_, runs := readRuns(t, db)
		var lost, finished int
		for _, r := range runs {
			switch {
			case r.Arm == "treatment" && r.Status == "lost" && r.Super:
				lost++
				if !strings.Contains(r.Error, "Slurm job") || !strings.Contains(r.Error, "CANCELLED") || !strings.Contains(r.Error, "scancel") {
					t.Errorf("lost run's error: %q; want Slurm's reason", r.Error)
				}
				t.Logf("lost run recorded: %s", r.Error)
			case r.Status == "done" && !r.Super:
				finished++
			}
		}
		// The lost launch ran again as a new job, which superseded it.
		if lost != 1 || finished != 2 {
			t.Fatalf("runs %+v; want treatment lost (and run again), both arms done\nstdout: %s\nstderr: %s", runs, res.stdout, res.stderr)
		}
		_, path, _ := strings.Cut(res.stdout, "verdict: ")
		verdict, err := os.ReadFile(strings.TrimSpace(path))
		if err != nil || !strings.Contains(string(verdict), "Slurm ended the job of treatment/b0") {
			t.Errorf("the verdict does not say a launch was lost (%v):\n%s", err, verdict)
		}
	})

	t.Run("node failure mid-run", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "arbiter.db")
		done := runBinaryInBackground(t, c.Env(), "run", spec, "--db", db)
		r := waitForRun(t, db, "control", "ready", 60*time.Second)
		// The node goes down under the running job, as an administrator marks a node
		// that failed: Slurm ends its jobs with NODE_FAIL.
		if _, err := c.Command(ctx, "scontrol", "update", "nodename="+r.Node, "state=down", "reason=arbiter test: node failed"); err != nil {
			t.Fatal(err)
		}
		defer c.Command(ctx, "scontrol", "update", "nodename="+r.Node, "state=resume")
		res := <-done
		_, runs := readRuns(t, db)
		// The node's jobs are lost in Slurm's words; their arms run again as new jobs
		// (ReturnToService=2 may bring the same node back for them) and finish.
		lost, finished := false, 0
		for _, x := range runs {
			switch {
			case x.Arm == "control" && x.Status == "lost" && x.Super:
				lost = strings.Contains(x.Error, "NODE_FAIL on "+r.Node) && strings.Contains(x.Error, "its node failed")
			case x.Status == "done" && !x.Super:
				finished++
			}
		}
		if !lost || finished != 2 || res.code != 0 {
			t.Fatalf("runs %+v; want control lost with NODE_FAIL on %s, both arms done at last\nstdout: %s\nstderr: %s",
				runs, r.Node, res.stdout, res.stderr)
		}
	})

	t.Run("gc and resume after a killed arbiter", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "arbiter.db")
		cmd := exec.Command(buildArbiter(t), "run", spec, "--db", db)
		cmd.Env = append(os.Environ(), c.Env()...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitForRun(t, db, "control", "ready", 60*time.Second)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		dbID, _ := readRuns(t, db)
		queued := func() string {
			out, err := c.Command(ctx, "squeue", "-h", "-o", "%j")
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(out)
		}
		if !strings.Contains(queued(), "arbiter-"+store.ShortID(dbID)+"-exp1-control-b0") {
			t.Fatalf("the killed arbiter's job is not running: %q", queued())
		}
		code, stdout, stderr := runBinary(t, c.Env(), "gc", "--db", db)
		if code != 0 || !strings.Contains(stdout, "cancelled Slurm job") || !strings.Contains(stdout, "experiment 1 was abandoned") {
			t.Fatalf("gc: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		// A cancelled job leaves the queue once its node has ended it.
		for deadline := time.Now().Add(30 * time.Second); strings.Contains(queued(), "arbiter-"+store.ShortID(dbID)); {
			if time.Now().After(deadline) {
				t.Fatalf("gc left the job queued: %q", queued())
			}
			time.Sleep(100 * time.Millisecond)
		}
		code, stdout, stderr = runBinary(t, c.Env(), "resume", "1", "--db", db)
		if code != 0 {
			t.Fatalf("resume: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		_, runs := readRuns(t, db)
		done := map[string]bool{}
		for _, r := range runs {
			if !r.Super && r.Status == "done" {
				done[r.Arm] = true
			}
		}
		if !done["control"] || !done["treatment"] {
			t.Errorf("after resume: %+v; want both arms done", runs)
		}
	})
}

// TestSlurmQuickstartREST runs the quickstart through the cluster's slurmrestd instead of
// the Slurm commands.
func TestSlurmQuickstartREST(t *testing.T) {
	t.Parallel()
	c := slurmtest.Start(t, slurmtest.Options{REST: true})
	// SLURM_CONF leads nowhere: nothing may go through the commands.
	env := []string{"SLURM_CONF=/nonexistent", "SLURM_JWT=" + c.Token, "SLURM_USER_NAME=root"}
	buildRefserve(t)
	spec := slurmSpec(t, c, "")
	b, _ := os.ReadFile(spec)
	restSpec := strings.Replace(string(b), "runtime: {kind: slurm,", "runtime: {kind: slurm, rest: \""+c.RESTURL+"\",", 1)
	if err := os.WriteFile(spec, []byte(restSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "arbiter.db")
	code, stdout, stderr := runBinary(t, env, "run", spec, "--db", db)
	if code != 0 {
		t.Fatalf("arbiter run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	_, runs := readRuns(t, db)
	if len(runs) != 2 {
		t.Fatalf("runs: %+v", runs)
	}
	for _, r := range runs {
		if r.Status != "done" || r.Node == "" || r.GPUs == "" {
			t.Errorf("run %+v; want done on a node of the cluster with its GPU", r)
		}
	}
}
