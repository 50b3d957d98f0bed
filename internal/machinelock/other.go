//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package machinelock

import "os"

const noFollow = 0

// owner is unknown where files carry no user id arbiter can read.
func owner(os.FileInfo) (int, bool) { return 0, false }

// TryLock claims nothing where flock is missing: the arbiters of a machine then do not
// see each other's claims.
func TryLock(*os.File) (bool, error) { return true, nil }
