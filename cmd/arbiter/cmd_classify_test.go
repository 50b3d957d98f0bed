package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// completionLine renders a one-choice chat completion as one JSONL line.
func completionLine(t *testing.T, content string, calls ...openai.ToolCall) string {
	t.Helper()
	c := openai.ChatCompletion{ID: "chatcmpl-1", Object: "chat.completion", Model: "m",
		Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: content, ToolCalls: calls}, FinishReason: "stop"}}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const classifyTools = `[{"type": "function", "function": {"name": "get_weather", "parameters":
	{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`

func classifyInput(t *testing.T) string {
	weather := openai.ToolCall{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{}`}}
	return strings.Join([]string{
		completionLine(t, "Paris is sunny today."),
		completionLine(t, "Checking.\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">"),
		"",
		"   ",
		completionLine(t, "", weather),
	}, "\n") // the last line has no newline
}

func TestClassifyJSON(t *testing.T) {
	in := writeFile(t, "responses.jsonl", classifyInput(t))
	tools := writeFile(t, "tools.json", classifyTools)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"classify", in, "--tools", tools, "--json"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got []classifyResult
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var r classifyResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		got = append(got, r)
	}
	if len(got) != 3 {
		t.Fatalf("got %d results: %s", len(got), stdout.String())
	}
	wantLine := []int{1, 2, 5}
	wantBad := []bool{false, true, true}
	// Markup in content with finish_reason "stop" is a leak and a finish anomaly; a
	// structured call with "stop" is how engines end a call, and only its {} is wrong.
	wantBy := []string{"", "dsml-leak finish-anomaly", "toolcall-schema"}
	for i, r := range got {
		if r.Line != wantLine[i] || r.Corrupted != wantBad[i] || len(r.Labels) != 4 {
			t.Errorf("result %d = %+v", i, r)
		}
		for _, l := range r.Labels {
			if l.Corrupted != strings.Contains(" "+wantBy[i]+" ", " "+l.Detector+" ") {
				t.Errorf("result %d label %+v", i, l)
			}
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("--json wrote to stderr: %q", stderr.String())
	}
}

func TestClassifyReadableFromStdin(t *testing.T) {
	classifyStdin = strings.NewReader(classifyInput(t))
	t.Cleanup(func() { classifyStdin = os.Stdin })
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"classify", "--detectors", "dsml-leak,repetition"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || lines[0] != "line 1: clean" || !strings.HasPrefix(lines[1], "line 2: CORRUPTED dsml-leak: DeepSeek V4 DSML markup") || lines[2] != "line 5: clean" {
		t.Errorf("stdout = %q", stdout.String())
	}
	if got := stderr.String(); got != "3 responses, 1 corrupted (dsml-leak 1, repetition 0)\n" {
		t.Errorf("summary = %q", got)
	}
}

// TestClassifyToolChoice: --tool-choice tells finish-anomaly what the requests asked for.
func TestClassifyToolChoice(t *testing.T) {
	in := writeFile(t, "responses.jsonl", completionLine(t, "Paris is sunny today.")+"\n")
	tools := writeFile(t, "tools.json", classifyTools)
	for choice, want := range map[string]string{
		"":            "line 1: clean",
		"auto":        "line 1: clean",
		"required":    `line 1: CORRUPTED finish-anomaly: tool_choice "required" requires a call`,
		"get_weather": `line 1: CORRUPTED finish-anomaly: tool_choice names "get_weather" requires a call`,
	} {
		var stdout, stderr bytes.Buffer
		args := []string{"classify", in, "--tools", tools, "--detectors", "finish-anomaly"}
		if choice != "" {
			args = append(args, "--tool-choice", choice)
		}
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if got := strings.TrimSpace(stdout.String()); !strings.HasPrefix(got, want) {
			t.Errorf("--tool-choice %q: %q, want %q", choice, got, want)
		}
	}
}

func TestClassifyBadLineStops(t *testing.T) {
	body := completionLine(t, "fine") + "\n" + completionLine(t, "<|python_tag|>{}") + "\n{\"choices\": [\n" + completionLine(t, "never read")
	in := writeFile(t, "bad.jsonl", body)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"classify", in, "--json"}, &stdout, &stderr)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), in+":3: not a JSON object") {
		t.Errorf("stderr = %q", stderr.String())
	}
	if n := strings.Count(stdout.String(), "\n"); n != 2 {
		t.Errorf("want the 2 results before the bad line, got %q", stdout.String())
	}
}

func TestClassifyUsageErrors(t *testing.T) {
	good := writeFile(t, "ok.jsonl", completionLine(t, "fine")+"\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown detector", []string{"classify", good, "--detectors", "dsml-leak,nope"}, `unknown detector "nope": built-in detectors are divergence, dsml-leak, finish-anomaly, repetition, toolcall-schema`},
		{"cross-arm detector", []string{"classify", good, "--detectors", "dsml-leak,divergence"}, "--detectors: divergence compares the arms of an experiment after they ran; it cannot judge one response"},
		{"missing file", []string{"classify", filepath.Join(t.TempDir(), "absent.jsonl")}, "no such file"},
		{"bad tools", []string{"classify", good, "--tools", writeFile(t, "tools.json", `{"name": "f"}`)}, "want a JSON array of tools"},
		{"not a completion", []string{"classify", writeFile(t, "turn.jsonl", `{"response": {}, "tools": []}`)}, `turn.jsonl:1: not a chat completion: no "choices" field`},
		{"two files", []string{"classify", good, good}, "classify reads one FILE (or - for stdin), got 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tt.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q", stdout.String())
			}
		})
	}
}
