package workload

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// normal makes empty slices nil, where encoding/json and the chunk decoder may differ
// without a difference to the assembly.
func normal(ev streamEvent) streamEvent {
	if len(ev.Choices) == 0 {
		ev.Choices = nil
	}
	for i := range ev.Choices {
		if len(ev.Choices[i].Delta.ToolCalls) == 0 {
			ev.Choices[i].Delta.ToolCalls = nil
		}
	}
	return ev
}

// checkChunk holds the chunk decoder to encoding/json's answer for payload; it returns
// whether the fast path took the payload.
func checkChunk(t testing.TB, d *chunkDecoder, payload []byte) bool {
	t.Helper()
	c, ok := d.decode(payload)
	if !ok {
		return false
	}
	var want streamEvent
	if err := json.Unmarshal(payload, &want); err != nil {
		t.Fatalf("chunk decoder took %q, encoding/json refuses it: %v", payload, err)
	}
	if want.Error != nil {
		t.Fatalf("chunk decoder took the error envelope %q", payload)
	}
	if got := c.event(); !reflect.DeepEqual(normal(got), normal(want)) {
		t.Fatalf("%q:\n chunk decoder %+v\n encoding/json %+v", payload, got, want)
	}
	return true
}

// checkWhole holds decodeCompletion's fast path to encoding/json's answer exactly.
func checkWhole(t testing.TB, payload []byte) bool {
	t.Helper()
	d := chunkDecoder{whole: true}
	c, ok := d.decode(payload)
	if !ok {
		return false
	}
	var want openai.ChatCompletion
	if err := json.Unmarshal(payload, &want); err != nil {
		t.Fatalf("completion decoder took %q, encoding/json refuses it: %v", payload, err)
	}
	if got := c.completion(); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n completion decoder %#v\n encoding/json      %#v", payload, got, want)
	}
	return true
}

var wholeSamples = []string{
	`{"id":"chatcmpl-1","object":"chat.completion","created":1733000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \u00e9\n"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`,
	`{"id":"c","choices":[],"usage":null}`,
	`{"id":"c","choices":null}`,
	`{"id":"c","choices":[{"message":{"role":"tool","name":"f","tool_call_id":"x","content":"","tool_calls":[]}}]}`,
}

var chunkSamples = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"system_fingerprint":"fp","usage":null}`,
	`{"id":"c","choices":[{"index":0,"delta":{"content":"line\n\"quoted\" \u00e9 \ud83d\ude00 \\ \/"},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": \"Osaka\"}"}}]},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46,"prompt_tokens_details":{"cached_tokens":0}}}`,
	` { "id" : "c" , "choices" : [ { "index" : 1 , "delta" : { "content" : "ü" } } ] , "extra" : [1, -2.5e3, true, false, null, {"a":[]}] } `,
	`{"id":"c","choices":[{"index":0,"delta":{"content":"日本語"},"finish_reason":"stop","matched_stop":151645}]}`,
}

// Payloads the fast path must hand to encoding/json.
var chunkRefused = []string{
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"ID":"folded key"}`,
	`{"id":"a","id":"duplicate"}`,
	`{"created":1.5}`,
	`{"created":12345678901234567890}`,
	`{"id":5}`,
	`{"choices":[null]}`,
	`{"choices":[{"index":"0"}]}`,
	`{"id":"bad \ud800 surrogate"}`,
	"{\"id\":\"bad \xff utf8\"}",
	`{"id":"c"} trailing`,
	`{"mod\u0065l":"escaped key"}`,
	`{"id":"c",}`,
	`[]`,
	`null`,
}

// A stream's text chunks differ only in their text: after the first, each is read by
// the template, and a chunk that differs elsewhere is parsed in full.
func TestChunkTemplate(t *testing.T) {
	var d chunkDecoder
	body := string(renderStream(4))
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		p := strings.TrimPrefix(ev, "data: ")
		if p != "[DONE]" && !checkChunk(t, &d, []byte(p)) {
			t.Fatalf("refused %s", p)
		}
	}
	if d.pre == nil {
		t.Fatal("no template kept")
	}
	for _, p := range []string{
		strings.Replace(chunkSamples[1], `"Hello"`, `"He said \"hi\"\n"`, 1),
		strings.Replace(chunkSamples[1], `"Hello"`, `"He" , "x":"y"`, 1),
		strings.Replace(chunkSamples[1], `"Hello"`, `""`, 1),
		strings.Replace(chunkSamples[1], `"Hello"`, `null`, 1),
		strings.Replace(chunkSamples[1], `"Hello"`, "\"bad \xff\"", 1),
	} {
		checkChunk(t, &d, []byte(chunkSamples[1]))
		checkChunk(t, &d, []byte(p))
	}
}

