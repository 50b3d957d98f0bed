package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// SecretFinder says where secrets are written in a text; arms.Redactor is one.
type SecretFinder interface {
	// Find returns the byte ranges [start, end) of s that hold a secret, in order and
	// without overlap.
	Find(s string) [][2]int
	// FindCut is Find for a text cut short: the start of a secret at its very end
	// counts too.
	FindCut(s string) [][2]int
}

// RedactRaw returns a response body as Exchange.Raw holds it, rewritten so that no
// secret can be read back from it, in f's sense, even one that the engine streamed in
// fragments across events ("hf_", "e2e", "Sec", ...), where no one event holds it.
//
// In an SSE body the streamed texts of each choice (content, reasoning, refusal, each
// tool call's arguments) are reassembled from the events' deltas; where a secret lies
// across fragments, the events that carry its pieces are rewritten so that the first of
// them carries "[redacted]" and the others lose their part of it, so the events still
// assemble to the redacted text. Then every secret written whole anywhere in the body is
// replaced. A body cut short (no [DONE] or finish, or a last event without its end)
// also loses the start of a secret at its end. A body without secrets comes back as it
// was (the same slice).
func RedactRaw(raw []byte, f SecretFinder) []byte {
	if len(raw) == 0 || f == nil {
		return raw
	}
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return redactText(raw, f, !json.Valid(raw))
	}
	out, cut := redactStream(raw, f)
	return redactText(out, f, cut)
}

// redactText replaces every secret written in b.
func redactText(b []byte, f SecretFinder, cut bool) []byte {
	s := string(b)
	spans := f.Find(s)
	if cut {
		spans = f.FindCut(s)
	}
	if len(spans) == 0 {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b))
	at := 0
	for _, sp := range spans {
		out.WriteString(s[at:sp[0]])
		out.WriteString(arms.Redacted)
		at = sp[1]
	}
	out.WriteString(s[at:])
	return out.Bytes()
}

// sseEvent is one event of a raw stream: where its data lines are, and its payload.
type sseEvent struct {
	start, end int // the bytes from its first data line to the end of its last
	payload    string
}

// splitEvents finds the events of a raw SSE body, as sseDecoder reads them; tail is
// true when the body ends inside an event (it was cut short).
func splitEvents(raw []byte) (events []sseEvent, tail bool) {
	var (
		cur     sseEvent
		data    []string
		hasData bool
	)
	for at := 0; at < len(raw); {
		end := bytes.IndexAny(raw[at:], "\r\n")
		lineEnd, next := len(raw), len(raw)
		if end >= 0 {
			lineEnd = at + end
			next = lineEnd + 1
			if raw[lineEnd] == '\r' && next < len(raw) && raw[next] == '\n' {
				next++
			}
		}
		line := raw[at:lineEnd]
		if end < 0 {
			return events, true // a last line without its end
		}
		switch {
		case len(line) == 0:
			if hasData {
				cur.payload = strings.Join(data, "\n")
				events = append(events, cur)
			}
			cur, data, hasData = sseEvent{}, data[:0], false
		case line[0] == ':':
		default:
			field, value := line, []byte(nil)
			if c := bytes.IndexByte(line, ':'); c >= 0 {
				field, value = line[:c], line[c+1:]
				if len(value) > 0 && value[0] == ' ' {
					value = value[1:]
				}
			}
			if string(field) == "data" {
				if !hasData {
					cur.start = at
				}
				cur.end = lineEnd
				data = append(data, string(value))
				hasData = true
			}
		}
		at = next
	}
	return events, hasData
}

