package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// version is refserve's version, reported by /get_server_info.
const version = "0.1.0"

// maxBody bounds a request body; long multi-turn sessions stay far below it.
const maxBody = 32 << 20

// server is refserve's HTTP front end: the OpenAI-compatible API and SGLang's
// operational endpoints over one scheduler.
type server struct {
	cfg     config
	sched   *scheduler
	agent   agent
	log     *slog.Logger
	started time.Time
	seq     atomic.Uint64
}

func newServer(cfg config, b Backend, log *slog.Logger) *server {
	sched := newScheduler(b, cfg.InterTokenDelay, cfg.MaxRunningRequests, log)
	sched.wedgeOnMassAbort = !cfg.DisableOverlapSchedule && cfg.TPSize > 1
	return &server{
		cfg:     cfg,
		sched:   sched,
		agent:   agent{seed: uint64(cfg.Seed)},
		log:     log,
		started: time.Now(),
	}
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /health_generate", s.healthGenerate)
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /get_server_info", s.serverInfo)
	mux.HandleFunc("POST /abort_request", s.abortRequest)
	mux.HandleFunc("GET /metrics", s.metrics)
	return mux
}

// writeError sends the OpenAI error envelope.
func writeError(w http.ResponseWriter, code int, typ, format string, a ...any) {
	var body openai.ErrorBody
	body.Error.Message = fmt.Sprintf(format, a...)
	body.Error.Type = typ
	body.Error.Code = code
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// decodeChatRequest reads and checks a chat request; its error is the client's fault.
func (s *server) decodeChatRequest(body io.Reader) (*openai.ChatRequest, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if len(raw) > maxBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxBody)
	}
	var req openai.ChatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	if req.Model != "" && req.Model != s.cfg.ServedModelName {
		return nil, fmt.Errorf("the model `%s` does not exist; this server serves `%s`", req.Model, s.cfg.ServedModelName)
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("messages: empty; a chat completion needs at least one message")
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("max_tokens %d: must not be negative", req.MaxTokens)
	}
	return &req, nil
}

// promptTokens estimates the prompt's tokens at four characters each.
func promptTokens(req *openai.ChatRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Content) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters)
	}
	return n/4 + 1
}

func (s *server) newRID() string {
	return fmt.Sprintf("%016x%016x", uint64(s.started.UnixNano()), mix64(s.seq.Add(1)))
}

func (s *server) chat(w http.ResponseWriter, hr *http.Request) {
	req, err := s.decodeChatRequest(hr.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	rep, session, err := s.agent.next(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	rid := req.RID
	if rid == "" {
		rid = s.newRID()
	}
	prompt := promptTokens(req)
	r := newRequest(rid, placeOf(session, req.Messages), prompt, newGeneration(s.cfg.ToolCallParser, rep, req.MaxTokens, uint64(s.cfg.Seed), session))
	if err := s.sched.submit(r); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "%v", err)
		return
	}
	if req.Stream {
		s.stream(w, hr, req, r, rep)
		return
	}
	var content strings.Builder
	var last event
	for last.Finish == "" {
		select {
		case ev := <-r.events:
			content.WriteString(ev.Content)
			last = ev
		case <-hr.Context().Done():
			s.sched.cancel(r)
			return
		}
	}
	msg := openai.Message{Role: "assistant", Content: content.String()}
	if last.Finish == "tool_calls" {
		msg.ToolCalls = []openai.ToolCall{{ID: rep.Call.ID, Type: "function",
			Function: openai.FunctionCall{Name: rep.Call.Name, Arguments: rep.Call.Arguments()}}}
	}
	writeJSON(w, openai.ChatCompletion{
		ID: rid, Object: "chat.completion", Created: time.Now().Unix(), Model: s.cfg.ServedModelName,
		Choices: []openai.Choice{{Index: 0, Message: msg, FinishReason: last.Finish}},
		Usage:   &openai.Usage{PromptTokens: prompt, CompletionTokens: last.Tokens, TotalTokens: prompt + last.Tokens},
	})
}

// stream writes a request's events as SSE chunks. A failed write means the client left,
// which aborts the request as it does in SGLang.
func (s *server) stream(w http.ResponseWriter, hr *http.Request, req *openai.ChatRequest, r *request, rep reply) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	chunk := func(d openai.Delta, finish string) openai.ChatCompletionChunk {
		c := openai.ChatCompletionChunk{ID: r.rid, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ServedModelName,
			Choices: []openai.ChunkChoice{{Index: 0, Delta: d}}}
		if finish != "" {
			c.Choices[0].FinishReason = &finish
		}
		return c
	}
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			s.log.Error("encoding a chunk", "rid", r.rid, "err", err)
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !send(chunk(openai.Delta{Role: "assistant"}, "")) {
		s.sched.cancel(r)
		return
	}
	for {
		var ev event
		select {
		case ev = <-r.events:
		case <-hr.Context().Done():
			s.sched.cancel(r)
			return
		}
		if ev.Content != "" && !send(chunk(openai.Delta{Content: ev.Content}, "")) {
			s.sched.cancel(r)
			return
		}
		if ev.Finish == "" {
			continue
		}
		ok := true
		if ev.Finish == "tool_calls" {
			ok = sendToolCall(*rep.Call, func(tc openai.ToolCall) bool {
				return send(chunk(openai.Delta{ToolCalls: []openai.ToolCall{tc}}, ""))
			})
		}
		ok = ok && send(chunk(openai.Delta{}, ev.Finish))
		if ok && req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			ok = send(openai.ChatCompletionChunk{ID: r.rid, Object: "chat.completion.chunk", Created: created, Model: s.cfg.ServedModelName,
				Choices: []openai.ChunkChoice{},
				Usage:   &openai.Usage{PromptTokens: r.prompt, CompletionTokens: ev.Tokens, TotalTokens: r.prompt + ev.Tokens}})
		}
		if ok {
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			if flusher != nil {
				flusher.Flush()
			}
		}
		return
	}
}

