package stats

import (
	"fmt"
	"math"
	"sort"
)

// fisherTieTol is the relative tolerance under which two tables count as equally likely
// in the two-sided Fisher p-value. Probabilities are computed in log space, so a table
// and its mirror image can differ in the last digits; R's fisher.test uses the same 1e-7.
const fisherTieTol = 1e-7

// BoschlooMaxN is the largest arm size for which Compare computes Boschloo's test. The
// test enumerates every (n1+1)x(n2+1) table and maximises over the nuisance rate, so its
// cost grows as n1*n2; at 200 per arm it takes about 15 ms (BenchmarkBoschloo200).
const BoschlooMaxN = 200

// FisherResult is Fisher's exact test of a 2x2 table: arm A with a events of n1, arm B
// with b events of n2, conditional on the total number of events.
type FisherResult struct {
	// PTwoSided sums the probabilities of all tables no more likely than the observed
	// one (the definition of scipy.stats.fisher_exact and R's fisher.test).
	PTwoSided float64 `json:"p_two_sided"`
	// PLess is P(arm A has at most a events): small when arm A's rate is lower.
	PLess float64 `json:"p_less"`
	// PGreater is P(arm A has at least a events): small when arm A's rate is higher.
	PGreater float64 `json:"p_greater"`
	// MidP is the two-sided mid-p in Fay's convention (R's exact2x2 with midp = TRUE):
	// the probability of the tables less likely than the observed one plus half the
	// probability of every table exactly as likely as it (the observed table and, for
	// instance, its mirror image). It is less conservative than PTwoSided and closer to
	// the nominal level on average. It is NaN when the margins allow a single table (no
	// events at all, events everywhere, or an empty arm): there is then nothing to weigh
	// and a "mid-p of 0.5" would be an artefact of the convention, not evidence.
	MidP float64 `json:"mid_p"`
}

// MidPDefined reports whether r.MidP is a number; JSON writes an undefined one as null.
func (r FisherResult) MidPDefined() bool { return !math.IsNaN(r.MidP) }

// MarshalJSON writes the four p-values, an undefined mid-p as null.
func (r FisherResult) MarshalJSON() ([]byte, error) {
	return coreJSONObject(
		coreJSONField{"p_two_sided", r.PTwoSided},
		coreJSONField{"p_less", r.PLess},
		coreJSONField{"p_greater", r.PGreater},
		coreJSONField{"mid_p", r.MidP},
	)
}

// coreLogChoose is log C(n, k) for 0 <= k <= n.
func coreLogChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n) + 1)
	b, _ := math.Lgamma(float64(k) + 1)
	c, _ := math.Lgamma(float64(n-k) + 1)
	return a - b - c
}

// coreHyper is the distribution of arm A's events given both arm sizes and the total
// number of events k: the null distribution of Fisher's test.
type coreHyper struct {
	n1, n2, k    int
	lo, hi, mode int
	lnorm        float64 // log C(n1+n2, k)
}

func newCoreHyper(n1, n2, k int) coreHyper {
	h := coreHyper{n1: n1, n2: n2, k: k}
	h.lo = max(0, k-n2)
	h.hi = min(k, n1)
	h.mode = int(int64(k+1) * int64(n1+1) / int64(n1+n2+2))
	h.mode = min(max(h.mode, h.lo), h.hi)
	h.lnorm = coreLogChoose(n1+n2, k)
	return h
}

// logPMF is log P(X = x); x must lie in [lo, hi].
func (h coreHyper) logPMF(x int) float64 {
	return coreLogChoose(h.n1, x) + coreLogChoose(h.n2, h.k-x) - h.lnorm
}

