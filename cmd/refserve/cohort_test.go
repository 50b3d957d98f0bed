package main

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

func TestPlaceOf(t *testing.T) {
	sys := openai.Message{Role: "system", Content: "s"}
	user := openai.Message{Role: "user", Content: "u"}
	call := openai.Message{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "c"}}}
	tool := openai.Message{Role: "tool", ToolCallID: "c", Content: "r"}
	answer := openai.Message{Role: "assistant", Content: "a"}
	for _, tc := range []struct {
		name     string
		msgs     []openai.Message
		want     sessionPlace
		restores bool
	}{
		{"first request", []openai.Message{sys, user}, sessionPlace{rounds: 1, opensRound: true}, false},
		{"tool result", []openai.Message{sys, user, call, tool}, sessionPlace{rounds: 1, turns: 1}, false},
		{"second round", []openai.Message{sys, user, call, tool, answer, user}, sessionPlace{rounds: 2, turns: 2, opensRound: true}, true},
		{"second round's tool result", []openai.Message{sys, user, answer, user, call, tool}, sessionPlace{rounds: 2, turns: 2}, false},
		{"plain chat, third round", []openai.Message{user, answer, user, answer, user}, sessionPlace{rounds: 3, turns: 2, opensRound: true}, true},
		{"no user message", []openai.Message{sys}, sessionPlace{}, false},
	} {
		got := placeOf(0, tc.msgs)
		if got != tc.want || got.restores() != tc.restores {
			t.Errorf("%s: place %+v (restores %v); want %+v (restores %v)", tc.name, got, got.restores(), tc.want, tc.restores)
		}
	}
}

// closedLoop simulates a closed-loop client against a cohort, event by event in an order
// drawn from rng: sessions of rounds rounds, each round one or two tool calls and then an
// answer, at most conc sessions at once, started in index order. With burst the first
// min(conc, sessions) start before anything else happens, as clients that start together
// do; without it any event may come first. It returns the load met by every request that
// opens a later round, by session and round, and the largest cohort seen.
func closedLoop(rng *rand.Rand, sessions, rounds, conc int, burst bool) (loads map[[2]int]int, peak int) {
	type client struct {
		place     sessionPlace // of its next or current request
		callsLeft int          // tool calls still to come in this round
		waiting   bool         // a request of it is in the engine
		done      bool
	}
	var c cohort
	loads = map[[2]int]int{}
	var clients []*client
	var inflight []int // sessions with a request in the engine
	running := 0
	send := func(i int) {
		cl := clients[i]
		if cl.place.opensRound {
			cl.place.rounds++
			cl.callsLeft = 1 + rng.IntN(2)
		}
		c.arrive(cl.place)
		if cl.place.restores() {
			loads[[2]int{i, cl.place.rounds}] = c.size()
		}
		peak = max(peak, c.size())
		cl.waiting = true
		inflight = append(inflight, i)
	}
	start := func() {
		clients = append(clients, &client{place: sessionPlace{key: uint64(len(clients) + 1), opensRound: true}})
		running++
		send(len(clients) - 1)
	}
	reply := func(i int) {
		cl := clients[i]
		cl.waiting = false
		cl.place.turns++
		if cl.callsLeft > 0 { // a tool call: the client sends its result next
			cl.callsLeft--
			c.finish(cl.place.key, true)
			cl.place.opensRound = false
			return
		}
		c.finish(cl.place.key, false) // the round's answer
		cl.place.opensRound = true
		if cl.place.rounds == rounds {
			cl.done = true
			running--
		}
	}
	if burst {
		for range min(conc, sessions) {
			start()
		}
	}
	for {
		// What may happen next: a reply finishes, a client sends, a session starts.
		type event struct{ kind, i int }
		var events []event
		for k := range inflight {
			events = append(events, event{0, k})
		}
		for i, cl := range clients {
			if !cl.done && !cl.waiting {
				events = append(events, event{1, i})
			}
		}
		if len(clients) < sessions && running < conc {
			events = append(events, event{2, 0})
		}
		if len(events) == 0 {
			return loads, peak
		}
		switch e := events[rng.IntN(len(events))]; e.kind {
		case 0:
			i := inflight[e.i]
			inflight = append(inflight[:e.i], inflight[e.i+1:]...)
			reply(i)
		case 1:
			send(e.i)
		case 2:
			start()
		}
	}
}

