package stats

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// SessionsCap is the largest arm size SessionsFor will consider; a difference that needs
// more is reported as unreachable (0). An arbiter session is a whole multi-turn
// conversation, so no experiment comes near it; near the cap one search takes seconds.
const SessionsCap = 1 << 18

// FisherPower is the exact power of the two-sided Fisher test at level alpha when arm A
// (n1 sessions) has event rate p0 and arm B (n2 sessions) has rate p1: the probability,
// summed over both binomials, that the test rejects under Reject (p <= alpha, with the
// same tolerance as every verdict decision). Binomial tails below 1e-16 of the mode are
// skipped, and the rejection region is found once per total number of events by
// walking the hypergeometric tails inwards, so 500 per arm takes milliseconds. It
// returns NaN for rates outside [0, 1] or negative sizes.
func FisherPower(p0, p1 float64, n1, n2 int, alpha float64) float64 {
	if !(p0 >= 0 && p0 <= 1 && p1 >= 0 && p1 <= 1) || n1 < 0 || n2 < 0 || math.IsNaN(alpha) {
		return math.NaN()
	}
	if alpha <= 0 {
		return 0
	}
	lo1, f1 := coreBinomBulk(n1, p0)
	lo2, f2 := coreBinomBulk(n2, p1)
	n := n1 + n2
	lf := make([]float64, n+1)
	for i := range lf {
		lf[i], _ = math.Lgamma(float64(i) + 1)
	}
	// Rejection regions for every total k the bulk can reach: reject x <= xl or x >= xr.
	kmin := lo1 + lo2
	xl := make([]int, len(f1)+len(f2)-1)
	xr := make([]int, len(xl))
	for i := range xl {
		xl[i], xr[i] = coreFisherRegion(lf, n1, n2, kmin+i, alpha)
	}
	power := 0.0
	for i, px := range f1 {
		x := lo1 + i
		s := 0.0
		for j, py := range f2 {
			if k := i + j; x <= xl[k] || x >= xr[k] {
				s += py
			}
		}
		power += px * s
	}
	return min(1, power)
}

// coreBinomBulk returns the first x and the Binomial(n, p) probabilities of the x whose
// probability is at least 1e-16 of the mode's; the rest cannot move a power figure.
func coreBinomBulk(n int, p float64) (int, []float64) {
	switch p {
	case 0:
		return 0, []float64{1}
	case 1:
		return n, []float64{1}
	}
	mode := min(int(float64(n+1)*p), n)
	lp := coreLogChoose(n, mode) + float64(mode)*math.Log(p) + float64(n-mode)*math.Log1p(-p)
	pm := math.Exp(lp)
	q := 1 - p
	var down []float64
	t := pm
	for x := mode; x > 0; x-- {
		t *= float64(x) * q / (float64(n-x+1) * p)
		if t < pm*1e-16 {
			break
		}
		down = append(down, t)
	}
	f := make([]float64, 0, 2*len(down)+1)
	for i := len(down) - 1; i >= 0; i-- {
		f = append(f, down[i])
	}
	f = append(f, pm)
	t = pm
	for x := mode; x < n; x++ {
		t *= float64(n-x) * p / (float64(x+1) * q)
		if t < pm*1e-16 {
			break
		}
		f = append(f, t)
	}
	return mode - len(down), f
}