// tailLogSum is log of the sum of P(X = x) from x0 to the end of the support in
// direction dir (-1 or +1). The walk must lead away from the mode, so that terms only
// shrink: it stops once they no longer change the sum.
func (h coreHyper) tailLogSum(x0, dir int) float64 {
	s, t := 1.0, 1.0
	x := x0
	for {
		if dir < 0 {
			if x <= h.lo {
				break
			}
			// P(x-1)/P(x)
			t *= float64(x) * float64(h.n2-h.k+x) / (float64(h.k-x+1) * float64(h.n1-x+1))
			x--
		} else {
			if x >= h.hi {
				break
			}
			// P(x+1)/P(x)
			t *= float64(h.k-x) * float64(h.n1-x) / (float64(x+1) * float64(h.n2-h.k+x+1))
			x++
		}
		s += t
		if t < s*1e-17 {
			break
		}
	}
	return h.logPMF(x0) + math.Log(s)
}

// lastAtMost returns the largest x in [h.lo, h.mode] with logPMF(x) <= thr, or h.lo-1 if
// none; the pmf rises up to the mode, so a binary search suffices.
func (h coreHyper) lastAtMost(thr float64) int {
	lo, hi := h.lo, h.mode
	if h.logPMF(lo) > thr {
		return h.lo - 1
	}
	for lo < hi { // invariant: logPMF(lo) <= thr
		mid := lo + (hi-lo+1)/2
		if h.logPMF(mid) <= thr {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// firstAtMost returns the smallest x in [h.mode, h.hi] with logPMF(x) <= thr, or h.hi+1
// if none; the pmf falls after the mode.
func (h coreHyper) firstAtMost(thr float64) int {
	lo, hi := h.mode, h.hi
	if h.logPMF(hi) > thr {
		return h.hi + 1
	}
	for lo < hi { // invariant: logPMF(hi) <= thr
		mid := lo + (hi-lo)/2
		if h.logPMF(mid) <= thr {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// twoSided is the Fisher two-sided p for X = x: the mass of all outcomes whose
// probability is at most that of x (within fisherTieTol).
func (h coreHyper) twoSided(x int) float64 {
	return h.massAtMost(h.logPMF(x) + math.Log1p(fisherTieTol))
}

// midP is Fay's two-sided mid-p for X = x: the mass of the outcomes less likely than x
// plus half the mass of those exactly as likely (within fisherTieTol); NaN when the
// support is a single outcome.
func (h coreHyper) midP(x int) float64 {
	if h.lo == h.hi {
		return math.NaN()
	}
	tie := math.Log1p(fisherTieTol)
	lp := h.logPMF(x)
	atMost := h.massAtMost(lp + tie)
	less := h.massAtMost(math.Nextafter(lp-tie, math.Inf(-1)))
	return min(1, max(0, (atMost+less)/2))
}

// massAtMost is the probability of the outcomes whose log-probability is at most thr;
// the pmf is unimodal, so they form the two tails.
func (h coreHyper) massAtMost(thr float64) float64 {
	if h.logPMF(h.mode) <= thr {
		return 1
	}
	p := 0.0
	if xl := h.lastAtMost(thr); xl >= h.lo {
		p += math.Exp(h.tailLogSum(xl, -1))
	}
	if xr := h.firstAtMost(thr); xr <= h.hi {
		p += math.Exp(h.tailLogSum(xr, +1))
	}
	return min(p, 1)
}

// cdf is P(X <= x), summed over whichever tail is away from the mode so that small
// probabilities keep their relative precision.
func (h coreHyper) cdf(x int) float64 {
	switch {
	case x < h.lo:
		return 0
	case x >= h.hi:
		return 1
	case x < h.mode:
		return math.Exp(h.tailLogSum(x, -1))
	}
	return max(0, 1-math.Exp(h.tailLogSum(x+1, +1)))
}

// sf is P(X >= x).
func (h coreHyper) sf(x int) float64 {
	switch {
	case x <= h.lo:
		return 1
	case x > h.hi:
		return 0
	case x > h.mode:
		return math.Exp(h.tailLogSum(x, +1))
	}
	return max(0, 1-math.Exp(h.tailLogSum(x-1, -1)))
}

// FisherExact runs Fisher's exact test on arm A (a events of n1) against arm B (b events
// of n2). Everything is computed in log space and only the tails that matter are summed,
// so arms of 100,000 and more take microseconds. It panics unless 0 <= a <= n1 and
// 0 <= b <= n2.
func FisherExact(a, n1, b, n2 int) FisherResult {
	coreCheckCounts("FisherExact", a, n1, b, n2)
	h := newCoreHyper(n1, n2, a+b)
	r := FisherResult{
		PTwoSided: h.twoSided(a),
		PLess:     h.cdf(a),
		PGreater:  h.sf(a),
	}
	r.MidP = h.midP(a)
	return r
}

// coreCheckCounts panics on impossible counts: they are a caller's bug, not data.
func coreCheckCounts(where string, a, n1, b, n2 int) {
	if a < 0 || n1 < 0 || b < 0 || n2 < 0 || a > n1 || b > n2 {
		panic(fmt.Sprintf("stats: %s: counts out of range: %d/%d vs %d/%d", where, a, n1, b, n2))
	}
}

// BoschlooExact is the two-sided p of Boschloo's exact unconditional test of arm A (a of
// n1) against arm B (b of n2), as scipy.stats.boschloo_exact: twice the smaller one-sided
// p, each being the largest, over the common event rate, probability of a table whose
// one-sided Fisher p is no larger than the observed one. The rate is maximised on a
// 1,000-point grid (denser near 0 and 1, where rare-event maxima sit) and each of the
// best local maxima is refined by golden-section search. The cost is O(n1*n2) for the
// table enumeration plus O(1000*(n1+n2)): keep it to arms of a few hundred
// (BoschlooMaxN). It panics on counts out of range.
func BoschlooExact(a, n1, b, n2 int) float64 {
	coreCheckCounts("BoschlooExact", a, n1, b, n2)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	less := coreBoschlooLess(a, n1, b, n2)
	greater := coreBoschlooLess(b, n2, a, n1)
	return min(1, 2*min(less, greater))
}

// coreBoschlooLess is the one-sided Boschloo p for the alternative "arm 1's rate is
// lower", with statistic T(x1, x2) = P(X1 <= x1 | x1+x2 events).
func coreBoschlooLess(a, n1, b, n2 int) float64 {
	n := n1 + n2
	lf := make([]float64, n+1)
	for i := range lf {
		lf[i], _ = math.Lgamma(float64(i) + 1)
	}
	w := n2 + 1
	stat := make([]float64, (n1+1)*w) // stat[x1*w+x2]
	pmf := make([]float64, n1+1)
	for k := 0; k <= n; k++ {
		lo, hi := max(0, k-n2), min(k, n1)
		lnorm := lf[n] - lf[k] - lf[n-k]
		total := 0.0
		for x := lo; x <= hi; x++ {
			pmf[x] = math.Exp(lf[n1] - lf[x] - lf[n1-x] + lf[n2] - lf[k-x] - lf[n2-k+x] - lnorm)
			total += pmf[x]
		}
		cum := 0.0
		for x := lo; x <= hi; x++ {
			cum += pmf[x]
			stat[x*w+k-x] = min(1, cum/total)
		}
	}
	limit := stat[a*w+b] * (1 + 1e-13) // scipy's guard against rounding
	// The rejection region, row by row, as runs of consecutive x2.
	type run struct{ x1, from, to int }
	var runs []run
	for x1 := 0; x1 <= n1; x1++ {
		start := -1
		for x2 := 0; x2 <= n2; x2++ {
			in := stat[x1*w+x2] <= limit
			if in && start < 0 {
				start = x2
			}
			if !in && start >= 0 {
				runs = append(runs, run{x1, start, x2 - 1})
				start = -1
			}
		}
		if start >= 0 {
			runs = append(runs, run{x1, start, n2})
		}
	}
	f1 := make([]float64, n1+1)
	f2 := make([]float64, n2+1)
	pre := make([]float64, n2+2) // pre[i] = sum f2[0:i]
	suf := make([]float64, n2+2) // suf[i] = sum f2[i:]
	// Ratios of consecutive binomial coefficients, shared by every rate tried.
	ratios := func(m int) (down, up []float64) {
		down, up = make([]float64, m+1), make([]float64, m+1)
		for x := 0; x <= m; x++ {
			if x > 0 {
				down[x] = float64(x) / float64(m-x+1)
			}
			if x < m {
				up[x] = float64(m-x) / float64(x+1)
			}
		}
		return down, up
	}
	down1, up1 := ratios(n1)
	down2, up2 := ratios(n2)
	binom := func(f []float64, m int, p float64, down, up []float64) {
		if p == 0 || p == 1 {
			for x := range f {
				f[x] = 0
			}
			f[int(p)*m] = 1
			return
		}
		// One exp at the mode, then ratios outwards: terms only shrink, so underflow
		// can only zero what is negligible.
		mode := min(int(float64(m+1)*p), m)
		f[mode] = math.Exp(lf[m] - lf[mode] - lf[m-mode] + float64(mode)*math.Log(p) + float64(m-mode)*math.Log1p(-p))
		odds := p / (1 - p)
		inv := 1 / odds
		for x := mode; x > 0; x-- {
			f[x-1] = f[x] * down[x] * inv
		}
		for x := mode; x < m; x++ {
			f[x+1] = f[x] * up[x] * odds
		}
	}
	size := func(p float64) float64 {
		binom(f1, n1, p, down1, up1)
		binom(f2, n2, p, down2, up2)
		for i := 0; i <= n2; i++ {
			pre[i+1] = pre[i] + f2[i]
		}
		suf[n2+1] = 0
		for i := n2; i >= 0; i-- {
			suf[i] = suf[i+1] + f2[i]
		}
		s := 0.0
		for _, r := range runs {
			var m float64
			switch {
			case r.to == n2:
				m = suf[r.from]
			case r.from == 0:
				m = pre[r.to+1]
			default:
				for x := r.from; x <= r.to; x++ {
					m += f2[x]
				}
			}
			s += f1[r.x1] * m
		}
		return s
	}
	return min(1, coreMaximise(size))
}

// coreMaximise returns the maximum of f over [0, 1], for functions (polynomials in the
// rate) with a few local maxima: a grid uniform in arcsine scale, then golden-section
// refinement of the best three grid maxima.
func coreMaximise(f func(float64) float64) float64 {
	const grid = 1000
	ps := make([]float64, grid+1)
	vs := make([]float64, grid+1)
	for i := range ps {
		s := math.Sin(math.Pi / 2 * float64(i) / grid)
		ps[i] = s * s
		vs[i] = f(ps[i])
	}
	ps[grid] = 1
	type peak struct {
		i int
		v float64
	}
	var peaks []peak
	for i := range vs {
		if (i == 0 || vs[i] >= vs[i-1]) && (i == grid || vs[i] >= vs[i+1]) {
			peaks = append(peaks, peak{i, vs[i]})
		}
	}
	// Refine the three highest peaks.
	sort.Slice(peaks, func(i, j int) bool { return peaks[i].v > peaks[j].v })
	if len(peaks) > 3 {
		peaks = peaks[:3]
	}
	best := 0.0
	for _, pk := range peaks {
		best = max(best, pk.v)
		lo, hi := ps[max(pk.i-1, 0)], ps[min(pk.i+1, grid)]
		best = max(best, coreGolden(f, lo, hi))
	}
	return best
}

// coreGolden maximises a unimodal f on [lo, hi] by golden-section search.
func coreGolden(f func(float64) float64, lo, hi float64) float64 {
	const invPhi = 0.6180339887498949
	c := hi - invPhi*(hi-lo)
	d := lo + invPhi*(hi-lo)
	fc, fd := f(c), f(d)
	for i := 0; i < 100 && hi-lo > 1e-13; i++ {
		if fc >= fd {
			hi, d, fd = d, c, fc
			c = hi - invPhi*(hi-lo)
			fc = f(c)
		} else {
			lo, c, fc = c, d, fd
			d = lo + invPhi*(hi-lo)
			fd = f(d)
		}
	}
	return max(fc, fd)
}

// RateEstimate is one arm's event rate with its intervals.
type RateEstimate struct {
	Events, N      int
	Rate           float64 // Events/N; NaN for an empty arm
	Wilson         Bounds
	ClopperPearson Bounds
	Conf           float64 // confidence level of both intervals
}

// MarshalJSON writes {"events", "n", "rate", "wilsonNN", "clopper_pearsonNN"}, NN being
// the confidence level in percent (95 by default).
func (r RateEstimate) MarshalJSON() ([]byte, error) {
	l := coreConfLabel(r.Conf)
	return coreJSONObject(
		coreJSONField{"events", r.Events},
		coreJSONField{"n", r.N},
		coreJSONField{"rate", r.Rate},
		coreJSONField{"wilson" + l, r.Wilson},
		coreJSONField{"clopper_pearson" + l, r.ClopperPearson},
	)
}

// Difference is the rate difference p_B - p_A with Newcombe's hybrid score interval.
type Difference struct {
	Estimate float64
	Newcombe Bounds
	Conf     float64
}

// MarshalJSON writes {"estimate", "newcombeNN": [lo, hi]}.
func (d Difference) MarshalJSON() ([]byte, error) {
	return coreJSONObject(
		coreJSONField{"estimate", d.Estimate},
		coreJSONField{"newcombe" + coreConfLabel(d.Conf), d.Newcombe},
	)
}

// BoschlooResult is Boschloo's exact unconditional test.
type BoschlooResult struct {
	PTwoSided float64 `json:"p_two_sided"`
}

// Comparison is everything the verdict says about one arm (B) against the baseline (A).
type Comparison struct {
	Conf       float64         `json:"conf"`
	A          RateEstimate    `json:"a"`
	B          RateEstimate    `json:"b"`
	Difference Difference      `json:"difference"`
	Ratio      RatioEstimate   `json:"ratio"`
	Fisher     FisherResult    `json:"fisher_exact"`
	Boschloo   *BoschlooResult `json:"boschloo,omitempty"` // nil when an arm exceeds BoschlooMaxN
	Warnings   []Warning       `json:"warnings,omitempty"`
}

// Compare compares arm B (b events of n2) with the baseline arm A (a events of n1) at
// confidence level conf (0 means DefaultConf). It panics on counts out of range; the
// CLI and the store never produce them.
func Compare(a, n1, b, n2 int, conf float64) Comparison {
	coreCheckCounts("Compare", a, n1, b, n2)
	conf = coreConf(conf)
	arm := func(x, n int) RateEstimate {
		return RateEstimate{
			Events: x, N: n, Rate: coreRate(x, n), Conf: conf,
			Wilson:         Bounds(Wilson(x, n, conf)),
			ClopperPearson: Bounds(ClopperPearson(x, n, conf)),
		}
	}
	c := Comparison{
		Conf: conf,
		A:    arm(a, n1),
		B:    arm(b, n2),
		Difference: Difference{
			Estimate: coreRate(b, n2) - coreRate(a, n1),
			Newcombe: Bounds(Newcombe(a, n1, b, n2, conf)),
			Conf:     conf,
		},
		Ratio:  RiskRatio(a, n1, b, n2, conf),
		Fisher: FisherExact(a, n1, b, n2),
	}
	if n1 <= BoschlooMaxN && n2 <= BoschlooMaxN && n1 > 0 && n2 > 0 {
		c.Boschloo = &BoschlooResult{PTwoSided: BoschlooExact(a, n1, b, n2)}
	}
	for _, s := range []struct {
		name string
		x, n int
	}{{"A", a, n1}, {"B", b, n2}} {
		switch {
		case s.n == 0:
			c.Warnings = append(c.Warnings, Warning(fmt.Sprintf("arm %s has no observations", s.name)))
		case s.x == 0:
			c.Warnings = append(c.Warnings, Warning(fmt.Sprintf("zero events in arm %s (0/%d): its rate is bounded, not zero: at most %.3g%% at %s%% confidence (Clopper-Pearson)", s.name, s.n, 100*ClopperPearson(0, s.n, conf).Hi, coreConfLabel(conf))))
		}
	}
	if a < 5 && b < 5 {
		c.Warnings = append(c.Warnings, "fewer than 5 events in both arms: read the exact p-values; the approximate intervals (Newcombe, ratio) are rough")
	}
	c.Warnings = append(c.Warnings, c.Ratio.Warnings...)
	return c
}
