package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Ollama returns the path of an ollama binary for tests that drive a real engine arbiter
// did not write: $ARBITER_OLLAMA, else ollama on PATH, else bin/ollama under GOPATH
// (where `go install github.com/ollama/ollama@v0.6.5` puts it). Without one the test is
// skipped, or fails when ARBITER_REQUIRE_OLLAMA=1 (as in CI).
func Ollama(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ARBITER_OLLAMA"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("ARBITER_OLLAMA=%s: %v", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "ollama")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	msg := "no ollama binary: set ARBITER_OLLAMA, put ollama on PATH, or go install github.com/ollama/ollama@v0.6.5"
	if os.Getenv("ARBITER_REQUIRE_OLLAMA") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
