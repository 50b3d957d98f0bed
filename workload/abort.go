package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// When an abort cascade aborts, in AbortCascadeConfig.AbortWhen.
const (
	AbortWhenStreaming  = "streaming"
	AbortWhenFirstToken = "first-token"
)

// Defaults of the abort-cascade kind.
const (
	DefaultCascadeSessions = 60   // the field's cascade started 60 sessions
	DefaultCascades        = 2    // and killed them twice
	DefaultCascadeTokens   = 4096 // long enough to be mid-flight when the abort comes
	DefaultCanaryTokens    = 8    // a canary is a small real generation
	// DefaultAbortAfter bounds the wait for every session to stream before the abort: an
	// engine that queues some of them (a batch cap) has them aborted in its queue.
	DefaultAbortAfter = 2 * time.Second
)

// AbortCascadeConfig is the abort-cascade kind, the field's proof of the abort-wedge
// fix: throughput at each of ThroughputAt before; then Cascades times, Sessions long
// generations started together and aborted mid-flight, after which canaries measure how
// long the engine takes to serve again; then throughput at each of ThroughputAt after.
// It is the spec's own (arms.AbortCascadeSpec); a zero field takes its default above.
type AbortCascadeConfig = arms.AbortCascadeSpec

func derefAbort(a *AbortCascadeConfig) AbortCascadeConfig {
	if a == nil {
		return AbortCascadeConfig{}
	}
	return *a
}

func cascadeSessions(a AbortCascadeConfig) int { return positiveOr(a.Sessions, DefaultCascadeSessions) }
func cascadeCount(a AbortCascadeConfig) int    { return positiveOr(a.Cascades, DefaultCascades) }
func cascadeThroughputRequests(a AbortCascadeConfig) int {
	return positiveOr(a.ThroughputRequests, DefaultThroughputRequests)
}

func abortOf(a AbortCascadeConfig, k int) string {
	if len(a.Abort) == 0 {
		return AbortAll
	}
	return a.Abort[k%len(a.Abort)]
}

func positiveOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// CascadePhaseName names the k-th cascade, from 1.
func CascadePhaseName(k int) string { return fmt.Sprintf("cascade %d", k) }

func runAbortCascade(ctx context.Context, cfg Config, base string, rec Recorder) error {
	a := derefAbort(cfg.AbortCascade)
	switch a.AbortWhen {
	case "", AbortWhenStreaming, AbortWhenFirstToken:
	default:
		return fmt.Errorf("workload: abort-cascade: abort_when %q (want %s or %s)", a.AbortWhen, AbortWhenStreaming, AbortWhenFirstToken)
	}
	for k := range cascadeCount(a) {
		switch m := abortOf(a, k); m {
		case AbortDisconnect, AbortRequest, AbortAll:
		default:
			return fmt.Errorf("workload: abort-cascade: unknown abort %q (want %s, %s or %s)", m, AbortDisconnect, AbortRequest, AbortAll)
		}
	}
	conc := cascadeSessions(a) + 1
	for _, c := range a.ThroughputAt {
		if c < 1 {
			return fmt.Errorf("workload: abort-cascade: throughput at concurrency %d", c)
		}
		conc = max(conc, c)
	}
	r, err := newRunner(ctx, cfg, base, rec, conc, Planned(cfg))
	if err != nil {
		return err
	}
	defer r.client.CloseIdleConnections()
	t := ThroughputConfig{Requests: cascadeThroughputRequests(a), PromptTokens: a.PromptTokens}
	next, pos := cfg.SessionOffset, 0
	stage := func(name string) {
		for _, c := range a.ThroughputAt {
			next = r.throughputPhase(ctx, t, Phase{Name: arms.ClosedPhaseName(c, name), Kind: PhaseClosed, Position: pos, Concurrency: c}, next)
			pos++
		}
	}
	stage("before")
	for k := range cascadeCount(a) {
		if ctx.Err() != nil {
			break
		}
		p := r.cascade(ctx, a, k, next, pos)
		next += p.Sessions
		pos++
		if !p.Recovered && ctx.Err() == nil {
			return fmt.Errorf("workload: %s (%s, %d requests cut): %w within %v", p.Name, p.Abort, p.Aborted, ErrNoLiveness, r.recoveryTimeout(a))
		}
	}
	if ctx.Err() == nil {
		stage("after")
	}
	return ctx.Err()
}

