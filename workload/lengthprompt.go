package workload

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// Prompts of a length trace. arbiter has no tokenizer of the served model, so it asks
// the engine: before the trace starts, two probe prompts of the same prose as the
// trace's (a short and a long one) are sent, and the engine's usage.prompt_tokens of each
// gives its tokens per byte of that prose and the tokens its chat template adds to a
// prompt (the short probe's tokens less what its bytes count). A request of n tokens is
// then one user message of n less the template's tokens, at the measured rate.
//
// Block k of a Mooncake request is the text of its hash id k: seeded prose that is a pure
// function of the run's seed and the id, cut to the block's length, so that two requests
// whose ids agree up to a block send byte-identical prompts up to it (a partial last
// block is a prefix of the same text). Tokens the blocks do not cover (a BurstGPT request,
// or a Mooncake request longer than its blocks) are prose of the request's own that
// begins with its number, so that no two requests share more than their blocks.

// Probe sizes, in bytes of prose: the difference between the two is what the rate is
// measured over.
const (
	probeShortBytes = 2 * 1024
	probeLongBytes  = 16 * 1024
)

// TraceCalibration is what the probes measured of the engine, once per launch before a
// length trace starts.
type TraceCalibration struct {
	// ShortBytes and LongBytes are the probes' prose; ShortTokens and LongTokens the
	// engine's usage.prompt_tokens of each.
	ShortBytes, ShortTokens int
	LongBytes, LongTokens   int
	// BytesPerToken is the prose's bytes per token of the engine; TemplateTokens are the
	// tokens the engine adds to a one-message prompt.
	BytesPerToken  float64
	TemplateTokens int
	// Note says what went wrong, when the probes could not measure (an engine that
	// reports no usage, or a probe that failed): the prompts are then written at four
	// bytes a token and no template, and their lengths are only approximate.
	Note string
}

// CalibrationRecorder is a Recorder that also keeps a length trace's calibration. A
// Recorder that is not one does not hear about it; it arrives before any turn.
type CalibrationRecorder interface {
	Calibration(TraceCalibration)
}

// uncalibrated is the calibration when the engine could not be measured.
func uncalibrated(c TraceCalibration, note string) TraceCalibration {
	c.BytesPerToken, c.TemplateTokens, c.Note = charsPerToken, 0, note
	return c
}

// calibrate sends the two probes and measures the engine from their prompt tokens.
func (r *runner) calibrate(ctx context.Context) TraceCalibration {
	c := TraceCalibration{}
	probe := func(bytes int) (int, error) {
		text := proseOf(newScriptRand(r.cfg.Seed, -11, bytes), bytes)
		req := r.chatRequest(-1, bytes, []openai.Message{{Role: "user", Content: text}}, 1, false)
		req.RID = fmt.Sprintf("arb-%d-probe-%d", r.cfg.Seed, bytes)
		ex := r.client.Chat(ctx, r.base, req)
		if ex.Err != nil {
			return 0, ex.Err
		}
		if ex.Completion.Usage == nil || ex.Completion.Usage.PromptTokens <= 0 {
			return 0, fmt.Errorf("the engine reported no usage.prompt_tokens")
		}
		return ex.Completion.Usage.PromptTokens, nil
	}
	var err error
	c.ShortBytes, c.LongBytes = probeShortBytes, probeLongBytes
	if c.ShortTokens, err = probe(c.ShortBytes); err != nil {
		return uncalibrated(c, "calibration probe failed: "+err.Error())
	}
	if c.LongTokens, err = probe(c.LongBytes); err != nil {
		return uncalibrated(c, "calibration probe failed: "+err.Error())
	}
	if c.LongTokens <= c.ShortTokens {
		return uncalibrated(c, fmt.Sprintf("the long probe counted %d tokens, the short one %d: no rate to measure", c.LongTokens, c.ShortTokens))
	}
	c.BytesPerToken = float64(c.LongBytes-c.ShortBytes) / float64(c.LongTokens-c.ShortTokens)
	c.TemplateTokens = max(c.ShortTokens-int(math.Round(float64(c.ShortBytes)/c.BytesPerToken)), 0)
	return c
}

// bytesFor is the prose that makes tokens tokens.
func (c TraceCalibration) bytesFor(tokens int) int {
	return int(math.Round(float64(tokens) * c.BytesPerToken))
}

// proseOf is seeded prose of exactly n bytes (cut inside a word when it must be).
func proseOf(r *scriptRand, n int) string {
	if n <= 0 {
		return ""
	}
	s := filler(r, n/charsPerToken+16)
	for len(s) < n { // filler writes at least what it is asked for; this is a bound
		s += " " + filler(r, 16)
	}
	return s[:n]
}

// blockText is the text of Mooncake block id, bytes long: a pure function of the seed
// and the id, so that every request naming the id, in every arm, sends the same bytes.
func blockText(seed, id int64, bytes int) string {
	return proseOf(newScriptRand(seed^0x6d6f6f6e63616b65, int(id), -12), bytes)
}

