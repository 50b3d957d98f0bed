//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testbin

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The builds' lock excludes every other holder until it is released: a second open of the
// lock file cannot take it meanwhile, as another test process could not.
func TestBuildsTakeTurns(t *testing.T) {
	unlock, err := lockBuilds()
	if err != nil {
		t.Fatal(err)
	}
	other, err := openLock(filepath.Join(os.TempDir(), "arbiter-testbin.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("the lock was taken while a build held it: %v", err)
	}
	unlock()
	if err := flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the lock could not be taken after the build released it: %v", err)
	}
}

// A sweep removes the folders of test processes that ended (their hold file unlocked) and
// leaves those of live ones, and every folder it did not make.
func TestSweepRemovesOnlyEndedProcessesFolders(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name string, withHold bool) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if withHold {
			if err := os.WriteFile(filepath.Join(d, holdName), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	ended := mk(dirPrefix+"1", true)
	live := mk(dirPrefix+"2", false)
	fd, err := hold(live)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	unheld := mk(dirPrefix+"3", false)
	other := mk("arbiter-other", true)
	sweep(tmp)
	for d, want := range map[string]bool{ended: false, live: true, unheld: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: there = %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
