package runtime

import (
	"os"
	"path/filepath"
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
