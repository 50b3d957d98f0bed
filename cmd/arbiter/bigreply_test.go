package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// TestBigRepliesKeepArbiterSmall runs `arbiter run` as a real process against
// hostileserve's giant replies (a 64 MiB JSON body, 12 MiB streamed in small events, a
// 64 MiB single event), several sessions at once, and reads arbiter's peak resident
// memory (VmHWM) while it runs. Before the response cap, one 64 MiB body cost 1 GB and
// six concurrent 12 MiB streams 613 MB; the target is under 300 MB for each mode.
func TestBigRepliesKeepArbiterSmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs three experiments against an engine that sends hundreds of megabytes")
	}
	if arms.DefaultMaxResponseBytes != workload.DefaultMaxResponseBytes {
		t.Fatalf("the spec's default cap %d is not the client's %d", arms.DefaultMaxResponseBytes, workload.DefaultMaxResponseBytes)
	}
	arbiter := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	hostile := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	for _, mode := range []struct {
		name, size string
		sessions   int
		stream     bool
	}{
		{"giant-body", "67108864", 3, false},
		{"giant-stream", "12582912", 6, true},
		{"giant-event", "67108864", 3, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			spec := filepath.Join(dir, "spec.yaml")
			src := fmt.Sprintf(`version: 1
name: %s
engine:
  preset: custom
  command: [%q, --mode, %s, --size, %q]
arms:
  a: {env: {K: "0"}}
  b: {env: {K: "1"}}
workload: {sessions: %d, rounds: 1, concurrency: %d, stream: %v}
timeouts: {startup: 60s, request: 120s, stall: 60s}
`, mode.name, hostile, mode.name, mode.size, mode.sessions, mode.sessions, mode.stream)
			if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "r.db")
			peak, code, stderr := runWatchingMemory(t, arbiter, "run", spec, "--db", db)
			t.Logf("%s: arbiter peak RSS (VmHWM) %.1f MB, exit %d", mode.name, float64(peak)/1024, code)
			if peak == 0 {
				t.Fatalf("no memory figure was read\n%s", stderr)
			}
			if peak > 300<<10 {
				t.Errorf("%s: arbiter peaked at %d KB, want under 300 MB", mode.name, peak)
			}
			// Every arm completed nothing, which the run reports as an error (exit 1),
			// not as a clean experiment.
			if code != exitError {
				t.Errorf("exit %d, want %d\n%s", code, exitError, stderr)
			}
			ro, err := store.OpenReadOnly(db)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			var turns []struct {
				Error  string `db:"error"`
				RawLen int    `db:"raw_len"`
				Status string `db:"status"`
			}
			if err := ro.Select(&turns, `SELECT coalesce(t.error, '') AS error, length(t.raw) AS raw_len, s.status
				FROM turns t JOIN sessions s ON s.run_id = t.run_id AND s.session_index = t.session_index`); err != nil {
				t.Fatal(err)
			}
			if len(turns) < 2*mode.sessions {
				t.Fatalf("%d turns recorded, want at least %d\n%s", len(turns), 2*mode.sessions, stderr)
			}
			for _, tr := range turns {
				if !strings.Contains(tr.Error, "response exceeded 8388608 bytes") || tr.RawLen > 64<<10 || tr.Status != "error" {
					t.Errorf("turn: error %q, %d bytes of raw, session %s; want the cap's error, a prefix of at most 64 KiB, an error session",
						tr.Error, tr.RawLen, tr.Status)
				}
			}
		})
	}
}

// runWatchingMemory runs a command to its end while reading its peak resident memory
// (VmHWM, in KB) from /proc: the kernel keeps the peak, so the last reading before the
// exit holds everything but the exit itself.
func runWatchingMemory(t *testing.T, args ...string) (peakKB int64, code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb := vmHWM(status); kb > peakKB {
			peakKB = kb
		}
		select {
		case err := <-done:
			return peakKB, exitCodeOf(err), errb.String()
		case <-tick.C:
		}
	}
}

// vmHWM reads the VmHWM line of a /proc status file; 0 once the process is gone.
func vmHWM(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
