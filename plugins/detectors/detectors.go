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
	"time"

	"github.com/arbiterlab/arbiter/internal/inert"
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

// MaxReasonBytes bounds the reason a label keeps: a reason says why in a few words, and
// one from a plugin is text arbiter did not write (see Judge).
const MaxReasonBytes = 1 << 10

// DefaultCallTimeout bounds one detector's judgement of one response where no spec says
// otherwise (classify, a replay): arms.DefaultDetectorTimeout, the spec's default.
const DefaultCallTimeout = 60 * time.Second

// Outcome is one detector's part in judging one response: its label, or why it gave none.
type Outcome struct {
	// Detector is the detector's own name, which its label carries whatever it claimed.
	Detector string
	// Label is its judgement when Err is nil.
	Label plugins.Label
	// Err says why it could not judge: it failed, ran past its time, or was cancelled.
	Err error
}

// Judge runs every detector that judges single responses on r, each call bounded by
// perCall (0: only by ctx), and says what each found. A label is stored under its
// detector's own name whatever the label claims, with its reason made inert (no escape
// sequences or control characters) and cut to MaxReasonBytes: a plugin can neither speak
// for another detector nor send unbounded text. Cross-arm detectors (divergence) are
// skipped: they judge sessions across arms after a run.
func Judge(ctx context.Context, ds []plugins.Detector, r plugins.Response, perCall time.Duration) []Outcome {
	out := make([]Outcome, 0, len(ds))
	for _, d := range ds {
		if _, cross := d.(crossArm); cross {
			continue
		}
		o := Outcome{Detector: d.Name()}
		if err := ctx.Err(); err != nil {
			o.Err = err
			out = append(out, o)
			continue
		}
		l, err := judgeOne(ctx, d, r, perCall)
		if err != nil {
			o.Err = err
		} else {
			o.Label = plugins.Label{Detector: o.Detector, Corrupted: l.Corrupted, Reason: inert.Text(l.Reason, MaxReasonBytes)}
		}
		out = append(out, o)
	}
	return out
}

// inProcess is a built-in detector: it runs in arbiter's process, in the caller's
// goroutine, and looks at its context only as it starts. Nothing can interrupt it, so
// its bound is its measured time rather than a timer raced against it: the same
// outcome without a timer made and stopped for every response and detector.
type inProcess interface{ inProcess() }

// judgeOne runs one detector on r, bounded by perCall (0: only by ctx). An answer that
// came after its time is a failure like any other.
func judgeOne(ctx context.Context, d plugins.Detector, r plugins.Response, perCall time.Duration) (plugins.Label, error) {
	if _, ok := d.(inProcess); ok || perCall <= 0 {
		start := time.Now()
		l, err := d.Detect(ctx, r)
		switch {
		case err != nil:
		case perCall > 0 && time.Since(start) > perCall:
			err = fmt.Errorf("answered after its %v: %w", perCall, context.DeadlineExceeded)
		case ctx.Err() != nil:
			err = fmt.Errorf("answered after its %v: %w", perCall, ctx.Err())
		}
		return l, err
	}
	cctx, cancel := context.WithTimeout(ctx, perCall)
	defer cancel()
	l, err := d.Detect(cctx, r)
	if err == nil && cctx.Err() != nil {
		err = fmt.Errorf("answered after its %v: %w", perCall, cctx.Err())
	}
	return l, err
}

// Label runs every detector on r and reports their labels and whether any says corrupted.
// A detector that fails contributes no label; the others still run, and the failures come
// back joined, each naming its detector. Labels are as Judge gives them; each call is
// bounded by DefaultCallTimeout.
func Label(ctx context.Context, ds []plugins.Detector, r plugins.Response) ([]plugins.Label, bool, error) {
	labels := make([]plugins.Label, 0, len(ds))
	corrupted := false
	var errs []error
	for _, o := range Judge(ctx, ds, r, DefaultCallTimeout) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("detector %s: %s", o.Detector, inert.Text(o.Err.Error(), MaxReasonBytes)))
			continue
		}
		corrupted = corrupted || o.Label.Corrupted
		labels = append(labels, o.Label)
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
