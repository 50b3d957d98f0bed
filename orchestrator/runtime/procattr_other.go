//go:build !linux

package runtime

import "syscall"

// engineProcAttr puts an engine in its own process group, so that Stop reaches every
// process it spawned. Without Linux's Pdeathsig an engine outlives an arbiter killed with
// SIGKILL here; arbiter is Linux-first (see procattr_linux.go).
func engineProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
