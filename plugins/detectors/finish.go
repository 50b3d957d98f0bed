package detectors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
	"github.com/arbiterlab/arbiter/plugins"
)

// FinishAnomalyName is the spec name of the detector of replies whose end contradicts
// what they hold or what the request asked.
const FinishAnomalyName = "finish-anomaly"

// finishAnomaly flags a reply whose finish_reason contradicts its content or the
// request's tool_choice:
//   - "stop" (or "tool_calls") with unquoted tool-call markup in content: the parser never
//     closed a call, yet the engine reported a normal end. This is how the field's
//     corrupted replies looked: HTTP 200, finish_reason "stop", markup in content.
//   - "length" where a call was due (tools offered, tool_choice not "none"), cut inside
//     the call: markup left in content, or a structured call whose arguments stop short
//     of one JSON value, or no call at all when tool_choice required one.
//   - "tool_calls" with no structured tool call in the reply.
//   - a reply that breaks tool_choice: no call under "required" or a named function, a
//     call of another function than the one named, or any call under "none".
//
// Not flagged, because engines do it legitimately: "stop" with structured tool_calls
// (OpenAI's own API and vLLM report "stop" for a forced or named call), "length" in
// plain prose (the reply simply ran to max_tokens), "abort" (SGLang's reason for an
// aborted request) and an empty finish_reason (a request cut short; the transport error
// is recorded with the turn).
type finishAnomaly struct{}

func (finishAnomaly) Name() string { return FinishAnomalyName }

func (finishAnomaly) inProcess() {}

func (finishAnomaly) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", FinishAnomalyName, err)
	}
	choice := readToolChoice(r.ToolChoice)
	for ci, c := range r.Completion.Choices {
		why := finishProblem(c, len(r.Tools) > 0, choice)
		if why == "" {
			continue
		}
		return plugins.Label{Detector: FinishAnomalyName, Corrupted: true, Reason: inChoice(ci, why)}, nil
	}
	return plugins.Label{Detector: FinishAnomalyName}, nil
}

// readToolChoice reads a request's tool_choice leniently: a detector judges replies, not
// requests, so one it cannot read counts as auto.
func readToolChoice(raw json.RawMessage) openai.ToolChoice {
	c, err := openai.ParseToolChoice(raw)
	if err != nil {
		return openai.ToolChoice{Mode: openai.ChoiceAuto}
	}
	return c
}

// finishProblem returns what is wrong with how one choice ended, or "".
func finishProblem(c openai.Choice, toolsOffered bool, choice openai.ToolChoice) string {
	calls := c.Message.ToolCalls
	leak, leaked := findLeak(c.Message.Content)
	forced := choice.Forces()
	due := toolsOffered && choice.Mode != openai.ChoiceNone
	switch c.FinishReason {
	case "stop", "tool_calls":
		if leaked {
			return fmt.Sprintf("finish_reason %q with %s markup in content, first at rune %d: %q; the parser closed no call, yet the engine reported a normal end",
				c.FinishReason, leak.format, leak.rune, leak.excerpt)
		}
		if c.FinishReason == "tool_calls" && len(calls) == 0 {
			return `finish_reason "tool_calls" but the reply holds no tool call`
		}
		if forced && toolsOffered && len(calls) == 0 {
			return fmt.Sprintf("tool_choice %s requires a call, but the reply ended (%q) without one", choice, c.FinishReason)
		}
	case "length":
		if !due {
			break
		}
		if leaked {
			return fmt.Sprintf(`finish_reason "length" cut a tool call short: %s markup in content, first at rune %d: %q`,
				leak.format, leak.rune, leak.excerpt)
		}
		for i, tc := range calls {
			args := strings.TrimSpace(tc.Function.Arguments)
			if args == "" {
				continue // no arguments yet: judged below with the missing call
			}
			if _, err := toolschema.DecodeJSON([]byte(args)); err != nil {
				return fmt.Sprintf(`finish_reason "length" cut tool call %d (%s) mid-arguments: %q`,
					i, excerpt(tc.Function.Name, 40), excerpt(args, excerptRunes))
			}
		}
		if forced && len(calls) == 0 {
			return fmt.Sprintf(`finish_reason "length" before the call that tool_choice %s requires`, choice)
		}
	}
	if len(calls) > 0 {
		switch choice.Mode {
		case "none":
			return fmt.Sprintf(`tool_choice "none", yet the reply calls %s`, excerpt(calls[0].Function.Name, 40))
		case "function":
			for _, tc := range calls {
				if tc.Function.Name != choice.Name {
					return fmt.Sprintf("tool_choice %s, but the reply calls %q", choice, excerpt(tc.Function.Name, 40))
				}
			}
		}
	}
	return ""
}
