package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// dockerImage builds refserve into an image from scratch on the local daemon (the
// preset's command, refserve, on the image's PATH) and removes it when t ends. Without a
// daemon the test skips, unless ARBITER_REQUIRE_DOCKER=1 (CI) makes that a failure.
func dockerImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := (runtime.Docker{}).Leftovers(ctx, "0"); err != nil {
		if os.Getenv("ARBITER_REQUIRE_DOCKER") == "1" {
			t.Fatalf("ARBITER_REQUIRE_DOCKER=1 but no Docker daemon answers: %v", err)
		}
		t.Skipf("no Docker daemon answers (set ARBITER_REQUIRE_DOCKER=1 to make this a failure): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "refserve")
	build := exec.Command("go", "build", "-o", bin, "github.com/arbiterlab/arbiter/cmd/refserve")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build refserve: %v\n%s", err, out)
	}
	files, err := runtime.ExecutableFiles(bin, "/usr/local/bin/refserve")
	if err != nil {
		t.Fatal(err)
	}
	tag := "arbiter-test/refserve:" + randomHex(6)
	if err := (runtime.Docker{}).BuildImage(ctx, tag, files); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := (runtime.Docker{}).RemoveImage(context.Background(), tag); err != nil {
			t.Error(err)
		}
	})
	return tag
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

const dockerSpec = `version: 1
name: e2e-docker
engine:
  preset: refserve
  image: %s
  args: [--enable-hierarchical-cache, --inter-token-delay, 1ms]
runtime: {kind: docker}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 6, seed: 11, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
timeouts: {startup: 60s, request: 60s, stall: 30s}
`

// TestDockerRuntime shares one image between an experiment run through the CLI on the
// docker runtime and arbiter gc.
func TestDockerRuntime(t *testing.T) {
	image := dockerImage(t)

	t.Run("run", func(t *testing.T) {
		dir := t.TempDir()
		spec := filepath.Join(dir, "spec.yaml")
		if err := os.WriteFile(spec, fmt.Appendf(nil, dockerSpec, image), 0o644); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(dir, "results.db")
		code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "--json")
		if code != 0 {
			t.Fatalf("arbiter run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		var runs []struct {
			Arm        string `db:"name"`
			Status     string `db:"status"`
			Runtime    string `db:"runtime"`
			Endpoint   string `db:"endpoint"`
			ServerInfo string `db:"server_info"`
			Sessions   int    `db:"sessions"`
		}
		if err := ro.Select(&runs, `SELECT a.name, r.status, r.runtime, r.endpoint, coalesce(r.server_info, '') AS server_info,
			(SELECT count(*) FROM sessions s WHERE s.run_id = r.id AND s.status = 'ok') AS sessions
			FROM runs r JOIN arms a ON a.id = r.arm_id ORDER BY a.name`); err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 {
			t.Fatalf("runs = %+v, want one per arm", runs)
		}
		loopback := regexp.MustCompile(`^http://127\.0\.0\.1:\d+$`)
		for i, r := range runs {
			pin := []string{`"BF16_INDEX_K":"0"`, `"BF16_INDEX_K":"1"`}[i]
			if r.Status != "done" || r.Runtime != "docker" || r.Sessions != 6 || !loopback.MatchString(r.Endpoint) ||
				!strings.Contains(r.ServerInfo, pin) {
				t.Errorf("run %s = %+v, want done on docker at a loopback endpoint, 6 ok sessions, server info with %s",
					r.Arm, r, pin)
			}
		}
		// Every arm's container is gone once the experiment is.
		left, err := (runtime.Docker{}).Leftovers(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range left {
			if l.Image == image {
				t.Errorf("container %s of the experiment was left behind", l.Name)
			}
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "arbiter-logs", "*", "*", "*.log")) // DB id / exp-ID / run
		if len(logs) != 2 {
			t.Fatalf("engine logs = %q, want one per run", logs)
		}
		for _, p := range logs {
			b, _ := os.ReadFile(p)
			if !strings.Contains(string(b), "The server is fired up and ready to roll!") {
				t.Errorf("%s lacks the engine's ready line", p)
			}
		}
	})

	t.Run("gc", func(t *testing.T) {
		// An experiment number no real database holds, so that gc touches nothing else
		// on this daemon.
		expID := 900000000 + time.Now().UnixNano()%100000000
		exp := fmt.Sprint(expID)
		var names []string
		for _, arm := range []string{"control", "treatment"} {
			l := runtime.Launch{Name: "exp" + exp + "-" + arm + "-b0", Image: image, Command: []string{"refserve"},
				LogPath: filepath.Join(t.TempDir(), arm+".log"), ExperimentID: expID}
			inst, err := runtime.Docker{}.Start(context.Background(), l)
			if err != nil {
				t.Fatal(err)
			}
			// arbiter dies here without stopping the arm; the container stays.
			t.Cleanup(func() { inst.Stop(context.Background()) })
		}
		left, err := (runtime.Docker{}).Leftovers(context.Background(), exp)
		if err != nil || len(left) != 2 {
			t.Fatalf("leftovers of experiment %s = %+v, %v; want the two started", exp, left, err)
		}
		for _, l := range left {
			names = append(names, l.Name)
		}

		code, stdout, stderr := runCLI(t, "gc", "--dry-run", "--json", "--experiment", exp)
		var listed []struct {
			Name, Run, Experiment, State string
			Removed                      bool
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &listed) != nil || len(listed) != 2 {
			t.Fatalf("gc --dry-run --json: code %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		for _, l := range listed {
			if l.Removed || l.Experiment != exp || !slices.Contains(names, l.Name) || l.State != "running" {
				t.Errorf("dry run listed %+v", l)
			}
		}
		if left, _ := (runtime.Docker{}).Leftovers(context.Background(), exp); len(left) != 2 {
			t.Fatalf("a dry run removed containers: %d left", len(left))
		}

		code, stdout, stderr = runCLI(t, "gc", "--experiment", exp)
		if code != 0 {
			t.Fatalf("gc: code %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		for _, n := range names {
			if !strings.Contains(stdout, "removed "+n+" (running, experiment "+exp) {
				t.Errorf("gc did not report removing %s:\n%s", n, stdout)
			}
		}
		if left, err := (runtime.Docker{}).Leftovers(context.Background(), exp); err != nil || len(left) != 0 {
			t.Errorf("after gc: %+v, %v; want none", left, err)
		}
		code, stdout, _ = runCLI(t, "gc", "--experiment", exp)
		if code != 0 || strings.TrimSpace(stdout) != "no leftover containers" {
			t.Errorf("second gc: code %d, %q", code, stdout)
		}
	})

	t.Run("ssh host is a usage error", func(t *testing.T) {
		code, _, stderr := runCLI(t, "gc", "--host", "ssh://ops@node-a")
		if code != exitUsage || !strings.Contains(stderr, "not supported yet") {
			t.Errorf("gc --host ssh://: code %d, %q", code, stderr)
		}
	})
}
