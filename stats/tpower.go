package stats

import (
	"math"

	"gonum.org/v1/gonum/integrate/quad"
	"gonum.org/v1/gonum/stat/distuv"
)

// Planning a speed claim: the verdict tests a speed (tok/s per request) on the logs of
// the launches' medians by the pooled two-sample t test (LaunchMeans), and claims
// non-inferiority when the one-sided bound of the log ratio clears log(1 − margin). Its
// power for k launches per arm, when launches of one configuration differ by a standard
// deviation sd on the log scale (their coefficient of variation, near enough) and the
// true log ratio clears the threshold by shift, is that of a one-sided t test with
// 2k − 2 degrees of freedom and noncentrality shift / (sd · sqrt(2/k)).

// NoncentralTSurvival is P(T > x) for T noncentral t with df degrees of freedom and
// noncentrality delta: T = (Z + delta) / sqrt(V/df), Z standard normal and V chi-squared
// with df degrees of freedom, so P(T > x) = E[P(Z > x·sqrt(V/df) − delta)]. NaN for df ≤ 0 or a non-finite argument.
func NoncentralTSurvival(df, delta, x float64) float64 {
	if !(df > 0) || math.IsNaN(delta) || math.IsNaN(x) || math.IsInf(delta, 0) {
		return math.NaN()
	}
	switch {
	case math.IsInf(x, 1):
		return 0
	case math.IsInf(x, -1):
		return 1
	case math.IsInf(df, 1):
		return distuv.UnitNormal.Survival(x - delta)
	}
	// Integrated over S = sqrt(V), whose density 2s·f(s²) is bounded even at one degree
	// of freedom, where V's is not; outside S's bulk the weight is below 1e-13 either way.
	chi := distuv.ChiSquared{K: df}
	lo, mid, hi := math.Sqrt(chi.Quantile(1e-13)), math.Sqrt(chi.Quantile(0.5)), math.Sqrt(chi.Quantile(1-1e-13))
	f := func(s float64) float64 {
		return distuv.UnitNormal.Survival(x*s/math.Sqrt(df)-delta) * 2 * s * chi.Prob(s*s)
	}
	p := quad.Fixed(f, lo, mid, 200, quad.Legendre{}, 0) + quad.Fixed(f, mid, hi, 200, quad.Legendre{}, 0)
	return min(max(p, 0), 1)
}

// LaunchTPower is the power of the one-sided pooled t test on k launches per arm at level
// when the launches' logs have standard deviation sd within each arm and the true
// difference clears the test's threshold by shift (on the log scale: log of the true
// ratio minus log(1 − margin) for non-inferiority). NaN for fewer than two launches, a
// level outside (0, 1) or a spread that is not positive.
func LaunchTPower(k int, sd, shift, level float64) float64 {
	if k < 2 || !(sd > 0) || !(level > 0 && level < 1) || math.IsNaN(shift) {
		return math.NaN()
	}
	df := float64(2*k - 2)
	delta := shift / (sd * math.Sqrt(2/float64(k)))
	return NoncentralTSurvival(df, delta, studentQuantile(df, 1-level))
}

// LaunchesForTPower is the fewest launches per arm, at most limit, whose LaunchTPower
// reaches power; 0 when none does.
func LaunchesForTPower(sd, shift, level, power float64, limit int) int {
	for k := 2; k <= limit; k++ {
		if LaunchTPower(k, sd, shift, level) >= power {
			return k
		}
	}
	return 0
}

// LaunchZPower is the power of the one-sided z test against a noise floor (FloorMeans)
// on k launches per arm at level: the test weighs the difference with the floor's bound
// on the launches' standard deviation, while the launches truly differ by sd, and the
// true difference clears the threshold by shift. NaN for no launch, a level outside
// (0, 1) or a spread or bound that is not positive.
func LaunchZPower(k int, sd, bound, shift, level float64) float64 {
	if k < 1 || !(sd > 0) || !(bound > 0) || !(level > 0 && level < 1) || math.IsNaN(shift) {
		return math.NaN()
	}
	se := math.Sqrt(2 / float64(k))
	return distuv.UnitNormal.Survival((distuv.UnitNormal.Quantile(1-level)*bound*se - shift) / (sd * se))
}
