package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// These tests run arbiter itself as a real process against hostileserve, kill it the way
// users and machines do, and look at which processes are left.

// hostileEngineSpec runs hostileserve in the mode given by $HOSTILE_MODE of the arbiter
// that launches it (a secret, so that a resume of the same spec can run it otherwise).
const hostileEngineSpec = `version: 1
name: hostile
engine:
  preset: custom
  command: [sh, -c, 'exec "$0" --mode "$HOSTILE_MODE" "$@"', %q]
  secrets: [HOSTILE_MODE]
%s
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 2, concurrency: 4, seed: 5}
detectors: [dsml-leak]
timeouts: {startup: 30s, request: 120s, stall: %s}
`

// arbiterProc is arbiter running as a child process of the test.
type arbiterProc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedbuf.Buffer
	db             string
}

func startArbiter(t testing.TB, dir, mode, stall, extra string, env []string, args ...string) *arbiterProc {
	t.Helper()
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	hostile := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	spec := filepath.Join(dir, "spec.yaml")
	if _, err := os.Stat(spec); err != nil {
		if err := os.WriteFile(spec, fmt.Appendf(nil, hostileEngineSpec, hostile, extra, stall), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &arbiterProc{db: filepath.Join(dir, "results.db")}
	if len(args) == 0 {
		args = []string{"run", spec}
	}
	a.cmd = exec.Command(bin, append(args, "--db", a.db)...)
	a.cmd.Env = append(append(os.Environ(), "HOSTILE_MODE="+mode), env...)
	a.cmd.Stdout, a.cmd.Stderr = &a.stdout, &a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill(); a.cmd.Wait() })
	return a
}

// engineGroup waits until arbiter has recorded a running engine process group and that
// engine has started its child, and returns the group's leader and its processes.
func (a *arbiterProc) engineGroup(t *testing.T) (runtime.ProcessID, []int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if leader, pids, ok := a.lookGroup(t); ok && len(pids) >= 3 {
			return leader, pids
		}
		if a.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("no engine group with a child appeared\nstderr:\n%s", a.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling another process's database and children
	}
}

func (a *arbiterProc) lookGroup(t *testing.T) (runtime.ProcessID, []int, bool) {
	ro, err := store.OpenReadOnly(a.db)
	if err != nil {
		return runtime.ProcessID{}, nil, false
	}
	defer ro.Close()
	var rec store.EngineProcess
	if err := ro.Get(&rec, `SELECT run_id, experiment_id, host, boot_id, pgid, leader_start, arbiter_pid, arbiter_start
		FROM engine_processes WHERE ended_at IS NULL ORDER BY run_id DESC LIMIT 1`); err != nil {
		return runtime.ProcessID{}, nil, false
	}
	leader := runtime.ProcessID{Pid: rec.PGID, Start: rec.LeaderStart, BootID: rec.BootID}
	pids, err := runtime.GroupMembers(leader)
	if err != nil {
		t.Fatal(err)
	}
	// The group is whole once the child has said it waits. (Killed before that, arbiter
	// would take the child's first write with it: SIGPIPE.)
	var logs []string
	filepath.WalkDir(filepath.Join(filepath.Dir(a.db), "arbiter-logs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") {
			logs = append(logs, path)
		}
		return nil
	})
	for _, l := range logs {
		if b, _ := os.ReadFile(l); regexp.MustCompile(`hostileserve child pid=\d+ waiting`).Match(b) {
			return leader, pids, true
		}
	}
	return leader, nil, false
}

// running lists which of pids still run (zombies do not).
func running(pids []int) []int {
	var out []int
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			continue
		}
		out = append(out, p)
	}
	return out
}

// waitAllGone waits until none of pids runs and returns how long that took.
func waitAllGone(t *testing.T, pids []int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		left := running(pids)
		if len(left) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			for _, p := range left {
				syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still run %v later", left, limit)
		}
		time.Sleep(50 * time.Millisecond) // polling other processes' exit
	}
}

// TestKilledArbiterLeavesNoEngine: arbiter is killed with SIGKILL mid-run while its engine
// ignores SIGTERM and has started a child that ignores it too. Within the grace period
// both are gone, with the supervisor that ended them.
func TestKilledArbiterLeavesNoEngine(t *testing.T) {
	t.Parallel()
	a := startArbiter(t, t.TempDir(), "ignore-sigterm,wedge", "120s", "", nil)
	_, pids := a.engineGroup(t)
	a.cmd.Process.Signal(syscall.SIGKILL)
	a.cmd.Wait()
	took := waitAllGone(t, pids, runtime.DefaultGrace+5*time.Second)
	t.Logf("after kill -9 of arbiter, the engine group (%d processes: supervisor, engine, child) was gone in %v",
		len(pids), took.Round(10*time.Millisecond))
}

