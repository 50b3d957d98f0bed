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
//   - finish-anomaly: a finish_reason that contradicts the reply or the request's
//     tool_choice ("stop" with markup in content, "length" cutting a call that was due).
//   - divergence: cross-arm; at temperature 0, the first turn and rune where an arm's
//     session departs from the baseline arm's (FirstDivergence). It labels no single
//     response: the orchestrator runs it over the stored turns once every arm has run.
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
	FinishAnomalyName:  func() plugins.Detector { return finishAnomaly{} },
	DivergenceName:     func() plugins.Detector { return divergence{} },
}

// Builtin returns the built-in detector of that name.
func Builtin(name string) (plugins.Detector, bool) {
	f, ok := builtins[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// ResponseNames lists the built-in detectors that judge one response at a time, sorted:
// every built-in but the cross-arm ones.
func ResponseNames() []string {
	var out []string
	for _, n := range Names() {
		if !IsCrossArm(n) {
			out = append(out, n)
		}
	}
	return out
}

// Names lists the built-in detectors, sorted, cross-arm ones included.
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
// back joined, each naming its detector. Cross-arm detectors (divergence) are skipped:
// they judge sessions across arms after a run.
func Label(ctx context.Context, ds []plugins.Detector, r plugins.Response) ([]plugins.Label, bool, error) {
	labels := make([]plugins.Label, 0, len(ds))
	corrupted := false
	var errs []error
	for _, d := range ds {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if _, cross := d.(crossArm); cross {
			continue
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

// inChoice is what a detector says of choice ci of a completion: as it is for the first
// (most completions have one), prefixed "choice N: " for any other.
func inChoice(ci int, s string) string {
	if ci == 0 {
		return s
	}
	return fmt.Sprintf("choice %d: %s", ci, s)
}
