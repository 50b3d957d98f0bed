package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// DefaultMaxToolSteps caps the tool-answering requests of one round.
const DefaultMaxToolSteps = 8

// ErrUnknownKind reports a Config.Kind that Run does not implement.
var ErrUnknownKind = errors.New("unknown workload kind")

// Run drives the workload cfg.Kind against the engine at baseURL, reporting every turn
// and session to rec as it completes. Session failures are data: Run returns nil once
// every session was attempted, ctx.Err() when cancelled (unfinished sessions then report
// SessionAborted; a request cut short is still reported as a Turn with Err set), and
// another error only when the run could not start at all (bad config, unknown kind, no
// model to be found at /v1/models); then no session is reported.
func Run(ctx context.Context, cfg Config, baseURL string, rec Recorder) error {
	// The driver's collection policy holds for the run (see ApplyRunGCPolicy).
	defer ApplyRunGCPolicy(runConcurrency(cfg))()
	switch cfg.Kind {
	case "", arms.WorkloadAgent:
		return runToolcallAgent(ctx, cfg, baseURL, rec)
	case arms.WorkloadThroughput:
		return runThroughput(ctx, cfg, baseURL, rec)
	case arms.WorkloadAbortCascade:
		return runAbortCascade(ctx, cfg, baseURL, rec)
	case arms.WorkloadLongContext:
		return runLongContext(ctx, cfg, baseURL, rec)
	case arms.WorkloadTrace, arms.WorkloadVerify:
		return runTrace(ctx, cfg, baseURL, rec)
	default:
		return fmt.Errorf("workload: kind %q: %w", cfg.Kind, ErrUnknownKind)
	}
}

// runConcurrency is how many requests cfg may have in flight at once, for the run's
// memory limit: the largest concurrency any of its phases uses.
func runConcurrency(cfg Config) int {
	n := cfg.Concurrency
	if n <= 0 {
		n = cfg.Sessions
	}
	if t := cfg.Throughput; t != nil {
		for _, c := range t.Concurrency {
			n = max(n, c)
		}
	}
	if a := cfg.AbortCascade; a != nil {
		n = max(n, a.Sessions)
	}
	return max(n, 1)
}

// Script is what one session of the tool-call agent says, fixed before it starts: a pure
// function of the run's seed and the session index, so every arm hears the same words.
type Script struct {
	Session int
	Ticket  string // unique per session, so engines' prefix caches key sessions apart
	System  string
	Users   []string // the user message of each round
	Tools   []openai.Tool
	// Calls is the call a faithful model makes for each round's request: the asked-for
	// tool with the request's own words as its arguments.
	Calls []openai.FunctionCall
}

// NewScript builds the script of session (SessionOffset included) for rounds rounds.
// The message of round r depends only on (seed, session, r), so a longer run begins
// with the same words as a shorter one.
func NewScript(seed int64, session, rounds int) Script {
	r := newScriptRand(seed, session, -1)
	s := Script{
		Session: session,
		Ticket:  fmt.Sprintf("ARB-%04X-%05d", uint16(r.next()), session),
	}
	// A seeded subset of 3 or more tools, in the set's order.
	n := 3 + r.intn(len(toolSet)-2)
	perm := r.perm(len(toolSet))
	chosen := make([]bool, len(toolSet))
	for _, i := range perm[:n] {
		chosen[i] = true
	}
	offered := make([]toolDef, 0, n)
	s.Tools = make([]openai.Tool, 0, n)
	specs := toolSpecs()
	for i, t := range toolSet {
		if chosen[i] {
			offered = append(offered, t)
			s.Tools = append(s.Tools, specs[i])
		}
	}
	persona := personas[r.intn(len(personas))]
	s.System = fmt.Sprintf("You are %s working ticket %s. Use the tools when they help; "+
		"call them with exactly the arguments their schemas ask for. Answer concisely.", persona, s.Ticket)
	for round := range rounds {
		rr := newScriptRand(seed, session, round)
		t := offered[rr.intn(len(offered))]
		ask, args := askFor(t, rr)
		argText, _ := json.Marshal(args) // strings, numbers and booleans always encode
		s.Calls = append(s.Calls, openai.FunctionCall{Name: t.Name, Arguments: string(argText)})
		if round == 0 {
			ask = fmt.Sprintf("Ticket %s: %s", s.Ticket, ask)
		} else {
			ask = followUps[rr.intn(len(followUps))] + " " + ask
		}
		s.Users = append(s.Users, ask)
	}
	return s
}

var (
	personas = []string{"a support agent for an online store", "an operations assistant for a GPU cluster",
		"a data analyst's assistant", "a travel desk assistant"}
	followUps = []string{"Thanks.", "Good, next question.", "One more thing.", "Understood; also:"}
	cities    = []string{"Lisbon", "Osaka", "Nairobi", "Reykjavik", "Santiago", "Toronto", "Hanoi", "Zurich"}
	topics    = []string{"enable hierarchical cache", "abort a running request", "tool call parser flags",
		"prefill decode disaggregation", "metrics endpoint", "page size tuning"}
	tables = []string{"orders", "sessions", "gpu_hours", "tickets"}
)

