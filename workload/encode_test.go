package workload

import (
	"encoding/json"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// The pre-encoded request is byte for byte what json.Marshal writes for it.
func TestRequestBuilderMatchesMarshal(t *testing.T) {
	temp, seed := 0.7, int64(42)
	idx := 0
	for _, tmpl := range []openai.ChatRequest{
		{Model: `m "messages":[] <&>`, Tools: NewScript(1, 3, 2).Tools, ToolChoice: json.RawMessage(`"auto"`), Stream: true,
			StreamOptions: &openai.StreamOptions{IncludeUsage: true}, Temperature: &temp, MaxTokens: 64, Seed: &seed},
		{Model: "plain"},
	} {
		b, err := newRequestBuilder(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		msgs := []openai.Message{
			{Role: "system", Content: "You are <b>terse</b> & \"exact\"\n"},
			{Role: "user", Content: "Wetter in Zürich? 日本"},
			{Role: "assistant", ToolCalls: []openai.ToolCall{{Index: &idx, ID: "call_1", Type: "function",
				Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Zürich"}`}}}},
			{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"t":3}`},
		}
		for n := 0; n <= len(msgs); n++ {
			for _, rid := range []string{"arb-1-3-0", ""} {
				req := tmpl
				req.Messages, req.RID = msgs[:n], rid
				if n == 0 {
					req.Messages = []openai.Message{}
				}
				want, _ := json.Marshal(req)
				got, err := b.body(rid)
				if err != nil || string(got) != string(want) {
					t.Fatalf("%d messages, rid %q:\n got %s\nwant %s (%v)", n, rid, got, want, err)
				}
				if cap(got) != len(got) {
					t.Errorf("body allocated %d for %d bytes", cap(got), len(got))
				}
			}
			if n < len(msgs) {
				if err := b.add(msgs[n]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func BenchmarkRequestEncode(b *testing.B) {
	s := NewScript(1, 7, 4)
	temp, seed := 0.7, int64(8)
	tmpl := openai.ChatRequest{Model: "m", Tools: s.Tools, ToolChoice: json.RawMessage(`"auto"`), Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true}, Temperature: &temp, Seed: &seed}
	msgs := []openai.Message{{Role: "system", Content: s.System}}
	for _, u := range s.Users {
		msgs = append(msgs, openai.Message{Role: "user", Content: u}, openai.Message{Role: "assistant", Content: "Sure: " + u})
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := tmpl
			req.Messages, req.RID = msgs, "arb-1-7-3"
			if _, err := json.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("requestBuilder", func(b *testing.B) {
		rb, _ := newRequestBuilder(tmpl)
		for _, m := range msgs {
			rb.add(m)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rb.body("arb-1-7-3"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkNewScript(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		NewScript(1, i, 8)
	}
}
