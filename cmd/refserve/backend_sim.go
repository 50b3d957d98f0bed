package main

import (
	"context"
	"math"
)

// Calibration of the sim backend's hazard. At 60 requests in flight every decode step
// reads stale index-K with probability simHazardAt60; below that the hazard falls off
// quadratically in the requests beyond simSafeInFlight and is exactly zero at or below
// it. The value was fitted with TestCalibration (60 streaming tool-call sessions x 4
// rounds, about 10 turns and 280 decode steps per session, default 2ms inter-token
// delay): seeds 1-20 corrupted 8.7 of 60 sessions on average (14.4%), as in the field.
const (
	simHazardAt60   = 5.7e-4
	simSafeInFlight = 4
)

// simBackend is the fault model on the CPU: with bf16 index-K and HiCache on, an
// ungated restore races the selection kernel more often the more requests share the
// iteration. Draws are a hash of (seed, session, position), so the same seed and load
// corrupt the same sessions.
type simBackend struct {
	armed bool
	seed  uint64
}

func newSimBackend(cfg BackendConfig) (Backend, error) {
	// The gate orders every read after its restore: with it nothing is ever stale.
	return &simBackend{armed: cfg.BF16IndexK && cfg.HiCache && !cfg.Gate, seed: uint64(cfg.Seed)}, nil
}

// Decode marks a step stale iff its uniform draw falls below the hazard of its load.
func (b *simBackend) Decode(_ context.Context, steps []Step) error {
	for i := range steps {
		s := &steps[i]
		s.Stale = b.armed && stepUniform(b.seed, s.Session, s.Position) < simHazard(s.InFlight)
	}
	return nil
}

// Close has nothing to release.
func (b *simBackend) Close() error { return nil }

// simHazard is the probability that one decode step reads stale index-K when inFlight
// requests run. It is zero at simSafeInFlight or fewer: small batches finish their
// restores long before the selection kernel reads them.
func simHazard(inFlight int) float64 {
	if inFlight <= simSafeInFlight {
		return 0
	}
	x := float64(inFlight-simSafeInFlight) / float64(60-simSafeInFlight)
	return math.Min(1, simHazardAt60*x*x)
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
