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
	// Significant is true when CI excludes 0.
	Significant bool
	// EffectAt are A's effects (risk differences) at B = 0 and at B = 1.
	EffectAt [2]float64
}

// Interaction computes the additive interaction contrast of a 2x2 table of cells indexed
// [a][b] (0 is a factor's reference level) at confidence level conf. Cells with N = 0 make
// the result NaN.
func Interaction(cells [2][2]Cell, conf float64) InteractionResult {
	conf = coreConf(conf)
	type term struct {
		coef    float64
		p, l, u float64
	}
	var terms []term
	out := InteractionResult{}
	for a := 0; a < 2; a++ {
		for b := 0; b < 2; b++ {
			c := cells[a][b]
			if c.N <= 0 {
				nan := math.NaN()
				return InteractionResult{Estimate: nan, CI: Interval{nan, nan}, EffectAt: [2]float64{nan, nan}}
			}
			coef := 1.0
			if a != b {
				coef = -1
			}
			w := Wilson(c.Events, c.N, conf)
			terms = append(terms, term{coef, float64(c.Events) / float64(c.N), w.Lo, w.Hi})
		}
	}
	var lo2, hi2 float64
	for _, t := range terms {
		out.Estimate += t.coef * t.p
		if t.coef > 0 {
			lo2 += (t.p - t.l) * (t.p - t.l)
			hi2 += (t.u - t.p) * (t.u - t.p)
		} else {
			lo2 += (t.u - t.p) * (t.u - t.p)
			hi2 += (t.p - t.l) * (t.p - t.l)
		}
	}
	out.CI = Interval{out.Estimate - math.Sqrt(lo2), out.Estimate + math.Sqrt(hi2)}
	out.Significant = out.CI.Lo > 0 || out.CI.Hi < 0
	rate := func(c Cell) float64 { return float64(c.Events) / float64(c.N) }
	out.EffectAt = [2]float64{rate(cells[1][0]) - rate(cells[0][0]), rate(cells[1][1]) - rate(cells[0][1])}
	return out
}
