package plugins

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// pythonPlugin is the example detector written in Python; the test is skipped when
// Debian's python3-grpcio is missing, and fails then with ARBITER_REQUIRE_PYTHON_PLUGIN=1
// (as in CI).
func pythonPlugin(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs("../examples/plugins/python/arbiter-detector-tool-args")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import grpc").CombinedOutput(); err != nil {
		msg := "no python3-grpcio for /usr/bin/python3 (apt-get install python3-grpcio): " + strings.TrimSpace(string(out))
		if os.Getenv("ARBITER_REQUIRE_PYTHON_PLUGIN") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// A detector written in Python runs through the same go-plugin gRPC protocol as the Go
// ones: arbiter launches it, asks its name, and has it label responses.
func TestPythonDetectorPlugin(t *testing.T) {
	d, release, err := Launch(context.Background(), pythonPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if d.Name() != "tool-args" {
		t.Errorf("name %q", d.Name())
	}
	tools := []openai.Tool{}
	if err := json.Unmarshal([]byte(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false}}}]`), &tools); err != nil {
		t.Fatal(err)
	}
	call := func(name, args string) Response {
		msg := openai.Message{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: name, Arguments: args}}}}
		return Response{Completion: openai.ChatCompletion{Choices: []openai.Choice{{Message: msg}}}, Tools: tools}
	}
	for _, tc := range []struct {
		r       Response
		corrupt bool
		reason  string
	}{
		{call("get_weather", `{"city": "Paris", "unit": "c"}`), false, ""},
		{call("get_weather", `{"unit": "c"}`), true, "required argument 'city' is missing"},
		{call("get_weather", `{"city": 3}`), true, "argument 'city' is int, not string"},
		{call("get_weather", `{"city": "Paris", "unit": "k"}`), true, "not one of ['c', 'f']"},
		{call("get_weather", `{"city": "Paris", "when": "now"}`), true, "argument 'when' is not in the schema"},
		{call("get_weather", `{"city": `), true, "arguments are not JSON"},
		{call("book_flight", `{}`), true, "calls 'book_flight', which was not offered"},
		{Response{Completion: openai.ChatCompletion{Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: "Sunny."}}}}}, false, ""},
	} {
		l, err := d.Detect(context.Background(), tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if l.Corrupted != tc.corrupt || !strings.Contains(l.Reason, tc.reason) || l.Detector != "tool-args" {
			t.Errorf("%+v: label %+v, want corrupted %v with %q", tc.r.Completion.Choices[0].Message, l, tc.corrupt, tc.reason)
		}
	}
}
