package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

// placement is where and in which wave one run of a block goes.
type placement struct {
	slot arms.Slot
	wave int
	// replaces is the run, lost with its node, that this one runs again; 0 for none.
	replaces int64
}

// barrier holds the arms of one wave until each has arrived: ready, or out (it failed
// to start, crashed before it was ready, or was interrupted). An arm arrives once,
// however often it calls arrive.
type barrier struct {
	wg   sync.WaitGroup
	once []sync.Once
}

func newBarrier(n int) *barrier {
	b := &barrier{once: make([]sync.Once, n)}
	b.wg.Add(n)
	return b
}

// member is the handle of the wave's i-th arm.
func (b *barrier) member(i int) *barrierMember { return &barrierMember{b: b, i: i} }

// barrierMember is one arm's place at a barrier; a nil member arrives and waits on
// nothing.
type barrierMember struct {
	b *barrier
	i int
}

func (m *barrierMember) arrive() {
	if m != nil {
		m.b.once[m.i].Do(m.b.wg.Done)
	}
}

// wait returns once every arm of the wave has arrived. Each arm arrives in bounded time
// (readiness has the startup timeout, and an interrupt ends it), so wait needs no
// context of its own.
func (m *barrierMember) wait() {
	if m != nil {
		m.b.wg.Wait()
	}
}

// liveSlots are the slots of the nodes not lost so far, in Spec.Slots order.
func (e *experiment) liveSlots() []arms.Slot {
	e.placeMu.Lock()
	defer e.placeMu.Unlock()
	var out []arms.Slot
	for _, s := range e.slots {
		if _, lost := e.lostNodes[s.Node]; !lost {
			out = append(out, s)
		}
	}
	return out
}

// nodeLost takes a node out of the schedule: its slots get no further arms.
func (e *experiment) nodeLost(node, why string) {
	e.placeMu.Lock()
	defer e.placeMu.Unlock()
	if _, already := e.lostNodes[node]; already {
		return
	}
	e.lostNodes[node] = why
	e.log.Error("node lost: its runs are recorded lost and it gets no further arms", "node", node, "why", why)
}

// Waves is how many waves a block of arms takes on slots: as many arms at once as there
// are slots, the waves one after the other; 0 without a slot.
func Waves(arms, slots int) int {
	if slots <= 0 {
		return 0
	}
	return (arms + slots - 1) / slots
}

// runBlock runs the arms of block b, in the block's order, on the live slots: as many at
// once as there are slots, in waves when there are fewer slots than arms. Within a wave
// the arms start together, wait for each other to be ready, and then get the workload
// at the same moment. No slot ever serves two arms at once: a wave ends (every arm of it
// stopped) before the next one is placed.
func (e *experiment) runBlock(ctx context.Context, b int, pending []int, res *Result) error {
	if len(pending) == 0 {
		return nil
	}
	live := e.liveSlots()
	if len(live) == 0 {
		return fmt.Errorf("block %d: %w", b, ErrNoSlot)
	}
	// Said when the number of waves changes, not again for every block that runs in as
	// many as the one before.
	if waves := Waves(len(pending), len(live)); waves > 1 && waves != e.wavesSaid {
		e.wavesSaid = waves
		e.log.Warn(fmt.Sprintf("block %d: %d arms on %d slot%s: running in %d waves; arms of different waves run at different times (list more slots under runtime.nodes to run them at once)",
			b, len(pending), len(live), map[bool]string{true: "s"}[len(live) > 1], waves))
	}
	replaces := map[int]int64{}
	for wave := 0; len(pending) > 0; wave++ {
		if ctx.Err() != nil {
			return nil
		}
		live = e.liveSlots()
		if len(live) == 0 {
			return fmt.Errorf("block %d: %w", b, ErrNoSlot)
		}
		n := min(len(live), len(pending))
		now := pending[:n]
		pending = slices.Clone(pending[n:])
		bar := newBarrier(n)
		runs := make([]RunResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, ai := range now {
			m := bar.member(i)
			wg.Go(func() {
				runs[i], errs[i] = e.runArm(ctx, ai, b, placement{slot: live[i], wave: wave, replaces: replaces[ai]}, m)
			})
		}
		wg.Wait()
		res.Runs = append(res.Runs, runs...)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		// An arm whose node was lost runs again, in a later wave of the block, on a slot
		// of a node still answering; the new run supersedes the lost one.
		for i, ai := range now {
			if runs[i].Status == store.RunLost && ctx.Err() == nil {
				replaces[ai] = runs[i].RunID
				pending = append(pending, ai)
			}
		}
	}
	return nil
}

// ErrNoSlot reports an experiment whose every node was lost: no slot is left to run on.
var ErrNoSlot = errors.New("no slot left: every node was lost")
