package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
)

func TestGPUClaimWaitsForTheHolderAndSaysWhoItIs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	ctx := context.Background()
	first, err := claimGPUs(ctx, dir, "local", "2,0", "arbiter pid 111 on node-a, experiment first", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "local-gpu2.lock")); !strings.Contains(string(b), "pid 111") {
		t.Errorf("lock file says %q, not who holds it", b)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("lock folder mode = %v, %v; want a sticky folder every user can write", fi.Mode(), err)
	}

	var log lockedbuf.Buffer
	got := make(chan error, 1)
	var second *gpuClaim
	go func() {
		var err error
		second, err = claimGPUs(ctx, dir, "local", "1-2", "arbiter pid 222", slog.New(slog.NewTextHandler(&log, nil)))
		got <- err
	}()
	// The second arbiter says it waits, and for whom, before the first lets go.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "GPU 2 is in use by arbiter pid 111 on node-a, experiment first; waiting") {
		select {
		case err := <-got:
			t.Fatalf("the second claim returned (%v) while the first held GPU 2", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiting message; log: %s", log.String())
		}
		time.Sleep(10 * time.Millisecond) // polling another goroutine's log
	}
	first.release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer second.release()
	if len(second.files) != 2 {
		t.Errorf("second claim holds %d devices, want 2", len(second.files))
	}
	// Another machine's devices, or none at all, are not in the way.
	other, err := claimGPUs(ctx, dir, "node-b", "1-2", "x", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	other.release()
	none, err := claimGPUs(ctx, dir, "local", "", "x", quietLogger())
	if err != nil || len(none.files) != 0 {
		t.Fatalf("empty claim: %+v, %v", none, err)
	}
}

func TestGPUClaimGivesUpWhenCancelled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held, err := claimGPUs(context.Background(), dir, "local", "0", "holder", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := claimGPUs(ctx, dir, "local", "0", "waiter", quietLogger()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim of a held GPU with a cancelled context: %v", err)
	}
}

func TestGPUScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind, host, want string
	}{
		{"process", "", "local"},
		{"docker", "", "local"},
		{"docker", "unix:///var/run/docker.sock", "local"},
		{"docker", "tcp://127.0.0.1:2375", "local"},
		{"docker", "tcp://gpu-node-7:2375", "gpu-node-7"},
	} {
		if got := gpuScope(arms.RuntimeKind(c.kind), c.host); got != c.want {
			t.Errorf("%s on %q: scope %q, want %q", c.kind, c.host, got, c.want)
		}
	}
}
