//go:build !unix

package store

// processExists cannot look on this system: a lease is then judged by its heartbeat
// alone.
func processExists(int) bool { return true }
