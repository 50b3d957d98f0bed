package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/openai"
)

// Phase kinds, in Phase.Kind.
const (
	PhaseClosed  = "closed"  // a closed loop: Concurrency requests in flight until Requests are done
	PhaseOpen    = "open"    // open-loop Poisson arrivals at Rate requests per second
	PhaseCascade = "cascade" // an abort cascade and the canaries after it
)

// Abort modes of an abort cascade.
const (
	AbortDisconnect = "disconnect"    // the client closes each stream
	AbortRequest    = "abort_request" // POST /abort_request {"rid": ...} for each session
	AbortAll        = "abort_all"     // one POST /abort_request {"abort_all": true}
)

// Phase is one stage of a workload measured as a whole: a closed loop at a concurrency,
// open-loop arrivals at a rate, or an abort cascade with the liveness recovery after it.
// Sessions [FirstSession, FirstSession+Sessions) belong to it; a phase's Name is the same
// in every arm, so the verdict compares phases by name.
type Phase struct {
	Name     string // "c=32 before", "poisson 4/s", "cascade 1"
	Kind     string // PhaseClosed, PhaseOpen or PhaseCascade
	Position int    // order within the run, from 0
	// Concurrency of a closed loop; Rate (requests per second) of open-loop arrivals.
	Concurrency int
	Rate        float64
	// FirstSession and Sessions are the sessions of the phase (SessionOffset included).
	FirstSession, Sessions int
	Started, Ended         time.Time
	// Requests sent, Completed of them, and the completion tokens of the completed ones:
	// the engine's throughput over the phase is Tokens / (Ended − Started).
	Requests, Completed, Tokens int

	// An abort cascade: how it aborted, how many requests its abort cut and how many
	// had finished before it, when it aborted, and whether (and how fast) a canary
	// completed afterwards.
	Abort     string
	Aborted   int
	Finished  int
	AbortedAt time.Time
	Recovered bool
	// Recovery is from the abort to the end of the first canary that completed.
	Recovery time.Duration
	Canaries int // canary requests sent
	// Note says what did not go as planned (an abort endpoint that failed, sessions
	// that never streamed before the abort); empty when everything did.
	Note string
}

// TokensPerSecond is the engine's generation throughput over the phase; NaN when it has
// no duration.
func (p Phase) TokensPerSecond() float64 {
	d := p.Ended.Sub(p.Started).Seconds()
	if d <= 0 {
		return math.NaN()
	}
	return float64(p.Tokens) / d
}

// PhaseRecorder is a Recorder that also keeps phases. A Recorder that is not one simply
// does not hear about them; phases arrive after their sessions' results.
type PhaseRecorder interface {
	Phase(Phase)
}

func recordPhase(rec Recorder, p Phase) {
	if pr, ok := rec.(PhaseRecorder); ok {
		pr.Phase(p)
	}
}

// ErrNoLiveness reports an engine that served no canary within the recovery timeout
// after an abort cascade: it still accepts connections, but generates nothing.
var ErrNoLiveness = errors.New("engine wedged: no canary request completed after the abort")

// StreamHooks are callbacks on one chat request's way: how an abort cascade knows its
// sessions are in the engine and mid-flight. Each is called at most once; nil ones are
// skipped.
type StreamHooks struct {
	// Accepted is called when the engine answered with a 2xx status: the request is in.
	Accepted func()
	// FirstDelta is called when the first content or tool-call delta arrives.
	FirstDelta func()
}

type streamHooksKey struct{}

// WithStreamHooks returns a context whose chat requests call h's hooks.
func WithStreamHooks(ctx context.Context, h StreamHooks) context.Context {
	return context.WithValue(ctx, streamHooksKey{}, h)
}

func streamHooks(ctx context.Context) StreamHooks {
	h, _ := ctx.Value(streamHooksKey{}).(StreamHooks)
	return h
}

// runner holds what every request of a run shares: the client, the engine, the model,
// and where turns are reported.
type runner struct {
	cfg    Config
	base   string
	model  string
	client *Client
	rec    Recorder
	warmed bool
}

// warm opens the first wave's n connections before it starts, once per run: later
// waves find the earlier waves' connections idle in the transport. Kinds whose
// requests arrive spread out in time (open-loop phases) do not call it. A failure here
// is the first request's to report.
func (r *runner) warm(ctx context.Context, n int) {
	if !r.warmed {
		r.warmed = true
		_ = r.client.Warm(ctx, r.base, n)
	}
}