// coreFisherRegion returns the two-sided Fisher rejection region at level alpha among
// tables with k events in total, as x <= xl or x >= xr for arm A's events x. Outcomes are
// taken in increasing order of probability from both tails (each tail rises towards the
// mode) while their cumulative mass, ties included, stays within alpha; outcomes below
// e^-50·alpha are rejected without being summed.
func coreFisherRegion(lf []float64, n1, n2, k int, alpha float64) (xl, xr int) {
	n := n1 + n2
	lo, hi := max(0, k-n2), min(k, n1)
	if alpha >= 1 {
		return hi, lo
	}
	lnorm := lf[n] - lf[k] - lf[n-k] - lf[n1] - lf[n2]
	lpmf := func(x int) float64 {
		return -lf[x] - lf[n1-x] - lf[k-x] - lf[n2-k+x] - lnorm
	}
	mode := int(int64(k+1) * int64(n1+1) / int64(n+2))
	mode = min(max(mode, lo), hi)
	cut := math.Log(alpha) - 50
	// Left tail [lo, mode] rises; right tail [mode+1, hi] falls. Outcomes below cut are
	// rejected unsummed: l is the first of the left tail at or above it (mode+1 when
	// none), r the last of the right tail (mode when none).
	l := lo + sort.Search(mode-lo+1, func(i int) bool { return lpmf(lo+i) >= cut })
	r := mode + sort.Search(hi-mode, func(i int) bool { return lpmf(mode+1+i) < cut })
	tieLog := math.Log1p(fisherTieTol)
	s := 0.0
	for l <= mode || r > mode {
		v := math.Inf(1)
		if l <= mode {
			v = lpmf(l)
		}
		if r > mode {
			v = min(v, lpmf(r))
		}
		thr := v + tieLog
		g, nl, nr := 0.0, l, r
		for nl <= mode && lpmf(nl) <= thr {
			g += math.Exp(lpmf(nl))
			nl++
		}
		for nr > mode && lpmf(nr) <= thr {
			g += math.Exp(lpmf(nr))
			nr--
		}
		// The mass summed so far, ties included, is exactly the Fisher p of the
		// outcomes just added: they are rejected under arbiter's one rule.
		if !Reject(s+g, alpha) {
			break
		}
		s += g
		l, r = nl, nr
	}
	return l - 1, r + 1
}

// SessionsFor is the smallest number of units per arm at which the two-sided Fisher
// test at level alpha reaches the given power for rates p0 and p1, multiplied by the
// design effect (rounded up) when responses, correlated within sessions, are the unit
// being planned. The size is bracketed by doubling and then bisected. Exact power is a
// sawtooth in n, not monotone, so the answer is the crossing bisection finds: power
// reaches the target there and not one unit below, but an isolated smaller n can
// occasionally reach it too. A design effect <= 0 counts as 1. It returns 0 when the
// target cannot be reached: equal rates, power or alpha outside (0, 1), or more than
// SessionsCap per arm needed.
func SessionsFor(p0, p1, alpha, power float64, designEffect float64) int {
	if p0 == p1 || !(power > 0 && power < 1) || !(alpha > 0 && alpha < 1) {
		return 0
	}
	if designEffect <= 0 {
		designEffect = 1
	}
	reaches := func(n int) bool {
		pw := FisherPower(p0, p1, n, n, alpha)
		return pw >= power
	}
	if math.IsNaN(FisherPower(p0, p1, 1, 1, alpha)) {
		return 0
	}
	// The normal approximation is off for rare events, but not by a factor of two (and
	// the exact test needs more, not fewer): beyond that, skip exact evaluations at a
	// million per arm.
	za, zb := coreZ(1-alpha), distuv.UnitNormal.Quantile(power)
	pbar := (p0 + p1) / 2
	approx := math.Pow(za*math.Sqrt(2*pbar*(1-pbar))+zb*math.Sqrt(p0*(1-p0)+p1*(1-p1)), 2) / ((p1 - p0) * (p1 - p0))
	if approx > 2*SessionsCap {
		return 0
	}
	lo, hi := 0, 1
	for !reaches(hi) {
		lo = hi
		hi *= 2
		if hi > SessionsCap {
			return 0
		}
	}
	for hi-lo > 1 { // reaches(hi), and lo == 0 or !reaches(lo)
		mid := lo + (hi-lo)/2
		if reaches(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return int(math.Ceil(float64(hi)*designEffect - 1e-9))
}
