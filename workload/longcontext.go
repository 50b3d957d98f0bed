package workload

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// Defaults of the long-context kind: the field's long sessions grew from 2k to 80k
// tokens, where the short reproducer never went.
const (
	DefaultStartTokens        = 2000
	DefaultCeilingTokens      = 80000
	DefaultSharedPrefixTokens = 1000
	DefaultLongTokens         = 1024 // each reply's cap: long generations
)

// LongContextConfig is the long-context kind: tool-calling agent sessions (Config's
// Sessions, Rounds, Concurrency) whose every round brings a further part of a long case
// file, so that the context grows evenly from StartTokens at the first request to
// CeilingTokens at the last round's, with replies of up to Config.MaxTokens tokens
// (default DefaultLongTokens). Every session's system prompt begins with the same seeded
// document of SharedPrefixTokens, as sessions of one deployment share a system prompt.
// It is the spec's own (arms.LongContextSpec); a zero field takes its default.
type LongContextConfig = arms.LongContextSpec

func startTokens(l LongContextConfig) int   { return positiveOr(l.StartTokens, DefaultStartTokens) }
func ceilingTokens(l LongContextConfig) int { return positiveOr(l.CeilingTokens, DefaultCeilingTokens) }

func sharedTokens(l LongContextConfig) int {
	switch {
	case l.SharedPrefixTokens < 0:
		return 0
	case l.SharedPrefixTokens == 0:
		return min(DefaultSharedPrefixTokens, startTokens(l)/2)
	}
	return l.SharedPrefixTokens
}

// TargetTokens is the context the request opening round r (from 0) of rounds reaches:
// linear from the start to the ceiling.
func TargetTokens(l LongContextConfig, r, rounds int) int {
	if rounds <= 1 {
		return startTokens(l)
	}
	return startTokens(l) + (ceilingTokens(l)-startTokens(l))*r/(rounds-1)
}

func runLongContext(ctx context.Context, cfg Config, base string, rec Recorder) error {
	lc := LongContextConfig{}
	if cfg.LongContext != nil {
		lc = *cfg.LongContext
	}
	if cfg.Sessions < 0 || cfg.Rounds < 0 || cfg.Concurrency < 0 || ceilingTokens(lc) < startTokens(lc) {
		return fmt.Errorf("workload: long-context: sessions %d, rounds %d, concurrency %d, context %d to %d",
			cfg.Sessions, cfg.Rounds, cfg.Concurrency, startTokens(lc), ceilingTokens(lc))
	}
	cfg.MaxTokens = generation(cfg, DefaultLongTokens)
	rounds := max(cfg.Rounds, 1)
	conc := max(cfg.Concurrency, 1)
	r, err := newRunner(ctx, cfg, base, rec, conc, cfg.Sessions)
	if err != nil {
		return err
	}
	defer r.client.CloseIdleConnections()
	shared := sharedPrefix(cfg.Seed, sharedTokens(lc))
	r.warm(ctx, min(conc, cfg.Sessions))
	var g errgroup.Group
	g.SetLimit(conc)
	for i := cfg.SessionOffset; i < cfg.SessionOffset+cfg.Sessions; i++ {
		if ctx.Err() != nil {
			rec.SessionDone(SessionResult{Session: i, Status: SessionAborted, Err: ctx.Err().Error()})
			continue
		}
		g.Go(func() error {
			script := NewScript(cfg.Seed, i, rounds)
			if shared != "" {
				script.System = shared + "\n\n" + script.System
			}
			s := &agentSession{cfg: cfg, model: r.model, base: base, client: r.client, rec: rec, script: script}
			rec.SessionDone(runGrowing(ctx, s, lc, rounds))
			return nil
		})
	}
	_ = g.Wait()
	return ctx.Err()
}

// runGrowing runs one long-context session: the agent's loop, with each round's user
// message padded by the next part of the case file up to the round's context target.
// The padding is measured on the conversation as it stands, so the target holds however
// long the engine's replies were.
func runGrowing(ctx context.Context, s *agentSession, lc LongContextConfig, rounds int) SessionResult {
	res := SessionResult{Session: s.script.Session, Status: SessionOK}
	maxSteps := s.cfg.MaxToolSteps
	if maxSteps == 0 {
		maxSteps = DefaultMaxToolSteps
	}
	file := newScriptRand(s.cfg.Seed, s.script.Session, -5) // the session's case file
	if err := s.begin(); err != nil {
		return s.end(res, SessionError, err)
	}
	for round, ask := range s.script.Users {
		user := growingUser(s.msgs, s.script.Tools, lc, round, rounds, file, ask)
		var over bool
		if res, over = s.round(ctx, res, round, user, maxSteps); over {
			return res
		}
	}
	return res
}

// growingUser is the user message of round r of a long-context session whose
// conversation so far is msgs: the round's request padded by the next part of the case
// file up to the round's context target, after the request when lc.AskFirst (so that a
// call's arguments must be copied from far back), before it otherwise.
func growingUser(msgs []openai.Message, tools []openai.Tool, lc LongContextConfig, r, rounds int, file *scriptRand, ask string) openai.Message {
	user := openai.Message{Role: "user", Content: ask}
	need := TargetTokens(lc, r, rounds) - estimateTokens(append(msgs, user), tools)
	if need <= 16 {
		return user
	}
	if lc.AskFirst {
		user.Content = fmt.Sprintf("Part %d of the case file opens with a request: %s\n\n%s\n\nAct on the request at the top of this part.", r+1, ask, filler(file, need-24))
	} else {
		user.Content = fmt.Sprintf("Part %d of the case file:\n\n%s\n\n%s", r+1, filler(file, need-16), ask)
	}
	return user
}
