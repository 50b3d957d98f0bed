package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// version is refserve's version, reported by /get_server_info.
const version = "0.1.0"

// maxBody bounds a request body: 32 MiB, some hundred times a conversation of 80k tokens
// (about 320 KB at four bytes a token).
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
	return &server{
		cfg:     cfg,
		sched:   newScheduler(b, cfg.schedulerConfig(), log),
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
	if s.cfg.EnableMetrics {
		mux.Handle("GET /metrics", s.metricsHandler())
	}
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

// samplingExtras are the sampling parameters SGLang and vLLM accept beyond OpenAI's,
// which benchmark clients use to fix a reply's length.
type samplingExtras struct {
	// IgnoreEOS makes a reply run to max_tokens (finish_reason "length"), as SGLang's
	// and vLLM's benchmark clients ask for; a tool call still ends where its markup does.
	IgnoreEOS bool `json:"ignore_eos"`
	// MinTokens keeps a reply from ending before it has this many tokens.
	MinTokens int `json:"min_tokens"`
	// MaxCompletionTokens is OpenAI's newer name for max_tokens.
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

// decodeChatRequest reads and checks a chat request; its error is the client's fault.
func (s *server) decodeChatRequest(body io.Reader) (*openai.ChatRequest, samplingExtras, error) {
	var extra samplingExtras
	raw, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err != nil {
		return nil, extra, fmt.Errorf("reading the body: %w", err)
	}
	if len(raw) > maxBody {
		return nil, extra, fmt.Errorf("body larger than %d bytes", maxBody)
	}
	var req openai.ChatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, extra, fmt.Errorf("invalid JSON body: %w", err)
	}
	if err := json.Unmarshal(raw, &extra); err != nil {
		return nil, extra, fmt.Errorf("invalid JSON body: %w", err)
	}
	if extra.MinTokens < 0 || extra.MaxCompletionTokens < 0 {
		return nil, extra, fmt.Errorf("min_tokens %d, max_completion_tokens %d: must not be negative", extra.MinTokens, extra.MaxCompletionTokens)
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = extra.MaxCompletionTokens
	}
	if req.Model != "" && req.Model != s.cfg.ServedModelName {
		return nil, extra, fmt.Errorf("the model `%s` does not exist; this server serves `%s`", req.Model, s.cfg.ServedModelName)
	}
	if len(req.Messages) == 0 {
		return nil, extra, errors.New("messages: empty; a chat completion needs at least one message")
	}
	if req.MaxTokens < 0 {
		return nil, extra, fmt.Errorf("max_tokens %d: must not be negative", req.MaxTokens)
	}
	return &req, extra, nil
}

// promptTokens is refserve's tokenizer: a prompt counts one token per four bytes of its
// roles, contents, tool-call ids, called functions' names and arguments, and offered tools'
// names, descriptions and parameter schemas, plus one. (A reply counts one token per word
// of text and one per piece of up to four characters of markup: see textPieces and
// chunks.) usage.prompt_tokens reports it, and the prefix cache counts the same way.
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
	req, extra, err := s.decodeChatRequest(hr.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	prompt := promptTokens(req)
	if prompt >= s.cfg.ContextLength {
		writeError(w, http.StatusBadRequest, "BadRequestError",
			"the input (%d tokens) is longer than the model's context length (%d tokens)", prompt, s.cfg.ContextLength)
		return
	}
	rep, session, err := s.agent.next(req)
	if f := s.cfg.ModelToolFormat; err == nil && rep.Call != nil && f != "" && f != s.cfg.ToolCallParser {
		// The parser does not read the model's markup: the call is text.
		rep.Text, rep.Call = strings.Join(callMarkup(f, *rep.Call), ""), nil
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "%v", err)
		return
	}
	rid := req.RID
	if rid == "" {
		rid = s.newRID()
	}
	// A reply ends at max_tokens or where the context is full, whichever is first; with
	// ignore_eos it runs to that end.
	limit := s.cfg.ContextLength - prompt
	if req.MaxTokens > 0 {
		limit = min(limit, req.MaxTokens)
	}
	atLeast := min(extra.MinTokens, limit)
	if extra.IgnoreEOS { // the reply never ends of itself: the limit cuts it, "length"
		atLeast = limit + 1
	}
	gen := newGeneration(s.cfg.ToolCallParser, rep, limit, uint64(s.cfg.Seed), session).withMinTokens(atLeast)
	r := newRequest(rid, placeOf(session, req.Messages), prompt, gen)
	r.prefix, r.promptBytes = promptPrefixes(req)
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
	var evs []event
	for last.Finish == "" {
		var ok bool
		if evs, ok = r.wait(hr.Context(), evs); !ok {
			s.sched.cancel(r)
			return
		}
		for _, ev := range evs {
			content.WriteString(ev.Content)
			last = ev
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

// wait blocks until the request has events and returns them in buf; false when ctx ended
// first.
func (r *request) wait(ctx context.Context, buf []event) ([]event, bool) {
	select {
	case <-r.events.ready:
		return r.events.take(buf), true
	case <-ctx.Done():
		return buf[:0], false
	}
}

// stream writes a request's events as SSE chunks, one chunk per decoded token of text
// (markup of a clean tool call is held back and sent as tool_calls fragments once the
// call is complete, as SGLang's tool-call parser does). A failed write means the client
// left, which aborts the request as it does in SGLang.
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
	var evs []event
	for {
		var ok bool
		if evs, ok = r.wait(hr.Context(), evs); !ok {
			s.sched.cancel(r)
			return
		}
		for _, ev := range evs {
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

// healthGenerate runs one real 1-token generation through the scheduler, as SGLang's
// does: it waits behind the queue like any request, passes (200) as soon as the scheduler
// puts out a token, its own or any other request's, and fails (503) after
// SGLANG_HEALTH_CHECK_TIMEOUT without one. A wedged scheduler fails it; a dead KV
// transfer loop does not, since SGLang's probe runs with a fake bootstrap.
func (s *server) healthGenerate(w http.ResponseWriter, hr *http.Request) {
	rep := reply{Text: "ok", Lure: call{Name: "search", Params: []param{{Name: "query", Value: "health"}}}}
	r := newProbe("HEALTH_CHECK_"+s.newRID(), newGeneration(s.cfg.ToolCallParser, rep, 1, uint64(s.cfg.Seed), 0))
	output := s.sched.outputs()
	if err := s.sched.submit(r); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "%v", err)
		return
	}
	timeout := time.NewTimer(s.cfg.HealthCheckTimeout)
	defer timeout.Stop()
	var evs []event
	for {
		select {
		case <-r.events.ready:
			evs = r.events.take(evs)
			for _, ev := range evs {
				switch ev.Finish {
				case "":
				case "abort":
					writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "health generation was aborted")
					return
				default:
					w.WriteHeader(http.StatusOK)
					return
				}
			}
		case <-output: // the scheduler answered someone: SGLang counts that as healthy
			s.sched.cancel(r)
			w.WriteHeader(http.StatusOK)
			return
		case <-timeout.C:
			s.sched.cancel(r)
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError",
				"no output from the scheduler in %s (SGLANG_HEALTH_CHECK_TIMEOUT)", s.cfg.HealthCheckTimeout)
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
	info["prefill_delay_per_token"] = s.cfg.PrefillDelayPerToken.String()
	info["health_check_timeout"] = s.cfg.HealthCheckTimeout.String()
	info["version"] = version
	info["engine"] = "refserve"
	if s.cfg.Launch.varies() { // an ordinary launch reports what it always did
		info["launch_variation"] = s.cfg.Launch
	}
	// Which of refserve's faults these settings arm, and whether one went off.
	wedged, dead := s.sched.faultState()
	info["refserve_faults"] = map[string]any{
		"stale_index_k":         s.cfg.BF16IndexK && s.cfg.EnableHierarchicalCache && !s.cfg.IndexKGate,
		"mass_abort_wedge":      s.cfg.massAbortArmed(),
		"nixl_abort_wedge":      s.cfg.nixlAbortArmed(),
		"scheduler_wedged":      wedged,
		"kv_transfer_loop_dead": dead,
	}
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
