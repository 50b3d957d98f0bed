package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readOnlyDir makes dir read-only as a read-only file system does, for root too: a bind
// mount of dir onto itself, remounted read-only, undone when the test ends. It skips
// where mounts cannot be made (not root, no CAP_SYS_ADMIN), saying why.
func readOnlyDir(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root (chmod 0555 does not stop root, and a non-root test cannot mount)")
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount %s: %v (no CAP_SYS_ADMIN?)", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount %s read-only: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing in the read-only %s: %v; want EROFS", dir, err)
	}
}

// TestReadsWorkOnAReadOnlyFileSystem: a database on a read-only file system (a snapshot,
// a mounted results archive) can be read although SQLite cannot create its -shm file
// there.
func TestReadsWorkOnAReadOnlyFileSystem(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "arbiter.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	exp, _, _ := seedExperiment(t, s)
	s.Close()
	readOnlyDir(t, dir)
	db, err := OpenReadOnly(path)
	if err != nil {
		t.Fatalf("OpenReadOnly on a read-only file system: %v", err)
	}
	defer db.Close()
	e, err := FindExperiment(context.Background(), db, "1")
	if err != nil || e.ID != exp {
		t.Errorf("FindExperiment: %+v, %v", e, err)
	}
	if err := Identify(path); err != nil {
		t.Errorf("Identify: %v", err)
	}
}

// TestReadOnlyFileSystemWithAWALSaysWhy: a database whose write-ahead log holds rows but
// whose -shm is missing cannot be read on a read-only file system without losing those
// rows: the error says so, and not "no such file or directory".
func TestReadOnlyFileSystemWithAWALSaysWhy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "arbiter.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seedExperiment(t, s)
	// Copy the file set while the writer holds it open: the WAL still has the rows.
	snap := t.TempDir()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(snap, "arbiter.db"+suffix), b, 0o644)
	}
	s.Close()
	readOnlyDir(t, snap)
	_, err = OpenReadOnly(filepath.Join(snap, "arbiter.db"))
	if err == nil {
		t.Fatal("OpenReadOnly read a WAL database without its -shm on a read-only file system")
	}
	if msg := err.Error(); strings.Contains(msg, "no such file") || !strings.Contains(msg, "read-only") || !strings.Contains(msg, "-shm") {
		t.Errorf("error %q; want one that names the read-only directory and the missing -shm", msg)
	}
}

// TestReadOnlyFileSystemWithWALAndSHMReads: with both side files there (a copy of a live
// database), the write-ahead log's rows are read too.
func TestReadOnlyFileSystemWithWALAndSHMReads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "arbiter.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	exp, _, _ := seedExperiment(t, s)
	snap := t.TempDir()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(snap, "arbiter.db"+suffix), b, 0o644)
	}
	s.Close()
	readOnlyDir(t, snap)
	db, err := OpenReadOnly(filepath.Join(snap, "arbiter.db"))
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	defer db.Close()
	if e, err := FindExperiment(context.Background(), db, "1"); err != nil || e.ID != exp {
		t.Errorf("FindExperiment: %+v, %v", e, err)
	}
}
