package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// scriptedEngine is a tiny OpenAI-compatible server for tests: a user message gets two
// tool calls (one valid, one with broken arguments), tool results get a short answer.
// Hooks let a test take over particular requests by their rid.
type scriptedEngine struct {
	t   *testing.T
	srv *httptest.Server

	// hook, when set, may answer a chat request itself (returning true); it runs
	// before the scripted behaviour.
	hook func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool
	// alwaysTools makes every answer a tool call, as an engine stuck in a loop would.
	alwaysTools bool

	mu    sync.Mutex
	reqs  []openai.ChatRequest
	raws  map[string][]byte // rid -> body sent back
	calls map[string][]openai.ToolCall
}

func newScriptedEngine(t *testing.T) *scriptedEngine {
	e := &scriptedEngine{t: t, raws: map[string][]byte{}, calls: map[string][]openai.ToolCall{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(openai.ModelList{Object: "list", Data: []openai.Model{{ID: "scripted-1", Object: "model"}, {ID: "other"}}})
	})
	mux.HandleFunc("POST /v1/chat/completions", e.chat)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *scriptedEngine) requests() []openai.ChatRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]openai.ChatRequest(nil), e.reqs...)
}

func (e *scriptedEngine) chat(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.reqs = append(e.reqs, req)
	e.mu.Unlock()
	if e.hook != nil && e.hook(w, r, req) {
		return
	}
	e.respond(w, req)
}

// respond answers req the scripted way.
func (e *scriptedEngine) respond(w http.ResponseWriter, req openai.ChatRequest) {
	last := req.Messages[len(req.Messages)-1]
	var chunks []openai.ChatCompletionChunk
	var calls []openai.ToolCall
	if last.Role == "user" || e.alwaysTools {
		first := req.Tools[0].Function
		calls = []openai.ToolCall{
			{ID: "call_" + req.RID + "_a", Type: "function", Function: openai.FunctionCall{Name: first.Name, Arguments: validArgs(e.t, first.Parameters)}},
			{ID: "call_" + req.RID + "_b", Type: "function", Function: openai.FunctionCall{Name: first.Name, Arguments: `{"broken": `}},
		}
		chunks = toolCallChunks(calls)
		chunks = append(chunks, finishChunk("tool_calls"))
	} else {
		answer := fmt.Sprintf("Done with %d tool results for %s.", countRole(req.Messages, "tool"), req.RID)
		for _, piece := range splitOdd(answer) {
			chunks = append(chunks, contentDelta(piece))
		}
		chunks = append(chunks, finishChunk("stop"))
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Content) / 4
	}
	chunks = append(chunks, usageChunk(prompt, 9))
	var body []byte
	if req.Stream {
		body = oddSSE(e.t, chunks)
		w.Header().Set("Content-Type", "text/event-stream")
		writePieces(w, body)
	} else {
		c, err := AssembleStream(chunkStream(e.t, chunks...))
		if err != nil {
			e.t.Errorf("scripted engine: %v", err)
		}
		body, _ = json.Marshal(c)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
	e.mu.Lock()
	e.raws[req.RID] = body
	e.calls[req.RID] = calls
	e.mu.Unlock()
}

// toolCallChunks streams calls the way engines do: id, type and name first, then the
// arguments cut at odd places, fragments of different calls interleaved.
func toolCallChunks(calls []openai.ToolCall) []openai.ChatCompletionChunk {
	var out []openai.ChatCompletionChunk
	var rest [][]string
	for i, c := range calls {
		out = append(out, toolDelta(i, c.ID, c.Function.Name, ""))
		rest = append(rest, splitOdd(c.Function.Arguments))
	}
	for more := true; more; {
		more = false
		for i := range rest {
			if len(rest[i]) > 0 {
				out = append(out, toolDelta(i, "", "", rest[i][0]))
				rest[i] = rest[i][1:]
				more = true
			}
		}
	}
	return out
}

// splitOdd cuts s into pieces of 1, 2, 3, 5, 8... bytes, through multi-byte runes.
func splitOdd(s string) []string {
	var out []string
	a, b := 1, 2
	for len(s) > 0 {
		n := min(a, len(s))
		out = append(out, s[:n])
		s = s[n:]
		a, b = b, a+b
	}
	return out
}

// oddSSE writes chunks with the variety a real stream shows: comments, event lines,
// CRLF, one event's JSON spread over several data lines.
func oddSSE(t testing.TB, chunks []openai.ChatCompletionChunk) []byte {
	var b bytes.Buffer
	b.WriteString(": keep-alive\n\n")
	for i, c := range chunks {
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "event: chunk\ndata: %s\n\n", j)
		case 1:
			cut := bytes.IndexByte(j, ',') + 1
			fmt.Fprintf(&b, "data: %s\r\ndata: %s\r\n\r\n", j[:cut], j[cut:])
		default:
			fmt.Fprintf(&b, "data:%s\n\n", j)
		}
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// writePieces sends body in small flushed writes so that reads split events.
func writePieces(w http.ResponseWriter, body []byte) {
	f := w.(http.Flusher)
	for step := 7; len(body) > 0; step = step*3%61 + 1 {
		n := min(step, len(body))
		_, _ = w.Write(body[:n])
		f.Flush()
		body = body[n:]
	}
}

// validArgs builds arguments that satisfy a tool's schema.
func validArgs(t testing.TB, schema json.RawMessage) string {
	var s struct {
		Properties map[string]struct {
			Type string   `json:"type"`
			Enum []string `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	args := map[string]any{}
	for _, name := range s.Required {
		p := s.Properties[name]
		switch {
		case len(p.Enum) > 0:
			args[name] = p.Enum[len(p.Enum)-1]
		case p.Type == "string":
			args[name] = "select count(*) from orders"
		case p.Type == "integer":
			args[name] = 3
		case p.Type == "number":
			args[name] = 12.5
		case p.Type == "boolean":
			args[name] = true
		}
	}
	j, _ := json.Marshal(args)
	return string(j)
}

func countRole(msgs []openai.Message, role string) int {
	n := 0
	for _, m := range msgs {
		if m.Role == role {
			n++
		}
	}
	return n
}

// memRecorder keeps what a run reports, in arrival order.
type memRecorder struct {
	mu       sync.Mutex
	turns    []Turn
	sessions []SessionResult
	order    []string // "turn S" / "done S"
	done     chan SessionResult
}

func (m *memRecorder) Turn(t Turn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns = append(m.turns, t)
	m.order = append(m.order, fmt.Sprintf("turn %d", t.Session))
}

func (m *memRecorder) SessionDone(r SessionResult) {
	m.mu.Lock()
	m.sessions = append(m.sessions, r)
	m.order = append(m.order, fmt.Sprintf("done %d", r.Session))
	m.mu.Unlock()
	if m.done != nil {
		m.done <- r
	}
}

// bySession indexes results and checks that no turn of a session follows its result.
func (m *memRecorder) bySession(t *testing.T) map[int]SessionResult {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	closed := map[string]bool{}
	for _, o := range m.order {
		s := strings.Fields(o)[1]
		if closed[s] {
			t.Errorf("session %s reported after it was closed: %q", s, o)
		}
		if strings.HasPrefix(o, "done") {
			closed[s] = true
		}
	}
	out := map[int]SessionResult{}
	for _, r := range m.sessions {
		if _, dup := out[r.Session]; dup {
			t.Errorf("session %d closed twice", r.Session)
		}
		out[r.Session] = r
	}
	return out
}

func (m *memRecorder) turnsOf(session int) []Turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Turn
	for _, t := range m.turns {
		if t.Session == session {
			out = append(out, t)
		}
	}
	return out
}