// TestTwoInterruptsLeaveNoEngine: the first Ctrl-C starts stopping the engine, which
// ignores SIGTERM; the second, 2 s later, makes arbiter exit at once. The engine and its
// child must not outlive that.
func TestTwoInterruptsLeaveNoEngine(t *testing.T) {
	t.Parallel()
	a := startArbiter(t, t.TempDir(), "ignore-sigterm,wedge", "120s", "", nil)
	_, pids := a.engineGroup(t)
	a.cmd.Process.Signal(syscall.SIGINT)
	time.Sleep(2 * time.Second) // the user's pause between the two Ctrl-C
	a.cmd.Process.Signal(syscall.SIGINT)
	a.cmd.Wait()
	if code := a.cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Errorf("exit code %d after a second Ctrl-C, want %d\n%s", code, exitInterrupted, a.stderr.String())
	}
	took := waitAllGone(t, pids, runtime.DefaultGrace+5*time.Second)
	t.Logf("after two Ctrl-C 2s apart, the engine group was gone %v after arbiter exited", took.Round(10*time.Millisecond))
}

// TestResumeAndGCEndEnginesWhoseSupervisorDied: when the supervisor dies with arbiter (it
// was killed too), the engine and its child live on; resume and gc find them in the
// database and end them, and resume then finishes the experiment.
func TestResumeAndGCEndEnginesWhoseSupervisorDied(t *testing.T) {
	t.Parallel()
	orphan := func(t *testing.T, dir string) []int {
		a := startArbiter(t, dir, "ignore-sigterm,wedge", "120s", "", nil)
		leader, pids := a.engineGroup(t)
		syscall.Kill(leader.Pid, syscall.SIGKILL)
		a.cmd.Process.Signal(syscall.SIGKILL)
		a.cmd.Wait()
		var engine []int
		for _, p := range pids {
			if p != leader.Pid {
				engine = append(engine, p)
			}
		}
		t.Cleanup(func() { // whatever the test's outcome, nothing of the engine outlives it
			for _, p := range running(engine) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		})
		time.Sleep(time.Second) // long enough for anything that would end them to act
		if left := running(engine); len(left) != len(engine) {
			var cmds []string
			for _, p := range pids {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
				cmds = append(cmds, fmt.Sprintf("%d %q", p, b))
			}
			t.Fatalf("engine processes %v, of which %v run: the test needs them orphaned (%s)\n%s", engine, left,
				strings.Join(cmds, "; "), a.stderr.String())
		}
		return engine
	}
	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		engine := orphan(t, dir)
		r := startArbiter(t, dir, "", "120s", "", nil, "resume", "1")
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("resume: %v\n%s", err, r.stderr.String())
		}
		if !strings.Contains(r.stderr.String(), "ended an engine a killed arbiter left running") {
			t.Errorf("resume did not say it ended the orphan:\n%s", r.stderr.String())
		}
		waitAllGone(t, engine, time.Second)
		if !strings.Contains(r.stdout.String(), "experiment 1 (hostile): done") {
			t.Errorf("resume did not finish the experiment:\n%s", r.stdout.String())
		}
	})
	t.Run("gc", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		engine := orphan(t, dir)
		// gc also removes the docker runtime's leftover containers: pointed at a daemon
		// that does not exist, it cannot touch anything on this host's shared one.
		gc := func(args ...string) (int, string, string) {
			g := startArbiter(t, dir, "", "120s", "", []string{"DOCKER_HOST=unix://" + filepath.Join(dir, "no-docker.sock")},
				append([]string{"gc"}, args...)...)
			g.cmd.Wait()
			return g.cmd.ProcessState.ExitCode(), g.stdout.String(), g.stderr.String()
		}
		code, stdout, stderr := gc("--dry-run", "--json")
		var listed []orchestrator.GCEntry
		if code != 0 || json.Unmarshal([]byte(stdout), &listed) != nil {
			t.Fatalf("gc --dry-run: code %d\n%s\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, "no Docker daemon answers; only engine processes and Slurm jobs were checked") {
			t.Errorf("gc without a daemon did not say so: %q", stderr)
		}
		groups := 0
		for _, e := range listed {
			if e.Kind == orchestrator.LeftoverProcessGroup {
				groups++
				if e.Removed || e.Experiment != "1" || e.Processes != len(engine) {
					t.Errorf("dry run listed %+v, want experiment 1 with %d processes", e, len(engine))
				}
			}
		}
		if groups != 1 || len(running(engine)) != len(engine) {
			t.Fatalf("dry run: %d groups listed, %v of %v still run", groups, running(engine), engine)
		}
		code, stdout, stderr = gc()
		if code != 0 || !regexp.MustCompile(`ended engine process group \d+ \(2 processes, experiment 1, run \d+\)`).MatchString(stdout) {
			t.Fatalf("gc: code %d\n%s\n%s", code, stdout, stderr)
		}
		waitAllGone(t, engine, time.Second)
		code, stdout, _ = gc()
		if code != 0 || strings.TrimSpace(stdout) != "no leftover containers, engine processes or Slurm jobs" {
			t.Errorf("second gc: code %d, %q", code, stdout)
		}
	})
}

