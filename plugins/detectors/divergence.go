package detectors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

// DivergenceName is the spec name of the cross-arm detector: at temperature 0, where an
// arm's output for a session first departs from the baseline arm's for the same session.
const DivergenceName = "divergence"

// ErrCrossArm is what a cross-arm detector answers when asked to judge one response: it
// compares the arms of an experiment after they ran, never a reply alone.
var ErrCrossArm = errors.New("compares the arms of an experiment after they ran; it cannot judge one response")

// crossArm marks a detector that judges sessions across arms after a run; Label leaves
// it out, and the orchestrator runs it once every arm has run.
type crossArm interface{ crossArm() }

// IsCrossArm reports whether the built-in detector of that name judges across arms.
func IsCrossArm(name string) bool {
	d, ok := Builtin(name)
	if !ok {
		return false
	}
	_, cross := d.(crossArm)
	return cross
}

// divergence stands for the cross-arm comparison in a spec's detectors list. Its work
// is FirstDivergence, run by the orchestrator over the stored turns of every arm.
type divergence struct{}

func (divergence) Name() string { return DivergenceName }
func (divergence) crossArm()    {}

func (divergence) Detect(ctx context.Context, _ plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", DivergenceName, err)
	}
	return plugins.Label{}, fmt.Errorf("%s %w", DivergenceName, ErrCrossArm)
}

// TurnOutput is what an arm produced in one turn of a session: the part of a reply that
// is identical between two launches of a deterministic engine at temperature 0.
type TurnOutput struct {
	Content string
	// ToolCalls are compared by name and arguments; call ids are the engine's to pick.
	ToolCalls    []openai.ToolCall
	FinishReason string
}

// Divergence is the first place an arm's session departs from the baseline's.
type Divergence struct {
	// Turn is the index of the first turn that differs.
	Turn int
	// Field is what differs in that turn: "content", "tool calls" (their number),
	// "tool call N name", "tool call N arguments" or "finish_reason".
	Field string
	// Rune is the rune offset in Field of the first difference.
	Rune int
	// Baseline and Arm are what each side holds from a few runes before that offset.
	Baseline, Arm string
}

// excerptBefore is how many runes of common text a divergence's excerpts keep before the
// first difference, so a reader sees where in the text it happened.
const excerptBefore = 12

// String says where the arm departs from the baseline, quoting both sides.
func (d Divergence) String() string {
	return fmt.Sprintf("turn %d %s differs at rune %d: baseline %q, this arm %q", d.Turn, d.Field, d.Rune, d.Baseline, d.Arm)
}

// FirstDivergence compares an arm's session with the baseline's, turn by turn over the
// turns both have, and returns the first difference. Sessions that agree on every turn
// both have do not diverge: a session that ended early (its request failed, or it was
// lost) says nothing about what the engine would have written.
func FirstDivergence(baseline, arm []TurnOutput) (Divergence, bool) {
	for t := range min(len(baseline), len(arm)) {
		if d, ok := turnDivergence(baseline[t], arm[t]); ok {
			d.Turn = t
			return d, true
		}
	}
	return Divergence{}, false
}

// turnDivergence compares one turn: content first, then the calls, then how it ended.
func turnDivergence(b, a TurnOutput) (Divergence, bool) {
	if d, ok := textDivergence("content", b.Content, a.Content); ok {
		return d, true
	}
	for i := range min(len(b.ToolCalls), len(a.ToolCalls)) {
		bf, af := b.ToolCalls[i].Function, a.ToolCalls[i].Function
		if d, ok := textDivergence("tool call "+strconv.Itoa(i)+" name", bf.Name, af.Name); ok {
			return d, true
		}
		if d, ok := textDivergence("tool call "+strconv.Itoa(i)+" arguments", bf.Arguments, af.Arguments); ok {
			return d, true
		}
	}
	if len(b.ToolCalls) != len(a.ToolCalls) {
		return Divergence{Field: "tool calls", Rune: 0,
			Baseline: strconv.Itoa(len(b.ToolCalls)) + " calls", Arm: strconv.Itoa(len(a.ToolCalls)) + " calls"}, true
	}
	if b.FinishReason != a.FinishReason {
		// Cut as the texts' excerpts are: the engine writes the finish reason, and one that
		// writes a long one would otherwise carry it whole into the label and the verdict.
		return Divergence{Field: "finish_reason", Baseline: excerpt(b.FinishReason, excerptRunes), Arm: excerpt(a.FinishReason, excerptRunes)}, true
	}
	return Divergence{}, false
}

// textDivergence finds the first rune where two texts differ; a text that is a prefix
// of the other differs where it ends.
func textDivergence(field, b, a string) (Divergence, bool) {
	if a == b {
		return Divergence{}, false
	}
	i, r := 0, 0 // byte offset and rune offset of the first difference
	for i < len(a) && i < len(b) {
		ra, na := utf8.DecodeRuneInString(a[i:])
		rb, nb := utf8.DecodeRuneInString(b[i:])
		if ra != rb || na != nb || a[i:i+na] != b[i:i+nb] {
			break
		}
		i += na
		r++
	}
	from := i
	for k := 0; k < excerptBefore && from > 0; k++ {
		_, n := utf8.DecodeLastRuneInString(b[:from])
		from -= n
	}
	return Divergence{Field: field, Rune: r, Baseline: excerpt(b[from:], excerptRunes), Arm: excerpt(a[from:], excerptRunes)}, true
}
