//go:build unix

package store

import (
	"errors"
	"syscall"
)

// signalable reports whether a process with this pid exists (a process of another user
// counts: signalling it is refused, not unknown).
func signalable(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
