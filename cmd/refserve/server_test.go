package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// checkArguments fails unless args is a JSON object that satisfies the tool's schema:
// required properties present, of the declared type, within enums and bounds.
func checkArguments(t testing.TB, tool openai.Tool, args string) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(args), &got); err != nil {
		t.Fatalf("%s: arguments %q are not a JSON object: %v", tool.Function.Name, args, err)
	}
	var sch struct {
		Properties map[string]struct {
			Type    string   `json:"type"`
			Enum    []any    `json:"enum"`
			Minimum *float64 `json:"minimum"`
			Maximum *float64 `json:"maximum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(tool.Function.Parameters, &sch); err != nil {
		t.Fatal(err)
	}
	for _, r := range sch.Required {
		if _, ok := got[r]; !ok {
			t.Errorf("%s: required %q missing from %s", tool.Function.Name, r, args)
		}
	}
	for k, v := range got {
		p, ok := sch.Properties[k]
		if !ok {
			t.Errorf("%s: unknown property %q", tool.Function.Name, k)
			continue
		}
		okType := false
		switch p.Type {
		case "string":
			_, okType = v.(string)
		case "integer":
			f, isNum := v.(float64)
			okType = isNum && f == float64(int64(f))
		case "number":
			_, okType = v.(float64)
		case "boolean":
			_, okType = v.(bool)
		case "array":
			_, okType = v.([]any)
		}
		if !okType {
			t.Errorf("%s: %s = %#v is not a %s", tool.Function.Name, k, v, p.Type)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
			t.Errorf("%s: %s = %#v is not in %v", tool.Function.Name, k, v, p.Enum)
		}
		if f, isNum := v.(float64); isNum {
			if (p.Minimum != nil && f < *p.Minimum) || (p.Maximum != nil && f > *p.Maximum) {
				t.Errorf("%s: %s = %v out of bounds", tool.Function.Name, k, f)
			}
		}
	}
}

func toolNamed(tools []openai.Tool, name string) openai.Tool {
	for _, t := range tools {
		if t.Function.Name == name {
			return t
		}
	}
	return openai.Tool{}
}

func TestChatToolCallNonStreaming(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	tools := testTools()
	for i := range 12 {
		c := chat(t, base, userRequest(fmt.Sprintf("Question %d: plan my trip to Lisbon", i), tools))
		ch := c.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("finish %q with %d tool calls; want one call", ch.FinishReason, len(ch.Message.ToolCalls))
		}
		tc := ch.Message.ToolCalls[0]
		if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" {
			t.Errorf("call id %q type %q", tc.ID, tc.Type)
		}
		checkArguments(t, toolNamed(tools, tc.Function.Name), tc.Function.Arguments)
		if ch.Message.Content != "" {
			t.Errorf("content %q next to a clean tool call", ch.Message.Content)
		}
		if u := c.Usage; u == nil || u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("usage %+v", c.Usage)
		}
	}
}

func TestStreamReassemblesToNonStreamMessage(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	tools := testTools()
	reqs := []openai.ChatRequest{
		userRequest("What is the weather in Porto?", tools),
		userRequest("Tell me about Kyoto", nil),
	}
	for _, req := range reqs {
		want := chat(t, base, req)
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		got := stream(t, base, req)
		if !got.SawDone {
			t.Error("stream did not end with [DONE]")
		}
		w := want.Choices[0]
		if got.Finish != w.FinishReason {
			t.Errorf("finish: stream %q, non-stream %q", got.Finish, w.FinishReason)
		}
		if got.Message.Content != w.Message.Content {
			t.Errorf("content: stream %q, non-stream %q", got.Message.Content, w.Message.Content)
		}
		if !slices.EqualFunc(got.Message.ToolCalls, w.Message.ToolCalls, func(a, b openai.ToolCall) bool {
			return a.ID == b.ID && a.Type == b.Type && a.Function == b.Function
		}) {
			t.Errorf("tool calls: stream %+v, non-stream %+v", got.Message.ToolCalls, w.Message.ToolCalls)
		}
		if got.Usage == nil || got.Usage.CompletionTokens != want.Usage.CompletionTokens {
			t.Errorf("usage: stream %+v, non-stream %+v", got.Usage, want.Usage)
		}
		for _, h := range got.ToolHead { // SGLang's first delta: id, type, name, empty arguments
			if h.ID == "" || h.Type != "function" || h.Function.Name == "" || h.Function.Arguments != "" || h.Index == nil {
				t.Errorf("first tool-call delta %+v", h)
			}
		}
		if len(w.Message.ToolCalls) > 0 && len(got.Chunks) < 4 {
			t.Errorf("tool call arguments came in %d chunks; want fragments", len(got.Chunks))
		}
	}
}

// toolResult answers a call the way a tool would.
func toolResult(tc openai.ToolCall) openai.Message {
	return openai.Message{Role: "tool", ToolCallID: tc.ID, Content: fmt.Sprintf(`{"tool": %q, "status": "ok", "value": 42}`, tc.Function.Name)}
}

func TestToolLoopEndsInAnswer(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	tools := testTools()
	for i := range 8 {
		req := userRequest(fmt.Sprintf("Session %d: check the numbers for Berlin", i), tools)
		var names []string
		for step := 0; ; step++ {
			if step > 3 {
				t.Fatalf("session %d: still calling tools after %d calls", i, step)
			}
			msg := chat(t, base, req).Choices[0].Message
			req.Messages = append(req.Messages, msg)
			if len(msg.ToolCalls) == 0 {
				words := len(strings.Fields(msg.Content))
				if words < 30 || words > 70 {
					t.Errorf("answer of %d words: %q", words, msg.Content)
				}
				for _, n := range names {
					if !strings.Contains(msg.Content, n) {
						t.Errorf("answer does not mention %s: %q", n, msg.Content)
					}
				}
				if !strings.Contains(msg.Content, "42") {
					t.Errorf("answer does not mention the tool result: %q", msg.Content)
				}
				break
			}
			names = append(names, msg.ToolCalls[0].Function.Name)
			req.Messages = append(req.Messages, toolResult(msg.ToolCalls[0]))
		}
		if len(names) < 1 || len(names) > 2 {
			t.Errorf("session %d called %v; want 1-2 tools", i, names)
		}
		// A new user message restarts the plan.
		req.Messages = append(req.Messages, openai.Message{Role: "user", Content: "And for Madrid?"})
		if msg := chat(t, base, req).Choices[0].Message; len(msg.ToolCalls) != 1 {
			t.Errorf("session %d: a new round did not start with a tool call: %+v", i, msg)
		}
	}
}

func TestDeterministicForSeed(t *testing.T) {
	cfg := testConfig(t)
	cfg.Seed = 7
	_, a := startServer(t, cfg, nil)
	_, b := startServer(t, cfg, nil)
	cfg.Seed = 8
	_, c := startServer(t, cfg, nil)
	differs := false
	for i := range 10 {
		req := userRequest(fmt.Sprintf("Compare option %d", i), testTools())
		x, y, z := chat(t, a, req).Choices[0].Message, chat(t, b, req).Choices[0].Message, chat(t, c, req).Choices[0].Message
		xj, _ := json.Marshal(x)
		yj, _ := json.Marshal(y)
		zj, _ := json.Marshal(z)
		if string(xj) != string(yj) {
			t.Errorf("same seed, different replies:\n%s\n%s", xj, yj)
		}
		differs = differs || string(xj) != string(zj)
	}
	if !differs {
		t.Error("seeds 7 and 8 gave identical replies to 10 requests")
	}
}

func TestToolChoice(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	tools := testTools()
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }

	req := userRequest("Weather in Oslo?", tools)
	req.ToolChoice = raw(`"none"`)
	if m := chat(t, base, req).Choices[0]; len(m.Message.ToolCalls) != 0 || m.FinishReason != "stop" || m.Message.Content == "" {
		t.Errorf("tool_choice none: %+v", m)
	}

	req.ToolChoice = raw(`{"type":"function","function":{"name":"run_sql"}}`)
	for range 2 { // forced, even once its result is in
		m := chat(t, base, req).Choices[0].Message
		if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "run_sql" {
			t.Fatalf("forced run_sql: %+v", m)
		}
		checkArguments(t, toolNamed(tools, "run_sql"), m.ToolCalls[0].Function.Arguments)
		req.Messages = append(req.Messages, m, toolResult(m.ToolCalls[0]))
	}

	req = userRequest("Weather in Oslo?", tools)
	req.ToolChoice = raw(`"required"`)
	for range 4 { // required outlasts the 1-2 call plan
		m := chat(t, base, req).Choices[0].Message
		if len(m.ToolCalls) != 1 {
			t.Fatalf("required: no tool call: %+v", m)
		}
		req.Messages = append(req.Messages, m, toolResult(m.ToolCalls[0]))
	}
	req.ToolChoice = raw(`"auto"`)
	if m := chat(t, base, req).Choices[0].Message; len(m.ToolCalls) != 0 {
		t.Errorf("auto after the plan: %+v", m)
	}

	for _, bad := range []string{`"sometimes"`, `{"type":"function","function":{"name":"nope"}}`, `{"type":"function"}`, `17`} {
		req.ToolChoice = raw(bad)
		if code, body := postJSON(t, base+"/v1/chat/completions", req); code != http.StatusBadRequest {
			t.Errorf("tool_choice %s: HTTP %d %s", bad, code, body)
		}
	}
}

func TestMaxTokensStopsWithLength(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	req := userRequest("Tell me a long story about Rome", nil)
	req.MaxTokens = 5
	c := chat(t, base, req)
	if c.Choices[0].FinishReason != "length" || c.Usage.CompletionTokens != 5 || len(strings.Fields(c.Choices[0].Message.Content)) != 5 {
		t.Errorf("max_tokens 5: finish %q, %d tokens, content %q", c.Choices[0].FinishReason, c.Usage.CompletionTokens, c.Choices[0].Message.Content)
	}
}

func TestBadRequests(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	cases := map[string]string{
		"bad json":       `{"model": "refserve-agent", "messages": [`,
		"unknown model":  `{"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}`,
		"empty messages": `{"model": "refserve-agent", "messages": []}`,
		"no messages":    `{"model": "refserve-agent"}`,
	}
	for name, body := range cases {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env openai.ErrorBody
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &env) != nil || env.Error.Message == "" || env.Error.Code != 400 {
			t.Errorf("%s: HTTP %d %s; want 400 with an error envelope", name, resp.StatusCode, raw)
		}
	}
}

func TestModelsAndHealth(t *testing.T) {
	cfg := testConfig(t)
	cfg.ServedModelName = "agent-x"
	_, base := startServer(t, cfg, nil)
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml openai.ModelList
	err = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if err != nil || len(ml.Data) != 1 || ml.Data[0].ID != "agent-x" {
		t.Errorf("models: %+v %v", ml, err)
	}
	before := metric(t, base, "sglang:generation_tokens_total")
	for _, path := range []string{"/health", "/health_generate", "/ping"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
	}
	if after := metric(t, base, "sglang:generation_tokens_total"); after != before+1 {
		t.Errorf("health_generate moved generation tokens %v -> %v; want one token", before, after)
	}
}

func TestHealthGenerateGoesThroughScheduler(t *testing.T) {
	cfg := testConfig(t)
	cfg.InterTokenDelay = time.Hour // nothing decodes: the probe must wait in the scheduler
	s, base := startServer(t, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := probeHealthGenerate(ctx, base)
	waitFor(t, s, "the probe to run", func() bool { r, _ := s.sched.load(); return r == 1 })
	select {
	case code := <-done:
		t.Fatalf("health_generate answered %d before any decode step", code)
	default:
	}
	cancel()
	if code := <-done; code == http.StatusOK {
		t.Fatal("cancelled probe reported healthy")
	}
	waitFor(t, s, "the probe to be aborted", func() bool { r, _ := s.sched.load(); return r == 0 })
}

func TestServerInfoShowsPins(t *testing.T) {
	cfg, err := parseConfig([]string{"--enable-hierarchical-cache", "--hicache-ratio", "3", "--disaggregation-mode", "decode",
		"--tool-call-parser", "kimi_k2", "--model-path", "/models/DeepSeek-V4-Flash", "--seed", "11",
		"--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port", "8999", "--tp", "8"},
		func(k string) string { return map[string]string{"BF16_INDEX_K": "1", "ARBITER_INDEX_K_GATE": "1"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, base := startServer(t, cfg, nil)
	resp, err := http.Get(base + "/get_server_info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"bf16_index_k": true, "enable_hierarchical_cache": true, "hicache_ratio": 3.0, "disaggregation_mode": "decode",
		"tool_call_parser": "kimi_k2", "model_path": "/models/DeepSeek-V4-Flash", "random_seed": 11.0, "backend": "sim",
		"version": version, "served_model_name": "refserve-agent", "disable_overlap_schedule": false,
		"index_k_gate": true, "disaggregation_transfer_backend": "nixl", "disaggregation_bootstrap_port": 8999.0,
		"nixl_abort_handler": false, "tp_size": 8.0, "max_total_tokens": float64(1 << 20), "chunked_prefill_size": 8192.0,
		"prefill_delay_per_token": "4µs", "decode_batch_cost": defaultDecodeBatchCost, "context_length": 163840.0,
	}
	for k, v := range want {
		if info[k] != v {
			t.Errorf("server info %s = %#v; want %#v", k, info[k], v)
		}
	}
	if env, _ := info["env"].(map[string]any); env["BF16_INDEX_K"] != "1" {
		t.Errorf("server info env = %#v; want BF16_INDEX_K=1", info["env"])
	}
	if port, _ := info["port"].(float64); port == 0 {
		t.Error("server info does not report the bound port")
	}
	faults, _ := info["refserve_faults"].(map[string]any)
	for k, v := range map[string]any{"stale_index_k": false, "mass_abort_wedge": true, "nixl_abort_wedge": true,
		"scheduler_wedged": false, "kv_transfer_loop_dead": false} {
		if faults[k] != v {
			t.Errorf("server info refserve_faults.%s = %#v; want %#v", k, faults[k], v)
		}
	}
}

// probeHealthGenerate calls /health_generate in the background; the channel gets its
// status code, or 0 when the call failed or was cancelled.
func probeHealthGenerate(ctx context.Context, base string) <-chan int {
	done := make(chan int, 1)
	go func() {
		hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health_generate", nil)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

func TestChatAcceptsContentParts(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	body := `{"model":"refserve-agent","messages":[{"role":"user","content":[{"type":"text","text":"What is the weather "},{"type":"text","text":"in Lisbon?"}]}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cc openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil || resp.StatusCode != http.StatusOK || len(cc.Choices) != 1 {
		t.Fatalf("status %d, %v, %+v", resp.StatusCode, err, cc)
	}
}
