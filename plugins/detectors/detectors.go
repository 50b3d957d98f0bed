// Package detectors holds arbiter's built-in detectors and resolves the detector names of a
// spec: built-in names, and "plugin:" names served by external binaries.
//
// Built in:
//   - dsml-leak: tool-call markup (DeepSeek DSML and V3 tokens, Qwen/Hermes, Kimi, Llama,
//     Anthropic-style) leaked into the assistant's content outside code, and DeepSeek
//     markup fragments whose angle brackets were lost.
//   - toolcall-schema: structured tool calls that name an unknown tool, carry arguments
//     that are not a JSON object, or break the tool's JSON schema.
//   - repetition: degenerate repetition loops in the content.
package detectors

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/arbiterlab/arbiter/plugins"
)

// builtins constructs each built-in detector by name.
var builtins = map[string]func() plugins.Detector{
	DSMLLeakName:       func() plugins.Detector { return dsmlLeak{} },
	ToolcallSchemaName: func() plugins.Detector { return toolcallSchema{} },
	RepetitionName:     func() plugins.Detector { return repetition{} },
}

// Builtin returns the built-in detector of that name.
func Builtin(name string) (plugins.Detector, bool) {
	f, ok := builtins[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// Names lists the built-in detectors, sorted.
func Names() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Label runs every detector on r and reports their labels and whether any says corrupted.
// A detector that fails contributes no label; the others still run, and the failures come
// back joined, each naming its detector.
func Label(ctx context.Context, ds []plugins.Detector, r plugins.Response) ([]plugins.Label, bool, error) {
	labels := make([]plugins.Label, 0, len(ds))
	corrupted := false
	var errs []error
	for _, d := range ds {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		l, err := d.Detect(ctx, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("detector %s: %w", d.Name(), err))
			continue
		}
		if l.Detector == "" {
			l.Detector = d.Name()
		}
		corrupted = corrupted || l.Corrupted
		labels = append(labels, l)
	}
	return labels, corrupted, errors.Join(errs...)
}
