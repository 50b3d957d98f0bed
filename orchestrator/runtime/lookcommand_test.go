package runtime

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLookCommandFindsEnginesAsDocsSpecSays: a bare name is looked for beside arbiter's
// executable first, then on PATH; a name with a slash is taken as it is; a name found
// nowhere is an error that says where it was looked for.
func TestLookCommandFindsEnginesAsDocsSpecSays(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Skip("no executable path:", err)
	}
	// The test binary's own name is beside itself: found there even with an empty PATH.
	t.Setenv("PATH", "")
	if got, err := LookCommand(filepath.Base(self)); err != nil || got != filepath.Join(filepath.Dir(self), filepath.Base(self)) {
		t.Errorf("beside arbiter: %q, %v; want %s", got, err, self)
	}
	dir := t.TempDir()
	engine := filepath.Join(dir, "fake-engine-on-path")
	if err := os.WriteFile(engine, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := LookCommand("fake-engine-on-path"); err != nil || got != engine {
		t.Errorf("on PATH: %q, %v; want %s", got, err, engine)
	}
	if got, err := LookCommand(engine); err != nil || got != engine {
		t.Errorf("a path: %q, %v; want it as it is", got, err)
	}
	if _, err := LookCommand("no-such-engine-anywhere"); err == nil || !strings.Contains(err.Error(), "not found beside arbiter or on PATH") {
		t.Errorf("a missing engine: %v", err)
	}
}

// A missing engine's hint is a command that makes it: refserve's is a target of the
// Makefile, and ollama's builds the version CI builds (.ci/run), so following the hint
// gives the engine the tests ran against.
func TestMissingEngineHintsAreTrue(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	root := filepath.Join("..", "..")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	version := regexp.MustCompile(`(?m)^OLLAMA_VERSION=(\S+)$`).FindSubmatch(ci)
	if version == nil {
		t.Fatal(".ci/run no longer sets OLLAMA_VERSION")
	}
	if !strings.Contains(string(ci), `go install`) || !strings.Contains(string(ci), `"github.com/ollama/ollama@$OLLAMA_VERSION"`) {
		t.Fatal(".ci/run no longer builds ollama with go install")
	}

	_, err = LookCommand("ollama")
	if err == nil {
		t.Skip("an ollama is beside the test binary")
	}
	if want := "go install github.com/ollama/ollama@" + string(version[1]); !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "make build") {
		t.Errorf("missing ollama: %v; want the hint %q and no make build", err, want)
	}

	_, err = LookCommand("refserve")
	if err == nil {
		t.Skip("a refserve is beside the test binary")
	}
	if !strings.Contains(err.Error(), "make build") || !regexp.MustCompile(`(?m)^build:[^\n]*\n(?:\t[^\n]*\n)*\t[^\n]*-o \$\(BIN\)/refserve \./cmd/refserve`).Match(makefile) {
		t.Errorf("missing refserve: %v; want make build, whose recipe builds bin/refserve", err)
	}

	_, err = LookCommand("no-such-engine-anywhere")
	if err == nil || strings.Contains(err.Error(), "make build") || strings.Contains(err.Error(), "go install") {
		t.Errorf("an engine arbiter does not build: %v; want no build command", err)
	}
}
