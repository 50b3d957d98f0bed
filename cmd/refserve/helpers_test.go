package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// testConfig is refserve's default configuration with an empty environment.
func testConfig(t testing.TB) config {
	t.Helper()
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("default config: %v", err)
	}
	c.Env = map[string]string{}
	c.InterTokenDelay = 0
	c.EnableMetrics = true
	return c
}

// startServer runs a real refserve on a loopback port until the test ends. A nil
// backend is the sim backend of cfg.
func startServer(t testing.TB, cfg config, b Backend) (*server, string) {
	t.Helper()
	if b == nil {
		var err error
		if b, err = newSimBackend(cfg.backendConfig()); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(cfg, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

// waitFor blocks until cond holds, re-checking at every change of the scheduler.
func waitFor(t testing.TB, s *server, what string, cond func() bool) {
	t.Helper()
	failsafe := time.NewTimer(20 * time.Second)
	defer failsafe.Stop()
	for {
		ch := s.sched.changes()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-failsafe.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func testTools() []openai.Tool {
	mk := func(name, params string) openai.Tool {
		return openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: name, Parameters: json.RawMessage(params)}}
	}
	return []openai.Tool{
		mk("get_weather", `{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}`),
		mk("search_docs", `{"type":"object","properties":{"query":{"type":"string"},"top_k":{"type":"integer","minimum":1,"maximum":10}},"required":["query","top_k"]}`),
		mk("convert_currency", `{"type":"object","properties":{"amount":{"type":"number"},"from":{"type":"string","enum":["USD","EUR"]},"to":{"type":"string","enum":["GBP","JPY"]}},"required":["amount","from","to"]}`),
		mk("run_sql", `{"type":"object","properties":{"query":{"type":"string"},"read_only":{"type":"boolean"},"tables":{"type":"array","items":{"type":"string"}}},"required":["query","read_only","tables"]}`),
	}
}

func userRequest(text string, tools []openai.Tool) openai.ChatRequest {
	return openai.ChatRequest{Model: "refserve-agent", Tools: tools,
		Messages: []openai.Message{{Role: "system", Content: "You are a helpful agent."}, {Role: "user", Content: text}}}
}

func postJSON(t testing.TB, url string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading: %v", url, err)
	}
	return resp.StatusCode, out
}

// chat sends a non-streaming request and decodes the completion.
func chat(t testing.TB, base string, req openai.ChatRequest) openai.ChatCompletion {
	t.Helper()
	req.Stream = false
	code, body := postJSON(t, base+"/v1/chat/completions", req)
	if code != http.StatusOK {
		t.Fatalf("chat: HTTP %d: %s", code, body)
	}
	var c openai.ChatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("chat: %v in %s", err, body)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("chat: %d choices", len(c.Choices))
	}
	return c
}

// streamed is a streaming response put back together.
type streamed struct {
	Message  openai.Message
	Finish   string
	Usage    *openai.Usage
	Chunks   []openai.ChatCompletionChunk
	SawDone  bool
	ToolHead []openai.ToolCall // the first delta of each call
}

// openStream starts a streaming request; the caller reads the body.
func openStream(t testing.TB, ctx context.Context, base string, req openai.ChatRequest) *http.Response {
	t.Helper()
	req.Stream = true
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream: HTTP %d: %s", resp.StatusCode, body)
	}
	return resp
}

// readStream assembles SSE events; onChunk, if set, sees each chunk as it arrives.
func readStream(body io.Reader, onChunk func(openai.ChatCompletionChunk)) (streamed, error) {
	var out streamed
	out.Message.Role = "assistant"
	calls := map[int]*openai.ToolCall{}
	var content strings.Builder
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			out.SawDone = true
			break
		}
		var ch openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return out, err
		}
		out.Chunks = append(out.Chunks, ch)
		if onChunk != nil {
			onChunk(ch)
		}
		if ch.Usage != nil {
			out.Usage = ch.Usage
		}
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			for _, tc := range c.Delta.ToolCalls {
				idx := 0
				if tc.Index != nil {
					idx = *tc.Index
				}
				cur, ok := calls[idx]
				if !ok {
					cp := tc
					cp.Index = nil
					calls[idx] = &cp
					out.ToolHead = append(out.ToolHead, tc)
					continue
				}
				cur.Function.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				out.Finish = *c.FinishReason
			}
		}
	}
	out.Message.Content = content.String()
	idxs := make([]int, 0, len(calls))
	for i := range calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		out.Message.ToolCalls = append(out.Message.ToolCalls, *calls[i])
	}
	return out, sc.Err()
}

func stream(t testing.TB, base string, req openai.ChatRequest) streamed {
	t.Helper()
	resp := openStream(t, context.Background(), base, req)
	defer resp.Body.Close()
	s, err := readStream(resp.Body, nil)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return s
}

// metric reads one sample of /metrics.
func metric(t testing.TB, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") {
			var v float64
			f := strings.Fields(line)
			if err := json.Unmarshal([]byte(f[len(f)-1]), &v); err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not served", name)
	return 0
}

// maxSteps bounds the tokens this generation can decode, garbled tail included.
func (g *generation) maxSteps() int {
	n := max(len(g.clean), g.minTokens) + garbleExtraMax
	if g.maxTokens > 0 && g.maxTokens < n {
		n = g.maxTokens
	}
	return n
}

// corrupted says whether a step of this generation read stale index-K.
func (g *generation) corrupted() bool { return g.garbled != nil }

// changes returns a channel that is closed at the scheduler's next change of state
// (a request queued, admitted or finished), so a watcher can wait for a condition
// without polling.
func (s *scheduler) changes() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// load is the number of running and queued requests.
func (s *scheduler) load() (running, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running), len(s.queue)
}
