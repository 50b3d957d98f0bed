package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A detector written in Python labels an experiment's responses through go-plugin, and
// the verdict counts it beside the built-in ones.
func TestPythonDetectorInAnExperiment(t *testing.T) {
	t.Parallel()
	plugin, err := filepath.Abs("../../examples/plugins/python/arbiter-detector-tool-args")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import grpc").CombinedOutput(); err != nil {
		msg := "no python3-grpcio for /usr/bin/python3: " + strings.TrimSpace(string(out))
		if os.Getenv("ARBITER_REQUIRE_PYTHON_PLUGIN") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	buildRefserve(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	src := fmt.Sprintf(`version: 1
name: python-detector
engine:
  preset: refserve
  args: [--tool-call-parser, deepseekv4]
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 8, rounds: 2, concurrency: 8, seed: 7, temperature: 0}
detectors: [dsml-leak, "plugin:%s"]
`, plugin)
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "v.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", filepath.Join(dir, "r.db"), "-o", out)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| tool-args |") {
		t.Errorf("the verdict's detectors do not count tool-args:\n%s", md)
	}
	code, stdout, _ = runCLI(t, "query", "SELECT count(*) FROM labels WHERE detector = 'tool-args'", "--db", filepath.Join(dir, "r.db"), "--format", "csv")
	if code != exitOK || strings.Contains(stdout, "\n0\n") || !strings.Contains(stdout, "\n") {
		t.Errorf("labels of tool-args: exit %d\n%s", code, stdout)
	}
}
