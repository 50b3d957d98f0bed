//go:build unix && !linux

package store

// processExists reports whether a process with this pid exists.
func processExists(pid int) bool { return signalable(pid) }
