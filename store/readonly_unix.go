//go:build unix

package store

import "golang.org/x/sys/unix"

// dirWritable reports whether this process may create files in dir: not on a read-only
// file system (EROFS, for root too), nor in a directory its permissions close.
func dirWritable(dir string) bool {
	return unix.Access(dir, unix.W_OK) == nil
}
