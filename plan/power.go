package plan

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

// A plan's first question is how many launches per arm the experiment needs: the launch
// is the unit every claim is tested on, and a launch of a large model can cost a quarter
// of an hour before its first session. The power here is that of the very tests the
// verdict will run, at the levels it will give them (stats.AllotAlpha), estimated by
// simulating experiments whose launches differ as the plan assumes: each launch's rate
// drawn from a beta distribution around its arm's rate with the planned intra-launch
// correlation (stats.BetaBinomialDraw).

// TableLaunches are the launches per arm the power table shows.
var TableLaunches = []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32}

// MaxPlannedLaunches is the most launches per arm the plan searches for power.
const MaxPlannedLaunches = 32

// PowerRow is the power of the verdict's claim on the primary outcome with Launches per
// arm: without a noise floor (Welch's test on launch rates at two or three launches per
// arm, the randomization test from four, nothing at one) and with one (the floor's
// contrast on effective counts, from one launch per arm).
type PowerRow struct {
	Launches int `json:"launches_per_arm"`
	// Test is the test without a floor ("" when none can be run), Level the level the
	// claim is tested at (0: no share of alpha, since the test cannot reach one) and
	// Power the chance it claims the planned difference.
	Test  string  `json:"test"`
	Level float64 `json:"level"`
	Power float64 `json:"power"`
	// FloorLevel and FloorPower are the same with a noise floor.
	FloorLevel float64 `json:"floor_level"`
	FloorPower float64 `json:"floor_power"`
	// Reps is the number of simulated experiments behind the powers.
	Reps int `json:"reps"`
}

// powerReps bounds the simulated experiments of one row: enough for a standard error of
// at most 0.016 at any power, and far fewer where the power is near 0 or 1.
const (
	powerRepsMin = 200
	powerRepsMax = 1000
	powerBatch   = 100
	powerSE      = 0.01
)

// powerModel estimates power rows for one plan, each row once (a plan asks for some rows
// several times: the table, the spec's own launches, the search for the target power).
type powerModel struct {
	spec     *arms.Spec
	arms     int     // the spec's arms, the baseline among them
	p0, p1   float64 // the baseline's and the other arms' corruption rates
	icc      float64 // the launches' intra-launch correlation in the simulation
	floorICC float64 // the upper bound the floor's test weighs launches with
	sessions int     // per launch
	seed     uint64
	rows     map[int]PowerRow
	// wedges, when set, plans a claim on a yes or no per launch (an abort cascade's
	// wedges): p0 and p1 are the shares of launches that wedge, and the power is exact.
	wedges bool
}

func newPowerModel(spec *arms.Spec, nArms int, p0, p1, icc, floorICC float64, sessions int, seed uint64) *powerModel {
	return &powerModel{spec: spec, arms: max(nArms, 2), p0: p0, p1: p1, icc: icc, floorICC: floorICC, sessions: max(sessions, 1),
		seed: seed, rows: map[int]PowerRow{}}
}

// level is the level the verdict tests every primary claim at with n launches per arm,
// with a noise floor or without (verdict.PlannedLevel: the verdict's own claims share
// alpha). 0 when some primary claim gets no level: the verdict then tests some arms and
// not others, which no plan should count on.
func (m *powerModel) level(n int, floor bool) float64 {
	return verdict.PlannedLevel(m.spec, m.arms, n, floor)
}

// row is the power of both tests with n launches per arm.
func (m *powerModel) row(n int) PowerRow {
	if r, ok := m.rows[n]; ok {
		return r
	}
	r := m.simulate(n)
	m.rows[n] = r
	return r
}

// simulate estimates the row of n launches per arm.
func (m *powerModel) simulate(n int) PowerRow {
	if m.wedges {
		return m.wedgeRow(n)
	}
	kind := stats.RateTestFor(n, n, false, false, false)
	r := PowerRow{Launches: n, Test: string(kind), Level: m.level(n, false), FloorLevel: m.level(n, true)}
	plain := r.Level > 0
	// From FloorMaxLaunches on the verdict tests the arms on their own launches, floor or
	// not: the floor's column is the plain one.
	floor := r.FloorLevel > 0 && stats.FloorWeighs(n, n)
	if !stats.FloorWeighs(n, n) {
		r.FloorLevel = r.Level
	}
	if !plain && !floor {
		return r
	}
	// Each row has its own stream, so a row's figures do not depend on which rows were
	// asked for before it.
	rng := rand.New(rand.NewPCG(m.seed, 0x706c616e0000|uint64(n)))
	a, b := make([]stats.ClusterCounts, n), make([]stats.ClusterCounts, n)
	ea, eb := make([]int, n), make([]int, n)
	var ways []float64
	up := 1.0
	if m.p1 < m.p0 {
		up = -1
	}
	hits, floorHits, reps := 0, 0, 0
	claims := func(t stats.LaunchRateTest, level float64) bool {
		return t.Possible && stats.Reject(t.P, level) && t.Difference*up > 0
	}
	for reps < powerRepsMax {
		for range powerBatch {
			diff := 0
			for k := range n {
				ea[k] = stats.BetaBinomialDraw(rng, m.sessions, m.p0, m.icc)
				eb[k] = stats.BetaBinomialDraw(rng, m.sessions, m.p1, m.icc)
				a[k] = stats.ClusterCounts{Events: ea[k], Responses: m.sessions}
				b[k] = stats.ClusterCounts{Events: eb[k], Responses: m.sessions}
				diff += eb[k] - ea[k]
			}
			switch {
			case !plain || float64(diff)*up <= 0:
				// No claim in the planned direction.
			case kind == stats.TestRandomization:
				var p float64
				if p, ways = countsP(ea, eb, ways); stats.Reject(p, r.Level) {
					hits++
				}
			default:
				if t, err := stats.CompareLaunchRates(kind, a, b, 0, 0); err == nil && claims(t, r.Level) {
					hits++
				}
			}
			if floor {
				if t, err := stats.CompareLaunchRates(stats.TestFloor, a, b, m.floorICC, 0); err == nil && claims(t, r.FloorLevel) {
					floorHits++
				}
			}
		}
		reps += powerBatch
		if reps >= powerRepsMin && settled(hits, reps) && settled(floorHits, reps) {
			break
		}
	}
	r.Reps = reps
	r.Power = float64(hits) / float64(reps)
	r.FloorPower = float64(floorHits) / float64(reps)
	if !stats.FloorWeighs(n, n) {
		r.FloorPower = r.Power
	}
	return r
}

