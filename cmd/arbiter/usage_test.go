package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A word a command does not know is bad usage with a suggestion, never help with exit 0;
// an experiment id that is not one is refused before anything is looked at.
func TestUsageMistakesAreRefused(t *testing.T) {
	code, stdout, stderr := runCLI(t, "image", "buld")
	if code != exitUsage || !strings.Contains(stderr, `unknown command "buld" for "arbiter image"; did you mean build?`) || stdout != "" {
		t.Errorf("image buld: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, "image"); code != 0 || !strings.Contains(stdout, "Available Commands") {
		t.Errorf("image alone: exit %d, %s", code, stdout)
	}
	db := filepath.Join(t.TempDir(), "none.db")
	for _, bad := range []string{"abc", "0", "-3", "1x"} {
		code, _, stderr := runCLI(t, "gc", "--experiment", bad, "--db", db)
		if code != exitUsage || !strings.Contains(stderr, "an experiment's id is a positive number") {
			t.Errorf("gc --experiment %s: exit %d, %s", bad, code, stderr)
		}
	}
}
