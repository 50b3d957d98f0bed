//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockBuilds waits for the lock that every test process building arbiter's commands
// shares, a flock on a file in the temporary folder; the returned func releases it. A
// process that dies holding it releases it with its descriptors.
func lockBuilds() (unlock func(), err error) {
	f, err := openLock(filepath.Join(os.TempDir(), "arbiter-testbin.lock"))
	if err != nil {
		return nil, err
	}
	if err := flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// holdName is the file in a test process's folder whose flock says the process lives.
const holdName = ".held"

// hold takes the flock that marks dir as a live process's for as long as the returned
// descriptor stays open: a raw descriptor, which no finalizer closes, so that Dir can leave
// it open for the life of the process. The file is locked under another name and then
// renamed, so that a sweep never finds it unlocked.
func hold(dir string) (fd int, err error) {
	tmp := filepath.Join(dir, holdName+".new")
	fd, err = syscall.Open(tmp, syscall.O_RDWR|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	if err = flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		err = os.Rename(tmp, filepath.Join(dir, holdName))
	}
	if err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// sweep removes the folders under tmp of test processes that have ended: those whose
// hold file nobody has locked.
func sweep(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		folder := filepath.Join(tmp, e.Name())
		f, err := os.OpenFile(filepath.Join(folder, holdName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue // not made by this package, or not ours to lock
		}
		if flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(folder)
		}
		f.Close()
	}
}

func openLock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o666)
}

// flock takes a flock on the descriptor, again when a signal interrupts the wait.
func flock(fd int, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
