package main

import (
	"context"
	"math"
	"math/bits"
)

// Calibration of the sim backend's hazard. With 33 to 64 sessions in the cohort (the
// field's 60) every decode step that reads restored index-K reads it stale with
// probability simHazard64. The hazard steps up with the cohort in powers of two, as a
// decode batch padded to its CUDA graph's size runs the same kernels for every size up
// to it; between steps it grows quadratically in the sessions beyond simSafeSessions,
// and it is exactly zero at or below that. Steps make the draws immune to a session
// that starts a little late: whether 57 or 60 sessions had begun when a round reopened,
// the hazard is the same. The value was fitted with TestCalibration
// (REFSERVE_CALIBRATION_SEEDS=40: 60 streaming tool-call sessions x 4 rounds) to the
// field's 12-18%; its doc comment has the figures.
const (
	simHazard64     = 2.2e-3
	simSafeSessions = 4
)

// simBackend is the fault model on the CPU: with bf16 index-K and HiCache on, an
// ungated restore races the selection kernel more often the more sessions share the
// device pool, so the more pages are evicted to host memory and restored. The load it
// reads is the logical one (Step.Load, the scheduler's cohort), not the requests that
// happen to share an iteration, and a draw is a hash of (seed, session, position): the
// same seed and workload corrupt the same sessions on any machine, however loaded.
type simBackend struct {
	armed bool
	seed  uint64
	// faultMultiplier is the launch's M (launch.go), which scales the hazard.
	faultMultiplier float64
}

func newSimBackend(cfg BackendConfig) (Backend, error) {
	m := cfg.FaultMultiplier
	if m == 0 {
		m = 1
	}
	// The gate orders every read after its restore: with it nothing is ever stale.
	return &simBackend{armed: cfg.BF16IndexK && cfg.HiCache && !cfg.Gate, seed: uint64(cfg.Seed), faultMultiplier: m}, nil
}

// Decode marks a step stale iff it reads restored index-K (its request opens a later
// round) and its uniform draw falls below the hazard of the logical load.
func (b *simBackend) Decode(_ context.Context, steps []Step) error {
	for i := range steps {
		s := &steps[i]
		s.Stale = b.armed && s.Restored && stepUniform(b.seed, s.Session, s.Position) < b.hazard(s.Load)
	}
	return nil
}

// hazard is the probability that one decode step reads stale index-K in this launch:
// simHazard scaled by the launch's multiplier, capped at 1. The draws stay fixed by
// (seed, session, position), so a launch with a higher multiplier corrupts a superset of
// the steps a lower one does.
func (b *simBackend) hazard(sessions int) float64 {
	return scaleProbability(simHazard(sessions), b.faultMultiplier)
}

// Close has nothing to release.
func (b *simBackend) Close() error { return nil }

// simHazard is the probability that one decode step reads stale index-K when the engine
// serves sessions sessions. It is zero at simSafeSessions or fewer: a small working set
// stays on the device, and what little is restored lands long before the selection
// kernel reads it.
func simHazard(sessions int) float64 {
	if sessions <= simSafeSessions {
		return 0
	}
	step := 1 << bits.Len(uint(sessions-1)) // the power of two at or above sessions
	x := float64(step-simSafeSessions) / float64(64-simSafeSessions)
	return math.Min(1, simHazard64*x*x)
}

// stepUniform is a uniform draw in [0, 1) fixed by (seed, session, position).
func stepUniform(seed, session uint64, position int) float64 {
	h := mix64(seed ^ 0x9e3779b97f4a7c15)
	h = mix64(h ^ session)
	h = mix64(h ^ uint64(position))
	return float64(h>>11) / (1 << 53)
}

// mix64 is the splitmix64 finalizer: a cheap bijection that spreads every input bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
