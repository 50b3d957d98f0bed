package detectors

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
	"github.com/arbiterlab/arbiter/plugins"
)

// ToolcallSchemaName is the spec name of the detector of malformed structured tool calls.
const ToolcallSchemaName = "toolcall-schema"

// maxProblems bounds how many problems a reason spells out; the rest are counted.
const maxProblems = 3

// toolcallSchema checks every structured tool call: it names a tool that was offered (when
// the request's tools are known), its arguments are one JSON object, and they meet the
// tool's JSON Schema, every keyword of it (minimum, maximum, pattern, $ref, oneOf, ...),
// read by openai/toolschema, the reader the workload and refserve share. It also flags
// the signatures that a corrupted decode leaves: a replacement character U+FFFD, a
// spurious "arguments" wrapper object, and {} where the schema requires fields.
//
// A tool whose parameters are not a readable schema is checked for name and JSON only:
// the request is arbiter's own, and a bad schema there says nothing about the engine.
type toolcallSchema struct{}

func (toolcallSchema) Name() string { return ToolcallSchemaName }

func (toolcallSchema) inProcess() {}

func (toolcallSchema) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", ToolcallSchemaName, err)
	}
	offered := toolschema.Of(r.Tools)
	var problems []string
	n := 0
	for ci, c := range r.Completion.Choices {
		for ti, tc := range c.Message.ToolCalls {
			where := fmt.Sprintf("tool call %d", ti)
			if ci > 0 {
				where = fmt.Sprintf("choice %d tool call %d", ci, ti)
			}
			if tc.Function.Name != "" {
				where += fmt.Sprintf(" (%s)", excerpt(tc.Function.Name, 40))
			}
			for _, p := range checkCall(tc, offered, len(r.Tools) > 0) {
				n++
				if len(problems) < maxProblems {
					problems = append(problems, where+": "+p)
				}
			}
		}
	}
	if n == 0 {
		return plugins.Label{Detector: ToolcallSchemaName}, nil
	}
	reason := strings.Join(problems, "; ")
	if n > len(problems) {
		reason += fmt.Sprintf("; and %d more", n-len(problems))
	}
	return plugins.Label{Detector: ToolcallSchemaName, Corrupted: true, Reason: reason}, nil
}

// checkCall returns the problems of one structured call, most telling first.
func checkCall(tc openai.ToolCall, offered *toolschema.Set, known bool) []string {
	var out []string
	name, args := tc.Function.Name, tc.Function.Arguments
	if name == "" {
		out = append(out, "no function name")
	}
	// The character may arrive raw, as invalid UTF-8, or JSON-escaped inside a string.
	if strings.ContainsRune(name+args, utf8.RuneError) || !utf8.ValidString(name+args) ||
		strings.Contains(strings.ToLower(args), `\ufffd`) {
		out = append(out, "replacement character U+FFFD (or invalid UTF-8) in the call")
	}
	var tool *toolschema.Tool
	if known && name != "" {
		t, ok := offered.Lookup(name)
		if !ok {
			return append(out, fmt.Sprintf("names a tool that was not offered (offered: %s)",
				excerpt(strings.Join(offered.Names(), ", "), excerptRunes)))
		}
		tool = t
	}
	if strings.TrimSpace(args) == "" {
		// Some engines send "" for a call without parameters; judge it as {}.
		args = "{}"
	}
	v, err := toolschema.DecodeJSON([]byte(args))
	if err != nil {
		return append(out, fmt.Sprintf("arguments are not JSON (%v): %q", err, excerpt(args, excerptRunes)))
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return append(out, fmt.Sprintf("arguments are a JSON %s, not an object", toolschema.Kind(v)))
	}
	readable := tool != nil && tool.Schema != nil
	if isWrapper(obj) && (!readable || !tool.Declares("arguments")) {
		return append(out, fmt.Sprintf("spurious %q wrapper around the arguments", "arguments"))
	}
	if !readable {
		return out
	}
	if req := tool.Required(); len(obj) == 0 && len(req) > 0 {
		return append(out, fmt.Sprintf("empty arguments {} but the tool requires %s", strings.Join(req, ", ")))
	}
	for _, vi := range tool.Validate(v) {
		out = append(out, vi.String())
	}
	return out
}

// isWrapper reports the shape {"arguments": …} or {"name": …, "arguments": …}: the whole
// call, or its envelope, nested where only the arguments belong.
func isWrapper(obj map[string]any) bool {
	if _, ok := obj["arguments"]; !ok {
		return false
	}
	_, hasName := obj["name"]
	return len(obj) == 1 || (len(obj) == 2 && hasName)
}
