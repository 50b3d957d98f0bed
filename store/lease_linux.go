package store

import (
	"bytes"
	"fmt"
	"os"
)

// pidNamespace names this process's PID namespace ("pid:[4026531836]"), so that a lease
// taken in one container is never judged by a pid looked up in another on the same host.
// Empty when /proc cannot say, which leaves leases to their heartbeats.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// processExists reports whether a process with this pid exists and has not died: a
// killed arbiter stays a zombie until its parent reaps it, and a zombie holds no lease.
func processExists(pid int) bool {
	if !signalable(pid) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // it answered the signal; /proc says nothing more
	}
	// "pid (comm) S ...": the state follows the last ')', since comm may hold any byte.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		switch stat[i+2] {
		case 'Z', 'X':
			return false
		}
	}
	return true
}
