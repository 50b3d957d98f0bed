package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// UnmarshalJSON reads a message whose content is a string, null, or a list of content
// parts ([{"type": "text", "text": "..."}], as OpenAI clients may send); the text parts
// are joined. Non-text parts (images, audio) have no place in arbiter's workloads and are
// refused rather than dropped silently.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message // no methods: no recursion
	var raw struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = Message(raw.plain)
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || bytes.Equal(c, []byte("null")):
		m.Content = ""
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return fmt.Errorf("message content: %w", err)
		}
		var text []string
		for i, p := range parts {
			if p.Type != "text" {
				return fmt.Errorf("message content part %d: type %q is not supported (only text)", i, p.Type)
			}
			text = append(text, p.Text)
		}
		m.Content = strings.Join(text, "")
	default:
		return fmt.Errorf("message content: want a string or a list of parts, not %s", c[:1])
	}
	return nil
}

// MarshalJSON writes the content as a string, except that an assistant message that
// only calls tools has content null, as OpenAI's own clients send it: some engines
// (ollama 0.6.5) drop the calls of a message whose content is the empty string, and
// the conversation they render loses them.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message // no methods: no recursion
	if m.Content != "" || len(m.ToolCalls) == 0 {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		Role       string     `json:"role"`
		Content    *string    `json:"content"`
		Name       string     `json:"name,omitempty"`
		ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}{m.Role, nil, m.Name, m.ToolCalls, m.ToolCallID})
}
