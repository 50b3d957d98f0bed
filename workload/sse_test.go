package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// collect feeds the pieces in order and returns the payloads emitted.
func collect(t testing.TB, pieces ...[]byte) ([]string, error) {
	t.Helper()
	var d sseDecoder
	var got []string
	for _, p := range pieces {
		if err := d.Feed(p, func(b []byte) error { got = append(got, string(b)); return nil }); err != nil {
			return got, err
		}
	}
	return got, nil
}

func TestSSEDecoderFields(t *testing.T) {
	stream := ": keep-alive\n" +
		"event: chunk\n" +
		"id: 7\n" +
		"data: one\n\n" +
		"data:two\r\n\r\n" + // no space after the colon, CRLF endings
		"data: multi\n" +
		"data: line\n\n" +
		"retry: 100\n\n" + // an event without data dispatches nothing
		"data\n\n" + // a bare field name is an empty data field
		"data: cr\r\r" + // lone CR endings
		"data: [DONE]\n\n" +
		"data: unterminated" // no blank line: never dispatched
	want := []string{"one", "two", "multi\nline", "", "cr", "[DONE]"}
	got, err := collect(t, []byte(stream))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("payloads = %q, want %q", got, want)
	}
	// Byte by byte, CR and LF of one CRLF land in different reads.
	var pieces [][]byte
	for i := range len(stream) {
		pieces = append(pieces, []byte{stream[i]})
	}
	got, err = collect(t, pieces...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("byte by byte: payloads = %q, want %q", got, want)
	}
}

func TestSSEDecoderRejectsHugeLine(t *testing.T) {
	huge := bytes.Repeat([]byte("x"), maxEventBytes+1)
	if _, err := collect(t, []byte("data: "), huge); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("split: err = %v, want ErrEventTooLarge", err)
	}
	if _, err := collect(t, append([]byte("data: "), append(huge, '\n', '\n')...)); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("whole: err = %v, want ErrEventTooLarge", err)
	}
}

func ptr[T any](v T) *T { return &v }

// chunkStream renders chunks as an engine would stream them, then [DONE].
func chunkStream(t testing.TB, chunks ...openai.ChatCompletionChunk) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, c := range chunks {
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

func toolDelta(idx int, id, name, args string) openai.ChatCompletionChunk {
	return openai.ChatCompletionChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m", Choices: []openai.ChunkChoice{{
		Delta: openai.Delta{ToolCalls: []openai.ToolCall{{Index: ptr(idx), ID: id, Type: typeIf(id), Function: openai.FunctionCall{Name: name, Arguments: args}}}},
	}}}
}

func typeIf(id string) string {
	if id == "" {
		return ""
	}
	return "function"
}

func contentDelta(s string) openai.ChatCompletionChunk {
	return openai.ChatCompletionChunk{ID: "c1", Model: "m", Choices: []openai.ChunkChoice{{Delta: openai.Delta{Content: s}}}}
}

func finishChunk(reason string) openai.ChatCompletionChunk {
	return openai.ChatCompletionChunk{ID: "c1", Model: "m", Choices: []openai.ChunkChoice{{FinishReason: ptr(reason)}}}
}

func usageChunk(p, c int) openai.ChatCompletionChunk {
	return openai.ChatCompletionChunk{ID: "c1", Model: "m", Choices: []openai.ChunkChoice{}, Usage: &openai.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}}
}

func TestAssembleStreamToolCalls(t *testing.T) {
	role := openai.ChatCompletionChunk{ID: "c1", Model: "m", Created: 5, Choices: []openai.ChunkChoice{{Delta: openai.Delta{Role: "assistant"}}}}
	raw := chunkStream(t,
		role,
		contentDelta("Let me "),
		contentDelta("check."),
		toolDelta(0, "call_a", "get_weather", ""),
		toolDelta(0, "", "", `{"ci`),
		toolDelta(1, "call_b", "get_order_status", `{"order_id":`),
		toolDelta(0, "", "", `ty":"Lisbon","unit":"celsius"}`),
		toolDelta(1, "", "", `"ORD-1"}`),
		finishChunk("tool_calls"),
		usageChunk(11, 7),
	)
	got, err := AssembleStream(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := openai.ChatCompletion{ID: "c1", Object: "chat.completion", Created: 5, Model: "m",
		Usage: &openai.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18},
		Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: "Let me check.", ToolCalls: []openai.ToolCall{
			{ID: "call_a", Type: "function", Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Lisbon","unit":"celsius"}`}},
			{ID: "call_b", Type: "function", Function: openai.FunctionCall{Name: "get_order_status", Arguments: `{"order_id":"ORD-1"}`}},
		}}, FinishReason: "tool_calls"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("assembled\n got %+v\nwant %+v", got, want)
	}
}

// errNotChunk stands for the JSON syntax error a payload that is not a chunk yields.
var errNotChunk = errors.New("not a chunk")

