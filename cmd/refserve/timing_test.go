package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// TestCostModelKeepsTheFieldsProportions: at the default batch cost, 32 requests decode
// 9.8 times as many tokens per second as one, each at a third of one's pace: the field's
// 530 tok/s against 54.
func TestCostModelKeepsTheFieldsProportions(t *testing.T) {
	c := costModel{interToken: 18500 * time.Microsecond, batchCost: defaultDecodeBatchCost}
	one := 1 / c.decode(1).Seconds()
	total32 := 32 / c.decode(32).Seconds()
	if math.Abs(one-54) > 0.5 || math.Abs(total32-530) > 10 {
		t.Errorf("--inter-token-delay 18.5ms: %.1f tok/s alone, %.0f tok/s in total at 32; want the field's 54 and 530", one, total32)
	}
	if c.decode(0) != 0 {
		t.Errorf("an empty batch takes %s", c.decode(0))
	}
	flat := costModel{interToken: time.Millisecond}
	if flat.decode(32) != time.Millisecond {
		t.Errorf("batch cost 0: a step of 32 takes %s; want the same as one", flat.decode(32))
	}
}

func TestPrefillCostGrowsWithContext(t *testing.T) {
	c := costModel{prefillPerToken: defaultPrefillDelayPerToken}
	short, long := c.prefill(0, 2000), c.prefill(0, 80000)
	if short < 8*time.Millisecond || short > 9*time.Millisecond || long < 500*time.Millisecond || long > 530*time.Millisecond {
		t.Errorf("prefill of 2k tokens %s, of 80k %s; want about 8 ms and 0.5 s", short, long)
	}
	// The same 2k new tokens cost more at the end of an 80k context than at its start.
	if late := c.prefill(80000, 2000); late < 2*short {
		t.Errorf("2k tokens after 80k cost %s, at the start %s; want more than twice", late, short)
	}
	// Chunks add up to the whole.
	if whole, parts := c.prefill(100, 9000), c.prefill(100, 4000)+c.prefill(4100, 5000); absDur(whole-parts) > time.Microsecond {
		t.Errorf("prefill of 9000 tokens %s, in two chunks %s", whole, parts)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestPacerKeepsTheSchedule(t *testing.T) {
	var p pacer
	t0 := time.Unix(1000, 0)
	d := 2 * time.Millisecond
	if got := p.next(t0, d); !got.Equal(t0.Add(d)) {
		t.Fatalf("first deadline %s", got)
	}
	// Planned 0.3 ms late: the next pass still ends one step after the last deadline.
	if got := p.next(t0.Add(d+300*time.Microsecond), d); !got.Equal(t0.Add(2 * d)) {
		t.Errorf("deadline after a small lag: %s; want %s", got.Sub(t0), 2*d)
	}
	// After an idle spell the schedule starts afresh.
	late := t0.Add(time.Second)
	if got := p.next(late, d); !got.Equal(late.Add(d)) {
		t.Errorf("deadline after idling: %s; want now + %s", got.Sub(late), d)
	}
}

// conversation of about n tokens: a system prompt and a user message of n*4 bytes.
func longConversation(n int, topic string) openai.ChatRequest {
	var b strings.Builder
	for b.Len() < 4*n {
		fmt.Fprintf(&b, "Paragraph %d about %s: the figures for this quarter are in the attached table. ", b.Len(), topic)
	}
	return userRequest(b.String()[:4*n], nil)
}

// timeToFirstToken streams req and returns the time from sending it to its first content
// chunk, and the assembled reply.
func timeToFirstToken(t *testing.T, base string, body any) (time.Duration, streamed) {
	t.Helper()
	start := time.Now()
	var first time.Duration
	ls := startStream(t, base, body)
	<-ls.first
	first = time.Since(start)
	return first, <-ls.done
}

// TestLongContextTakesLongerToFirstToken: an 80k-token conversation (a body of some 320 KB)
// is accepted and waits for its prefill, some 0.5 s at the default cost; a 2k-token one
// gets its first token in milliseconds.
func TestLongContextTakesLongerToFirstToken(t *testing.T) {
	cfg := testConfig(t)
	cfg.InterTokenDelay = 2 * time.Millisecond
	_, base := startServer(t, cfg, nil)
	stream := func(n int) map[string]any {
		req := longConversation(n, fmt.Sprint("context of ", n))
		req.Stream, req.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
		return bodyWith(req, nil)
	}
	// The long one first: asked after the short one, it would find the conversations'
	// shared prefix in the radix cache and prefill less than all of its tokens.
	long, s2 := timeToFirstToken(t, base, stream(80000))
	short, s1 := timeToFirstToken(t, base, stream(2000))
	t.Logf("time to first token: %s at 2k tokens, %s at 80k", short, long)
	if s1.Usage == nil || s2.Usage == nil || s1.Usage.PromptTokens/1000 != 2 || s2.Usage.PromptTokens/1000 != 80 {
		t.Fatalf("usage %+v, %+v; want 2k and 80k prompt tokens", s1.Usage, s2.Usage)
	}
	// The cost model puts 0.51 s of prefill ahead of the long one's first token (a timer
	// never fires early), and 8 ms ahead of the short one's.
	if floor := (costModel{prefillPerToken: defaultPrefillDelayPerToken}).prefill(0, 80000); long < floor {
		t.Errorf("80k tokens reached their first token in %s, before their prefill of %s", long, floor)
	}
	if long < 3*short {
		t.Errorf("first token after %s at 80k tokens, %s at 2k; want the long context well behind", long, short)
	}
}

// TestPrefixCacheSparesTheResentConversation: the second turn of a long conversation
// resends the first turn and its reply; the prefix cache holds both, so only the new
// message is prefilled. --disable-radix-cache prefills it all again.
func TestPrefixCacheSparesTheResentConversation(t *testing.T) {
	for _, off := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.DisableRadixCache = off
		_, base := startServer(t, cfg, nil)
		req := longConversation(20000, "cache")
		first := chat(t, base, req)
		req.Messages = append(req.Messages, first.Choices[0].Message, openai.Message{Role: "user", Content: "And what about next year?"})
		second := chat(t, base, req)
		cached := metric(t, base, "sglang:cached_tokens_total")
		hit := metric(t, base, "sglang:cache_hit_rate")
		resent := first.Usage.PromptTokens + first.Usage.CompletionTokens // about: the reply counts by words
		switch {
		case off && (cached != 0 || hit != 0):
			t.Errorf("radix cache off: %v cached tokens, hit rate %v; want none", cached, hit)
		case !off && (cached < float64(first.Usage.PromptTokens) || cached >= float64(second.Usage.PromptTokens) || hit < 0.99):
			t.Errorf("second turn: %v of %d prompt tokens cached (hit rate %v); want the %d or so resent",
				cached, second.Usage.PromptTokens, hit, resent)
		}
	}
}

// TestUsageFollowsTheTokens: prompt_tokens is the tokenizer's count of what was sent (four
// bytes a token, counted here independently), completion_tokens what was generated, one
// streamed chunk per token of text; max_tokens, max_completion_tokens, ignore_eos,
// min_tokens and the context length decide the reply's length.
func TestUsageFollowsTheTokens(t *testing.T) {
	cfg := testConfig(t)
	cfg.ContextLength = 3000
	_, base := startServer(t, cfg, nil)
	tools := testTools()
	sent := func(req openai.ChatRequest) int {
		n := 0
		for _, m := range req.Messages {
			n += len(m.Role) + len(m.Content) + len(m.ToolCallID)
			for _, c := range m.ToolCalls {
				n += len(c.Function.Name) + len(c.Function.Arguments)
			}
		}
		for _, tl := range req.Tools {
			n += len(tl.Function.Name) + len(tl.Function.Description) + len(tl.Function.Parameters)
		}
		return n/4 + 1
	}
	for _, tc := range []struct {
		name       string
		req        openai.ChatRequest
		extra      map[string]any
		tokens     func(n, prompt int) bool // completion tokens, given the prompt's
		wantFinish string
	}{
		{"plan", userRequest("Tell me about Lima", nil), nil, func(n, _ int) bool { return n >= 30 && n <= 70 }, "stop"},
		{"max_tokens", userRequest("Tell me about Lima", nil), map[string]any{"max_tokens": 7}, func(n, _ int) bool { return n == 7 }, "length"},
		{"max_completion_tokens", userRequest("Tell me about Lima", nil), map[string]any{"max_completion_tokens": 9}, func(n, _ int) bool { return n == 9 }, "length"},
		{"ignore_eos", userRequest("Tell me about Lima", nil), map[string]any{"ignore_eos": true, "max_tokens": 400}, func(n, _ int) bool { return n == 400 }, "length"},
		{"min_tokens", userRequest("Tell me about Lima", nil), map[string]any{"min_tokens": 250}, func(n, _ int) bool { return n == 250 }, "stop"},
		{"min_tokens below the plan", userRequest("Tell me about Lima", nil), map[string]any{"min_tokens": 3}, func(n, _ int) bool { return n >= 30 }, "stop"},
		{"context length", longConversation(2900, "edge"), map[string]any{"ignore_eos": true}, func(n, prompt int) bool { return n == 3000-prompt }, "length"},
		{"tool call", userRequest("Weather in Lima?", tools), nil, func(n, _ int) bool { return n > 10 }, "tool_calls"},
	} {
		tc.req.Stream, tc.req.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
		ls := startStream(t, base, bodyWith(tc.req, tc.extra))
		got := <-ls.done
		if got.Usage == nil || got.Finish != tc.wantFinish {
			t.Errorf("%s: finish %q, usage %+v; want %q", tc.name, got.Finish, got.Usage, tc.wantFinish)
			continue
		}
		u := got.Usage
		if u.PromptTokens != sent(tc.req) || u.TotalTokens != u.PromptTokens+u.CompletionTokens || !tc.tokens(u.CompletionTokens, u.PromptTokens) {
			t.Errorf("%s: usage %+v; want %d prompt tokens", tc.name, u, sent(tc.req))
		}
		contentChunks := 0
		for _, c := range got.Chunks {
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				contentChunks++
			}
		}
		if tc.wantFinish != "tool_calls" && contentChunks != u.CompletionTokens {
			t.Errorf("%s: %d content chunks for %d completion tokens; want one chunk a token", tc.name, contentChunks, u.CompletionTokens)
		}
		if tc.wantFinish != "tool_calls" && len(strings.Fields(got.Message.Content)) != u.CompletionTokens {
			t.Errorf("%s: %d words for %d tokens", tc.name, len(strings.Fields(got.Message.Content)), u.CompletionTokens)
		}
	}
	// A prompt as long as the context is refused, as SGLang refuses it.
	code, body := postJSON(t, base+"/v1/chat/completions", longConversation(3000, "too long"))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "context length") {
		t.Errorf("a prompt of the whole context: HTTP %d %s; want 400", code, body)
	}
}

