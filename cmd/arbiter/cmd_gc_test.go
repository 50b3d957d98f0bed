package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
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
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve", testbin.Static...)
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
	t.Parallel()
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
		ctx := context.Background()
		dir := t.TempDir()
		db := filepath.Join(dir, "results.db")
		s, err := store.Open(db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		dbID, err := store.DatabaseID(ctx, s.DB())
		if err != nil {
			t.Fatal(err)
		}
		// Experiment 1 is still run by this process: its lease is live.
		live, _, err := s.StartExperiment(ctx, store.Experiment{Name: "live", Created: time.Now()}, store.ThisProcess())
		if err != nil {
			t.Fatal(err)
		}
		// Experiment 2 is over.
		over, _ := s.CreateExperiment(ctx, store.Experiment{Name: "over", Created: time.Now()})
		s.FinishExperiment(ctx, over, store.ExperimentDone, "", time.Now())
		// Experiment 3 was abandoned: its arbiter, on a host that is gone, stopped renewing
		// its lease long ago.
		ghost := store.ThisProcess()
		ghost.Host = "a-host-that-is-gone"
		abandoned, _, err := s.StartExperiment(ctx, store.Experiment{Name: "abandoned", Created: time.Now().Add(-2 * store.LeaseExpiry)}, ghost)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()

		// An engine container per experiment, and one of experiment 2 of another database
		// on the same daemon: arbiter dies without stopping any of them.
		start := func(exp int64, database string) string {
			l := runtime.Launch{Name: fmt.Sprintf("exp%d-control-b0", exp), Image: image, Command: []string{"refserve"},
				LogPath: filepath.Join(t.TempDir(), "engine.log"), ExperimentID: exp, DatabaseID: database}
			inst, err := runtime.Docker{}.Start(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { inst.Stop(context.Background()) })
			left, err := (runtime.Docker{}).Leftovers(ctx, fmt.Sprint(exp))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range left {
				if c.Database == database {
					return c.Name
				}
			}
			t.Fatalf("container of experiment %d, database %s not listed: %+v", exp, database, left)
			return ""
		}
		liveName, overName, abandonedName := start(live, dbID), start(over, dbID), start(abandoned, dbID)
		otherName := start(over, "another-database-"+randomHex(4))
		exists := func(name string) bool {
			left, err := (runtime.Docker{}).Leftovers(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(left, func(l runtime.Leftover) bool { return l.Name == name })
		}

		code, stdout, stderr := runCLI(t, "gc", "--dry-run", "--json", "--db", db)
		var listed []struct {
			Name, Experiment, State, Action, Reason, Database string
			Removed                                           bool
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &listed) != nil {
			t.Fatalf("gc --dry-run --json: code %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		actions := map[string]string{}
		for _, l := range listed {
			if l.Database != dbID || l.Removed || l.State != "running" {
				t.Errorf("dry run listed %+v", l)
			}
			actions[l.Name] = l.Action + ": " + l.Reason
		}
		for name, want := range map[string]string{liveName: "leave: experiment 1 is still running: arbiter pid",
			overName: "remove: experiment 2 is done", abandonedName: "remove: experiment 3 was abandoned"} {
			if !strings.HasPrefix(actions[name], want) {
				t.Errorf("dry run: %s: %q, want %q", name, actions[name], want)
			}
		}
		if _, ok := actions[otherName]; ok || len(actions) != 3 {
			t.Errorf("dry run listed %v; want this database's three containers only", actions)
		}
		for _, n := range []string{liveName, overName, abandonedName, otherName} {
			if !exists(n) {
				t.Fatalf("a dry run removed %s", n)
			}
		}

		// gc removes what no live experiment owns, and leaves the running engine alone.
		code, stdout, stderr = runCLI(t, "gc", "--db", db)
		if code != 0 {
			t.Fatalf("gc: code %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		for _, want := range []string{"removed " + overName + " (running, image ", "removed " + abandonedName,
			"left " + liveName, "--force kills it"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("gc output lacks %q:\n%s", want, stdout)
			}
		}
		if exists(overName) || exists(abandonedName) || !exists(liveName) || !exists(otherName) {
			t.Fatalf("after gc: over %v, abandoned %v, live %v, other database's %v; want only live and the other's left",
				exists(overName), exists(abandonedName), exists(liveName), exists(otherName))
		}

		// --force says what it kills before it does.
		code, stdout, stderr = runCLI(t, "gc", "--force", "--db", db)
		if code != 0 || !strings.Contains(stderr, "arbiter gc --force: killing "+liveName+" (running): experiment 1 is still running") ||
			!strings.Contains(stdout, "killed "+liveName) {
			t.Fatalf("gc --force: code %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		if exists(liveName) || !exists(otherName) {
			t.Fatalf("after gc --force: live %v, other database's %v; want the live one gone, the other's kept", exists(liveName), exists(otherName))
		}
		code, stdout, _ = runCLI(t, "gc", "--db", db)
		if code != 0 || strings.TrimSpace(stdout) != "no leftover containers, engine processes or Slurm jobs" {
			t.Errorf("third gc: code %d, %q", code, stdout)
		}
	})

	t.Run("gc needs a database", func(t *testing.T) {
		code, _, stderr := runCLI(t, "gc", "--db", filepath.Join(t.TempDir(), "none.db"))
		if code != exitUsage || !strings.Contains(stderr, "no results database at") {
			t.Errorf("gc without a database: code %d, %q", code, stderr)
		}
	})

	t.Run("a host that is no daemon address is a usage error", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "results.db")
		s, err := store.Open(db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		code, _, stderr := runCLI(t, "gc", "--db", db, "--host", "ssh://ops:secret@127.0.0.1")
		if code != exitUsage || !strings.Contains(stderr, "no passwords") || strings.Contains(stderr, "secret") {
			t.Errorf("gc --host ssh://user:password@: code %d, %q", code, stderr)
		}
	})
}