// chunkTexts is what redaction reads of a chunk: the streamed texts of each choice.
type chunkTexts struct {
	Choices []struct {
		Index *int    `json:"index"`
		Text  *string `json:"text"`
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
			Refusal          *string `json:"refusal"`
			ToolCalls        []struct {
				Index    *int `json:"index"`
				Function struct {
					Name      *string `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// fragment is one piece of a streamed text: where it is in its event's JSON (a path of
// keys and array positions) and what it says.
type fragment struct {
	event int
	path  []any // string keys and int positions, from the chunk's root
	value string
}

// redactStream rewrites the events whose fragments carry part of a secret.
func redactStream(raw []byte, f SecretFinder) (out []byte, cut bool) {
	events, tail := splitEvents(raw)
	var (
		channels = map[string][]fragment{}
		order    []string
		done     bool
		finished bool
	)
	add := func(key string, fr fragment) {
		if _, ok := channels[key]; !ok {
			order = append(order, key)
		}
		channels[key] = append(channels[key], fr)
	}
	for ei, ev := range events {
		p := strings.TrimSpace(ev.payload)
		if p == "[DONE]" {
			done = true
			continue
		}
		var c chunkTexts
		if json.Unmarshal([]byte(p), &c) != nil {
			continue
		}
		for cp, ch := range c.Choices {
			idx := cp
			if ch.Index != nil {
				idx = *ch.Index
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finished = true
			}
			text := func(field string, v *string, path ...any) {
				if v != nil && *v != "" {
					add(fmt.Sprintf("%d/%s", idx, field), fragment{event: ei, path: append([]any{"choices", cp}, path...), value: *v})
				}
			}
			text("text", ch.Text, "text")
			text("content", ch.Delta.Content, "delta", "content")
			text("reasoning_content", ch.Delta.ReasoningContent, "delta", "reasoning_content")
			text("reasoning", ch.Delta.Reasoning, "delta", "reasoning")
			text("refusal", ch.Delta.Refusal, "delta", "refusal")
			for tp, tc := range ch.Delta.ToolCalls {
				ti := tp
				if tc.Index != nil {
					ti = *tc.Index
				}
				text(fmt.Sprintf("tool%d/name", ti), tc.Function.Name, "delta", "tool_calls", tp, "function", "name")
				text(fmt.Sprintf("tool%d/arguments", ti), tc.Function.Arguments, "delta", "tool_calls", tp, "function", "arguments")
			}
		}
	}
	cut = tail || (!done && !finished)
	// edits are the new values of the fragments that carry part of a secret, by event.
	edits := map[int][]fragment{}
	for _, key := range order {
		frags := channels[key]
		var whole strings.Builder
		for _, fr := range frags {
			whole.WriteString(fr.value)
		}
		spans := f.Find(whole.String())
		if cut {
			spans = f.FindCut(whole.String())
		}
		if len(spans) == 0 {
			continue
		}
		at := 0
		for _, fr := range frags {
			from, to := at, at+len(fr.value)
			at = to
			if nv, changed := cutSpans(fr.value, from, to, spans); changed {
				fr.value = nv
				edits[fr.event] = append(edits[fr.event], fr)
			}
		}
	}
	if len(edits) == 0 {
		return raw, cut
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	at := 0
	for ei, ev := range events {
		frs, ok := edits[ei]
		if !ok {
			continue
		}
		payload, err := rewritePayload(ev.payload, frs)
		if err != nil {
			// Not rewritable as JSON: the event goes, rather than its piece of a secret.
			payload = `{"choices":[]}`
		}
		b.Write(raw[at:ev.start])
		b.WriteString("data: ")
		b.WriteString(payload)
		at = ev.end
	}
	b.Write(raw[at:])
	return b.Bytes(), cut
}

// cutSpans is the part of a fragment (bytes [from, to) of its assembled text) that
// remains once the secret spans are replaced: a span that starts within it becomes
// "[redacted]", the parts of spans that started before it are dropped.
func cutSpans(value string, from, to int, spans [][2]int) (string, bool) {
	var b strings.Builder
	changed := false
	at := from
	for _, sp := range spans {
		if sp[1] <= from || sp[0] >= to {
			continue
		}
		changed = true
		s := max(sp[0], from)
		b.WriteString(value[at-from : s-from])
		if sp[0] >= from {
			b.WriteString(arms.Redacted)
		}
		at = min(sp[1], to)
	}
	if !changed {
		return value, false
	}
	b.WriteString(value[at-from:])
	return b.String(), true
}

// rewritePayload sets the fragments' new values in a chunk's JSON. Numbers keep their
// text; keys come out sorted, which only the rewritten events show.
func rewritePayload(payload string, frs []fragment) (string, error) {
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return "", err
	}
	for _, fr := range frs {
		if !setPath(root, fr.path, fr.value) {
			return "", fmt.Errorf("no %v in the chunk", fr.path)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(root); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// setPath sets the string at path (keys and array positions) under v.
func setPath(v any, path []any, value string) bool {
	for i, step := range path {
		last := i == len(path)-1
		switch key := step.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return false
			}
			if last {
				if _, isString := m[key].(string); !isString {
					return false
				}
				m[key] = value
				return true
			}
			v = m[key]
		case int:
			a, ok := v.([]any)
			if !ok || key >= len(a) || last {
				return false
			}
			v = a[key]
		}
	}
	return false
}

// RedactCutCompletion returns the completion of a response that was cut short (its
// exchange ended with an error) with the start of a secret at the end of any of its texts
// hidden: the rest of the secret never arrived, so no search for it whole would find
// what did.
func RedactCutCompletion(c openai.ChatCompletion, f SecretFinder) openai.ChatCompletion {
	if f == nil {
		return c
	}
	cutText := func(s string) string {
		spans := f.FindCut(s)
		if len(spans) == 0 {
			return s
		}
		return string(redactText([]byte(s), f, true))
	}
	out := c
	out.Choices = slices.Clone(c.Choices)
	for i := range out.Choices {
		m := &out.Choices[i].Message
		m.Content = cutText(m.Content)
		m.ToolCalls = slices.Clone(m.ToolCalls)
		for j := range m.ToolCalls {
			m.ToolCalls[j].Function.Arguments = cutText(m.ToolCalls[j].Function.Arguments)
		}
	}
	return out
}
