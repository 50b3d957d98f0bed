package workload

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// A trace is the user's own traffic, one recorded conversation per line of a JSONL file:
//
//	{"id": "ticket-17", "messages": [...], "tools": [...], "tool_choice": "auto",
//	 "max_tokens": 512, "temperature": 0}
//
// messages is an OpenAI message list (system, developer, user, assistant and tool
// messages; content a string or a list of text parts; assistant tool_calls answered by
// tool messages that name them); every other field is optional, and fields arbiter does
// not use (model, stream, a recorded response, timestamps) are ignored. Each assistant
// message marks a request: the conversation up to it, as recorded, so that every arm
// receives byte for byte the same requests whatever the engines answer; a conversation
// that ends with another message is also sent whole.

// Limits on a trace, checked while it is read, line by line: a trace is never held
// whole. A run keeps only where each conversation's line is (TraceIndex) and reads a
// conversation again when its session starts.
const (
	// MaxTraceLine bounds one line of a trace (one conversation).
	MaxTraceLine = 32 << 20
	// MaxTraceBytes bounds a whole trace (1 GiB): reading and checking one takes some
	// seconds per gigabyte, before any engine starts.
	MaxTraceBytes = 1 << 30
	// MaxTraceConversations bounds the conversations of a trace: each is a session,
	// and a launch runs at most 100,000 (arms.MaxSessions).
	MaxTraceConversations = 100_000
)

// traceLimits are the limits ScanTrace holds a trace to: the constants, which a test
// lowers to reach them with little input.
var traceLimits = struct {
	bytes         int64
	line          int
	conversations int
}{MaxTraceBytes, MaxTraceLine, MaxTraceConversations}

// TraceConversation is one line of a trace.
type TraceConversation struct {
	// Line is where the conversation is written (from 1); ID its "id", or "line N".
	Line int
	ID   string
	// Messages, Tools and ToolChoice are sent as recorded.
	Messages   []openai.Message
	Tools      []openai.Tool
	ToolChoice json.RawMessage
	// MaxTokens and Temperature override the workload's when set.
	MaxTokens   int
	Temperature *float64
	// Requests are the lengths of the message prefixes sent, in order: one per
	// assistant message, and one for the whole list when it does not end with one.
	Requests []int
}

// TraceConfig is the trace kind. Config.Sessions, when set, replays only the first that
// many conversations; Config.Concurrency conversations run at once.
type TraceConfig struct {
	// Path is the trace file (the orchestrator resolves a relative path against the
	// spec's folder).
	Path string
	// Index, when set, is the trace already checked (ReadTraceFormat); otherwise Run
	// reads and checks Path first.
	Index *TraceIndex
	// Format is the file's: arms.TraceArbiter ("" too), TraceMooncake or TraceBurstGPT.
	Format string
	// Arrivals and Speed drive a length trace: arms.ArrivalsRecorded ("" too) sends each
	// request at its recorded time divided by Speed (0 is 1); arms.ArrivalsClosed sends
	// them in order, Config.Concurrency at once.
	Arrivals string
	Speed    float64
}

// TraceIndex is a checked trace: where each conversation's line is in the file, and a
// digest of the line, so that a session reads its conversation when it starts and a
// file changed since it was checked is noticed. It holds some 40 bytes per
// conversation, whatever their size.
type TraceIndex struct {
	// Path is the file.
	Path   string
	format string // "" (arbiter's own), or a length trace's (lengthtrace.go)
	lines  []traceLine
}

type traceLine struct {
	offset int64
	size   int32 // without the newline; at most MaxTraceLine
	line   int32 // from 1
	digest [16]byte
}

// Len is how many conversations the trace holds.
func (x *TraceIndex) Len() int { return len(x.lines) }