// TestCohortLoadIsTheClientsConcurrency: whatever order the events of a closed-loop
// client come in, every round that reopens meets a cohort of exactly its concurrency
// (or its sessions, if fewer), never more.
func TestCohortLoadIsTheClientsConcurrency(t *testing.T) {
	for _, tc := range []struct{ sessions, rounds, conc int }{
		{60, 4, 60}, {60, 4, 1}, {8, 4, 4}, {60, 4, 30}, {20, 3, 60}, {40, 5, 7},
	} {
		t.Run(fmt.Sprintf("%d sessions x %d rounds at %d", tc.sessions, tc.rounds, tc.conc), func(t *testing.T) {
			want := min(tc.conc, tc.sessions)
			for seed := range uint64(50) {
				loads, _ := closedLoop(rand.New(rand.NewPCG(seed, 7)), tc.sessions, tc.rounds, tc.conc, true)
				if len(loads) != tc.sessions*(tc.rounds-1) {
					t.Fatalf("order %d: %d reopened rounds; want %d", seed, len(loads), tc.sessions*(tc.rounds-1))
				}
				for k, n := range loads {
					if n != want {
						t.Fatalf("order %d: session %d round %d met a cohort of %d; want %d", seed, k[0], k[1], n, want)
					}
				}
			}
		})
	}
}

// TestCohortNeverExceedsConcurrency: even when a client starts so late that others have
// finished rounds before it (and a session between rounds leaves in place of one that
// ended), the cohort never counts more sessions than run at once.
func TestCohortNeverExceedsConcurrency(t *testing.T) {
	for _, tc := range []struct{ sessions, rounds, conc int }{{60, 4, 60}, {8, 4, 4}, {30, 3, 5}, {10, 4, 1}} {
		for seed := range uint64(50) {
			_, peak := closedLoop(rand.New(rand.NewPCG(seed, 11)), tc.sessions, tc.rounds, tc.conc, false)
			if peak > min(tc.conc, tc.sessions) {
				t.Errorf("%+v, order %d: the cohort reached %d", tc, seed, peak)
			}
		}
	}
}

// TestCohortRetiresTheEndedSession: when a conversation starts while one session has
// ended and another is between rounds, the ended one (more rounds) leaves; the one
// between rounds stays and its next round counts the new session.
func TestCohortRetiresTheEndedSession(t *testing.T) {
	var c cohort
	ended, between, fresh := uint64(1), uint64(2), uint64(3)
	c.arrive(sessionPlace{key: ended, rounds: 4, turns: 9, opensRound: true})
	c.arrive(sessionPlace{key: between, rounds: 2, turns: 4, opensRound: true})
	c.finish(between, false) // answered round 2; the client is thinking
	c.finish(ended, false)   // answered its last round
	c.arrive(sessionPlace{key: fresh, rounds: 1, opensRound: true})
	if _, ok := c.sessions[ended]; ok || c.size() != 2 {
		t.Fatalf("after a new conversation: %d sessions, the ended one still in: %v", c.size(), ok)
	}
	c.arrive(sessionPlace{key: between, rounds: 3, turns: 5, opensRound: true})
	if c.size() != 2 {
		t.Errorf("the session between rounds came back: %d sessions; want 2", c.size())
	}
	// A session owed a tool result never leaves: its client must come back.
	c.finish(between, true)
	c.finish(fresh, false)
	c.arrive(sessionPlace{key: 4, rounds: 1, opensRound: true})
	if _, ok := c.sessions[between]; !ok {
		t.Error("a session whose client owes a tool result left the cohort")
	}
	if _, ok := c.sessions[fresh]; ok {
		t.Error("the idle session stayed while one owed a result was there instead")
	}
}
