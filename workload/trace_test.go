package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTraceSample(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "support.jsonl")
	convs, err := ReadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) != 12 {
		t.Fatalf("%d conversations, want 12", len(convs))
	}
	for i, c := range convs {
		if c.Line != i+1 || !strings.HasPrefix(c.ID, "support-") || len(c.Tools) != 4 || c.MaxTokens != 256 {
			t.Errorf("conversation %d: line %d id %q, %d tools, max_tokens %d", i, c.Line, c.ID, len(c.Tools), c.MaxTokens)
		}
		// A request at each assistant message, and one at the end when the
		// conversation ends with a user or tool message.
		want := 0
		for _, m := range c.Messages {
			if m.Role == "assistant" {
				want++
			}
		}
		if c.Messages[len(c.Messages)-1].Role != "assistant" {
			want++
		}
		if len(c.Requests) != want {
			t.Errorf("%s: %d requests, want %d", c.ID, len(c.Requests), want)
		}
		for _, end := range c.Requests {
			if end < len(c.Messages) && c.Messages[end].Role != "assistant" {
				t.Errorf("%s: a request ends before message %d, a %s message", c.ID, end, c.Messages[end].Role)
			}
		}
	}
	// Content given as a list of text parts is read as its text.
	if got := convs[0].Messages[5].Content; !strings.HasPrefix(got, "Thanks. Also, how do I ") || strings.Contains(got, "type") {
		t.Errorf("text parts read as %q", got)
	}
}

func TestTraceErrorsNameFileLineAndField(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	for _, tc := range []struct{ name, text, want string }{
		{"not json", `{"messages": [` + "\n", "t.jsonl:1: not a JSON object"},
		{"array", `[1, 2]`, "t.jsonl:1: a line must be one JSON object"},
		{"no messages", `{"id": "x"}`, "t.jsonl:1: messages: missing or empty"},
		{"blank lines count", "\n\n" + `{"messages": [{"role": "wizard", "content": "x"}]}`, "t.jsonl:3: messages[0].role: \"wizard\" is not one of"},
		{"no role", `{"messages": [{"content": "x"}]}`, "t.jsonl:1: messages[0].role: missing"},
		{"assistant first", `{"messages": [{"role":"system","content":"s"},{"role":"assistant","content":"a"}]}`, "t.jsonl:1: messages[1]: an assistant message before any user message"},
		{"orphan tool", `{"messages": [` + user + `,{"role":"tool","tool_call_id":"c9","content":"{}"}]}`, `t.jsonl:1: messages[1].tool_call_id: "c9" answers no earlier tool call`},
		{"call without id", `{"messages": [` + user + `,{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`, "t.jsonl:1: messages[1].tool_calls[0].id: missing"},
		{"image part", `{"messages": [{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "t.jsonl:1: messages[0]: message content part 0: type \"image_url\" is not supported"},
		{"bad tool", `{"tools": [{"type": "retrieval"}], "messages": [` + user + `]}`, `t.jsonl:1: tools[0].type: "retrieval": only function tools`},
		{"tool params", `{"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}], "messages": [` + user + `]}`, "t.jsonl:1: tools[0].function.parameters: must be a JSON Schema object"},
		{"max_tokens", `{"max_tokens": -1, "messages": [` + user + `]}`, "t.jsonl:1: max_tokens: must be a whole number"},
		{"temperature", `{"temperature": "hot", "messages": [` + user + `]}`, "t.jsonl:1: temperature: must be a number"},
		{"tool_choice", `{"tool_choice": "sometimes", "messages": [` + user + `]}`, "t.jsonl:1: tool_choice: must be"},
		{"duplicate id", `{"id": "a", "messages": [` + user + `]}` + "\n" + `{"id": "a", "messages": [` + user + `]}`, `t.jsonl:2: id: "a" is also the id of line 1`},
		{"empty", "\n \n", "t.jsonl:1: the trace has no conversation"},
		{"user type", `{"messages": [{"role":"user","content":42}]}`, "t.jsonl:1: messages[0]: message content: want a string or a list of parts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrace("t.jsonl", strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			var te *TraceError
			if !errors.As(err, &te) || te.File != "t.jsonl" || te.Line < 1 {
				t.Fatalf("error %v is not a TraceError naming the file and line", err)
			}
		})
	}
}

func TestTraceLineLimit(t *testing.T) {
	long := `{"messages": [{"role":"user","content":"` + strings.Repeat("x", MaxTraceLine) + `"}]}`
	_, err := ParseTrace("big.jsonl", strings.NewReader(`{"messages": [{"role":"user","content":"hi"}]}`+"\n"+long+"\n"))
	if err == nil || !strings.Contains(err.Error(), "big.jsonl:2: line longer than") {
		t.Fatalf("a line past the limit: %v", err)
	}
}

func TestReadTraceMissingFile(t *testing.T) {
	if _, err := ReadTrace(filepath.Join(t.TempDir(), "none.jsonl")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzTraceReader: no input makes the reader panic, and what it accepts is a conversation
// it can replay (a request at each assistant message, tool messages answering calls made
// before them) that reads back the same after being written out again.
func FuzzTraceReader(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "examples", "traces", "support.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	// One line of the sample, not all of it: the fuzzer minimizes what it finds, which
	// takes long on a large input.
	first, _, _ := bytes.Cut(sample, []byte("\n"))
	f.Add(first)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`))
	f.Add([]byte("\n\n{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}],\"temperature\":0.5}\n"))
	f.Add([]byte(`{"messages":[{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"{}"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		convs, err := ParseTrace("fuzz.jsonl", bytes.NewReader(data))
		if err != nil {
			var te *TraceError
			if errors.As(err, &te) && (te.Line < 1 || te.File != "fuzz.jsonl") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var again bytes.Buffer
		for _, c := range convs {
			if len(c.Requests) == 0 || len(c.Messages) == 0 {
				t.Fatalf("accepted a conversation with nothing to replay: %+v", c)
			}
			calls := map[string]bool{}
			for i, m := range c.Messages {
				for _, tc := range m.ToolCalls {
					calls[tc.ID] = true
				}
				if m.Role == "tool" && !calls[m.ToolCallID] {
					t.Fatalf("message %d answers a call never made: %+v", i, m)
				}
			}
			for _, end := range c.Requests {
				if end < 1 || end > len(c.Messages) {
					t.Fatalf("request end %d of %d messages", end, len(c.Messages))
				}
			}
			line := map[string]any{"id": c.ID, "messages": c.Messages, "tools": c.Tools, "max_tokens": c.MaxTokens}
			if c.Temperature != nil {
				line["temperature"] = *c.Temperature
			}
			if len(c.ToolChoice) > 0 {
				line["tool_choice"] = c.ToolChoice
			}
			b, err := json.Marshal(line)
			if err != nil {
				t.Fatal(err)
			}
			again.Write(append(b, '\n'))
		}
		back, err := ParseTrace("again.jsonl", &again)
		if err != nil {
			t.Fatalf("written out again, the trace is refused: %v", err)
		}
		if len(back) != len(convs) {
			t.Fatalf("%d conversations read back, want %d", len(back), len(convs))
		}
		for i := range back {
			if len(back[i].Requests) != len(convs[i].Requests) || len(back[i].Messages) != len(convs[i].Messages) {
				t.Fatalf("conversation %d reads back with %d requests, %d messages; want %d, %d", i,
					len(back[i].Requests), len(back[i].Messages), len(convs[i].Requests), len(convs[i].Messages))
			}
		}
	})
}
