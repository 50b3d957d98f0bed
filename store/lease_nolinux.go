//go:build !linux

package store

// pidNamespace is the same for every process of a host without PID namespaces.
func pidNamespace() string { return "host" }
