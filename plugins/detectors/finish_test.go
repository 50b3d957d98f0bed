package detectors

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

// ended is a one-choice reply with a finish reason, content and calls, answering a
// request that offered tools (or not) with a tool_choice (empty: none sent).
func ended(finish, content string, tools []openai.Tool, choice string, cs ...openai.ToolCall) plugins.Response {
	r := reply(content)
	r.Tools = tools
	if choice != "" {
		r.ToolChoice = json.RawMessage(choice)
	}
	r.Completion.Choices[0].FinishReason = finish
	r.Completion.Choices[0].Message.ToolCalls = cs
	return r
}

func TestFinishAnomaly(t *testing.T) {
	weather := call("get_weather", `{"city": "Paris"}`)
	cut := call("get_weather", `{"city": "Pa`)
	tests := []struct {
		name string
		r    plugins.Response
		want string // substring of the reason; "" means clean
	}{
		// What engines legitimately do.
		{"stop in prose", ended("stop", "Paris is sunny.", agentTools, `"auto"`), ""},
		{"tool_calls with a call", ended("tool_calls", "", agentTools, `"auto"`, weather), ""},
		{"stop with a structured call (OpenAI and vLLM for forced calls)", ended("stop", "", agentTools, `"required"`, weather), ""},
		{"named function called with stop", ended("stop", "", agentTools, `{"type":"function","function":{"name":"get_weather"}}`, weather), ""},
		{"length in prose", ended("length", "Paris is a city of about two million people and", agentTools, `"auto"`), ""},
		{"length with a whole call", ended("length", "", agentTools, `"auto"`, weather), ""},
		{"length cutting markup without tools offered", ended("length", "<｜DSML｜tool_calls>\n<｜DSML｜invoke", nil, ""), ""},
		{"abort", ended("abort", "<｜DSML｜tool_calls>", agentTools, `"auto"`), ""},
		{"no finish reason (request cut short)", ended("", "<｜DSML｜tool_calls>", agentTools, `"auto"`), ""},
		{"markup quoted in a fence", ended("stop", "Like this:\n```\n"+v4Leak+"\n```\n", agentTools, `"auto"`), ""},
		{"no tools, no choice", ended("stop", "hello", nil, ""), ""},
		{"required without tools known", ended("stop", "hello", nil, `"required"`), ""},

		// Anomalies.
		{"stop with markup", ended("stop", "Let me know if"+v4Leak, agentTools, `"auto"`),
			`finish_reason "stop" with DeepSeek V4 DSML markup in content, first at rune 14`},
		{"stop with markup and no tools", ended("stop", qwen, nil, ""), `finish_reason "stop" with Qwen/Hermes <tool_call> markup`},
		{"stop with bracketless fragments", ended("stop", "Sure｜DSML｜invoke name=\"f\"", agentTools, ""), "DeepSeek DSML fragments (brackets lost)"},
		{"tool_calls with leftover markup", ended("tool_calls", "<|python_tag|>{\"name\"", agentTools, `"auto"`, weather), `finish_reason "tool_calls" with Llama`},
		{"tool_calls without a call", ended("tool_calls", "", agentTools, `"auto"`), `finish_reason "tool_calls" but the reply holds no tool call`},
		{"length mid-markup", ended("length", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">", agentTools, ""),
			`finish_reason "length" cut a tool call short: DeepSeek V4 DSML markup`},
		{"length mid-arguments", ended("length", "", agentTools, `"auto"`, cut), `finish_reason "length" cut tool call 0 (get_weather) mid-arguments: "{\"city\": \"Pa"`},
		{"length before a required call", ended("length", "I think I will", agentTools, `"required"`), `finish_reason "length" before the call that tool_choice "required" requires`},
		{"stop without a required call", ended("stop", "Paris is sunny.", agentTools, `"required"`), `tool_choice "required" requires a call, but the reply ended ("stop") without one`},
		{"stop without the named call", ended("stop", "", agentTools, `{"type":"function","function":{"name":"search"}}`), `tool_choice names "search" requires a call`},
		{"named function, other call", ended("tool_calls", "", agentTools, `{"type":"function","function":{"name":"search"}}`, weather), `tool_choice names "search", but the reply calls "get_weather"`},
		{"none, yet a call", ended("tool_calls", "", agentTools, `"none"`, weather), `tool_choice "none", yet the reply calls get_weather`},
		{"length mid-markup, none chosen", ended("length", "<｜DSML｜tool_calls>", agentTools, `"none"`), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := finishAnomaly{}.Detect(context.Background(), tt.r)
			if err != nil {
				t.Fatal(err)
			}
			if l.Detector != FinishAnomalyName {
				t.Errorf("detector = %q", l.Detector)
			}
			if tt.want == "" {
				if l.Corrupted || l.Reason != "" {
					t.Fatalf("want clean, got %+v", l)
				}
				return
			}
			if !l.Corrupted || !strings.Contains(l.Reason, tt.want) {
				t.Fatalf("got %+v, want a reason containing %q", l, tt.want)
			}
		})
	}
}

func TestFinishAnomalySecondChoice(t *testing.T) {
	r := ended("stop", "fine", agentTools, "")
	r.Completion.Choices = append(r.Completion.Choices, openai.Choice{Index: 1, FinishReason: "tool_calls"})
	l, _ := finishAnomaly{}.Detect(context.Background(), r)
	if !l.Corrupted || !strings.HasPrefix(l.Reason, "choice 1: ") {
		t.Errorf("got %+v", l)
	}
}

func FuzzFinishAnomaly(f *testing.F) {
	for _, s := range []struct{ finish, content, choice, args string }{
		{"stop", v4Leak, `"auto"`, ""}, {"length", "<｜DSML｜tool_calls>", `"required"`, `{"a":`},
		{"tool_calls", "", `{"type":"function","function":{"name":"f"}}`, `{}`}, {"stop", "fine", `"none"`, `{}`},
		{"length", "prose", `not json`, ""}, {"abort", qwen, ``, `{"x":1}`},
	} {
		f.Add(s.finish, s.content, s.choice, s.args)
	}
	f.Fuzz(func(t *testing.T, finish, content, choice, args string) {
		var cs []openai.ToolCall
		if args != "" {
			cs = append(cs, call("get_weather", args))
		}
		l, err := finishAnomaly{}.Detect(context.Background(), ended(finish, content, agentTools, choice, cs...))
		if err != nil {
			t.Fatal(err)
		}
		if l.Corrupted == (l.Reason == "") {
			t.Fatalf("corrupted=%v with reason %q", l.Corrupted, l.Reason)
		}
		// Only the four reasons it knows can make a reply anomalous.
		switch finish {
		case "stop", "length", "tool_calls":
		default:
			if l.Corrupted && !strings.Contains(l.Reason, "tool_choice") {
				t.Fatalf("finish_reason %q flagged: %q", finish, l.Reason)
			}
		}
		// A reply in plain prose that ran to its limit is never an anomaly.
		if finish == "length" && args == "" && !strings.ContainsAny(content, "<▁｜") && !strings.Contains(content, "DSML") &&
			!strings.Contains(choice, "required") && !strings.Contains(choice, "function") && l.Corrupted {
			t.Fatalf("prose cut by length flagged: %q", l.Reason)
		}
	})
}