func TestAssembleStreamErrors(t *testing.T) {
	full := chunkStream(t, contentDelta("hi"), finishChunk("stop"))
	truncated := full[:bytes.Index(full, []byte("\n\n"))+2+10]
	cases := []struct {
		name string
		raw  string
		want error
	}{
		{"not a chunk", "data: {\"id\":\"c1\"\n\n", errNotChunk},
		{"truncated", string(truncated), ErrIncompleteStream},
		{"server error", "data: {\"error\":{\"message\":\"out of memory\",\"type\":\"internal\"}}\n\n", ErrServerStreamError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := AssembleStream([]byte(c.raw))
			var syn *json.SyntaxError
			if c.want == errNotChunk && errors.As(err, &syn) {
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	// Finished without [DONE] (some servers omit it): complete.
	noDone := bytes.TrimSuffix(full, []byte("data: [DONE]\n\n"))
	if c, err := AssembleStream(noDone); err != nil || c.Choices[0].Message.Content != "hi" {
		t.Fatalf("finished stream without [DONE]: %+v, %v", c, err)
	}
}

// assembleSplit feeds raw in the given pieces and returns the completion and error
// text, the way the client reads a response.
func assembleSplit(raw []byte, cuts []int) (openai.ChatCompletion, string, bool) {
	var (
		dec sseDecoder
		asm streamAssembly
	)
	emit := func(p []byte) error { _, err := asm.event(p); return err }
	prev := 0
	var err error
	for _, c := range append(cuts, len(raw)) {
		if err = dec.Feed(raw[prev:c], emit); err != nil {
			break
		}
		prev = c
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return asm.completion(), msg, asm.done
}

func FuzzSSE(f *testing.F) {
	f.Add(chunkStream(f, contentDelta("Hello"), toolDelta(0, "id0", "get_weather", `{"city":`), toolDelta(0, "", "", `"Oslo"}`), finishChunk("tool_calls"), usageChunk(3, 4)), uint64(1))
	f.Add([]byte(": c\r\nevent: x\r\ndata: {\"choices\":[{\"index\":0,\"delta\":\r\ndata: {\"content\":\"a\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n"), uint64(2))
	f.Add([]byte("data: {\"choices\":[{\"index\":1,\"delta\":{\"tool_calls\":[{\"id\":\"x\",\"function\":{\"arguments\":\"{\"}}]}}]}\r\r"), uint64(3))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\ndata: not json\n\n"), uint64(4))
	f.Add([]byte("data:\n\ndata: [DONE]\n\ndata: {\"choices\":[]}\n\n"), uint64(5))
	f.Fuzz(func(t *testing.T, raw []byte, seed uint64) {
		whole, wholeErr, done := assembleSplit(raw, nil)
		// Split the same bytes at random points: the transport's read boundaries must
		// not change what is assembled, nor whether it fails.
		r := rand.New(rand.NewPCG(seed, uint64(len(raw))))
		for range 3 {
			var cuts []int
			for i := 1; i < len(raw); i++ {
				if r.IntN(4) == 0 {
					cuts = append(cuts, i)
				}
			}
			split, splitErr, splitDone := assembleSplit(raw, cuts)
			if !reflect.DeepEqual(whole, split) || wholeErr != splitErr || done != splitDone {
				t.Fatalf("cuts %v changed the result:\nwhole %+v (%s)\nsplit %+v (%s)", cuts, whole, wholeErr, split, splitErr)
			}
		}
		// AssembleStream is the same parse plus the completeness check.
		c, err := AssembleStream(raw)
		if !reflect.DeepEqual(c, whole) {
			t.Fatalf("AssembleStream = %+v, want %+v", c, whole)
		}
		switch {
		case wholeErr != "":
			if err == nil || err.Error() != wholeErr {
				t.Fatalf("AssembleStream err = %v, want %s", err, wholeErr)
			}
		case !done && !hasFinish(whole):
			if !errors.Is(err, ErrIncompleteStream) {
				t.Fatalf("AssembleStream err = %v, want ErrIncompleteStream", err)
			}
		case err != nil:
			t.Fatalf("AssembleStream err = %v on a complete stream", err)
		}
	})
}

func hasFinish(c openai.ChatCompletion) bool {
	for _, ch := range c.Choices {
		if ch.FinishReason != "" {
			return true
		}
	}
	return false
}

func BenchmarkSSE(b *testing.B) {
	var chunks []openai.ChatCompletionChunk
	for i := range 500 {
		if i%5 == 0 {
			chunks = append(chunks, toolDelta(i/50, fmt.Sprintf("call_%d", i), "run_sql", `{"query":"select`))
		} else {
			chunks = append(chunks, contentDelta("token "))
		}
	}
	chunks = append(chunks, finishChunk("stop"), usageChunk(2000, 500))
	raw := chunkStream(b, chunks...)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		// 4 KiB reads, as a TCP stream tends to deliver them.
		if _, msg, _ := assembleSplit(raw, cutsEvery(len(raw), 4096)); msg != "" {
			b.Fatal(msg)
		}
	}
}

func cutsEvery(n, step int) []int {
	var cuts []int
	for i := step; i < n; i += step {
		cuts = append(cuts, i)
	}
	return cuts
}
