package detectors

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/arbiterlab/arbiter/plugins"
)

// PluginBinaryPrefix starts the file name of an external detector found on PATH:
// "plugin:NAME" runs arbiter-detector-NAME.
const PluginBinaryPrefix = "arbiter-detector-"

// resolvePlugin launches the external detector that ref names: a path when it holds a
// slash, else a name looked up on PATH.
func resolvePlugin(ctx context.Context, ref string) (plugins.Detector, func(), error) {
	if ref == "" {
		return nil, nil, errors.New("detector \"plugin:\" names no plugin: want plugin:PATH or plugin:NAME")
	}
	path := ref
	if !strings.ContainsRune(ref, '/') {
		p, err := exec.LookPath(PluginBinaryPrefix + ref)
		if err != nil {
			return nil, nil, fmt.Errorf("detector %s%s: %w", PluginPrefix, ref, err)
		}
		path = p
	}
	d, release, err := plugins.Launch(ctx, path)
	if err != nil {
		return nil, nil, fmt.Errorf("detector %s%s: %w", PluginPrefix, ref, err)
	}
	return d, release, nil
}
