package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/store"
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

// A missing argument says how the command is used, a mistyped flag the flag meant, and
// a failure asked for in JSON answers in JSON on stdout.
func TestUsageErrorsSayWhatWasMeant(t *testing.T) {
	if code, _, stderr := runCLI(t, "run"); code != exitUsage || !strings.Contains(stderr, "usage: arbiter run SPEC [flags] (arbiter run --help says more)") {
		t.Errorf("run without a spec: exit %d, %s", code, stderr)
	}
	db := filepath.Join(t.TempDir(), "r.db")
	if code, _, stderr := runCLI(t, "ls", "--dbb", db); code != exitUsage || !strings.Contains(stderr, "unknown flag: --dbb; did you mean --db?") {
		t.Errorf("ls --dbb: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "ls", "--formt", "csv"); code != exitUsage || !strings.Contains(stderr, "did you mean --format?") {
		t.Errorf("ls --formt: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "ls", "--zzzzzz"); code != exitUsage || strings.Contains(stderr, "did you mean") || !strings.Contains(stderr, "arbiter ls --help lists the flags") {
		t.Errorf("ls --zzzzzz: exit %d, %s", code, stderr)
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, stdout, stderr := runCLI(t, "show", "99", "--json", "--db", db)
	var out struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != exitNotFound || out.ExitCode != exitNotFound || !strings.Contains(out.Error, "experiment 99: not found") {
		t.Errorf("show 99 --json: exit %d, stdout %q (%v), stderr %s", code, stdout, err, stderr)
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

// run --help says how arms run: a block's arms start together and get the workload at
// the same moment (orchestrator's runBlock), not one after another.
func TestRunHelpSaysArmsStartTogether(t *testing.T) {
	code, stdout, stderr := runCLI(t, "run", "--help")
	if code != exitOK {
		t.Fatalf("run --help: exit %d, %s", code, stderr)
	}
	help := strings.Join(strings.Fields(stdout), " ")
	if strings.Contains(help, "in turn") || !strings.Contains(help, "the arms of a block start together") || !strings.Contains(help, "at the same moment") {
		t.Errorf("run --help does not say that a block's arms start together:\n%s", stdout)
	}
}
