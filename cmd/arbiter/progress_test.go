package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
)

// TestDevNullGetsPlainLines: /dev/null is a character device but not a terminal, so a
// run whose stderr goes there gets plain lines, not bars.
func TestDevNullGetsPlainLines(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Mode()&os.ModeCharDevice == 0 {
		t.Skip("/dev/null is not a character device here")
	}
	p := newProgress(f, false)
	defer p.Wait()
	if p.bars != nil {
		t.Error("bars drawn on /dev/null")
	}
}

// fakeClock is a display's clock that the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestPlainLinesFromTheFirstSecond: a launch is shown as soon as its engine starts (arm 2
// of 4, elapsed, the last line of its log), then its sessions, corrupted, lost and
// tokens per second.
func TestPlainLinesFromTheFirstSecond(t *testing.T) {
	var out lockedbuf.Buffer
	p := startProgress(&out, false, time.Hour)
	defer p.Wait()
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	p.now = clk.now
	logPath := filepath.Join(t.TempDir(), "engine.log")
	os.WriteFile(logPath, []byte("Loading weights\n\x1b[32mCapturing cuda graph: 12/36\x1b[0m\r\n"), 0o644)
	p.EngineStarting(orchestrator.LaunchInfo{Arm: "treatment", Block: 0, Position: 2, Arms: 4, Blocks: 1, Sessions: 60, LogPath: logPath})
	if got := out.String(); !strings.Contains(got, "treatment/b0 (arm 2 of 4): engine starting; its log: "+logPath) {
		t.Errorf("nothing said as the engine starts:\n%s", got)
	}
	clk.t = clk.t.Add(75 * time.Second)
	p.readLogs()
	p.printActive()
	if got := out.String(); !strings.Contains(got, "treatment/b0 (arm 2 of 4): engine starting 1m15s | Capturing cuda graph: 12/36\n") {
		t.Errorf("no elapsed time and last log line while starting:\n%s", got)
	}
	p.EngineReady("treatment", 0)
	p.RunStarted("treatment", 0, 60)
	for i := range 10 {
		status := store.SessionOK
		if i >= 8 {
			status = store.SessionError
		}
		p.SessionDone("treatment", 0, status, i == 0 || i == 9)
		p.TurnDone("treatment", 0, 400)
	}
	clk.t = clk.t.Add(2 * time.Second)
	p.printActive()
	if got := out.String(); !strings.Contains(got, "treatment/b0 (arm 2 of 4): 8/60 sessions, 1 corrupted, 2 lost (1 corrupted first), 2000 tok/s, 2.0s") {
		t.Errorf("running launch not shown with sessions, corrupted, lost and tok/s:\n%s", got)
	}
}

// TestBarNeverShowsLostSessionsAsDone: after a Ctrl-C the sessions cut short end as
// aborted; the bar counts only those that finished and stops there, aborted.
func TestBarNeverShowsLostSessionsAsDone(t *testing.T) {
	var out lockedbuf.Buffer
	p := startProgress(&out, true, time.Hour)
	p.EngineStarting(orchestrator.LaunchInfo{Arm: "control", Position: 1, Arms: 2, Blocks: 1, Sessions: 60})
	p.EngineReady("control", 0)
	p.RunStarted("control", 0, 60)
	for i := range 60 {
		status := store.SessionOK
		if i >= 34 {
			status = store.SessionAborted // cut by the interrupt
		}
		p.SessionDone("control", 0, status, false)
	}
	p.RunEnded("control", 0, store.RunInterrupted)
	bar := p.barOf["control/b0"]
	p.Wait()
	if bar.Current() != 34 || bar.Completed() || !bar.Aborted() {
		t.Errorf("bar at %d, completed %v, aborted %v; want 34 of 60, aborted", bar.Current(), bar.Completed(), bar.Aborted())
	}
	l := p.launches["control/b0"]
	if got := l.describe(l.ended); !strings.HasPrefix(got, "34/60 sessions, 0 corrupted, 26 unfinished") ||
		!strings.HasSuffix(got, "interrupted, left out of the analysis") {
		t.Errorf("the bar's text says %q; want 34 of 60 done, 26 unfinished, and the launch left out of the analysis", got)
	}
	if got := out.String(); !strings.Contains(got, "34/60") || strings.Contains(got, "60/60") {
		t.Errorf("the bar drew lost sessions as done:\n%s", got)
	}
}

// TestEngineFailurePrintsItsLogTailAndPath: an engine that does not start is reported
// with why, the end of its log and the log's path.
func TestEngineFailurePrintsItsLogTailAndPath(t *testing.T) {
	var out lockedbuf.Buffer
	p := startProgress(&out, false, time.Hour)
	defer p.Wait()
	logPath := filepath.Join(t.TempDir(), "engine.log")
	os.WriteFile(logPath, []byte("Loading weights\nRuntimeError: CUDA out of memory\n"), 0o644)
	p.EngineStarting(orchestrator.LaunchInfo{Arm: "control", Position: 1, Arms: 2, Blocks: 1, Sessions: 60, LogPath: logPath})
	p.EngineFailed("control", 0, "engine exited before it was ready (exit code 1)", "")
	got := out.String()
	for _, want := range []string{"control/b0 (arm 1 of 2): the engine did not start: engine exited before it was ready (exit code 1)",
		"    RuntimeError: CUDA out of memory", "  its log: " + logPath} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestRunShowsWhyAnEngineDidNotStart: arbiter run against an engine that exits while
// starting prints, on stderr, the end of the engine's log and where the log is.
func TestRunShowsWhyAnEngineDidNotStart(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	os.WriteFile(spec, []byte(`version: 1
name: no-start
engine:
  preset: custom
  command: [sh, -c, 'echo "Loading weights"; echo "RuntimeError: CUDA out of memory" >&2; exit 3', engine]
arms:
  a: {env: {K: "0"}}
  b: {env: {K: "1"}}
workload: {sessions: 2, rounds: 1, concurrency: 2, seed: 1}
timeouts: {startup: 30s, request: 10s, stall: 10s}
`), 0o644)
	code, _, stderr := runCLI(t, "run", spec, "--db", filepath.Join(dir, "r.db"))
	if code == exitOK {
		t.Fatalf("a run whose engines never started exited 0:\n%s", stderr)
	}
	for _, want := range []string{"(arm 1 of 2): the engine did not start:", "    RuntimeError: CUDA out of memory",
		"  its log: " + filepath.Join(dir, "arbiter-logs")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
