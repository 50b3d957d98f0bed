package main

import "strings"

// generation is the decode state of one request: the reply the agent planned, how far
// decoding got, and, once a step read stale index-K, the garbled tail it degenerated
// into. It is owned by the scheduler goroutine.
type generation struct {
	parser    string
	rep       reply
	clean     []string // tokens of the planned reply: markup for a call, words for text
	maxTokens int      // 0: no cap
	seed      uint64
	session   uint64

	n       int      // tokens decoded
	garbled []string // non-nil once corrupted
	gi      int
	// held is call markup the tool-call parser keeps back until the call closes; it
	// reaches the client as content only if the call never parses.
	held strings.Builder
}

func newGeneration(parser string, rep reply, maxTokens int, seed, session uint64) *generation {
	g := &generation{parser: parser, rep: rep, maxTokens: maxTokens, seed: seed, session: session}
	if rep.Call != nil {
		g.clean = callMarkup(parser, *rep.Call)
	} else {
		g.clean = textPieces(rep.Text)
	}
	return g
}

// maxSteps bounds the tokens this generation can decode, garbled tail included.
func (g *generation) maxSteps() int {
	n := len(g.clean) + garbleExtraMax
	if g.maxTokens > 0 && g.maxTokens < n {
		n = g.maxTokens
	}
	return n
}

// A corrupted reply runs past its planned length by garbleExtraMin..garbleExtraMax tokens.
const (
	garbleExtraMin = 4
	garbleExtraMax = 24
)

// step decodes one token at position; stale says whether the step read stale index-K.
// It returns the content that became visible and, when the reply is complete, the
// finish reason ("stop", "tool_calls" or "length").
func (g *generation) step(stale bool, position int) (content, finish string) {
	var b strings.Builder
	if g.garbled == nil && stale {
		r := newRNG(mix64(g.seed^g.session) ^ uint64(position)*0x9e3779b97f4a7c15)
		variant := r.intn(numVariants)
		start := 0
		if g.rep.Call != nil {
			start = g.n
		}
		extra := garbleExtraMin + r.intn(garbleExtraMax-garbleExtraMin+1)
		g.garbled = garble(g.parser, g.rep.Lure, start, len(g.clean)-g.n+extra, variant, r)
		b.WriteString(g.held.String()) // the parser gives up: what it held becomes text
		g.held.Reset()
	}
	switch {
	case g.garbled != nil:
		b.WriteString(g.garbled[g.gi])
		g.gi++
		if g.gi == len(g.garbled) {
			finish = "stop"
		}
	case g.rep.Call != nil:
		g.held.WriteString(g.clean[g.n])
		if g.n+1 == len(g.clean) {
			finish = "tool_calls"
		}
	default:
		b.WriteString(g.clean[g.n])
		if g.n+1 == len(g.clean) {
			finish = "stop"
		}
	}
	g.n++
	if finish == "" && g.maxTokens > 0 && g.n >= g.maxTokens {
		finish = "length"
		b.WriteString(g.held.String())
		g.held.Reset()
	}
	return b.String(), finish
}

// corrupted says whether a step of this generation read stale index-K.
func (g *generation) corrupted() bool { return g.garbled != nil }
