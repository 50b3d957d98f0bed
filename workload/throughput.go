package workload

import (
	"context"
	"fmt"

	"github.com/arbiterlab/arbiter/arms"
)

// Defaults of the throughput kind (and of the throughput phases of an abort cascade).
const (
	DefaultThroughputRequests = 32  // requests per phase
	DefaultPromptTokens       = 512 // prompt of each request
	DefaultThroughputTokens   = 256 // generation of each request
)

// ThroughputConfig is the throughput kind: a closed loop at each concurrency in turn,
// then open-loop Poisson arrivals at each rate. Every request is a session of its own
// (one seeded prompt, one answer of Config.MaxTokens tokens, DefaultThroughputTokens
// when 0), so the sessions of a phase are independent and identical in every arm. It is
// the spec's own (arms.ThroughputSpec); a zero field takes its default above.
type ThroughputConfig = arms.ThroughputSpec

func requestsOf(t ThroughputConfig) int {
	if t.Requests > 0 {
		return t.Requests
	}
	return DefaultThroughputRequests
}

func promptTokensOf(t ThroughputConfig) int {
	if t.PromptTokens > 0 {
		return t.PromptTokens
	}
	return DefaultPromptTokens
}

func generation(cfg Config, def int) int {
	if cfg.MaxTokens > 0 {
		return cfg.MaxTokens
	}
	return def
}

// Planned is how many sessions one run of cfg reports: what the verdict counts as
// planned, and what block k's sessions are offset by.
func Planned(cfg Config) int {
	switch cfg.Kind {
	case arms.WorkloadThroughput:
		t := derefThroughput(cfg.Throughput)
		return (len(t.Concurrency) + len(t.Rates)) * requestsOf(t)
	case arms.WorkloadAbortCascade:
		a := derefAbort(cfg.AbortCascade)
		return 2*len(a.ThroughputAt)*cascadeThroughputRequests(a) + cascadeCount(a)*(cascadeSessions(a)+1)
	case arms.WorkloadTrace, arms.WorkloadVerify:
		if cfg.Trace != nil && cfg.Trace.Index != nil && cfg.Sessions == 0 {
			return cfg.Trace.Index.Len()
		}
	}
	return cfg.Sessions
}

func derefThroughput(t *ThroughputConfig) ThroughputConfig {
	if t == nil {
		return ThroughputConfig{}
	}
	return *t
}

func runThroughput(ctx context.Context, cfg Config, base string, rec Recorder) error {
	t := derefThroughput(cfg.Throughput)
	if len(t.Concurrency)+len(t.Rates) == 0 {
		return fmt.Errorf("workload: throughput: no concurrency and no rate to measure")
	}
	for _, c := range t.Concurrency {
		if c < 1 {
			return fmt.Errorf("workload: throughput: concurrency %d", c)
		}
	}
	for _, rate := range t.Rates {
		if !(rate > 0) {
			return fmt.Errorf("workload: throughput: rate %g", rate)
		}
	}
	conc := 1
	for _, c := range t.Concurrency {
		conc = max(conc, c)
	}
	r, err := newRunner(ctx, cfg, base, rec, conc, Planned(cfg))
	if err != nil {
		return err
	}
	defer r.client.CloseIdleConnections()
	next, pos := cfg.SessionOffset, 0
	for _, c := range t.Concurrency {
		next = r.throughputPhase(ctx, t, Phase{Name: arms.ClosedPhaseName(c, ""), Kind: PhaseClosed, Position: pos, Concurrency: c}, next)
		pos++
	}
	for _, rate := range t.Rates {
		next = r.throughputPhase(ctx, t, Phase{Name: arms.OpenPhaseName(rate), Kind: PhaseOpen, Position: pos, Rate: rate}, next)
		pos++
	}
	return ctx.Err()
}

// throughputPhase runs one phase of t's requests from session first on, records it,
// and returns the next free session index.
func (r *runner) throughputPhase(ctx context.Context, t ThroughputConfig, p Phase, first int) int {
	n := requestsOf(t)
	p.FirstSession, p.Sessions = first, n
	shots := make([]oneShot, n)
	for i := range shots {
		shots[i] = r.promptShot(first+i, p.Name, promptTokensOf(t), t.SharedPrefixTokens,
			generation(r.cfg, DefaultThroughputTokens), !t.KeepEOS)
	}
	if p.Kind == PhaseOpen {
		// The arrival times are the phase's own seeded draw: the same in every arm.
		p = r.openLoop(ctx, p, shots, newScriptRand(r.cfg.Seed, first, -4))
	} else {
		r.warm(ctx, min(p.Concurrency, n))
		p = r.closedLoop(ctx, p, shots)
	}
	recordPhase(r.rec, p)
	return first + n
}

// abortRange reports sessions [first, first+n) aborted before they started.
func abortRange(rec Recorder, first, n int, err error) {
	for i := first; i < first+n; i++ {
		rec.SessionDone(SessionResult{Session: i, Status: SessionAborted, Err: err.Error()})
	}
}
