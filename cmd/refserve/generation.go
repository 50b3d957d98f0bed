package main

import (
	"strings"

	"github.com/arbiterlab/arbiter/openai"
)

// generation is the decode state of one request: the reply the agent planned, how far
// decoding got, and, once a step read stale index-K, the garbled tail it degenerated
// into. It is owned by the scheduler goroutine.
type generation struct {
	parser    string
	rep       reply
	clean     []string // tokens of the planned reply: markup for a call, words for text
	maxTokens int      // 0: no cap
	// minTokens is how long a text reply must run before it may end: max_tokens under
	// ignore_eos, or min_tokens. Past its plan it goes on in the same voice (continuation).
	minTokens int
	seed      uint64
	session   uint64
	cont      *rng // draws the continuation's sentences
	contWords []string

	n       int      // tokens decoded
	garbled []string // non-nil once corrupted
	gi      int
	// held is call markup the tool-call parser keeps back until the call closes; it
	// reaches the client as content only if the call never parses.
	held strings.Builder
	// visible is the content the client has been sent, for the prefix cache.
	visible strings.Builder
	finish  string
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

// withMinTokens makes a text reply run to at least n tokens; a tool call ends where its
// markup does, as a parser would cut it there.
func (g *generation) withMinTokens(n int) *generation {
	if g.rep.Call == nil {
		g.minTokens = n
	}
	return g
}

// continuation lengthens a text reply that must not end yet by one word, drawn from
// sentences in the agent's voice, fixed by the seed and the session.
func (g *generation) continuation() {
	if len(g.contWords) == 0 {
		if g.cont == nil {
			g.cont = newRNG(mix64(g.seed^0xc0de) ^ g.session)
		}
		g.contWords = strings.Fields(continuationSentences[g.cont.intn(len(continuationSentences))])
	}
	g.clean = append(g.clean, " "+g.contWords[0])
	g.contWords = g.contWords[1:]
}

// continuationSentences are what a reply that must run long goes on with.
var continuationSentences = []string{
	"To put this in context, the same pattern held over the previous weeks as well.",
	"Each of these points deserves a closer look before anything is settled.",
	"Some of the sources disagree slightly, but not in ways that change the picture.",
	"A second reading of the numbers gives the same answer within a small margin.",
	"Where the data is thin I have said so rather than guess.",
	"The main risk is timing, and that is easy to watch as things develop.",
	"Several smaller details point the same way, which makes the conclusion sturdier.",
	"If anything here looks off, it is worth checking against your own records.",
}

// message is the assistant message this generation amounts to, as a client assembles it
// and sends it back with the next turn.
func (g *generation) message() openai.Message {
	m := openai.Message{Role: "assistant", Content: g.visible.String()}
	if g.finish == "tool_calls" {
		m.ToolCalls = []openai.ToolCall{{ID: g.rep.Call.ID, Type: "function",
			Function: openai.FunctionCall{Name: g.rep.Call.Name, Arguments: g.rep.Call.Arguments()}}}
	}
	return m
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
		for g.n+1 == len(g.clean) && len(g.clean) < g.minTokens {
			g.continuation()
		}
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
	g.visible.WriteString(b.String())
	g.finish = finish
	return b.String(), finish
}
