package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// recordedDone is a database holding one done experiment and one bisection, with the
// spec file they name beside it.
func recordedDone(t *testing.T) (db, spec string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "r.db")
	spec = filepath.Join(dir, "spec.yaml")
	text, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(spec, text, 0o644)
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	id, err := s.CreateExperiment(ctx, store.Experiment{Name: "done", SpecPath: spec, Spec: string(text), Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"control", "treatment"} {
		if _, err := s.AddArm(ctx, store.Arm{ExperimentID: id, Name: name, Position: i, Pins: "{}", Command: `["refserve"]`, Env: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	s.FinishExperiment(ctx, id, store.ExperimentDone, "", time.Now())
	if _, _, err := s.StartBisection(ctx, store.Bisection{Name: "b", SpecPath: spec, Spec: "version: 1", Changes: "[]",
		ErrorBudget: 0.05, Effect: 0.1, Looks: 10, MaxSteps: 1, StepAlpha: 0.05, LaunchICC: 0.05, Sessions: 1, Created: time.Now()},
		store.Owner{ID: "test", Host: "h", PID: 1}); err != nil {
		t.Fatal(err)
	}
	return db, spec
}

// TestOutputNeverReplacesWhatMustSurvive: -o naming the database, one of its journal
// files, the spec, a symbolic link, a directory or a device is bad usage (exit 2), said
// with the path and why, and every file is left as it was; run says so before it runs.
func TestOutputNeverReplacesWhatMustSurvive(t *testing.T) {
	t.Parallel()
	db, spec := recordedDone(t)
	dir := filepath.Dir(db)
	link := filepath.Join(dir, "link.md")
	os.Symlink(filepath.Join(dir, "elsewhere.md"), link)
	before := map[string][]byte{}
	for _, p := range []string{db, spec} {
		before[p], _ = os.ReadFile(p)
	}
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"verdict", "-o", db}, "the results database"},
		{[]string{"verdict", "1", "-o", db + "-wal"}, "write-ahead log"},
		{[]string{"verdict", "-o", spec}, "the spec file"},
		{[]string{"verdict", "-o", link}, "symbolic link"},
		{[]string{"verdict", "-o", dir}, "directory"},
		{[]string{"verdict", "-o", "/dev/null"}, "not a regular file"},
		{[]string{"bisect", "--verdict", "-o", db}, "the results database"},
		{[]string{"bisect", "--verdict", "1", "-o", spec}, "the spec file"},
		{[]string{"run", spec, "-o", db}, "the results database"},
		{[]string{"run", spec, "-o", db + "-shm"}, "shared-memory index"},
		{[]string{"run", spec, "-o", spec}, "the spec file"},
		{[]string{"resume", "1", "-o", db}, "the results database"},
	} {
		args := append(c.args, "--db", db)
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "refusing to write") || !strings.Contains(stderr, c.why) {
			t.Errorf("arbiter %s: exit %d, %q; want %d naming %q", strings.Join(args, " "), code, strings.TrimSpace(stderr), exitUsage, c.why)
		}
	}
	for p, b := range before {
		if now, _ := os.ReadFile(p); string(now) != string(b) {
			t.Errorf("%s changed (%d bytes, was %d)", p, len(now), len(b))
		}
	}
	for _, p := range []string{db + "-wal", db + "-shm", filepath.Join(dir, "elsewhere.md")} {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 && !strings.HasSuffix(p, "-shm") {
			t.Errorf("%s was written", p)
		}
	}
	// A new path and a regular file are written, whole.
	out := filepath.Join(dir, "v.md")
	if code, _, stderr := runCLI(t, "verdict", "-o", out, "--db", db); code != exitOK {
		t.Fatalf("verdict -o %s: exit %d, %s", out, code, stderr)
	}
	if code, _, stderr := runCLI(t, "bisect", "--verdict", "-o", filepath.Join(dir, "b.md"), "--db", db); code != exitOK {
		t.Errorf("bisect --verdict -o: exit %d, %s", code, stderr)
	}
}

// TestResumeRewritesACutVerdict: a done experiment whose verdict at the default path is
// empty (an older arbiter killed between creating it and writing it) gets its verdict
// written, whole; a whole one stops resume.
func TestResumeRewritesACutVerdict(t *testing.T) {
	t.Parallel()
	db, _ := recordedDone(t)
	ctx := context.Background()
	r, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	dbID, err := store.DatabaseID(ctx, r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(db), "verdicts", "done-"+store.ShortID(dbID)+"-1.md")
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, nil, 0o644)
	code, stdout, stderr := runCLI(t, "resume", "1", "--db", db)
	if code != exitOK || !strings.Contains(stdout, "incomplete (0 bytes): written now") {
		t.Fatalf("resume with an empty verdict: exit %d, %q, %q", code, stdout, stderr)
	}
	if md, _ := os.ReadFile(path); !strings.HasPrefix(string(md), "# Verdict: done") || !strings.HasSuffix(string(md), "`arbiter verdict 1 --db "+db+"`.\n") {
		t.Errorf("the verdict written:\n%s", md)
	}
	if code, _, stderr := runCLI(t, "resume", "1", "--db", db); code != exitUsage || !strings.Contains(stderr, "nothing to resume") {
		t.Errorf("resume with the verdict whole: exit %d, %q", code, stderr)
	}
}
