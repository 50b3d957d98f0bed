// Package version is arbiter's version, as the build recorded it. It is printed by
// arbiter version and stored with every experiment, so that a result names the build that
// produced it.
package version

import (
	"runtime/debug"
)

// version is set at link time by the Makefile:
//
//	go build -ldflags "-X github.com/arbiterlab/arbiter/internal/version.version=v1.2.3"
var version string

// String is arbiter's version: the one set at link time, else the module version of a
// `go install`ed build, else "devel" with the commit it was built from (and "+dirty" when
// the work tree had changes), else "devel".
func String() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return "devel-" + rev
}
