package runtime

import "syscall"

// engineProcAttr puts an engine in its own process group, so that Stop reaches every
// process it spawned, and asks the kernel to send it SIGTERM if arbiter itself is killed
// outright (Pdeathsig), rather than leave it holding its port and GPUs as an orphan.
//
// arbiter is Linux-first: serving engines run on Linux, and Pdeathsig exists only there.
// Other systems build (see procattr_other.go) and run engines as processes, but an
// engine outlives an arbiter killed with SIGKILL there.
func engineProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
