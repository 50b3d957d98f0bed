package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// A shell completes an experiment argument, and a --noise-floor, with the ids of the
// --db's experiments, newest first, each described by its name and status; a command
// whose experiment is given, or a database that is not there, offers nothing, and never
// a file name.
func TestCompletionOffersTheExperimentsOfTheDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"aa-floor", "bf16-index-k"} {
		if _, err := s.CreateExperiment(context.Background(), store.Experiment{Name: name, Spec: "version: 1", Unit: "session", Alpha: 0.05, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const none = ":4\n" // ShellCompDirectiveNoFileComp, and nothing offered
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"verdict", "--db", db, ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"show", "--db", db, ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"resume", "--db", db, ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"repro", "--db", db, ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"run", "x.yaml", "--db", db, "--noise-floor", ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"plan", "x.yaml", "--db", db, "--noise-floor", ""}, []string{"2\tbf16-index-k (", "1\taa-floor ("}},
		{[]string{"verdict", "--db", db, "2", ""}, nil},
		{[]string{"verdict", "--db", filepath.Join(dir, "none.db"), ""}, nil},
	} {
		code, out, stderr := runCLI(t, append([]string{"__complete"}, c.args...)...)
		if code != exitOK {
			t.Fatalf("%q: exit %d: %s", c.args, code, stderr)
		}
		lines := strings.SplitAfter(out, "\n")
		if len(lines) != len(c.want)+2 || lines[len(lines)-2] != none {
			t.Errorf("%q offers %q, want %d experiments and no files", c.args, out, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%q offers %q at %d, want %q", c.args, lines[i], i, w)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("completing against a database that is not there made one: %v", err)
	}
}