// Conversation reads and parses conversation i (from 0) from the file again. It fails
// when the line is no longer what was checked.
func (x *TraceIndex) Conversation(i int) (TraceConversation, error) {
	l := x.lines[i]
	f, err := os.Open(x.Path)
	if err != nil {
		return TraceConversation{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	text := make([]byte, l.size)
	if _, err := f.ReadAt(text, l.offset); err != nil {
		return TraceConversation{}, &TraceError{File: x.Path, Line: int(l.line), Msg: fmt.Sprintf("cannot read the line again: %v", err)}
	}
	if lineDigest(text) != l.digest {
		return TraceConversation{}, &TraceError{File: x.Path, Line: int(l.line), Msg: "the line changed since the trace was checked"}
	}
	c, terr := parseConversation(bytes.TrimSpace(text))
	if terr != nil {
		terr.File, terr.Line = x.Path, int(l.line)
		return TraceConversation{}, terr
	}
	c.Line = int(l.line)
	if c.ID == "" {
		c.ID = fmt.Sprintf("line %d", l.line)
	}
	return c, nil
}

// lineDigest is the SHA-256 of a line (or of an id), cut to 128 bits: no two lines of
// a trace share one by chance.
func lineDigest(b []byte) (d [16]byte) {
	sum := sha256.Sum256(b)
	copy(d[:], sum[:])
	return d
}

// TraceError is a problem at one line of a trace.
type TraceError struct {
	File  string
	Line  int
	Field string // messages[2].tool_call_id; empty for the line as a whole
	Msg   string
}

// Error implements error: "trace.jsonl:12: messages[2].role: ...".
func (e *TraceError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// ReadTrace reads and checks the trace at path, line by line, and returns where each
// conversation is.
func ReadTrace(path string) (*TraceIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	x := &TraceIndex{Path: path}
	err = ScanTrace(path, f, func(c TraceConversation, at TraceLine) error {
		x.lines = append(x.lines, traceLine{offset: at.Offset, size: int32(len(at.Text)), line: int32(c.Line), digest: lineDigest(at.Text)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// TraceLine is where a conversation is written: its line's text (only valid during the
// call it is given to) and the offset of the line in the file.
type TraceLine struct {
	Text   []byte
	Offset int64
}

// ScanTrace reads a trace from r line by line, checks each line and each limit
// (MaxTraceLine, MaxTraceBytes, MaxTraceConversations) as it goes, and calls fn with
// each conversation; name is the file its errors name. It stops at the first problem,
// or at an error fn returns. Only the line being read is held.
func ScanTrace(name string, r io.Reader, fn func(TraceConversation, TraceLine) error) error {
	lim := traceLimits
	seen := map[[16]byte]int{} // digests of the ids, to the line of each
	n := 0
	err := scanTraceLines(name, r, func(line int, t []byte, tl TraceLine) error {
		if n++; n > lim.conversations {
			return &TraceError{File: name, Line: line, Msg: fmt.Sprintf("more than %d conversations, the most a trace may hold (one a session, and a launch runs at most %d sessions); split it",
				lim.conversations, MaxTraceConversations)}
		}
		c, terr := parseConversation(t)
		if terr != nil {
			terr.File, terr.Line = name, line
			return terr
		}
		c.Line = line
		if c.ID == "" {
			c.ID = fmt.Sprintf("line %d", line)
		}
		id := lineDigest([]byte(c.ID))
		if first, dup := seen[id]; dup {
			return &TraceError{File: name, Line: line, Field: "id", Msg: fmt.Sprintf("%q is also the id of line %d", c.ID, first)}
		}
		seen[id] = line
		return fn(c, tl)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return &TraceError{File: name, Line: 1, Msg: "the trace has no conversation: write one JSON object per line"}
	}
	return nil
}

// scanTraceLines reads a trace file of any format line by line, holding only the line
// being read, checks the limits every format shares (MaxTraceBytes, MaxTraceLine) as it
// goes, and calls fn with each line that is not blank (trimmed) and where it lies.
func scanTraceLines(name string, r io.Reader, fn func(line int, text []byte, at TraceLine) error) error {
	lim := traceLimits
	// One byte past the limit is read, so that a trace of exactly the limit passes.
	br := bufio.NewReaderSize(io.LimitReader(r, lim.bytes+1), 64<<10)
	var offset int64
	var buf []byte
	for line := 1; ; line++ {
		text, size, err := readLine(br, buf[:0], lim.line)
		buf = text
		if offset+size > lim.bytes {
			return &TraceError{File: name, Line: line, Msg: fmt.Sprintf("the trace runs past %d bytes, the most a trace may hold; split it", lim.bytes)}
		}
		if size > int64(lim.line) {
			return &TraceError{File: name, Line: line, Msg: fmt.Sprintf("line longer than %d bytes", lim.line)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("trace %s:%d: %w", name, line, err)
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			if ferr := fn(line, t, TraceLine{Text: text, Offset: offset}); ferr != nil {
				return ferr
			}
		}
		offset += size
		if errors.Is(err, io.EOF) {
			return nil
		}
		offset++ // the newline
	}
}

// readLine reads one line into buf, without its newline, and returns it with the line's
// length. It keeps at most limit+1 bytes of it: the rest of a longer line is counted and
// discarded.
func readLine(br *bufio.Reader, buf []byte, limit int) ([]byte, int64, error) {
	var size int64
	for {
		part, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			size += int64(len(part))
			if len(buf) <= limit {
				buf = append(buf, part[:min(len(part), limit+1-len(buf))]...)
			}
			continue
		}
		part = bytes.TrimSuffix(part, []byte("\n"))
		size += int64(len(part))
		if len(buf) <= limit {
			buf = append(buf, part[:min(len(part), limit+1-len(buf))]...)
		}
		return buf, size, err
	}
}

// traceRoles are the roles a recorded message may have.
var traceRoles = []string{"system", "developer", "user", "assistant", "tool"}

func parseConversation(text []byte) (TraceConversation, *TraceError) {
	var raw struct {
		ID          json.RawMessage   `json:"id"`
		Messages    []json.RawMessage `json:"messages"`
		Tools       []json.RawMessage `json:"tools"`
		ToolChoice  json.RawMessage   `json:"tool_choice"`
		MaxTokens   json.RawMessage   `json:"max_tokens"`
		Temperature json.RawMessage   `json:"temperature"`
	}
	var c TraceConversation
	if text[0] != '{' {
		return c, &TraceError{Msg: "a line must be one JSON object with a \"messages\" list"}
	}
	if err := json.Unmarshal(text, &raw); err != nil {
		return c, &TraceError{Msg: "not a JSON object of the trace's shape: " + jsonProblem(err)}
	}
	if len(raw.ID) > 0 && string(raw.ID) != "null" {
		if err := json.Unmarshal(raw.ID, &c.ID); err != nil {
			return c, &TraceError{Field: "id", Msg: "must be a string"}
		}
	}
	if len(raw.MaxTokens) > 0 && string(raw.MaxTokens) != "null" {
		if err := json.Unmarshal(raw.MaxTokens, &c.MaxTokens); err != nil || c.MaxTokens < 0 {
			return c, &TraceError{Field: "max_tokens", Msg: "must be a whole number, 0 or more"}
		}
	}
	if len(raw.Temperature) > 0 && string(raw.Temperature) != "null" {
		var t float64
		if err := json.Unmarshal(raw.Temperature, &t); err != nil || t < 0 {
			return c, &TraceError{Field: "temperature", Msg: "must be a number, 0 or more"}
		}
		c.Temperature = &t
	}
	if tc := bytes.TrimSpace(raw.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		if _, err := openai.ParseToolChoice(tc); err != nil {
			return c, &TraceError{Field: "tool_choice", Msg: `must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`}
		}
		c.ToolChoice = append(json.RawMessage(nil), tc...)
	}
	for i, rt := range raw.Tools {
		field := fmt.Sprintf("tools[%d]", i)
		var t openai.Tool
		if err := json.Unmarshal(rt, &t); err != nil {
			return c, &TraceError{Field: field, Msg: jsonProblem(err)}
		}
		if t.Type != "function" {
			return c, &TraceError{Field: field + ".type", Msg: fmt.Sprintf("%q: only function tools can be replayed", t.Type)}
		}
		if t.Function.Name == "" {
			return c, &TraceError{Field: field + ".function.name", Msg: "missing"}
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' {
			return c, &TraceError{Field: field + ".function.parameters", Msg: "must be a JSON Schema object"}
		}
		c.Tools = append(c.Tools, t)
	}
	if len(raw.Messages) == 0 {
		return c, &TraceError{Field: "messages", Msg: "missing or empty: a conversation needs at least one message"}
	}
	calls := map[string]bool{} // tool call ids made so far
	sawUser := false
	for i, rm := range raw.Messages {
		field := fmt.Sprintf("messages[%d]", i)
		var m openai.Message
		if err := json.Unmarshal(rm, &m); err != nil {
			return c, &TraceError{Field: field, Msg: jsonProblem(err)}
		}
		switch m.Role {
		case "user":
			sawUser = true
		case "assistant":
			if !sawUser {
				return c, &TraceError{Field: field, Msg: "an assistant message before any user message: there is no request to replay up to it"}
			}
			c.Requests = append(c.Requests, i)
			for k, tc := range m.ToolCalls {
				cf := fmt.Sprintf("%s.tool_calls[%d]", field, k)
				switch {
				case tc.ID == "":
					return c, &TraceError{Field: cf + ".id", Msg: "missing: the tool message answering the call names it"}
				case tc.Function.Name == "":
					return c, &TraceError{Field: cf + ".function.name", Msg: "missing"}
				case calls[tc.ID]:
					return c, &TraceError{Field: cf + ".id", Msg: fmt.Sprintf("%q was already used by an earlier call", tc.ID)}
				}
				calls[tc.ID] = true
				m.ToolCalls[k].Index = nil
			}
		case "tool":
			if !calls[m.ToolCallID] {
				return c, &TraceError{Field: field + ".tool_call_id", Msg: fmt.Sprintf("%q answers no earlier tool call", m.ToolCallID)}
			}
		case "system", "developer":
		case "":
			return c, &TraceError{Field: field + ".role", Msg: "missing"}
		default:
			return c, &TraceError{Field: field + ".role", Msg: fmt.Sprintf("%q is not one of %s", m.Role, strings.Join(traceRoles, ", "))}
		}
		if m.Role != "assistant" && len(m.ToolCalls) > 0 {
			return c, &TraceError{Field: field + ".tool_calls", Msg: "only an assistant message makes tool calls"}
		}
		c.Messages = append(c.Messages, m)
	}
	if last := c.Messages[len(c.Messages)-1]; last.Role != "assistant" {
		if !sawUser {
			return c, &TraceError{Field: "messages", Msg: "no user message: there is nothing to ask the engine"}
		}
		c.Requests = append(c.Requests, len(c.Messages))
	}
	return c, nil
}

// jsonProblem is a JSON error in words, without the Go type names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s: %s where %s belongs", te.Field, te.Value, strings.TrimPrefix(te.Type.String(), "*"))
		}
		return fmt.Sprintf("%s where %s belongs", te.Value, strings.TrimPrefix(te.Type.String(), "*"))
	}
	return err.Error()
}

func runTrace(ctx context.Context, cfg Config, base string, rec Recorder) error {
	if cfg.Trace == nil {
		return errors.New("workload: trace: no trace configured")
	}
	index := cfg.Trace.Index
	if index == nil {
		var err error
		if index, err = ReadTraceFormat(cfg.Trace.Path, cfg.Trace.Format); err != nil {
			return fmt.Errorf("workload: %w", err)
		}
	}
	if index.Format() != arms.TraceArbiter {
		return runLengthTrace(ctx, cfg, base, rec, index)
	}
	n := index.Len()
	if cfg.Sessions > 0 {
		if cfg.Sessions > n {
			return fmt.Errorf("workload: trace %s has %d conversations, fewer than the %d sessions asked for", cfg.Trace.Path, n, cfg.Sessions)
		}
		n = cfg.Sessions
	}
	conc := max(cfg.Concurrency, 1)
	r, err := newRunner(ctx, cfg, base, rec, conc, n)
	if err != nil {
		return err
	}
	defer r.client.CloseIdleConnections()
	r.warm(ctx, min(conc, n))
	var g errgroup.Group
	g.SetLimit(conc)
	for k := range n {
		session := cfg.SessionOffset + k
		if ctx.Err() != nil {
			rec.SessionDone(SessionResult{Session: session, Status: SessionAborted, Err: ctx.Err().Error()})
			continue
		}
		g.Go(func() error {
			// The conversation is read when its session starts, and dropped when it ends.
			c, err := index.Conversation(k)
			if err != nil {
				rec.SessionDone(SessionResult{Session: session, Status: SessionError, Err: err.Error()})
				return nil
			}
			rec.SessionDone(r.replay(ctx, session, c))
			return nil
		})
	}
	_ = g.Wait()
	return ctx.Err()
}

// replay sends a conversation's requests in order, each its recorded prefix.
func (r *runner) replay(ctx context.Context, session int, c TraceConversation) SessionResult {
	res := SessionResult{Session: session, Status: SessionOK}
	for i, end := range c.Requests {
		if ctx.Err() != nil {
			res.Status, res.Err = SessionAborted, ctx.Err().Error()
			return res
		}
		maxTokens := r.cfg.MaxTokens
		if c.MaxTokens > 0 {
			maxTokens = c.MaxTokens
		}
		req := r.chatRequest(session, i, c.Messages[:end], maxTokens, false)
		if c.Temperature != nil {
			t := *c.Temperature
			req.Temperature = &t
		}
		req.Tools, req.ToolChoice = c.Tools, c.ToolChoice
		turn, ex := r.exchange(ctx, session, i, i, req)
		r.rec.Turn(turn)
		res.Turns = i + 1
		if ex.Err != nil {
			res.Status, res.Err = sessionStatus(ctx, ex.Err), ex.Err.Error()
			return res
		}
	}
	return res
}
