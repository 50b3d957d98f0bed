// Package machinelock holds the claims that the arbiters of one machine make on what they
// share: GPUs, whoever runs them (a folder every user may write, as /tmp), and the ports
// handed to engines (a folder of the user's own). A claim is an exclusive flock on a file
// in such a folder; it lasts as long as the file is open, and ends with the process that
// held it, however it ended.
package machinelock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// PrivateDir returns the lock folder to use for dir, for claims among this user's
// arbiters: dir itself, created private (0700) if missing, when it is a folder (not a
// link) this user owns; else dir-UID, checked the same way. A file, a link or another
// user's folder at dir must neither stop arbiter nor receive its lock files.
func PrivateDir(dir string) (string, error) {
	if err := privateDir(dir); err == nil {
		return dir, nil
	}
	alt := fmt.Sprintf("%s-%d", dir, os.Getuid())
	if err := privateDir(alt); err != nil {
		return "", err
	}
	return alt, nil
}

func privateDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		if errors.Is(err, fs.ErrNotExist) {
			if err = os.MkdirAll(filepath.Dir(dir), 0o755); err == nil {
				err = os.Mkdir(dir, 0o700)
			}
		}
		if err != nil {
			return err
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if err := ours(dir, fi); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dir, 0o700) // a folder an older arbiter made shared
	}
	return nil
}

// SharedDir returns the lock folder to use for dir, for claims among the arbiters of
// every user (GPUs): dir itself, created like /tmp (every user may write, sticky), when it
// is a folder, not a link, and either this user's or sticky (so that no user can remove
// another's lock files); else this user's PrivateDir(dir), whose claims other users do
// not see.
func SharedDir(dir string) (string, error) {
	err := os.Mkdir(dir, 0o777)
	switch {
	case err == nil:
		if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
			return "", err
		}
		return dir, nil
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", err
		}
		return SharedDir(dir)
	case !errors.Is(err, fs.ErrExist):
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if fi.IsDir() && (ours(dir, fi) == nil || fi.Mode()&fs.ModeSticky != 0) {
		return dir, nil
	}
	return PrivateDir(dir)
}

// ours says why fi, found at dir, is not a folder this user owns; nil when it is one.
func ours(dir string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, not a folder", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a folder", dir)
	}
	if uid, ok := owner(fi); ok && uid != os.Getuid() {
		return fmt.Errorf("%s belongs to another user (uid %d)", dir, uid)
	}
	return nil
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