// newRunner builds the client for conc requests in flight and picks the model. When ctx
// ends first, the planned sessions (planned of them from cfg.SessionOffset) are recorded
// aborted and ctx's error returned.
func newRunner(ctx context.Context, cfg Config, base string, rec Recorder, conc, planned int) (*runner, error) {
	client := NewClient(conc)
	client.RequestTimeout, client.StallTimeout = cfg.RequestTimeout, cfg.StallTimeout
	client.Labels, client.LabelsHeader = cfg.Labels, cfg.LabelsHeader
	client.OnToken, client.MaxResponseBytes = cfg.OnToken, cfg.MaxResponseBytes
	model := cfg.Model
	if model == "" {
		ids, err := client.ListModels(ctx, base)
		if err != nil && ctx.Err() != nil {
			client.CloseIdleConnections()
			abortRange(rec, cfg.SessionOffset, planned, ctx.Err())
			return nil, ctx.Err()
		}
		if err != nil {
			client.CloseIdleConnections()
			return nil, fmt.Errorf("workload: pick a model: %w", err)
		}
		if len(ids) == 0 {
			client.CloseIdleConnections()
			return nil, fmt.Errorf("workload: pick a model: %s/v1/models lists none", base)
		}
		model = ids[0]
	}
	return &runner{cfg: cfg, base: base, model: model, client: client, rec: rec}, nil
}

// chatRequest is the request every kind sends for messages, with the run's sampling
// settings; maxTokens 0 leaves the length to the engine.
func (r *runner) chatRequest(session, turn int, msgs []openai.Message, maxTokens int, ignoreEOS bool) openai.ChatRequest {
	temp := r.cfg.Temperature
	seed := r.cfg.Seed + int64(session)
	return openai.ChatRequest{
		Model:       r.model,
		Messages:    msgs,
		Stream:      !r.cfg.NoStream,
		Temperature: &temp,
		MaxTokens:   maxTokens,
		IgnoreEOS:   ignoreEOS,
		Seed:        &seed,
		RID:         fmt.Sprintf("arb-%d-%d-%d", r.cfg.Seed, session, turn),
	}
}

// exchange sends req and returns its Turn, not yet reported.
func (r *runner) exchange(ctx context.Context, session, index, round int, req openai.ChatRequest) (Turn, Exchange) {
	ex := r.client.Chat(withRequestTag(ctx, session, round), r.base, req)
	return turnOf(ctx, ex, session, index, round, req), ex
}

// turnOf is the Turn of an exchange; ctx is the request's, which says whether arbiter
// cancelled it.
func turnOf(ctx context.Context, ex Exchange, session, index, round int, req openai.ChatRequest) Turn {
	t := Turn{
		Session: session, Index: index, Round: round, Started: ex.Started, Request: ex.Request, Tools: req.Tools,
		ToolChoice: req.ToolChoice, StatusCode: ex.StatusCode, Response: ex.Completion, Raw: ex.Raw, TTFT: ex.TTFT,
		Latency: ex.Latency, Deltas: ex.Deltas, DeltaTimes: ex.DeltaTimes,
	}
	if ex.Deltas > 1 {
		t.DecodeTime = ex.LastDelta - ex.TTFT
	}
	if u := ex.Completion.Usage; u != nil {
		t.PromptTokens, t.CompletionTokens = u.PromptTokens, u.CompletionTokens
	}
	if len(ex.Completion.Choices) > 0 {
		t.FinishReason = ex.Completion.Choices[0].FinishReason
	}
	if ex.Err != nil {
		t.Err = ex.Err.Error()
		t.Failure = failureOf(ctx, ex.Err)
	}
	return t
}

// sessionStatus is a session's status after a request that ended with err.
func sessionStatus(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return SessionOK
	case ctx.Err() != nil:
		return SessionAborted
	case errors.Is(err, ErrStalled), errors.Is(err, ErrRequestTimeout):
		return SessionTimeout
	}
	return SessionError
}

// oneShot is one request that is a session of its own (throughput, abort cascades).
type oneShot struct {
	session int
	req     openai.ChatRequest
}

// phaseTally accumulates a phase's requests as they end.
type phaseTally struct {
	mu         sync.Mutex
	first      time.Time
	last       time.Time
	requests   int
	completed  int
	tokens     int
	firstStart bool
}

func (t *phaseTally) add(turn Turn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	if !t.firstStart || turn.Started.Before(t.first) {
		t.first, t.firstStart = turn.Started, true
	}
	if end := turn.Started.Add(turn.Latency); end.After(t.last) {
		t.last = end
	}
	if turn.Err == "" && turn.StatusCode == 200 {
		t.completed++
		t.tokens += turn.CompletionTokens
	}
}

func (t *phaseTally) fill(p *Phase) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.Requests, p.Completed, p.Tokens = t.requests, t.completed, t.tokens
	if t.firstStart {
		p.Started, p.Ended = t.first, t.last
	}
}

