package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
)

// These tests drive ollama, an engine arbiter did not write, built for the CPU (go install
// github.com/ollama/ollama@v0.6.5; CI builds it and sets ARBITER_REQUIRE_OLLAMA=1).

// withOllama writes the example at path into dir, with the changes of r if any, its
// engine run from the test's ollama binary by path (the tests run in parallel, so none
// changes $PATH), and returns the copy's path.
func withOllama(t *testing.T, path, dir string, r *strings.Replacer) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	if r != nil {
		text = r.Replace(text)
	}
	pinned := strings.Replace(text, "  preset: ollama\n", fmt.Sprintf("  preset: ollama\n  command: [%q, serve]\n", testbin.Ollama(t)), 1)
	if pinned == text {
		t.Fatalf("%s has no ollama engine to run from a path", path)
	}
	spec := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(spec, []byte(pinned), 0o644); err != nil {
		t.Fatal(err)
	}
	return spec
}

// On a CPU, ollama leaves flash attention off and its KV cache in f16 whatever its env
// asks, and says so only in its log: the KV-cache example is refused before any traffic,
// with exit code 5, and its verdict names the pins and what the engine reported.
func TestOllamaKVCacheExampleRefusedOnCPU(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := withOllama(t, "../../examples/ollama-kv-cache.yaml", dir, nil)
	db, out := filepath.Join(dir, "r.db"), filepath.Join(dir, "kv.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", out)
	if code != exitPinRefused {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, exitPinRefused, stdout, stderr)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**Not judged: pins did not take effect.**", "Arm **q4_0** pinned `OLLAMA_KV_CACHE_TYPE=q4_0`, and its engine reported `f16`",
		"type_k = 'f16'", "`OLLAMA_FLASH_ATTENTION=1`", "<summary>Pins as the engines reported them</summary>", "| q8_0 | b0 | `OLLAMA_KV_CACHE_TYPE=q8_0` | f16 | not in effect |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the verdict does not say %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "<summary>Results by arm</summary>") {
		t.Errorf("a refused experiment's verdict shows results:\n%s", md)
	}
	st, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var sent int
	if err := st.Get(&sent, `SELECT count(*) FROM turns`); err != nil || sent != 0 {
		t.Errorf("%d turns recorded (%v): a refused experiment sends no traffic", sent, err)
	}
	var refused []string
	if err := st.Select(&refused, `SELECT a.name || ':' || p.got FROM pin_checks p JOIN runs r ON r.id = p.run_id JOIN arms a ON a.id = r.arm_id
		WHERE p.pin = 'OLLAMA_KV_CACHE_TYPE' AND p.status = ? ORDER BY a.name`, store.PinNotInEffect); err != nil {
		t.Fatal(err)
	}
	if strings.Join(refused, " ") != "q4_0:f16 q8_0:f16" {
		t.Errorf("KV-cache pins not in effect: %q, want q4_0's and q8_0's, reported f16", refused)
	}
}

// Divergence between arms is judged against the divergence between identical arms: the
// parallel example's p16-again repeats p16, and p1 is tested against that floor. The
// example's workload, made smaller to keep the suite short.
func TestOllamaParallelExampleJudgedAgainstTheFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := withOllama(t, "../../examples/ollama-parallel.yaml", dir,
		strings.NewReplacer("sessions: 32", "sessions: 6", "concurrency: 16", "concurrency: 6", "max_tokens: 32", "max_tokens: 12"))
	out := filepath.Join(dir, "p.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", filepath.Join(dir, "r.db"), "-o", out)
	if code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**p1** ", " from p16 ", "the A/A floor: ", "; the floor, p16-again, which repeats p16's pins, departed in ", "| p16-again | 6 |", "| the floor |",
		"| p1 | b0 | `OLLAMA_NUM_PARALLEL=1` | 1 | verified |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the verdict does not say %q:\n%s", want, md)
		}
	}
}