// lengthPrompt writes request req's prompt (session is its session index). Block k
// takes the prompt's bytes from bytesFor(k*512 tokens) on, so that rounding never adds
// up: the prompt is bytesFor(its tokens) long.
func lengthPrompt(seed int64, c TraceCalibration, req TraceRequest, session int) string {
	total := c.bytesFor(max(req.InputTokens-c.TemplateTokens, 1))
	var b strings.Builder
	b.Grow(total)
	for k, id := range req.Blocks {
		from, to := c.bytesFor(k*TraceBlockTokens), min(c.bytesFor((k+1)*TraceBlockTokens), total)
		if from >= to {
			break
		}
		b.WriteString(blockText(seed, id, c.bytesFor(TraceBlockTokens)+1)[:to-from])
	}
	if rest := total - b.Len(); rest > 0 {
		own := fmt.Sprintf("Request %d. ", session)
		text := own + proseOf(newScriptRand(seed, session, -13), max(rest-len(own), 0))
		b.WriteString(text[:rest])
	}
	return b.String()
}

// TracePhaseName names the one phase of a length trace.
func TracePhaseName(format string) string { return format + " trace" }

// runLengthTrace replays a mooncake or burstgpt trace: the probes, then one request a
// session, each at its recorded time (or in a closed loop), with a prompt of its recorded
// length and an answer of its recorded length (ignore_eos).
func runLengthTrace(ctx context.Context, cfg Config, base string, rec Recorder, index *TraceIndex) error {
	n := index.Len()
	if cfg.Sessions > 0 {
		if cfg.Sessions > n {
			return fmt.Errorf("workload: trace %s has %d requests, fewer than the %d sessions asked for", index.Path, n, cfg.Sessions)
		}
		n = cfg.Sessions
	}
	closed := cfg.Trace.Arrivals == arms.ArrivalsClosed
	speed := cfg.Trace.Speed
	if !(speed > 0) {
		speed = 1
	}
	conc := max(cfg.Concurrency, 1)
	r, err := newRunner(ctx, cfg, base, rec, conc, n)
	if err != nil {
		return err
	}
	defer r.client.CloseIdleConnections()
	cal := r.calibrate(ctx)
	if cr, ok := rec.(CalibrationRecorder); ok {
		cr.Calibration(cal)
	}
	if ctx.Err() != nil {
		abortRange(rec, cfg.SessionOffset, n, ctx.Err())
		return ctx.Err()
	}
	// shot reads request k when it is due, and writes its prompt.
	shot := func(k int) (oneShot, error) {
		req, err := index.Request(k)
		if err != nil {
			return oneShot{}, err
		}
		return r.lengthShot(cal, req, cfg.SessionOffset+k), nil
	}
	p := Phase{Name: TracePhaseName(index.Format()), Position: 0, FirstSession: cfg.SessionOffset, Sessions: n}
	tally := &phaseTally{}
	fail := func(k int, err error) {
		rec.SessionDone(SessionResult{Session: cfg.SessionOffset + k, Status: SessionError, Err: err.Error()})
	}
	if closed {
		p.Kind, p.Concurrency = PhaseClosed, conc
		r.warm(ctx, min(conc, n))
		var g errgroup.Group
		g.SetLimit(conc)
		for k := range n {
			g.Go(func() error {
				s, err := shot(k)
				if err != nil {
					fail(k, err)
					return nil
				}
				r.runShot(ctx, s, tally)
				return nil
			})
		}
		_ = g.Wait()
	} else {
		p.Kind = PhaseOpen
		var wg sync.WaitGroup
		start := time.Now()
		var first, last time.Duration
		read := false // first is the first request read
		for k := range n {
			req, err := index.Request(k)
			if err != nil {
				fail(k, err)
				continue
			}
			if !read {
				first, read = req.At, true
			}
			last = req.At
			due := start.Add(time.Duration(float64(req.At-first) / speed))
			if wait := time.Until(due); wait > 0 && ctx.Err() == nil {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
			}
			s := r.lengthShot(cal, req, cfg.SessionOffset+k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.runShot(ctx, s, tally)
			}()
		}
		wg.Wait()
		if span := float64(last-first) / speed; span > 0 && n > 1 {
			p.Rate = float64(n-1) / (span / float64(time.Second))
		}
	}
	tally.fill(&p)
	recordPhase(rec, p)
	return ctx.Err()
}

// lengthShot is request req as a one-request session: its prompt, and an answer of its
// recorded length (capped by Config.MaxTokens when set) that ignores EOS.
func (r *runner) lengthShot(c TraceCalibration, req TraceRequest, session int) oneShot {
	out := max(req.OutputTokens, 1)
	if r.cfg.MaxTokens > 0 {
		out = min(out, r.cfg.MaxTokens)
	}
	msgs := []openai.Message{{Role: "user", Content: lengthPrompt(r.cfg.Seed, c, req, session)}}
	return oneShot{session: session, req: r.chatRequest(session, 0, msgs, out, true)}
}
