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
		d, release, err := resolvePlugin(ctx, rest)
		if err != nil {
			return nil, nil, err
		}
		// The built-ins' names are theirs: labels are kept by detector name, and a
		// plugin under one would overwrite the built-in's findings.
		if _, builtin := builtins[d.Name()]; builtin {
			release()
			return nil, nil, fmt.Errorf("detector %s: the plugin calls itself %q, the name of a built-in detector; built-in names (%s) are reserved",
				name, d.Name(), strings.Join(Names(), ", "))
		}
		return d, release, nil
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
	by := map[string]string{} // a detector's own name: the spec's name for it
	for _, n := range names {
		d, rel, err := Resolve(ctx, n)
		if err != nil {
			release()
			return nil, nil, err
		}
		releases = append(releases, rel)
		if other, dup := by[d.Name()]; dup {
			release()
			return nil, nil, fmt.Errorf("detectors %s and %s both call themselves %q: each detector's labels are kept under its own name",
				other, n, d.Name())
		}
		by[d.Name()] = n
		ds = append(ds, d)
	}
	return ds, release, nil
}
