package main

import "github.com/arbiterlab/arbiter/openai"

// The logical load.
//
// The field's corruption grew with the number of sessions an engine served at once: 12-18%
// of sessions at 60 concurrent multi-turn sessions, none at one. refserve's sim fault model
// reproduces that dependence, but it must not read it off the wall clock: how many
// requests happen to sit between two decode ticks depends on how fast the clients turn a
// reply into their next request, that is on CPU scheduling, and on a loaded machine (or
// under the race detector, or behind a container's port proxy) the same seeded experiment
// corrupted 4 sessions in one run and 9 in the next.
//
// So the sim backend draws against the cohort instead: the conversations the engine is
// serving, counted from what the requests themselves say and from events that causally
// precede one another, never from timing.
//
//   - A request belongs to the session named by its first user message (every turn of a
//     conversation resends it) and to the round given by its user messages.
//   - A session joins the cohort with its first request and stays in it between its turns
//     and between its rounds: a client that is still reading the last reply or building
//     the next request is still there, however long that takes on a busy machine.
//   - A session leaves the cohort only when a new conversation starts while it is idle
//     (its last reply was not a tool call, so its client owes no follow-up). A closed-loop
//     client at concurrency C starts conversation C+1 only after one of its C has ended,
//     and the engine finished that conversation's last reply before the client could read
//     it, so the ended session is idle by then. Of the idle sessions the one with the most
//     rounds leaves: the ended one whenever every session has as many rounds. A session
//     that left and comes back rejoins.
//   - Only the request that opens a later round reads restored pages: while the client was
//     away, the other sessions' traffic pushed its KV pages out to HiCache's host copy. A
//     session's first request has nothing to restore, and the tool-result requests within a
//     round find their prefix still on the device. Such a request meets the cohort as it is
//     when it arrives, and every step of it draws against that load.
//
// At 60 sessions at concurrency 60 the cohort grows to 60 while the clients start and
// then holds 60 to the end; at concurrency 1 it is 1 throughout, at concurrency 4 at most 4.
// The one race left is the start itself: nothing orders one client's first request
// after another's second round, so a round may reopen before the last clients have
// started and meet a smaller cohort. Rounds take hundreds of decode steps, so this is
// rare (with both cores busy all 60 quickstart clients had started 0.2-0.4 s after the
// first, before any round reopened), and the hazard steps in powers of two
// (backend_sim.go), so a cohort of 33 to 64 draws the same: under the race detector on a
// loaded machine, where the last client started up to 6 s after the first, rounds
// reopened at cohorts of 44 to 60 and the corrupted sessions were the same. With
// --inter-token-delay 0 rounds are as short as the CPU makes them and the margin is gone.
// Anything that starts a conversation is load, arbiter's readiness probe included: it is
// idle once answered, and the workload's first session takes its place.

// sessionPlace is where a request stands in its conversation, read from its messages.
type sessionPlace struct {
	key        uint64 // the session: a hash of the first user message (as Step.Session)
	rounds     int    // user messages: the round this request belongs to, counted from 1
	turns      int    // assistant messages: 0 for the session's first request
	opensRound bool   // no assistant message follows the last user message
}

// placeOf reads a request's place; key is the session key the agent derived from the
// same messages.
func placeOf(key uint64, msgs []openai.Message) sessionPlace {
	p := sessionPlace{key: key}
	for _, m := range msgs {
		switch m.Role {
		case "user":
			p.rounds++
			p.opensRound = true
		case "assistant":
			p.turns++
			p.opensRound = false
		}
	}
	return p
}

// restores says whether the request's prefix comes back from host memory: it opens a
// round after the first.
func (p sessionPlace) restores() bool { return p.rounds > 1 && p.opensRound }

// cohortSession is what the cohort knows of one session.
type cohortSession struct {
	rounds    int    // rounds of its latest request
	requests  int    // its requests still in the scheduler, queued or running
	owed      bool   // its last reply was a tool call: the client must send the results
	idleOrder uint64 // when it last became idle, for a stable choice between equals
}

func (s *cohortSession) idle() bool { return s.requests == 0 && !s.owed }

// cohort is the set of sessions the engine is serving; its size is the logical load. It
// is guarded by the scheduler's mutex.
type cohort struct {
	sessions map[uint64]*cohortSession
	clock    uint64 // counts idle transitions
}

// arrive records a request of the session at p entering the scheduler.
func (c *cohort) arrive(p sessionPlace) {
	if c.sessions == nil {
		c.sessions = map[uint64]*cohortSession{}
	}
	s, ok := c.sessions[p.key]
	if !ok {
		if p.turns == 0 { // a conversation starts: it takes the place of one that ended
			c.retireOne()
		}
		s = &cohortSession{}
		c.sessions[p.key] = s
	}
	s.rounds = p.rounds
	s.requests++
	s.owed = false
}

// finish records that a request of the session key ended; toolCall says whether its
// reply was a tool call, whose result the client owes.
func (c *cohort) finish(key uint64, toolCall bool) {
	s, ok := c.sessions[key]
	if !ok {
		return
	}
	s.requests--
	s.owed = toolCall
	if s.idle() {
		c.clock++
		s.idleOrder = c.clock
	}
}

// retireOne drops the idle session with the most rounds (of those, the one idle
// longest): the conversation that ended, when one did.
func (c *cohort) retireOne() {
	var (
		best    uint64
		bestS   *cohortSession
		present bool
	)
	for k, s := range c.sessions {
		if !s.idle() {
			continue
		}
		if !present || s.rounds > bestS.rounds || s.rounds == bestS.rounds && s.idleOrder < bestS.idleOrder {
			best, bestS, present = k, s, true
		}
	}
	if present {
		delete(c.sessions, best)
	}
}

// size is the logical load: the sessions in the cohort.
func (c *cohort) size() int { return len(c.sessions) }
