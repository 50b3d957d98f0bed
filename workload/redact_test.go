package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

const streamedSecret = "hf_e2eSecretValue_9f3k"

func secretFinder(values ...string) *arms.Redactor {
	env := map[string]string{}
	var names []string
	for i, v := range values {
		name := fmt.Sprintf("S%d_TOKEN", i)
		env[name] = v
		names = append(names, name)
	}
	spec := &arms.Spec{Engine: arms.Engine{Secrets: names}}
	return spec.Redactor(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

// sseOf writes content pieces and tool-call argument pieces as a stream, one event each.
func sseOf(contents, args []string, done bool) []byte {
	var b bytes.Buffer
	ev := func(d openai.Delta, finish *string) {
		c, _ := json.Marshal(openai.ChatCompletionChunk{ID: "chatcmpl-1", Object: "chat.completion.chunk", Model: "m",
			Choices: []openai.ChunkChoice{{Delta: d, FinishReason: finish}}})
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	for i, p := range contents {
		d := openai.Delta{Content: p}
		if i == 0 {
			d.Role = "assistant"
		}
		ev(d, nil)
	}
	zero := 0
	for i, p := range args {
		tc := openai.ToolCall{Index: &zero, Function: openai.FunctionCall{Arguments: p}}
		if i == 0 {
			tc.ID, tc.Type, tc.Function.Name = "call_1", "function", "get_weather"
		}
		ev(openai.Delta{ToolCalls: []openai.ToolCall{tc}}, nil)
	}
	if done {
		stop := "stop"
		ev(openai.Delta{}, &stop)
		b.WriteString("data: [DONE]\n\n")
	}
	return b.Bytes()
}

func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

func TestRedactRawReassemblesSplitSecrets(t *testing.T) {
	r := secretFinder(streamedSecret)
	text := "Here is the token: " + streamedSecret + " and that is all."
	args := `{"city":"` + streamedSecret + `"}`
	for _, n := range []int{1, 3, 7} {
		raw := sseOf(split(text, n), split(args, n), true)
		if bytes.Contains(raw, []byte(streamedSecret)) {
			t.Fatalf("chunk %d: the test stream holds the secret whole", n)
		}
		out := RedactRaw(raw, r)
		got, err := AssembleStream(out)
		if err != nil {
			t.Fatalf("chunk %d: the redacted stream no longer assembles: %v\n%s", n, err, out)
		}
		msg := got.Choices[0].Message
		if msg.Content != "Here is the token: [redacted] and that is all." {
			t.Errorf("chunk %d: content %q", n, msg.Content)
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Arguments != `{"city":"[redacted]"}` || msg.ToolCalls[0].Function.Name != "get_weather" {
			t.Errorf("chunk %d: tool calls %+v", n, msg.ToolCalls)
		}
		// No run of the secret's characters of four or more survives in any event.
		for _, piece := range split(streamedSecret, 4) {
			if len(piece) == 4 && bytes.Contains(out, []byte(piece)) {
				t.Errorf("chunk %d: %q of the secret is still in the stream", n, piece)
			}
		}
		// The events that carried none of it are untouched.
		if first, _, _ := bytes.Cut(raw, []byte("\n\n")); !bytes.HasPrefix(out, first) {
			t.Errorf("chunk %d: an event before the secret was rewritten:\n%s", n, out)
		}
	}
}

func TestRedactRawLeavesCleanStreamsAlone(t *testing.T) {
	raw := sseOf(split("nothing to hide here", 3), nil, true)
	if out := RedactRaw(raw, secretFinder(streamedSecret)); &out[0] != &raw[0] {
		t.Error("a stream without secrets was copied")
	}
	body := []byte(`{"choices":[{"message":{"content":"fine"}}]}`)
	if out := RedactRaw(body, secretFinder(streamedSecret)); !bytes.Equal(out, body) {
		t.Errorf("body changed: %s", out)
	}
}

func TestRedactRawCutStreams(t *testing.T) {
	r := secretFinder(streamedSecret)
	// Broken off in the middle of the secret, between events: the start that arrived is
	// hidden, since no more came to make it whole.
	raw := sseOf(split("Here is the token: "+streamedSecret[:9], 3), nil, false)
	out := RedactRaw(raw, r)
	got, _ := AssembleStream(out)
	if c := got.Choices[0].Message.Content; c != "Here is the token: [redacted]" {
		t.Errorf("cut stream content %q\n%s", c, out)
	}
	// Broken off inside an event.
	raw = []byte("data: {\"choices\":[{\"delta\":{\"content\":\"the token " + streamedSecret[:8])
	if out := RedactRaw(raw, r); bytes.Contains(out, []byte(streamedSecret[:8])) {
		t.Errorf("cut event kept the secret's start: %s", out)
	}
	// A JSON body cut short.
	body := []byte(`{"choices":[{"message":{"content":"token ` + streamedSecret[:10])
	if out := RedactRaw(body, r); bytes.Contains(out, []byte(streamedSecret[:10])) {
		t.Errorf("cut body kept the secret's start: %s", out)
	}
}

func TestRedactRawEncodedSplitSecret(t *testing.T) {
	// The encoded forms arrive in pieces too: base64, percent and \u escapes.
	r := secretFinder(streamedSecret)
	b64 := "aGZfZTJlU2VjcmV0VmFsdWVfOWYzaw=="
	var esc strings.Builder
	for _, c := range streamedSecret {
		fmt.Fprintf(&esc, `\u%04x`, c)
	}
	text := "b64 " + b64 + " json " + esc.String() + " url %68%66%5F%65%32%65%53%65%63%72%65%74%56%61%6C%75%65%5F%39%66%33%6B."
	out := RedactRaw(sseOf(split(text, 5), nil, true), r)
	got, err := AssembleStream(out)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Choices[0].Message.Content; c != "b64 [redacted] json [redacted] url [redacted]." {
		t.Errorf("content %q", c)
	}
}

// FuzzRedactRaw streams a text holding a secret in pieces the fuzzer cuts, and checks
// that the redacted stream still assembles, to the redacted text, without the secret.
func FuzzRedactRaw(f *testing.F) {
	f.Add("Here is the token: ", " and more", []byte{3, 1, 4, 1, 5}, true)
	f.Add("", "", []byte{1}, false)
	f.Add("x", "", []byte{30, 2}, true)
	r := secretFinder(streamedSecret)
	f.Fuzz(func(t *testing.T, before, after string, cuts []byte, done bool) {
		if strings.ContainsAny(before+after, "\x00") || len(before)+len(after) > 400 {
			return
		}
		text := before + streamedSecret + after
		var pieces []string
		rest := text
		for i := 0; len(rest) > 0; i++ {
			n := 1
			if len(cuts) > 0 {
				n = 1 + int(cuts[i%len(cuts)])%12
			}
			n = min(n, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		raw := sseOf(pieces, nil, done)
		out := RedactRaw(raw, r)
		got, _ := AssembleStream(out)
		if len(got.Choices) == 0 {
			t.Fatalf("redacted stream has no choice:\n%s", out)
		}
		content := got.Choices[0].Message.Content
		if strings.Contains(content, streamedSecret) || bytes.Contains(out, []byte(streamedSecret)) {
			t.Fatalf("secret survived:\n%s", out)
		}
		orig, _ := AssembleStream(raw)
		want := r.Redact(orig.Choices[0].Message.Content)
		if done && content != want {
			t.Fatalf("assembles to %q, want %q", content, want)
		}
	})
}

func TestRedactCutCompletion(t *testing.T) {
	r := secretFinder(streamedSecret)
	c := openai.ChatCompletion{Choices: []openai.Choice{{Message: openai.Message{Content: "token " + streamedSecret[:7],
		ToolCalls: []openai.ToolCall{{Function: openai.FunctionCall{Name: "f", Arguments: `{"k":"` + streamedSecret[:5]}}}}}}}
	got := RedactCutCompletion(c, r)
	if m := got.Choices[0].Message; m.Content != "token [redacted]" || m.ToolCalls[0].Function.Arguments != `{"k":"[redacted]` {
		t.Errorf("got %+v", m)
	}
	if c.Choices[0].Message.Content != "token "+streamedSecret[:7] || c.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"k":"`+streamedSecret[:5] {
		t.Error("RedactCutCompletion changed its input")
	}
}
