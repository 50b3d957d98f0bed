package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/openai"
)

// fakeDetector is a Detector whose judgement a test supplies.
type fakeDetector struct {
	name     string
	DetectFn func(context.Context, Response) (Label, error)
}

func (f fakeDetector) Name() string { return f.name }
func (f fakeDetector) Detect(ctx context.Context, r Response) (Label, error) {
	return f.DetectFn(ctx, r)
}

func sampleResponse(content string) Response {
	return Response{
		Completion: openai.ChatCompletion{ID: "chatcmpl-7", Object: "chat.completion", Model: "deepseek-v4-flash",
			Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: content,
				ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}},
				FinishReason: "tool_calls"}},
			Usage: &openai.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}},
		Tools:      []openai.Tool{{Type: "function", Function: openai.FunctionSpec{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object"}`)}}},
		ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"get_weather"}}`),
	}
}

// dispense connects a DetectorPlugin serving impl in process and returns the host's side.
func dispense(t *testing.T, impl Detector) Detector {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{DetectorPluginName: &DetectorPlugin{Impl: impl}})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(DetectorPluginName)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := raw.(Detector)
	if !ok {
		t.Fatalf("dispensed a %T", raw)
	}
	return d
}

func TestDetectorPluginRoundTrip(t *testing.T) {
	var mu sync.Mutex
	var got []Response
	impl := fakeDetector{name: "echo", DetectFn: func(_ context.Context, r Response) (Label, error) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		if strings.Contains(r.Completion.Choices[0].Message.Content, "bad") {
			return Label{Corrupted: true, Reason: "says bad"}, nil
		}
		return Label{Detector: "echo"}, nil
	}}
	d := dispense(t, impl)
	if d.Name() != "echo" {
		t.Errorf("Name() = %q", d.Name())
	}
	want := sampleResponse("a bad reply")
	l, err := d.Detect(context.Background(), want)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin left Detector empty; the server fills in the plugin's name.
	if l != (Label{Detector: "echo", Corrupted: true, Reason: "says bad"}) {
		t.Errorf("label = %+v", l)
	}
	if l, err := d.Detect(context.Background(), sampleResponse("fine")); err != nil || l.Corrupted {
		t.Errorf("clean reply: %+v, %v", l, err)
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got[0])
	if string(wj) != string(gj) {
		t.Errorf("plugin received\n%s\nwant\n%s", gj, wj)
	}
	// Without tools or tool_choice, the plugin sees none rather than empty ones.
	noTools := sampleResponse("x")
	noTools.Tools, noTools.ToolChoice = nil, nil
	if _, err := d.Detect(context.Background(), noTools); err != nil {
		t.Fatal(err)
	}
	if got[2].Tools != nil || got[2].ToolChoice != nil {
		t.Errorf("tools = %#v, tool_choice = %q; want nil", got[2].Tools, got[2].ToolChoice)
	}
}

func TestDetectorPluginErrors(t *testing.T) {
	impl := fakeDetector{name: "flaky", DetectFn: func(ctx context.Context, _ Response) (Label, error) {
		if err := ctx.Err(); err != nil {
			return Label{}, err
		}
		return Label{}, errors.New("model of the judge is not loaded")
	}}
	d := dispense(t, impl)
	_, err := d.Detect(context.Background(), sampleResponse("x"))
	if err == nil || err.Error() != "plugin detector flaky: model of the judge is not loaded" {
		t.Errorf("err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Detect(ctx, sampleResponse("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled detect: err = %v, want context.Canceled", err)
	}
}

func TestDetectorPluginWithoutImpl(t *testing.T) {
	if err := (&DetectorPlugin{}).GRPCServer(nil, nil); err == nil {
		t.Error("serving a nil detector succeeded")
	}
}

// buildExample compiles cmd/arbiter-detector-example into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter-detector-example")
}

func TestLaunchSubprocess(t *testing.T) {
	bin := buildExample(t)
	t.Setenv("ARBITER_CONTAINS_WORD", "Wedged")
	d, release, err := Launch(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if d.Name() != "contains-word" {
		t.Errorf("Name() = %q", d.Name())
	}
	l, err := d.Detect(context.Background(), sampleResponse("The scheduler is WEDGED again."))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Corrupted || l.Detector != "contains-word" || l.Reason != `choice 0 content contains "wedged" at rune 17` {
		t.Errorf("label = %+v", l)
	}
	if l, err := d.Detect(context.Background(), sampleResponse("unwedged is not the word")); err != nil || l.Corrupted {
		t.Errorf("clean: %+v, %v", l, err)
	}
	release()
	release() // a second release is harmless
	if _, err := d.Detect(context.Background(), sampleResponse("x")); err == nil {
		t.Error("detect after release succeeded")
	}
}

func TestLaunchRefusesNonPlugins(t *testing.T) {
	if _, _, err := Launch(context.Background(), filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("launched a missing binary")
	}
	script := filepath.Join(t.TempDir(), "not-a-plugin")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Launch(context.Background(), script); err == nil || !strings.Contains(err.Error(), "start") {
		t.Errorf("launched a binary that is not a plugin: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := Launch(ctx, script); !errors.Is(err, context.Canceled) {
		t.Errorf("launch under a cancelled context: %v", err)
	}
}

// A plugin launched without WithEnv inherits arbiter's environment, secrets included:
// what it writes to its standard error reaches arbiter's only through the redactor. The
// example plugin prints the word it looks for, here a secret.
func TestLaunchedPluginStderrIsRedacted(t *testing.T) {
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter-detector-example")
	const secret = "hf_pluginSecret_7q2x"
	t.Setenv("ARBITER_CONTAINS_WORD", secret)
	var out lockedbuf.Buffer
	ctx := WithOutput(context.Background(), Output{W: &out, Redact: func(s string) string { return strings.ReplaceAll(s, secret, "[redacted]") }})
	d, release, err := Launch(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != "contains-word" {
		t.Errorf("name %q", d.Name())
	}
	release()
	got := out.String()
	if strings.Contains(got, secret) || !strings.Contains(got, `contains-word: flagging "[redacted]"`) {
		t.Errorf("the plugin's standard error as arbiter wrote it:\n%s", got)
	}
}
