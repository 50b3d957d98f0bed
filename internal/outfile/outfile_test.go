package outfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestGuardRefusesWhatMustSurvive: the database, its journal files (present or not), the
// spec, links to any of them, and whatever is not a regular file or a new path are refused,
// each with a reason, and left as they were.
func TestGuardRefusesWhatMustSurvive(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	spec := filepath.Join(dir, "spec.yaml")
	for _, p := range []string{db, db + "-wal", spec} {
		if err := os.WriteFile(p, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(db, filepath.Join(dir, "link.md"))
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling.md"))
	os.Link(db, filepath.Join(dir, "hard.md"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	fifo := filepath.Join(dir, "fifo.md")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Logf("no fifo: %v", err)
	}
	os.Symlink(dir, filepath.Join(dir, "same"))
	g := Guard{Database: db, Specs: []string{spec}}
	for path, why := range map[string]string{
		db:                                      "the results database",
		db + "-wal":                             "write-ahead log",
		db + "-shm":                             "shared-memory index",
		db + "-journal":                         "rollback journal",
		filepath.Join(dir, "same", "r.db"):      "the results database",
		filepath.Join(dir, "sub", "..", "r.db"): "the results database",
		spec:                                    "the spec file",
		filepath.Join(dir, "link.md"):           "symbolic link",
		filepath.Join(dir, "dangling.md"):       "symbolic link",
		filepath.Join(dir, "hard.md"):           "the results database",
		filepath.Join(dir, "sub"):               "directory",
		fifo:                                    "not a regular file",
		"/dev/null":                             "not a regular file",
	} {
		err := g.Write(path, []byte("# Verdict\n"))
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), path) {
			t.Errorf("Write(%s) = %v; want a refusal naming the path and %q", path, err, why)
		}
	}
	for _, p := range []string{db, db + "-wal", spec} {
		if b, _ := os.ReadFile(p); string(b) != "keep" {
			t.Errorf("%s now holds %q", p, b)
		}
	}
	if _, err := os.Stat(db + "-shm"); err == nil {
		t.Errorf("%s-shm was created", db)
	}
}

// TestWriteIsAtomic: a new path and an existing regular file are written whole, readable
// by all, with no temporary file left beside them.
func TestWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.md")
	os.WriteFile(old, []byte("a longer previous verdict"), 0o600)
	for _, p := range []string{filepath.Join(dir, "new", "v.md"), old} {
		if err := (Guard{}).Write(p, []byte("whole")); err != nil {
			t.Fatalf("Write(%s): %v", p, err)
		}
		fi, err := os.Stat(p)
		if b, _ := os.ReadFile(p); err != nil || string(b) != "whole" || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %q, %v, %v", p, b, err, fi.Mode())
		}
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*tmp*"))
		if len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}
