package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// Launch variation: what makes one launch of a configuration differ from the next.
//
// A real engine's launches are not replicas: GPU clocks, memory layout and CUDA graph
// capture make one launch faster or slower, or more or less prone to a race, than the
// next with the same flags. arbiter treats the launch as the experimental unit, and
// refserve's own flags give its launches that spread, so that the statistics can be
// tested end to end against it. At start a launch draws
//
//	a fault-rate multiplier M ~ Gamma(shape 1/C², rate 1/C²), C = --launch-fault-cv: mean 1, CV C
//	a speed factor          S = exp(N(0, C²)),              C = --launch-speed-cv: median 1, CV √(e^{C²}-1), about C when small
//
// from --launch-seed. Every fault probability of the sim backend is multiplied by M
// (capped at 1), every pacing delay of the cost model by S. The sim backend's stale-read
// hazard is refserve's one fault probability: the wedges (faults.go) go off at a count of
// aborts, not by chance, and the cuda backend's race is physical, so --launch-fault-cv
// asks for the sim backend. A CV of 0 draws nothing: M or S is exactly 1, and the launch
// runs as if the flags did not exist. The draws are independent of --seed, which fixes
// the workload's sessions and must be the same in every arm; a launch seed of 0 is drawn
// from crypto/rand, so that launches given identical arguments (an A/A experiment's)
// differ.

// maxLaunchCV bounds both CVs. At 2 the median launch already runs at a sixth of the
// mean fault rate and nearly half (44%) below a tenth of it, while one in twenty runs at
// five times it; beyond that the draws say more about the tail of a distribution than
// about any engine.
const maxLaunchCV = 2

// maxLaunchSeed is the largest --launch-seed: /get_server_info reports the seed as a JSON
// number, which readers hold as a double, exact only below 2^53.
const maxLaunchSeed = 1<<53 - 1

// launchVariation is a launch's draws and what they were drawn from. /get_server_info
// reports it under launch_variation when either CV is non-zero.
type launchVariation struct {
	// Seed is --launch-seed, or the seed drawn for it when it was 0 and a CV is not.
	Seed uint64 `json:"seed"`
	// FaultCV is --launch-fault-cv, the coefficient of variation of FaultMultiplier.
	FaultCV float64 `json:"fault_cv"`
	// SpeedCV is --launch-speed-cv, the standard deviation of log SpeedFactor.
	SpeedCV float64 `json:"speed_cv"`
	// FaultMultiplier is M, which scales every fault probability of the sim backend.
	// Read it through faultMultiplier: the zero value stands for a launch that drew nothing.
	FaultMultiplier float64 `json:"fault_multiplier"`
	// SpeedFactor is S, which scales every pacing delay. Read it through speedFactor.
	SpeedFactor float64 `json:"speed_factor"`
}

// varies says whether the launch drew anything.
func (v launchVariation) varies() bool { return v.FaultCV != 0 || v.SpeedCV != 0 }

// faultMultiplier is M: exactly 1 unless --launch-fault-cv is non-zero.
func (v launchVariation) faultMultiplier() float64 {
	if v.FaultCV == 0 {
		return 1
	}
	return v.FaultMultiplier
}

// speedFactor is S: exactly 1 unless --launch-speed-cv is non-zero.
func (v launchVariation) speedFactor() float64 {
	if v.SpeedCV == 0 {
		return 1
	}
	return v.SpeedFactor
}

// validLaunchCV says whether cv is a usable coefficient of variation; NaN is not.
func validLaunchCV(cv float64) bool { return cv >= 0 && cv <= maxLaunchCV }

// drawLaunch draws a launch's multiplier and factor from seed. Each has its own stream,
// so a seed gives the same M whatever --launch-speed-cv, and the same S whatever
// --launch-fault-cv. Both CVs must be valid (validLaunchCV).
func drawLaunch(seed uint64, faultCV, speedCV float64) launchVariation {
	v := launchVariation{Seed: seed, FaultCV: faultCV, SpeedCV: speedCV, FaultMultiplier: 1, SpeedFactor: 1}
	if faultCV != 0 {
		// Shape k and rate k give mean 1 and variance 1/k. A CV so small that k
		// overflows is a spread no double can show: M stays 1.
		if k := 1 / (faultCV * faultCV); !math.IsInf(k, 0) {
			v.FaultMultiplier = distuv.Gamma{Alpha: k, Beta: k, Src: launchStream(seed, "fault")}.Rand()
		}
	}
	if speedCV != 0 {
		v.SpeedFactor = math.Exp(distuv.Normal{Mu: 0, Sigma: speedCV, Src: launchStream(seed, "speed")}.Rand())
	}
	return v
}

// launchStream is the random stream of one draw: ChaCha8 keyed by the seed and the
// draw's name, so that neighbouring seeds give unrelated draws.
func launchStream(seed uint64, draw string) rand.Source {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:8], seed)
	copy(key[8:], draw)
	return rand.NewChaCha8(key)
}

// newLaunchSeed draws a launch seed in [1, maxLaunchSeed] from crypto/rand.
func newLaunchSeed() uint64 {
	for {
		var b [8]byte
		_, _ = crand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead
		if s := binary.LittleEndian.Uint64(b[:]) & maxLaunchSeed; s != 0 {
			return s
		}
	}
}

// scaleProbability is a fault probability p scaled by a launch's multiplier m, capped
// at 1. At m = 1 it is p itself, bit for bit.
func scaleProbability(p, m float64) float64 { return math.Min(1, p*m) }