// TestIgnoreEOSIsDeterministic: a reply lengthened past its plan is the same every time.
func TestIgnoreEOSIsDeterministic(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	req := userRequest("Summarise the quarter", nil)
	body := bodyWith(req, map[string]any{"ignore_eos": true, "max_tokens": 200})
	code1, a := postJSON(t, base+"/v1/chat/completions", body)
	code2, b := postJSON(t, base+"/v1/chat/completions", body)
	if code1 != 200 || code2 != 200 || !strings.Contains(string(a), `"completion_tokens":200`) {
		t.Fatalf("HTTP %d %d: %s", code1, code2, a)
	}
	strip := func(s []byte) string { // ids and timestamps differ; the message must not
		i := strings.Index(string(s), `"choices"`)
		return string(s[i:])
	}
	if strip(a) != strip(b) {
		t.Errorf("the same request gave two continuations:\n%s\n%s", a, b)
	}
}

// BenchmarkThroughput measures decode throughput at concurrency 1 and 32 at the default
// pace: tok/s per request and for the engine. The field's SGLang did 54 and 530.
func BenchmarkThroughput(b *testing.B) {
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprint("concurrency=", conc), func(b *testing.B) {
			cfg := testConfig(b)
			cfg.InterTokenDelay = 2 * time.Millisecond
			_, base := startServer(b, cfg, nil)
			const tokens = 200
			var total time.Duration
			for b.Loop() {
				start := time.Now()
				streams := make([]*liveStream, conc)
				for i := range streams {
					req := userRequest(fmt.Sprint("Benchmark stream ", i), nil)
					req.Stream = true
					streams[i] = startStream(b, base, bodyWith(req, map[string]any{"ignore_eos": true, "max_tokens": tokens}))
				}
				for _, ls := range streams {
					<-ls.done
				}
				total += time.Since(start)
			}
			secs := total.Seconds() / float64(b.N)
			b.ReportMetric(float64(tokens)/secs, "tok/s/request")
			b.ReportMetric(float64(tokens*conc)/secs, "tok/s")
		})
	}
}

// BenchmarkCascadeRecovery measures the field's liveness figure: after an abort of 60
// sessions in flight on a prefill server over NIXL with the abort handler, the time from
// the abort to a completed canary.
func BenchmarkCascadeRecovery(b *testing.B) {
	cfg := nixlConfig(b, 32, true)
	s, base := startServer(b, cfg, nil)
	var total time.Duration
	for b.Loop() {
		decoding(b, base, "run-", 32)
		for i := range 28 {
			startStream(b, base, longReply(fmt.Sprint("wait-", i)))
		}
		waitFor(b, s, "60 in flight", func() bool { r, q := s.sched.load(); return r+q == 60 })
		start := time.Now()
		postJSON(b, base+"/abort_request", map[string]any{"abort_all": true})
		if err := <-canary(context.Background(), base); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N)*1000, "ms-to-canary")
}