// askFor writes a user request that a model would answer with a call to t, and the
// arguments a faithful call carries (the words of the request, in the schema's types).
func askFor(t toolDef, r *scriptRand) (string, map[string]any) {
	switch t.Name {
	case "get_weather":
		unit := []string{"celsius", "fahrenheit"}[r.intn(2)]
		city := cities[r.intn(len(cities))]
		return fmt.Sprintf("What is the weather in %s right now, in %s?", city, unit),
			map[string]any{"city": city, "unit": unit}
	case "search_docs":
		k := 1 + r.intn(5)
		topic := topics[r.intn(len(topics))]
		return fmt.Sprintf("Find the top %d documentation pages about %q.", k, topic),
			map[string]any{"query": topic, "top_k": k}
	case "get_order_status":
		id := fmt.Sprintf("ORD-%05d", r.intn(100000))
		return fmt.Sprintf("Where is order %s?", id), map[string]any{"order_id": id}
	case "run_sql":
		table := tables[r.intn(len(tables))]
		days := 1 + r.intn(30)
		return fmt.Sprintf("How many rows in %s were created in the last %d days? Read-only, please.", table, days),
			map[string]any{"query": fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE age_days <= %d", table, days), "read_only": true}
	case "convert_currency":
		amount := 10 + r.intn(990)
		from, to := currencies[r.intn(len(currencies))], currencies[r.intn(len(currencies))]
		return fmt.Sprintf("Convert %d %s to %s.", amount, from, to),
			map[string]any{"amount": amount, "from": from, "to": to}
	case "create_ticket":
		priority := []string{"low", "medium", "high"}[r.intn(3)]
		title := topics[r.intn(len(topics))] + " fails"
		return fmt.Sprintf("Open a %s priority ticket: %q.", priority, title),
			map[string]any{"title": title, "priority": priority}
	}
	return "Summarize where we are.", nil
}

// scriptRand is splitmix64: tiny, and fixed forever, so a script written today is the
// script a resumed experiment rebuilds after a Go upgrade.
type scriptRand struct{ s uint64 }

func newScriptRand(seed int64, session, round int) *scriptRand {
	r := &scriptRand{s: uint64(seed)}
	r.s ^= r.next() + uint64(int64(session))*0x9E3779B97F4A7C15
	r.s ^= r.next() + uint64(int64(round))*0xBF58476D1CE4E5B9
	return r
}

func (r *scriptRand) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (r *scriptRand) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *scriptRand) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := r.intn(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

func runToolcallAgent(ctx context.Context, cfg Config, base string, rec Recorder) error {
	if cfg.Sessions < 0 || cfg.Rounds < 0 || cfg.Concurrency < 0 || cfg.MaxToolSteps < 0 {
		return fmt.Errorf("workload: negative sessions, rounds, concurrency or max tool steps in %+v", cfg)
	}
	rounds := max(cfg.Rounds, 1)
	conc := max(cfg.Concurrency, 1)
	client := NewClient(conc)
	client.RequestTimeout, client.StallTimeout = cfg.RequestTimeout, cfg.StallTimeout
	client.Labels, client.LabelsHeader = cfg.Labels, cfg.LabelsHeader
	client.OnToken = cfg.OnToken
	client.MaxResponseBytes = cfg.MaxResponseBytes
	defer client.CloseIdleConnections()

	model := cfg.Model
	if model == "" {
		ids, err := client.ListModels(ctx, base)
		if err != nil && ctx.Err() != nil {
			abortAll(cfg, rec, ctx.Err())
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("workload: pick a model: %w", err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("workload: pick a model: %s/v1/models lists none", base)
		}
		model = ids[0]
	}

	// The first wave's connections are open before any session starts, so that round
	// 0 does not time the client's own dialling. A failure here is the first request's
	// to report.
	_ = client.Warm(ctx, base, min(conc, cfg.Sessions))

	var g errgroup.Group
	g.SetLimit(conc)
	first, last := cfg.SessionOffset, cfg.SessionOffset+cfg.Sessions
	for i := first; i < last; i++ {
		if ctx.Err() != nil {
			rec.SessionDone(SessionResult{Session: i, Status: SessionAborted, Err: ctx.Err().Error()})
			continue
		}
		// Go blocks while conc sessions run, so sessions start in index order.
		g.Go(func() error {
			s := agentSession{cfg: cfg, model: model, base: base, client: client, rec: rec,
				script: NewScript(cfg.Seed, i, rounds)}
			rec.SessionDone(s.run(ctx))
			return nil
		})
	}
	_ = g.Wait() // sessions never return errors: their failures are reported as data
	return ctx.Err()
}

// abortAll closes every session of cfg as aborted before any started.
func abortAll(cfg Config, rec Recorder, err error) {
	for i := cfg.SessionOffset; i < cfg.SessionOffset+cfg.Sessions; i++ {
		rec.SessionDone(SessionResult{Session: i, Status: SessionAborted, Err: err.Error()})
	}
}

// agentSession is one conversation of the tool-call agent.
type agentSession struct {
	cfg    Config
	model  string
	base   string
	client *Client
	rec    Recorder
	script Script
	msgs   []openai.Message
	turns  int
	// enc holds the request's shared fields and every message encoded once.
	enc *requestBuilder
}

// push appends messages to the conversation and to its encoding.
func (s *agentSession) push(ms ...openai.Message) error {
	for _, m := range ms {
		s.msgs = append(s.msgs, m)
		if err := s.enc.add(m); err != nil {
			return err
		}
	}
	return nil
}

// begin opens the conversation with the system message.
func (s *agentSession) begin() error {
	enc, err := newRequestBuilder(s.template())
	if err != nil {
		return err
	}
	s.enc, s.msgs = enc, nil
	return s.push(openai.Message{Role: "system", Content: s.script.System})
}

// template is the request every turn of the session shares, less messages and id.
func (s *agentSession) template() openai.ChatRequest {
	temp := s.cfg.Temperature
	seed := s.cfg.Seed + int64(s.script.Session)
	req := openai.ChatRequest{
		Model:       s.model,
		Tools:       s.script.Tools,
		ToolChoice:  json.RawMessage(`"auto"`),
		Stream:      !s.cfg.NoStream,
		Temperature: &temp,
		MaxTokens:   s.cfg.MaxTokens,
		Seed:        &seed,
	}
	if req.Stream {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	return req
}

func (s *agentSession) run(ctx context.Context) SessionResult {
	res := SessionResult{Session: s.script.Session, Status: SessionOK}
	maxSteps := s.cfg.MaxToolSteps
	if maxSteps == 0 {
		maxSteps = DefaultMaxToolSteps
	}
	if err := s.begin(); err != nil {
		return s.end(res, SessionError, err)
	}
	for round, user := range s.script.Users {
		var over bool
		if res, over = s.round(ctx, res, round, openai.Message{Role: "user", Content: user}, maxSteps); over {
			return res
		}
	}
	return res
}

// round plays one round: the user's message, then one request, and one more for each
// answer to tool calls, up to maxSteps. It returns res brought up to date, and over when
// the session ended in the round; otherwise the session goes on to its next round.
func (s *agentSession) round(ctx context.Context, res SessionResult, round int, user openai.Message, maxSteps int) (_ SessionResult, over bool) {
	if err := s.push(user); err != nil {
		return s.end(res, SessionError, err), true
	}
	for step := 0; step <= maxSteps; step++ {
		if ctx.Err() != nil {
			return s.end(res, SessionAborted, ctx.Err()), true
		}
		ex := s.send(ctx, round)
		res.Turns = s.turns
		if ex.Err != nil {
			return s.end(res, s.statusOf(ctx, ex.Err), ex.Err), true
		}
		msg := ex.Completion.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			if err := s.push(openai.Message{Role: "assistant", Content: msg.Content}); err != nil {
				return s.end(res, SessionError, err), true
			}
			return res, false
		}
		// Even past the cap the calls are answered, so that the conversation stays
		// well-formed for the next round's user message.
		if err := s.answerTools(msg); err != nil {
			return s.end(res, SessionError, err), true
		}
	}
	return res, false
}

func (s *agentSession) end(res SessionResult, status string, err error) SessionResult {
	res.Status, res.Err, res.Turns = status, err.Error(), s.turns
	return res
}

func (s *agentSession) statusOf(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return SessionAborted
	case errors.Is(err, ErrStalled), errors.Is(err, ErrRequestTimeout):
		return SessionTimeout
	}
	return SessionError
}

// send makes the session's next request and reports it as a Turn.
func (s *agentSession) send(ctx context.Context, round int) Exchange {
	req := s.template()
	req.Messages = s.msgs
	req.RID = fmt.Sprintf("arb-%d-%d-%d", s.cfg.Seed, s.script.Session, s.turns)
	body, err := s.enc.body(req.RID)
	var ex Exchange
	if err != nil {
		ex.Err = err
	} else {
		ex = s.client.chatBody(withRequestTag(ctx, s.script.Session, round), s.base, req, body)
	}
	t := turnOf(ctx, ex, s.script.Session, s.turns, round, req)
	s.turns++
	s.rec.Turn(t)
	return ex
}

// answerTools appends the assistant's calls and one tool message per call.
func (s *agentSession) answerTools(msg openai.Message) error {
	calls := make([]openai.ToolCall, len(msg.ToolCalls))
	for i, tc := range msg.ToolCalls {
		tc.Index = nil
		if tc.Type == "" {
			tc.Type = "function"
		}
		if tc.ID == "" {
			// The tool message must name its call; an engine that sent no id gets one.
			tc.ID = fmt.Sprintf("call_%d_%d_%d", s.script.Session, s.turns-1, i)
		}
		calls[i] = tc
	}
	if err := s.push(openai.Message{Role: "assistant", Content: msg.Content, ToolCalls: calls}); err != nil {
		return err
	}
	for _, tc := range calls {
		err := s.push(openai.Message{
			Role:       "tool",
			ToolCallID: tc.ID,
			Name:       tc.Function.Name,
			Content:    ToolResult(s.script.Tools, tc.Function),
		})
		if err != nil {
			return err
		}
	}
	return nil
}
