package workload_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/workload"
)

// TestRunawayEngineKeepsArbiterSmall runs the long-context workload (8 sessions of 8
// rounds, max_tokens 1024, each turn stored in SQLite as arbiter run stores it) in a
// child process against hostileserve's runaway mode, an engine that ignores max_tokens
// and answers every request with 6 MiB of text (within the 8 MiB response cap), and
// reads the child's peak resident memory (VmHWM) at its end. Before the reply budget,
// such an engine took arbiter to 3.1 GB, a 2.6 GB database and 44 MB requests; each
// session now ends at its first reply, cut some 80 KB into it.
func TestRunawayEngineKeepsArbiterSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a workload in a child process against an engine that streams megabytes per reply")
	}
	base := startHostile(t, "--mode", "runaway", "--size", strconv.Itoa(6<<20), "--chunk", "1024", "--ready-requests", "0")
	db := filepath.Join(t.TempDir(), "runaway.db")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRunawayMemoryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ARBITER_RUNAWAY_CHILD="+base+","+db)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`vmhwm_kb=(\d+) turns=(\d+) sessions=(\d+) max_request=(\d+) max_raw=(\d+) db_bytes=(\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("the child said nothing of its memory:\n%s", out)
	}
	n := make([]int64, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.ParseInt(m[i], 10, 64)
	}
	peakKB, turns, sessions, maxRequest, maxRaw, dbBytes := n[1], n[2], n[3], n[4], n[5], n[6]
	t.Logf("peak RSS %.1f MB, %d turns of %d sessions, largest request %d bytes, largest raw reply %d bytes, database %.1f MB",
		float64(peakKB)/1024, turns, sessions, maxRequest, maxRaw, float64(dbBytes)/(1<<20))
	if peakKB > 500<<10 {
		t.Errorf("peak RSS %d KB, want under 500 MB", peakKB)
	}
	if sessions != 8 || turns != 8 {
		t.Errorf("%d turns of %d sessions; want each session to end at its first, cut reply", turns, sessions)
	}
	if maxRequest > 256<<10 || maxRaw > 1<<20 || dbBytes > 32<<20 {
		t.Errorf("largest request %d bytes, largest raw reply %d, database %d; want under 256 KiB, 1 MiB and 32 MiB", maxRequest, maxRaw, dbBytes)
	}
}

// TestRunawayMemoryChild is the child of TestRunawayEngineKeepsArbiterSmall; it does
// nothing without ARBITER_RUNAWAY_CHILD.
func TestRunawayMemoryChild(t *testing.T) {
	arg := os.Getenv("ARBITER_RUNAWAY_CHILD")
	if arg == "" {
		t.Skip("runs only as the child of TestRunawayEngineKeepsArbiterSmall")
	}
	base, db, _ := strings.Cut(arg, ",")
	ctx := context.Background()
	s, rec := recordInto(t, db, "runaway")
	w := rec.w
	// The long-context kind's defaults: 8 sessions of 8 rounds, replies of up to 1024 tokens.
	cfg := workload.Config{Kind: arms.WorkloadLongContext, Sessions: 8, Rounds: 8, Concurrency: 8, Seed: 1,
		RequestTimeout: 2 * time.Minute, StallTimeout: time.Minute, LongContext: &workload.LongContextConfig{}}
	if err := workload.Run(ctx, cfg, base, rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var turns, sessions, maxRequest, maxRaw int64
	s.DB().Get(&turns, "SELECT count(*) FROM turns")
	s.DB().Get(&sessions, "SELECT count(*) FROM sessions")
	s.DB().Get(&maxRequest, "SELECT coalesce(max(length(request)), 0) FROM turns")
	s.DB().Get(&maxRaw, "SELECT coalesce(max(length(raw)), 0) FROM turns")
	var dbBytes int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(db + suffix); err == nil {
			dbBytes += fi.Size()
		}
	}
	fmt.Printf("vmhwm_kb=%d turns=%d sessions=%d max_request=%d max_raw=%d db_bytes=%d\n", vmHWM(t), turns, sessions, maxRequest, maxRaw, dbBytes)
}

// vmHWM is this process's peak resident set, in KB, from /proc/self/status.
func vmHWM(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Skip("no VmHWM in /proc/self/status")
	return 0
}
