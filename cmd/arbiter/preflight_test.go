//go:build linux

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
)

// refusedSpec is the quickstart's two arms with the given engine and runtime lines.
func refusedSpec(engine, runtimeSection string) string {
	return `version: 1
name: preflight
engine:
  preset: refserve
` + engine + `
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 2, concurrency: 4, seed: 1, temperature: 0}
timeouts: {startup: 30s, request: 30s, stall: 10s}
` + runtimeSection
}

// runRefused runs the spec and checks that arbiter refused it at the preflight, saying
// want, and left neither an experiment nor a verdict behind.
func runRefused(t *testing.T, src, want string) {
	t.Helper()
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db)
	if code != exitError || !strings.Contains(stderr, "preflight failed") || !strings.Contains(stderr, want) {
		t.Errorf("run: exit %d, want %d and a preflight failure saying %q\nstdout:\n%s\nstderr:\n%s", code, exitError, want, stdout, stderr)
	}
	// Nothing recorded: the database was never created, and no verdict written.
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		code, out, _ := runCLI(t, "ls", "--db", db)
		t.Errorf("a database exists after a failed preflight (%v); ls (exit %d):\n%s", err, code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "verdicts")); !os.IsNotExist(err) {
		t.Errorf("a verdicts folder exists after a failed preflight (%v)", err)
	}
	code, stdout, _ = runCLI(t, "validate", "--preflight", spec)
	if code != exitError || !strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, want) {
		t.Errorf("validate --preflight: exit %d, want %d and a FAIL line saying %q:\n%s", code, exitError, want, stdout)
	}
	// --json: one document, the spec's summary with the checks in it.
	code, stdout, _ = runCLI(t, "validate", "--preflight", "--json", spec)
	var doc struct {
		Name      string `json:"name"`
		Preflight struct {
			Checks []struct {
				OK     bool   `json:"ok"`
				Detail string `json:"detail"`
			} `json:"checks"`
		} `json:"preflight"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&doc); err != nil || dec.More() || code != exitError || doc.Name != "preflight" {
		t.Fatalf("validate --preflight --json: exit %d, %v, one document: %v\n%s", code, err, !dec.More(), stdout)
	}
	failed := false
	for _, c := range doc.Preflight.Checks {
		failed = failed || (!c.OK && strings.Contains(c.Detail, want))
	}
	if !failed {
		t.Errorf("validate --preflight --json lists no failed check saying %q:\n%s", want, stdout)
	}
}

func TestFailedPreflightLeavesNothing(t *testing.T) {
	t.Parallel()
	buildRefserve(t)

	t.Run("a fixed port that is taken", func(t *testing.T) {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		runRefused(t, refusedSpec("  args: [--disaggregation-bootstrap-port, \""+port+"\"]", ""), "--disaggregation-bootstrap-port "+port+" is taken")
	})
	t.Run("a fixed port two arms side by side would share", func(t *testing.T) {
		runRefused(t, refusedSpec("  args: [--disaggregation-bootstrap-port=1]", "runtime: {nodes: [{name: box, slots: 2}]}\n"),
			"is set for arms control, treatment, which may run side by side")
	})
	t.Run("an engine binary that is nowhere", func(t *testing.T) {
		runRefused(t, refusedSpec("  command: [no-such-engine-1a2b]", ""), "no-such-engine-1a2b: not found beside arbiter or on PATH")
	})
	t.Run("a bisection whose engine binary is nowhere", func(t *testing.T) {
		dir := t.TempDir()
		spec := filepath.Join(dir, "bisect.yaml")
		src := strings.Replace(singleCulpritSpec, "  preset: refserve\n", "  preset: refserve\n  command: [no-such-engine-1a2b]\n", 1)
		if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(dir, "results.db")
		code, stdout, stderr := runCLI(t, "bisect", spec, "--db", db)
		if code != exitError || !strings.Contains(stderr, "preflight failed") || !strings.Contains(stderr, "no-such-engine-1a2b: not found") {
			t.Errorf("bisect: exit %d, want %d and a preflight failure\nstdout:\n%s\nstderr:\n%s", code, exitError, stdout, stderr)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("a database exists after a bisection's failed preflight (%v)", err)
		}
	})
	// The model file is checked before any engine starts: it is handed to every launch
	// once its engine is ready, so a bad one would fail each launch in turn.
	modelSpec := func(t *testing.T, model string) string {
		gguf, err := filepath.Abs("../../examples/models/toolcall.gguf")
		if err != nil {
			t.Fatal(err)
		}
		return `version: 1
name: preflight
engine:
  preset: ollama
  model: {name: toolcall, ` + strings.ReplaceAll(model, "@toolcall@", gguf) + `}
arms:
  p1: {env: {OLLAMA_NUM_PARALLEL: "1"}}
  p2: {env: {OLLAMA_NUM_PARALLEL: "2"}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 2, concurrency: 4, seed: 1, temperature: 0}
`
	}
	t.Run("a model file that is not there", func(t *testing.T) {
		runRefused(t, modelSpec(t, "file: /nonexistent/toolcall.gguf"), "engine.model.file: open /nonexistent/toolcall.gguf: no such file or directory")
	})
	t.Run("a model file that is not GGUF", func(t *testing.T) {
		notGGUF := filepath.Join(t.TempDir(), "model.gguf")
		if err := os.WriteFile(notGGUF, []byte("version https://git-lfs.github.com/spec/v1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		runRefused(t, modelSpec(t, "file: "+notGGUF), "is not a GGUF file")
	})
	t.Run("heads that cannot be padded to head_dim", func(t *testing.T) {
		runRefused(t, modelSpec(t, "file: @toolcall@, head_dim: 48"), "engine.model.head_dim 48: gguf: heads of 64 cannot be padded to 48")
	})
	t.Run("a model the preflight passes", func(t *testing.T) {
		dir := t.TempDir()
		spec := filepath.Join(dir, "spec.yaml")
		if err := os.WriteFile(spec, []byte(modelSpec(t, "file: @toolcall@, head_dim: 128")), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stdout, _ := runCLI(t, "validate", "--preflight", spec)
		if !regexp.MustCompile(`(?m)^  ok   local model toolcall: .*toolcall\.gguf: heads of 64 padded to 128$`).MatchString(stdout) {
			t.Errorf("validate --preflight does not pass the model:\n%s", stdout)
		}
	})
	t.Run("an image the daemon does not have", func(t *testing.T) {
		ds := dockertest.Start(t, 1)
		runRefused(t, refusedSpec("  image: arbiter-test/absent:1", "runtime: {kind: docker, nodes: [{name: n, host: \""+ds[0].Host+"\"}]}\n"),
			"image arbiter-test/absent:1 is not on the daemon")
	})
	t.Run("a daemon that does not answer", func(t *testing.T) {
		runRefused(t, refusedSpec("  image: arbiter-test/absent:1", "runtime: {kind: docker, nodes: [{name: n, host: \"unix:///nonexistent/docker.sock\"}]}\n"),
			"no daemon answers at unix:///nonexistent/docker.sock")
	})
}
