package detectors

import (
	"context"
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/plugins"
)

// PluginPrefix marks a spec's detector name as an external plugin: "plugin:/path/to/bin",
// or "plugin:NAME" for the binary arbiter-detector-NAME on PATH.
const PluginPrefix = "plugin:"

// Resolve returns the detector a spec names, and a function that releases it (it stops
// a plugin's process; for a built-in it does nothing). It is never nil when err is nil.
func Resolve(ctx context.Context, name string) (plugins.Detector, func(), error) {
	if d, ok := Builtin(name); ok {
		return d, func() {}, nil
	}
	if rest, ok := strings.CutPrefix(name, PluginPrefix); ok {
		return resolvePlugin(ctx, rest)
	}
	return nil, nil, fmt.Errorf("unknown detector %q: built-in detectors are %s; an external one is named %sPATH or %sNAME (arbiter-detector-NAME on PATH)",
		name, strings.Join(Names(), ", "), PluginPrefix, PluginPrefix)
}

// ResolveAll resolves every name; on an error it releases what it had already started.
func ResolveAll(ctx context.Context, names []string) ([]plugins.Detector, func(), error) {
	var ds []plugins.Detector
	var releases []func()
	release := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	for _, n := range names {
		d, rel, err := Resolve(ctx, n)
		if err != nil {
			release()
			return nil, nil, err
		}
		ds = append(ds, d)
		releases = append(releases, rel)
	}
	return ds, release, nil
}
