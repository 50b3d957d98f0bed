// Package machinelock holds the claims that the arbiters of one machine make on what they
// share, whoever runs them: GPUs, and the ports handed to engines. A claim is an
// exclusive flock on a file in a folder every user may write, as /tmp; it lasts as long
// as the file is open, and ends with the process that held it, however it ended.
package machinelock

import (
	"errors"
	"io/fs"
	"os"
)

// Dir creates the lock folder, shared by every user like /tmp itself.
func Dir(dir string) error {
	err := os.Mkdir(dir, 0o777)
	switch {
	case err == nil:
		return os.Chmod(dir, 0o777|fs.ModeSticky)
	case errors.Is(err, fs.ErrExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	}
	return err
}

// Open opens (creating if needed) a lock file that any user may lock, never through a
// symbolic link.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o666)
	if errors.Is(err, fs.ErrPermission) {
		f, err = os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	}
	if err != nil {
		return nil, err
	}
	_ = f.Chmod(0o666) // the umask must not lock other users out; fails harmlessly on theirs
	return f, nil
}
