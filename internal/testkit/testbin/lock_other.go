//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package testbin

// lockBuilds shares nothing where flock is missing: concurrent test processes then build
// on their own, as they would without it.
func lockBuilds() (unlock func(), err error) { return func() {}, nil }

// hold marks nothing, and sweep removes nothing, where flock is missing: the folders of
// ended test processes stay.
func hold(string) (int, error) { return -1, nil }
func sweep(string)             {}
