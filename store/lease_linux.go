package store

import "os"

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