func (r *runner) recoveryTimeout(a AbortCascadeConfig) time.Duration {
	if a.RecoveryTimeout > 0 {
		return a.RecoveryTimeout
	}
	_, stall := r.client.timeouts()
	return stall
}

// cascadeSession is one session of a cascade in flight.
type cascadeSession struct {
	index  int
	rid    string
	cancel context.CancelFunc
	done   chan struct{}
	turn   Turn
	err    error
}

// cascade runs the k-th abort cascade (from 0) on sessions first..first+N (the last one
// the canaries'), records its phase and returns it.
// abortEndGrace is how long after an abort's answer a stream it ended may take to be
// read to its end before the cascade counts it as still streaming.
const abortEndGrace = 2 * time.Second

func (r *runner) cascade(ctx context.Context, a AbortCascadeConfig, k, first, pos int) Phase {
	n := cascadeSessions(a)
	p := Phase{Name: CascadePhaseName(k + 1), Kind: PhaseCascade, Position: pos, Concurrency: n,
		FirstSession: first, Sessions: n + 1, Abort: abortOf(a, k)}
	var notes []string

	accepted := make(chan struct{}, n)
	streaming := make(chan struct{}, n)
	sessions := make([]*cascadeSession, n)
	r.warm(ctx, n)
	p.Started = time.Now()
	for i := range sessions {
		idx := first + i
		shot := r.promptShot(idx, p.Name, positiveOr(a.PromptTokens, DefaultPromptTokens), 0,
			positiveOr(a.CascadeTokens, DefaultCascadeTokens), true)
		sctx, cancel := context.WithCancel(ctx)
		var in, first sync.Once
		sctx = WithStreamHooks(sctx, StreamHooks{
			Accepted:   func() { in.Do(func() { accepted <- struct{}{} }) },
			FirstDelta: func() { first.Do(func() { streaming <- struct{}{} }) },
		})
		s := &cascadeSession{index: idx, rid: shot.req.RID, cancel: cancel, done: make(chan struct{})}
		sessions[i] = s
		go func() {
			defer close(s.done)
			var ex Exchange
			s.turn, ex = r.exchange(sctx, idx, 0, 0, shot.req)
			s.err = ex.Err
		}()
	}

	// Mid-flight: every session is in the engine (its request answered), and every one
	// streams, or the first does (AbortWhen); or AbortAfter passed, or all have ended. An
	// abort that came before every request was in would leave the late ones running.
	after := a.AbortAfter
	if after <= 0 {
		after = DefaultAbortAfter
	}
	want := n
	if a.AbortWhen == AbortWhenFirstToken {
		want = 1
	}
	deadline := time.NewTimer(after)
	allDone := make(chan struct{})
	go func() {
		for _, s := range sessions {
			<-s.done
		}
		close(allDone)
	}()
	started, in := 0, 0
wait:
	for started < want || in < n {
		select {
		case <-accepted:
			in++
		case <-streaming:
			started++
		case <-deadline.C:
			notes = append(notes, fmt.Sprintf("%d of %d sessions were in the engine and %d streaming when the abort came after %v", in, n, started, after))
			break wait
		case <-allDone:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	deadline.Stop()

	// The abort. A run stopped before it (an interrupt) cut nothing; one stopped after it
	// (the watchdog, once the engine wedged) leaves the cut sessions cut.
	stoppedBefore := ctx.Err() != nil
	p.AbortedAt = time.Now()
	switch p.Abort {
	case AbortDisconnect:
		for _, s := range sessions {
			s.cancel()
		}
	case AbortAll:
		if err := r.client.Abort(ctx, r.base, map[string]any{"abort_all": true}); err != nil {
			notes = append(notes, "abort_all failed: "+err.Error())
		}
	case AbortRequest:
		var g errgroup.Group
		g.SetLimit(16)
		var mu sync.Mutex
		failed := 0
		var firstErr error
		for _, s := range sessions {
			select {
			case <-s.done:
				continue // finished before its abort
			default:
			}
			g.Go(func() error {
				if err := r.client.Abort(ctx, r.base, map[string]any{"rid": s.rid}); err != nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				return nil
			})
		}
		_ = g.Wait()
		if failed > 0 {
			notes = append(notes, fmt.Sprintf("%d abort requests failed, the first with: %v", failed, firstErr))
		}
	}

	// Liveness: canaries until one completes or the recovery timeout passes.
	canary := first + n
	limit := r.recoveryTimeout(a)
	cctx, cancelCanaries := context.WithDeadline(ctx, p.AbortedAt.Add(limit))
	var lastErr string
	for backoff := 10 * time.Millisecond; cctx.Err() == nil; backoff = min(2*backoff, 250*time.Millisecond) {
		msgs := []openai.Message{{Role: "user", Content: fmt.Sprintf("Canary %d after %s: answer with one word.", p.Canaries+1, p.Name)}}
		req := r.chatRequest(canary, p.Canaries, msgs, positiveOr(a.CanaryTokens, DefaultCanaryTokens), false)
		turn, ex := r.exchange(cctx, canary, p.Canaries, 0, req)
		p.Canaries++
		r.rec.Turn(turn)
		if ex.Err == nil {
			p.Recovered = true
			p.Recovery = ex.Started.Add(ex.Latency).Sub(p.AbortedAt)
			break
		}
		lastErr = ex.Err.Error()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-cctx.Done():
			t.Stop()
		}
	}
	cancelCanaries()
	cres := SessionResult{Session: canary, Status: SessionOK, Turns: p.Canaries}
	if !p.Recovered {
		cres.Status, cres.Err = SessionTimeout, fmt.Sprintf("no canary completed within %v of the abort (last: %s)", limit, lastErr)
		if ctx.Err() != nil {
			cres.Status, cres.Err = SessionAborted, ctx.Err().Error()
		}
	}

	// Whatever the abort did not end is cut now, so that no stream outlives its cascade.
	// A stream the abort did end may not have been read to its end yet (its last chunk in
	// flight, its reader not yet scheduled, the canary quicker): each gets until
	// abortEndGrace after the abort's answer before it counts as still streaming.
	gctx, cancelGrace := context.WithDeadline(ctx, p.AbortedAt.Add(abortEndGrace))
	stillOpen := 0
	for _, s := range sessions {
		select {
		case <-s.done:
			continue
		case <-gctx.Done():
		}
		select {
		case <-s.done:
		default:
			stillOpen++
			s.cancel()
		}
	}
	cancelGrace()
	if stillOpen > 0 && p.Abort != AbortDisconnect {
		notes = append(notes, fmt.Sprintf("%d sessions still streamed after the %s and were disconnected", stillOpen, p.Abort))
	}
	tally := &phaseTally{}
	for _, s := range sessions {
		<-s.done
		s.cancel()
		turn := s.turn
		endedBefore := !turn.Started.IsZero() && turn.Started.Add(turn.Latency).Before(p.AbortedAt)
		res := SessionResult{Session: s.index, Status: SessionOK, Turns: 1}
		switch {
		case endedBefore && s.err == nil:
			p.Finished++ // finished before the abort: not cut
		case endedBefore:
			res.Status, res.Err = sessionStatus(ctx, s.err), s.err.Error()
		case stoppedBefore:
			// The run was stopped before the abort: that, not the cascade, ended it.
			res.Status, res.Err = SessionAborted, ctx.Err().Error()
		default:
			// Cut on purpose: arbiter's doing, which says nothing of the engine's
			// progress (the watchdog leaves cancelled turns out).
			turn.Cut, turn.Failure = true, FailureCancelled
			p.Aborted++
		}
		r.rec.Turn(turn)
		tally.add(turn)
		r.rec.SessionDone(res)
	}
	r.rec.SessionDone(cres)
	p.Ended = time.Now()
	p.Requests = tally.requests + p.Canaries
	p.Note = strings.Join(notes, "; ")
	recordPhase(r.rec, p)
	return p
}

// Abort posts body to the engine's /abort_request (SGLang's: {"rid": ...} or
// {"abort_all": true}). An engine without the endpoint answers 404, which is an error:
// abort by disconnecting from such an engine (vLLM).
func (c *Client) Abort(ctx context.Context, base string, body any) error {
	reqTimeout, _ := c.timeouts()
	ctx, cancel := context.WithTimeout(ctx, min(reqTimeout, 30*time.Second))
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("workload: abort: %w", err)
	}
	url := strings.TrimRight(base, "/") + "/abort_request"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("workload: abort: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		return fmt.Errorf("workload: abort at %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("workload: abort at %s: %w", url, &StatusError{Code: resp.StatusCode, Message: errorMessage(raw)})
	}
	return nil
}