// sendToolCall streams one call as SGLang does: a first delta with id, type, name and
// empty arguments, then the arguments in fragments.
func sendToolCall(c call, send func(openai.ToolCall) bool) bool {
	idx := 0
	if !send(openai.ToolCall{Index: &idx, ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: ""}}) {
		return false
	}
	for _, frag := range chunks(c.Arguments()) {
		if !send(openai.ToolCall{Index: &idx, Function: openai.FunctionCall{Arguments: frag}}) {
			return false
		}
	}
	return true
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, openai.ModelList{Object: "list", Data: []openai.Model{{
		ID: s.cfg.ServedModelName, Object: "model", Created: s.started.Unix(), OwnedBy: "refserve",
	}}})
}

// health answers 200 while serving; with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=1 it
// also runs a generation, as SGLang's does.
func (s *server) health(w http.ResponseWriter, hr *http.Request) {
	if s.cfg.Env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "1" {
		s.healthGenerate(w, hr)
		return
	}
	s.sched.mu.Lock()
	closed := s.sched.closed
	s.sched.mu.Unlock()
	if closed {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// healthGenerate runs one real 1-token generation through the scheduler, so it waits
// behind the queue like any request and fails if the scheduler does not run it.
func (s *server) healthGenerate(w http.ResponseWriter, hr *http.Request) {
	rep := reply{Text: "ok", Lure: call{Name: "search", Params: []param{{Name: "query", Value: "health"}}}}
	r := newProbe("health-"+s.newRID(), newGeneration(s.cfg.ToolCallParser, rep, 1, uint64(s.cfg.Seed), 0))
	if err := s.sched.submit(r); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "%v", err)
		return
	}
	for {
		select {
		case ev := <-r.events:
			if ev.Finish == "" {
				continue
			}
			if ev.Finish == "abort" {
				writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "health generation was aborted")
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		case <-hr.Context().Done():
			s.sched.cancel(r)
			return
		}
	}
}

func (s *server) serverInfo(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(s.cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", "encoding server info: %v", err)
		return
	}
	info := map[string]any{}
	_ = json.Unmarshal(b, &info) // our own encoding of a struct: always an object
	info["seed"] = s.cfg.Seed
	info["inter_token_delay"] = s.cfg.InterTokenDelay.String()
	info["version"] = version
	info["engine"] = "refserve"
	writeJSON(w, info)
}

func (s *server) abortRequest(w http.ResponseWriter, hr *http.Request) {
	var body struct {
		RID      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err := json.NewDecoder(io.LimitReader(hr.Body, 1<<20)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON body: %v", err)
		return
	}
	if body.RID == "" && !body.AbortAll {
		writeError(w, http.StatusBadRequest, "BadRequestError", "name a rid or set abort_all")
		return
	}
	n := s.sched.abort(body.RID, body.AbortAll)
	s.log.Info("abort", "rid", body.RID, "abort_all", body.AbortAll, "aborted", n)
	writeJSON(w, map[string]int{"aborted": n})
}

// metrics serves Prometheus text with SGLang's metric names.
func (s *server) metrics(w http.ResponseWriter, _ *http.Request) {
	s.sched.mu.Lock()
	running, queued := len(s.sched.running), len(s.sched.queue)
	cohort := s.sched.cohort.size()
	gen := s.sched.genTokens.Load()
	rate := s.sched.tp.rate(time.Now(), gen)
	s.sched.mu.Unlock()
	label := fmt.Sprintf(`{model_name=%q}`, s.cfg.ServedModelName)
	var b strings.Builder
	metric := func(name, typ, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s%s %s\n", name, help, name, typ, name, label, strconv.FormatFloat(v, 'f', -1, 64))
	}
	metric("sglang:num_running_reqs", "gauge", "The number of running requests.", float64(running))
	metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", float64(queued))
	metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", rate)
	metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(gen))
	metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(s.sched.promptTokens.Load()))
	metric("sglang:num_requests_total", "counter", "Number of requests finished.", float64(s.sched.requests.Load()))
	metric("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", float64(s.sched.aborted.Load()))
	metric("refserve:cohort_sessions", "gauge", "Sessions the engine is serving: the logical load the sim fault model draws against (refserve only).", float64(cohort))
	metric("refserve:stale_index_k_steps_total", "counter", "Decode steps that read stale index-K (refserve only).", float64(s.sched.staleSteps.Load()))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = io.WriteString(w, b.String())
}
