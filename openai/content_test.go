package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMessageContentForms(t *testing.T) {
	for in, want := range map[string]string{
		`{"role":"user","content":"hello"}`: "hello",
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}`: "",
		`{"role":"assistant"}`: "",
		`{"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}`: "hello",
	} {
		var m Message
		if err := json.Unmarshal([]byte(in), &m); err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if m.Content != want {
			t.Errorf("%s: content %q, want %q", in, m.Content, want)
		}
	}
	var m Message
	json.Unmarshal([]byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}`), &m)
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "f" || m.Role != "assistant" {
		t.Errorf("other fields lost: %+v", m)
	}
	for _, bad := range []string{
		`{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}`,
		`{"role":"user","content":42}`,
	} {
		if err := json.Unmarshal([]byte(bad), &m); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// Marshal keeps the plain string form.
	b, _ := json.Marshal(Message{Role: "user", Content: "hi"})
	if string(b) != `{"role":"user","content":"hi"}` {
		t.Errorf("marshal = %s", b)
	}
}

func FuzzMessageUnmarshal(f *testing.F) {
	f.Add(`{"role":"user","content":[{"type":"text","text":"a"}]}`)
	f.Add(`{"content":"x"}`)
	f.Fuzz(func(t *testing.T, in string) {
		var m Message
		if json.Unmarshal([]byte(in), &m) == nil {
			// What decodes must round-trip through the string form.
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var again Message
			if err := json.Unmarshal(b, &again); err != nil || again.Content != m.Content {
				t.Fatalf("round trip of %q: %v, %q", in, err, again.Content)
			}
		}
	})
}

func TestToolCallingMessageHasNullContent(t *testing.T) {
	m := Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Type: "function", Function: FunctionCall{Name: "f", Arguments: "{}"}}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	if string(b) != want {
		t.Errorf("marshal = %s\nwant      %s", b, want)
	}
	var back Message
	if err := json.Unmarshal(b, &back); err != nil || back.Content != "" || len(back.ToolCalls) != 1 {
		t.Errorf("round trip: %v, %+v", err, back)
	}
	// With content, or without calls, content stays a string.
	for _, m := range []Message{{Role: "assistant", Content: "x", ToolCalls: m.ToolCalls}, {Role: "assistant"}} {
		b, _ := json.Marshal(m)
		if !strings.Contains(string(b), `"content":"`) {
			t.Errorf("marshal = %s, want string content", b)
		}
	}
}