// TestTwoArbitersNeverShareAGPU: two arbiters on one host pin the same GPU. The second
// waits, says who holds it, and launches only once the first has finished.
func TestTwoArbitersNeverShareAGPU(t *testing.T) {
	t.Parallel()
	locks := []string{"ARBITER_GPU_LOCK_DIR=" + t.TempDir()}
	const pin = "  gpus: 1\nruntime: {kind: process, nodes: [{name: local, gpus: \"0\"}]}"
	first := startArbiter(t, t.TempDir(), "wedge", "3s", pin, locks)
	first.engineGroupReady(t)
	second := startArbiter(t, t.TempDir(), "", "3s", pin, locks)
	if err := first.cmd.Wait(); err != nil && first.cmd.ProcessState.ExitCode() != exitError {
		t.Fatalf("first arbiter: %v\n%s", err, first.stderr.String())
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second arbiter: %v\n%s", err, second.stderr.String())
	}
	want := fmt.Sprintf("GPU 0 is in use by arbiter pid %d", first.cmd.Process.Pid)
	if !strings.Contains(second.stderr.String(), want) {
		t.Errorf("the second arbiter did not say who held GPU 0 (%q):\n%s", want, second.stderr.String())
	}
	firstEnd := runTimes(t, first.db, "max(ended_at)")
	secondStart := runTimes(t, second.db, "min(started_at)")
	if !secondStart.After(firstEnd) {
		t.Errorf("the second arbiter launched at %v, before the first ended at %v", secondStart, firstEnd)
	}
}

// engineGroupReady waits until the first run's engine is up (its run is ready).
func (a *arbiterProc) engineGroupReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ro, err := store.OpenReadOnly(a.db); err == nil {
			var n int
			ro.Get(&n, `SELECT count(*) FROM runs WHERE ready_at IS NOT NULL`)
			ro.Close()
			if n > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first arbiter never had a ready engine\n%s", a.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling another process's database
	}
}

func runTimes(t *testing.T, db, agg string) time.Time {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var s string
	if err := ro.Get(&s, "SELECT "+agg+" FROM runs"); err != nil {
		t.Fatal(err)
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// runLogFlood runs an experiment whose engine writes 64 MiB of log as one line
// (hostileserve's log-flood mode) and returns arbiter's peak resident memory in bytes.
func runLogFlood(tb testing.TB, dir string) (peak int64, db string) {
	tb.Helper()
	a := startArbiter(tb, dir, "log-flood", "30s", "", nil)
	if err := a.cmd.Wait(); err != nil {
		tb.Fatalf("arbiter run: %v\n%s", err, a.stderr.String())
	}
	ru, ok := a.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		tb.Fatal("no resource usage for arbiter's process")
	}
	return ru.Maxrss * 1024, a.db // Linux reports kilobytes
}

// TestLogFloodIsCut: a 64 MiB log line reaches neither the log file nor the database
// whole; the line is cut with a marker that says how much was dropped.
func TestLogFloodIsCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	peak, db := runLogFlood(t, dir)
	t.Logf("arbiter's peak RSS with a 64 MiB engine log line: %.0f MB", float64(peak)/1e6)
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var tails []string
	if err := ro.Select(&tails, `SELECT coalesce(log_tail, '') FROM runs`); err != nil || len(tails) != 2 {
		t.Fatalf("log tails: %d, %v", len(tails), err)
	}
	for _, tail := range tails {
		if len(tail) > runtime.MaxTail || !strings.Contains(tail, "more bytes in the log file") {
			t.Errorf("log tail of %d bytes (cap %d): ...%q", len(tail), runtime.MaxTail, tail[max(0, len(tail)-200):])
		}
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "arbiter-logs", "*", "*.log"))
	marker := regexp.MustCompile(`\[arbiter: line cut, (\d+) more bytes dropped\]`)
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		m := marker.FindSubmatch(b)
		if len(b) > 2*runtime.MaxLogLine || m == nil || string(m[1]) != strconv.Itoa(64<<20-runtime.MaxLogLine) {
			t.Errorf("%s: %d bytes, cut marker %q", l, len(b), m)
		}
	}
}

// BenchmarkLogFloodPeakRSS reports arbiter's peak resident memory while its engine
// writes a 64 MiB log line; the target is below 300 MB.
func BenchmarkLogFloodPeakRSS(b *testing.B) {
	var peak int64
	for range b.N {
		p, _ := runLogFlood(b, b.TempDir())
		peak = max(peak, p)
	}
	b.ReportMetric(float64(peak)/1e6, "peak-RSS-MB")
	if peak > 300e6 {
		b.Errorf("peak RSS %.0f MB, above the 300 MB target", float64(peak)/1e6)
	}
}