// wedgeRow is the exact power of the wedge claim with n launches per arm: the
// randomization test on launches that each wedged (1) or not (0), which with as many
// launches a side is Fisher's exact test on the wedged launches (the hypergeometric of
// a wedged count is then symmetric, so ordering the tables by their distance from the
// middle, as the randomization test does, orders them by probability, as Fisher's does).
// A noise floor does not weigh wedges: its column is the plain one.
func (m *powerModel) wedgeRow(n int) PowerRow {
	r := PowerRow{Launches: n, Test: string(stats.RateTestFor(n, n, false, true, false)), Level: m.level(n, false)}
	if r.Level > 0 && r.Test != string(stats.TestNone) {
		r.Power = stats.FisherPower(m.p0, m.p1, n, n, r.Level)
	} else {
		r.Level = 0
	}
	r.FloorLevel, r.FloorPower = r.Level, r.Power
	return r
}

// settled reports whether a power estimated from hits of reps is known to powerSE.
func settled(hits, reps int) bool {
	p := float64(hits) / float64(reps)
	return math.Sqrt(p*(1-p)/float64(reps)) <= powerSE
}

// table is the power at every TableLaunches entry, the rows simulated side by side
// (each on its own stream, so the figures do not depend on the processors).
func (m *powerModel) table() []PowerRow {
	out := make([]PowerRow, len(TableLaunches))
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, n := range TableLaunches {
		if r, ok := m.rows[n]; ok {
			out[i] = r
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i] = m.simulate(n)
		}()
	}
	wg.Wait()
	for _, r := range out {
		m.rows[r.Launches] = r
	}
	return out
}

// needed is the fewest launches per arm, up to MaxPlannedLaunches, at which the test
// (with the floor or without) reaches power; 0 when none does. Power grows with the
// launches, so the table's entries bracket the answer and the launches between two of
// them are searched by bisection.
func (m *powerModel) needed(power float64, withFloor bool) int {
	reaches := func(n int) bool {
		r := m.row(n)
		if withFloor {
			return r.FloorPower >= power
		}
		return r.Power >= power
	}
	lo := 0 // the largest entry known not to reach power
	for _, n := range TableLaunches {
		if !reaches(n) {
			lo = n
			continue
		}
		hi := n
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if reaches(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	return 0
}

// countsP is the two-sided p of the launch randomization test (stats.LaunchPermutation)
// for launches of equal size given by their event counts a and b: the share of the
// labellings of the counts as A or B, len(b) of them B, whose difference of mean rates is
// at least as far from 0 as the observed one. With counts on a common size the test is
// exact in integers: the labellings are counted by their sum of B's counts (ways, a
// buffer reused across calls), far quicker than stats' general test, which must allow
// for rates on different sizes and fall back to sampling labellings at 12 launches per
// arm and more. The two agree (TestCountsPIsTheLaunchTest).
func countsP(a, b []int, ways []float64) (float64, []float64) {
	na, nb := len(a), len(b)
	x := append(append(make([]int, 0, na+nb), a...), b...)
	lo := x[0]
	for _, v := range x {
		lo = min(lo, v)
	}
	total, obs := 0, 0
	for i := range x {
		x[i] -= lo // a common shift moves every labelling's sum alike
		total += x[i]
		if i >= na {
			obs += x[i]
		}
	}
	// The difference of means for a B sum s is (s·(na+nb) − total·nb)/(na·nb): compared
	// in integers, so that ties count as extreme exactly.
	dev := func(s int) int {
		d := s*(na+nb) - total*nb
		if d < 0 {
			return -d
		}
		return d
	}
	far := dev(obs)
	width := total + 1
	if need := (nb + 1) * width; cap(ways) < need {
		ways = make([]float64, need)
	} else {
		ways = ways[:need]
		clear(ways)
	}
	ways[0] = 1
	n := len(x)
	prefix := 0
	for i, c := range x {
		prefix += c
		// Row j counts the labellings of j of the first i+1 values as B; rows that the
		// values left could no longer fill up to nb are not needed.
		for j := min(i+1, nb); j >= max(1, nb-(n-i-1)); j-- {
			row, prev := ways[j*width:(j+1)*width], ways[(j-1)*width:j*width]
			for s := prefix; s >= c; s-- {
				row[s] += prev[s-c]
			}
		}
	}
	hit, all := 0.0, 0.0
	for s, w := range ways[nb*width:] {
		all += w
		if dev(s) >= far {
			hit += w
		}
	}
	return hit / all, ways
}
