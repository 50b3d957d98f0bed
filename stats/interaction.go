package stats

import "math"

// Cell is one cell of a 2x2 factorial table: corrupted sessions of N.
type Cell struct {
	Events, N int
}

// InteractionResult is the interaction of two two-level factors on the risk-difference
// scale: how much factor A's effect changes between the levels of factor B.
type InteractionResult struct {
	// Estimate is (p11 − p10) − (p01 − p00): A's effect at B = 1 minus A's effect at B = 0.
	Estimate float64
	// CI is the MOVER interval built from the four Wilson intervals (Zou & Donner 2008;
	// Newcombe's method 10 is its two-cell case). It stays informative when cells have no
	// events, where the log-odds scale cannot tell an interaction from main effects.
	CI Interval
	// P is the two-sided p-value of the interval inverted: the largest level 1 − P at
	// which the MOVER interval still touches 0, so P <= 1 − conf exactly when CI
	// excludes 0. It is 1 when the estimate is 0.
	P float64
	// Significant is true when CI excludes 0. It is the unadjusted judgement of this one
	// interaction; a verdict headlines an interaction only through its family
	// (FactorialFamily), where P is adjusted for every other claim.
	Significant bool
	// EffectAt are A's effects (risk differences) at B = 0 and at B = 1.
	EffectAt [2]float64
}

// moverTerm is one cell's contribution to a contrast: coef times the rate of x events in
// n trials (effective counts may be fractional).
type moverTerm struct {
	coef float64
	x, n float64
}

// moverBounds is the MOVER-Wilson interval of Σ coef·p at normal critical value z.
func moverBounds(terms []moverTerm, z float64) (est, lo, hi float64) {
	var lo2, hi2 float64
	for _, t := range terms {
		p := t.x / t.n
		l, u := wilsonZ(t.x, t.n, z)
		est += t.coef * p
		c2 := t.coef * t.coef
		if t.coef > 0 {
			lo2 += c2 * (p - l) * (p - l)
			hi2 += c2 * (u - p) * (u - p)
		} else {
			lo2 += c2 * (u - p) * (u - p)
			hi2 += c2 * (p - l) * (p - l)
		}
	}
	return est, est - math.Sqrt(lo2), est + math.Sqrt(hi2)
}

// wilsonZ is the Wilson score interval for x of n at critical value z (n > 0).
func wilsonZ(x, nf, z float64) (lo, hi float64) {
	z2 := z * z
	p := x / nf
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / denom
	lo, hi = max(0, center-half), min(1, center+half)
	if x == 0 {
		lo = 0
	}
	if x >= nf {
		hi = 1
	}
	return lo, hi
}

// moverP inverts the MOVER-Wilson interval: the two-sided p at which the bound on the
// estimate's side reaches 0. The bound moves monotonically away from the estimate as z
// grows, so bisection on z finds it.
func moverP(terms []moverTerm) float64 {
	est, _, _ := moverBounds(terms, 0)
	if est == 0 {
		return 1
	}
	// gap is the distance of the bound on the estimate's side from 0: positive while
	// the interval still excludes 0.
	gap := func(z float64) float64 {
		_, lo, hi := moverBounds(terms, z)
		if est > 0 {
			return lo
		}
		return -hi
	}
	const zMax = 38.0 // erfc(38/√2) is about 3e-316: p is then below anything printed
	if gap(zMax) > 0 {
		return math.Erfc(zMax / math.Sqrt2)
	}
	lo, hi := 0.0, zMax
	for i := 0; i < 200 && hi-lo > 1e-13*hi; i++ {
		mid := (lo + hi) / 2
		if gap(mid) > 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Erfc((lo + hi) / 2 / math.Sqrt2)
}

// Interaction computes the additive interaction contrast of a 2x2 table of cells indexed
// [a][b] (0 is a factor's reference level) at confidence level conf. Cells with N = 0 make
// the result NaN.
func Interaction(cells [2][2]Cell, conf float64) InteractionResult {
	conf = coreConf(conf)
	var terms []moverTerm
	for a := 0; a < 2; a++ {
		for b := 0; b < 2; b++ {
			c := cells[a][b]
			if c.N <= 0 {
				nan := math.NaN()
				return InteractionResult{Estimate: nan, CI: Interval{nan, nan}, P: nan, EffectAt: [2]float64{nan, nan}}
			}
			coreCheckCounts("Interaction", c.Events, c.N, 0, 0)
			coef := 1.0
			if a != b {
				coef = -1
			}
			terms = append(terms, moverTerm{coef, float64(c.Events), float64(c.N)})
		}
	}
	var out InteractionResult
	var lo, hi float64
	out.Estimate, lo, hi = moverBounds(terms, coreZ(conf))
	out.CI = Interval{lo, hi}
	out.Significant = out.CI.Lo > 0 || out.CI.Hi < 0
	out.P = moverP(terms)
	rate := func(c Cell) float64 { return float64(c.Events) / float64(c.N) }
	out.EffectAt = [2]float64{rate(cells[1][0]) - rate(cells[0][0]), rate(cells[1][1]) - rate(cells[0][1])}
	return out
}