// runShot sends one one-request session, reports its turn and result, and adds it to the
// phase's tally.
func (r *runner) runShot(ctx context.Context, s oneShot, tally *phaseTally) {
	if ctx.Err() != nil {
		r.rec.SessionDone(SessionResult{Session: s.session, Status: SessionAborted, Err: ctx.Err().Error()})
		return
	}
	turn, ex := r.exchange(ctx, s.session, 0, 0, s.req)
	r.rec.Turn(turn)
	tally.add(turn)
	res := SessionResult{Session: s.session, Status: sessionStatus(ctx, ex.Err), Turns: 1}
	if ex.Err != nil {
		res.Err = ex.Err.Error()
	}
	r.rec.SessionDone(res)
}

// closedLoop sends shots with at most conc in flight, in index order, and returns the
// phase it measured.
func (r *runner) closedLoop(ctx context.Context, p Phase, shots []oneShot) Phase {
	var g errgroup.Group
	g.SetLimit(max(p.Concurrency, 1))
	tally := &phaseTally{}
	for _, s := range shots {
		g.Go(func() error {
			r.runShot(ctx, s, tally)
			return nil
		})
	}
	_ = g.Wait() // failures are data
	tally.fill(&p)
	return p
}

// openLoop sends shots at seeded Poisson arrival times (rate per second), each without
// waiting for the others: the load does not slow down when the engine does, which is
// what a closed loop hides.
func (r *runner) openLoop(ctx context.Context, p Phase, shots []oneShot, gaps *scriptRand) Phase {
	var wg sync.WaitGroup
	tally := &phaseTally{}
	start := time.Now()
	at := time.Duration(0)
	for _, s := range shots {
		at += time.Duration(expGap(gaps, p.Rate) * float64(time.Second))
		wait := time.Until(start.Add(at))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runShot(ctx, s, tally)
		}()
	}
	wg.Wait()
	tally.fill(&p)
	return p
}

// expGap is an exponential inter-arrival time for rate per second, in seconds.
func expGap(r *scriptRand, rate float64) float64 {
	// 53 random bits, shifted off zero so that the logarithm is finite.
	u := (float64(r.next()>>11) + 0.5) / (1 << 53)
	return -math.Log(u) / rate
}

// Prompt text. Lengths are approximate, at four characters per token, the count
// refserve uses; a real tokenizer differs by a few tens of percent, which the engine's
// own prompt_tokens (recorded per turn) shows.
const charsPerToken = 4

var fillerWords = strings.Fields(`the engine serves requests from a queue and each request carries a prompt
whose tokens fill the cache before decoding starts while pages move between device and host
memory as sessions come and go a scheduler batches running requests and every step produces
one token for each of them the operator watches latency throughput and errors on a dashboard
and wants to know whether a change to a flag made things better worse or left them alone
reports mention tables of orders tickets regions and hours spent on clusters of accelerators
with interconnects bandwidth numbers and notes about incidents deployments and rollbacks
a long document describes the system its history configuration defaults known issues and
workarounds in sections that refer to each other so that a reader must keep earlier parts in
mind when later parts build on them`)

// filler is seeded prose of about tokens tokens.
func filler(r *scriptRand, tokens int) string {
	want := tokens * charsPerToken
	var b strings.Builder
	b.Grow(want + 64)
	for b.Len() < want {
		n := 8 + r.intn(10)
		for i := range n {
			w := fillerWords[r.intn(len(fillerWords))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			} else {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		}
		b.WriteString(". ")
	}
	return strings.TrimSpace(b.String())
}

// estimateTokens is the prompt length of msgs at four characters per token.
func estimateTokens(msgs []openai.Message, tools []openai.Tool) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	for _, t := range tools {
		n += len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters)
	}
	return n / charsPerToken
}

// sharedPrefix is the system prompt every request of a run begins with, for engines'
// prefix caches (HiCache): a pure function of the seed.
func sharedPrefix(seed int64, tokens int) string {
	if tokens <= 0 {
		return ""
	}
	return "Reference document for this deployment. " + filler(newScriptRand(seed, -2, -2), tokens)
}

// promptShot is a one-request session asking for a long answer about a seeded prompt of
// about promptTokens tokens, after the run's shared prefix.
func (r *runner) promptShot(session int, label string, promptTokens, sharedTokens, maxTokens int, ignoreEOS bool) oneShot {
	rr := newScriptRand(r.cfg.Seed, session, -3)
	var msgs []openai.Message
	if shared := sharedPrefix(r.cfg.Seed, sharedTokens); shared != "" {
		msgs = append(msgs, openai.Message{Role: "system", Content: shared})
	}
	// The request's own label and number first, so that no two requests share more
	// than the declared prefix.
	user := fmt.Sprintf("Request %d (%s). Read the notes below, then explain them in detail.\n\n%s", session, label, filler(rr, promptTokens))
	msgs = append(msgs, openai.Message{Role: "user", Content: user})
	return oneShot{session: session, req: r.chatRequest(session, 0, msgs, maxTokens, ignoreEOS)}
}
