package main

import (
	"os"
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

// A --db that is not a results database is bad usage (exit 2), for readers as for run.
func TestDBThatIsNotADatabaseIsBadUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.db")
	if err := os.WriteFile(path, []byte("these are notes, not a database\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ls"}, {"show", "1"}, {"verdict", "1"}, {"query", "SELECT 1"}} {
		code, _, stderr := runCLI(t, append(args, "--db", path)...)
		if code != exitUsage || !strings.Contains(stderr, "not an arbiter database") {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
}
