//go:build !unix

package store

// dirWritable cannot tell on this system; a read-only open then fails as SQLite says.
func dirWritable(string) bool { return true }