func TestChunkDecoderAgreesWithEncodingJSON(t *testing.T) {
	var d chunkDecoder
	for _, s := range chunkSamples {
		if !checkChunk(t, &d, []byte(s)) {
			t.Errorf("fast path refused a plain chunk: %s", s)
		}
	}
	for _, s := range chunkRefused {
		if checkChunk(t, &d, []byte(s)) {
			t.Errorf("fast path took %s", s)
		}
	}
}

// The assembly is the same whichever decoder read each chunk, and a server's error
// envelope still ends the stream with ErrServerStreamError.
func TestAssemblyFastAndSlowAgree(t *testing.T) {
	var raw strings.Builder
	for _, s := range chunkSamples {
		fmt.Fprintf(&raw, "data: %s\n\n", s)
	}
	raw.WriteString("data: [DONE]\n\n")
	got, err := AssembleStream([]byte(raw.String()))
	if err != nil {
		t.Fatal(err)
	}
	var slow streamAssembly
	for _, s := range chunkSamples {
		var ev streamEvent
		if err := json.Unmarshal([]byte(s), &ev); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(ev.ChatCompletionChunk)
		// Re-encoded with a refused key so that the slow path decodes it.
		b = append([]byte(`{"ID":"`+ev.ID+`",`), b[1:]...)
		if _, err := slow.event(b); err != nil {
			t.Fatal(err)
		}
	}
	if want := slow.completion(); !reflect.DeepEqual(got, want) {
		t.Fatalf("fast assembly\n %+v\nslow assembly\n %+v", got, want)
	}
	_, err = AssembleStream([]byte("data: " + chunkRefused[0] + "\n\n"))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error envelope: %v", err)
	}
}

func TestCompletionDecoderAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range wholeSamples {
		if !checkWhole(t, []byte(s)) {
			t.Errorf("fast path refused a plain completion: %s", s)
		}
	}
	for _, s := range append(chunkRefused, `{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]}}]}`,
		`{"choices":[{"delta":{"content":"a chunk's key"}}]}`) {
		if checkWhole(t, []byte(s)) {
			t.Errorf("fast path took %s", s)
		}
	}
}

func FuzzChunkDecoder(f *testing.F) {
	for _, s := range wholeSamples {
		f.Add([]byte(s))
	}
	for _, s := range chunkSamples {
		f.Add([]byte(s))
	}
	for _, s := range chunkRefused {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var d chunkDecoder
		checkChunk(t, &d, payload)
		// A decoder that read another chunk first gives the same answer.
		d.decode([]byte(chunkSamples[3]))
		checkChunk(t, &d, payload)
		// And one that keeps a plain text chunk as its template.
		var e chunkDecoder
		for _, s := range chunkSamples[1:3] {
			checkChunk(t, &e, []byte(s))
		}
		checkChunk(t, &e, payload)
		checkChunk(t, &e, payload)
		checkWhole(t, payload)
	})
}

func BenchmarkChunkDecode(b *testing.B) {
	payload := []byte(chunkSamples[1])
	b.Run("chunkDecoder-cold", func(b *testing.B) {
		// A fresh decoder each time: the full parse, no template.
		b.ReportAllocs()
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			var d chunkDecoder
			if _, ok := d.decode(payload); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("chunkDecoder-template", func(b *testing.B) {
		var d chunkDecoder
		b.ReportAllocs()
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if _, ok := d.decode(payload); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			var ev streamEvent
			if err := json.Unmarshal(payload, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// event is the chunk as encoding/json would have decoded it into a streamEvent, for
// tests that hold the two decoders to one answer.
func (c *fastChunk) event() streamEvent {
	var ev streamEvent
	ev.ID, ev.Object, ev.Model, ev.Created = string(c.id), string(c.object), string(c.model), c.created
	if c.hasUsage {
		u := c.usage
		ev.Usage = &u
	}
	for _, ch := range c.choices {
		cc := openai.ChunkChoice{Index: ch.index, Delta: openai.Delta{Role: string(ch.role), Content: string(ch.content)}}
		if ch.hasFinish {
			f := string(ch.finish)
			cc.FinishReason = &f
		}
		for _, tc := range ch.calls {
			call := openai.ToolCall{ID: string(tc.id), Type: string(tc.typ),
				Function: openai.FunctionCall{Name: string(tc.name), Arguments: string(tc.args)}}
			if tc.hasIndex {
				i := tc.index
				call.Index = &i
			}
			cc.Delta.ToolCalls = append(cc.Delta.ToolCalls, call)
		}
		ev.Choices = append(ev.Choices, cc)
	}
	return ev
}
