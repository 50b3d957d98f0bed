package stats

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// A noise floor is what an A/A experiment (every arm the same configuration, several
// launches) measured of how launches of one configuration differ: the intra-launch
// correlation of a binary session outcome, and the launch-to-launch spread of each speed
// summary on the log scale. A later experiment on the same engine, workload and hardware
// can weigh a difference between its arms against that spread instead of its own, so one
// launch per arm can decide a difference far larger than launches of one configuration
// show. The floor is used through an upper confidence bound, not its point estimate: a
// test that assumes the bound stays at its level whenever the true spread is at or below
// the bound, which it is with the bound's confidence.

// FloorConf is the confidence of the upper bounds a noise floor is used through. The
// floor's test is conservative besides (the MOVER-Wilson interval on effective counts):
// simulated with the truth at the floor's correlation, one-launch verdicts claimed
// anything falsely at most 0.013 of the time at 90% (docs/calibration/launches.md), while
// a 95% bound from eight launches cost a third of the power for 0% against 50%.
const FloorConf = 0.90

// ICCBound estimates the intra-launch correlation of a binary session outcome from
// launches' counts (Events sessions of Responses each), by one-way ANOVA, and gives its
// one-sided upper bound at conf: the largest correlation under which launches like these
// would show a between- to within-launch mean-square ratio at most the observed one with
// probability above 1 − conf. That probability is found by a parametric bootstrap
// (beta-binomial launches of the observed sizes at the pooled rate, iccSims draws from a
// fixed seed, so the bound is the same on every reading) and the correlation by
// bisection (see iccUpper). The F-distribution bound of the normal model (Searle) falls far below the
// truth for binary outcomes at low rates; this one does not. Both are NaN with fewer than
// two launches or no spread of outcomes at all (no event, or nothing but events): such
// launches say nothing about how launches differ.
func ICCBound(launches []ClusterCounts, conf float64) (est, upper float64) {
	nan := math.NaN()
	s := sumClusters(launches)
	if s.k < 2 || s.n <= s.k || s.y == 0 || s.y == s.n {
		return nan, nan
	}
	yf := float64(s.y)
	if !((yf - s.sumY2M) > 0) {
		// Every launch all events or all clean: the spread is all between launches.
		return 1, 1
	}
	est = math.Max(0, anovaICC(1, s.k, s.n, yf, s.sumY2M, yf*yf/float64(s.n), s.withinFn))
	return est, iccUpper(launches, yf/float64(s.n), fRatio(launches), 1-coreConf(conf))
}

// iccSims is the number of bootstrap draws, conditional on the observed total, behind
// each probability ICCBound bisects on (at most iccTries·iccSims are drawn to find them).
const (
	iccSims  = 600
	iccTries = 4
)

// iccUpper is the largest correlation, to 2⁻¹⁴, at which F ratios of launches sized like
// these at rate p fall at or below fobs with probability above gamma. The probability is
// conditional on the total events (drawn launches whose total is within 15% of the
// observed one, at least 2): how clustered events look depends on how many there are, and
// at a high correlation most draws have few events, bunched in one launch, whose F ratio
// is small however clustered they are. A correlation under which hardly any draw (fewer
// than iccSims/20) comes near the observed total is taken as unable to give launches like
// these. The same draws (one seed) serve every correlation tried, so the bisection is
// stable.
func iccUpper(launches []ClusterCounts, p, fobs, gamma float64) float64 {
	total, sessions := 0, 0
	for _, l := range launches {
		total += l.Events
		sessions += l.Responses
	}
	window := max(2, int(math.Ceil(0.15*float64(total))))
	sim := make([]ClusterCounts, len(launches))
	atOrBelow := func(rho float64) float64 {
		rng := rand.New(rand.NewPCG(0x666c6f6f72, 7))
		hit, near := 0, 0
		for r := 0; r < iccTries*iccSims && near < iccSims; r++ {
			events := 0
			for i, l := range launches {
				sim[i] = ClusterCounts{Events: BetaBinomialDraw(rng, l.Responses, p, rho), Responses: l.Responses}
				events += sim[i].Events
			}
			if events == 0 || events == sessions || events < total-window || events > total+window {
				continue
			}
			near++
			if !(fRatio(sim) > fobs) {
				hit++
			}
		}
		if near < iccSims/20 {
			return 0
		}
		return float64(hit) / float64(near)
	}
	if atOrBelow(0) <= gamma {
		return 0
	}
	lo, hi := 0.0, 0.999
	if atOrBelow(hi) > gamma {
		return 1
	}
	for i := 0; i < 14; i++ {
		mid := (lo + hi) / 2
		if atOrBelow(mid) > gamma {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// SpreadBound is the pooled standard deviation of values around their groups' means
// (launches' log speeds, one group per arm that repeats a configuration), its degrees of
// freedom, and its one-sided upper bound at conf from the chi-square distribution of
// the sum of squares. NaN with no degree of freedom.
func SpreadBound(groups [][]float64, conf float64) (sd, upper float64, df int) {
	ss := 0.0
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		m := Mean(g)
		for _, x := range g {
			ss += (x - m) * (x - m)
		}
		df += len(g) - 1
	}
	if df == 0 {
		return math.NaN(), math.NaN(), 0
	}
	q := distuv.ChiSquared{K: float64(df)}.Quantile(1 - coreConf(conf))
	return math.Sqrt(ss / float64(df)), math.Sqrt(ss / q), df
}

// RateTerm is one arm's (or cell's) share of a contrast of corruption rates: Coef times
// its rate, from effective counts (events and sessions divided by the design effect of
// its launches, so that a binomial interval on them has the variance of the launches).
type RateTerm struct {
	Coef     float64
	Events   float64
	Sessions float64
}

// EffectiveCounts pools launches' counts into one rate term: the rate Σx/Σm, on Σm²/Σm·DE
// effective sessions, where each launch of m sessions has design effect 1 + (m − 1)·icc.
// The effective sessions are those whose binomial variance equals the pooled rate's
// variance when launches differ with intra-launch correlation icc.
func EffectiveCounts(coef float64, launches []ClusterCounts, icc float64) RateTerm {
	var x, m, w float64
	for _, l := range launches {
		if l.Responses <= 0 {
			continue
		}
		mi := float64(l.Responses)
		x += float64(l.Events)
		m += mi
		w += mi * DesignEffect(mi, icc)
	}
	if m == 0 {
		return RateTerm{Coef: coef}
	}
	n := m * m / w
	return RateTerm{Coef: coef, Events: x / m * n, Sessions: n}
}

// Contrast is a linear contrast of rates Σ coef·p with its MOVER-Wilson interval at conf
// (Zou & Donner; with two terms of coefficients −1 and +1 it is Newcombe's hybrid score
// interval) and the two-sided p of the interval inverted, so that the interval excludes 0
// exactly when P ≤ 1 − conf. NaN when a term has no sessions.
func Contrast(terms []RateTerm, conf float64) (est float64, ci Interval, p float64) {
	nan := math.NaN()
	for _, t := range terms {
		if !(t.Sessions > 0) || t.Events < 0 || t.Events > t.Sessions*(1+1e-12) {
			return nan, Interval{nan, nan}, nan
		}
	}
	mt := make([]moverTerm, len(terms))
	for i, t := range terms {
		mt[i] = moverTerm{coef: t.Coef, x: math.Min(t.Events, t.Sessions), n: t.Sessions}
	}
	est, lo, hi := moverBounds(mt, coreZ(conf))
	return est, Interval{lo, hi}, moverP(mt)
}

// LaunchTestKind names the test a claim on launches' rates is decided by.
type LaunchTestKind string

// The launch tests of rates.
const (
	// TestRandomization: the exact randomization test over launch labels, from
	// RandomizationLaunches launches per arm (fewer cannot reach a useful level).
	TestRandomization LaunchTestKind = "randomization"
	// TestWelch: Welch's t test on launch rates, with two or three launches per arm, where
	// the randomization test cannot reach a useful level and Welch's stays at its own.
	TestWelch LaunchTestKind = "Welch"
	// TestFloor: the rates' difference weighed against a noise floor's upper bound of
	// the intra-launch correlation (a contrast on effective counts), from one launch per
	// arm.
	TestFloor LaunchTestKind = "noise floor"
	// TestNone: too few launches and no floor: nothing can be tested.
	TestNone LaunchTestKind = ""
)

// RandomizationLaunches is the fewest launches per arm from which claims on rates use the
// randomization test: with four a side its smallest p is 2/70.
const RandomizationLaunches = 4

// FloorMaxLaunches is the most launches per arm a noise floor stands in for. From three
// launches a side the arms' own launches test a claim with more power than the floor's
// conservative bound does (docs/calibration/launches.md, power by launches per arm: 0%
// against 12% at an intra-launch correlation of 0.02 is found 0.98 of the time by four
// launches per arm on their own, 0.64 against the floor), so the floor weighs only the
// claims of arms with one or two.
const FloorMaxLaunches = 2

// FloorWeighs reports whether a noise floor weighs a claim whose arms have na and nb
// launches: when either has at most FloorMaxLaunches.
func FloorWeighs(na, nb int) bool { return min(na, nb) <= FloorMaxLaunches }

// RateTestFor picks the test of a claim on rates with na and nb launches: the floor's when
// one is given and FloorWeighs, else the randomization test from RandomizationLaunches launches per arm,
// Welch's from two (not for a per-launch yes or no, such as a wedge, whose launch values
// have no spread Welch can use), none below. A sequential look uses the randomization
// test or the floor's only (sequential true): Welch's test with two or three launches
// reaches a look's small level too rarely to be worth its share.
func RateTestFor(na, nb int, floor, binary, sequential bool) LaunchTestKind {
	switch {
	case na < 1 || nb < 1:
		return TestNone
	case floor && !binary && FloorWeighs(na, nb):
		return TestFloor
	case min(na, nb) >= RandomizationLaunches || binary || sequential:
		if MinAttainableP(na, nb) < 1 {
			return TestRandomization
		}
		return TestNone
	case min(na, nb) >= 2:
		return TestWelch
	}
	return TestNone
}

// MinP is the smallest p the test can give with na and nb launches: the randomization
// test's MinAttainableP, 0 for the t and contrast tests, 1 for none.
func (k LaunchTestKind) MinP(na, nb int) float64 {
	switch k {
	case TestRandomization:
		return MinAttainableP(na, nb)
	case TestWelch, TestFloor:
		return 0
	}
	return 1
}

// LaunchRateTest is one comparison of arm B's launches' rates with arm A's.
type LaunchRateTest struct {
	Kind                 LaunchTestKind
	LaunchesA, LaunchesB int
	// Difference is B − A: the difference of the launches' mean rates, or of the pooled
	// rates for the floor's test.
	Difference float64
	// P is two-sided; CI is the interval at Conf that excludes 0 exactly when P ≤ 1 −
	// Conf (±Inf where the test cannot reach 1 − Conf). Both NaN when not Possible.
	P    float64
	CI   Interval
	Conf float64
	MinP float64
	// Possible is false when the test could not be run: too few launches, or launches
	// without any spread for Welch's test to weigh the difference against.
	Possible bool
}

// CompareLaunchRates compares arm B's launches with arm A's by the test kind, with its
// interval at conf (0: none, for a decision that reads only P). icc is the noise floor's
// upper bound of the intra-launch correlation, read by the floor's test only.
func CompareLaunchRates(kind LaunchTestKind, a, b []ClusterCounts, icc, conf float64) (LaunchRateTest, error) {
	nan := math.NaN()
	ra, rb := launchRates(a), launchRates(b)
	out := LaunchRateTest{Kind: kind, LaunchesA: len(ra), LaunchesB: len(rb), Difference: nan, P: nan,
		CI: Interval{nan, nan}, Conf: conf, MinP: kind.MinP(len(ra), len(rb))}
	if len(ra) == 0 || len(rb) == 0 {
		out.MinP = 1
		return out, nil
	}
	out.Difference = Mean(rb) - Mean(ra)
	switch kind {
	case TestRandomization:
		r, err := LaunchPermutation(ra, rb, conf)
		if err != nil {
			return out, err
		}
		out.P, out.CI, out.Possible = r.P, r.CI, true
	case TestWelch:
		if !(conf > 0 && conf < 1) {
			conf = 0.95
		}
		r, err := LaunchWelch(ra, rb, conf)
		if err != nil {
			return out, err
		}
		if r.Possible {
			out.P, out.Possible = r.P, true
			if out.Conf > 0 {
				out.CI = r.CI
			}
		}
	case TestFloor:
		if !(icc >= 0 && icc <= 1) {
			return out, fmt.Errorf("stats: noise floor test: intra-launch correlation %g is not in [0, 1]", icc)
		}
		c := conf
		if !(c > 0 && c < 1) {
			c = 0.95
		}
		est, ci, p := Contrast([]RateTerm{EffectiveCounts(-1, a, icc), EffectiveCounts(1, b, icc)}, c)
		out.Difference, out.P, out.Possible = est, p, !math.IsNaN(p)
		if out.Conf > 0 {
			out.CI = ci
		}
	default:
		out.MinP = 1
	}
	return out, nil
}

// launchRates are the rates of the launches that have sessions.
func launchRates(ls []ClusterCounts) []float64 {
	var out []float64
	for _, l := range ls {
		if l.Responses > 0 {
			out = append(out, float64(l.Events)/float64(l.Responses))
		}
	}
	return out
}

// LaunchWelch is Welch's two-sample t test of launch values b against a (unequal
// variances, Satterthwaite's degrees of freedom), with its interval at conf. It needs two
// launches per arm and some spread in at least one arm.
func LaunchWelch(a, b []float64, conf float64) (LaunchTest, error) {
	for _, x := range append(append([]float64(nil), a...), b...) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return LaunchTest{}, fmt.Errorf("stats: launch Welch test: value %g is not finite", x)
		}
	}
	if !(conf > 0 && conf < 1) {
		return LaunchTest{}, fmt.Errorf("stats: launch Welch test: confidence %g is not in (0, 1)", conf)
	}
	nan := math.NaN()
	out := LaunchTest{LaunchesA: len(a), LaunchesB: len(b), Conf: conf, MeanA: nan, MeanB: nan, Difference: nan,
		SE: nan, T: nan, P: nan, DF: nan, CI: Interval{nan, nan}}
	if len(a) > 0 && len(b) > 0 {
		out.MeanA, out.MeanB = Mean(a), Mean(b)
		out.Difference = out.MeanB - out.MeanA
	}
	if len(a) < 2 || len(b) < 2 {
		return out, nil
	}
	va, vb := variance(a)/float64(len(a)), variance(b)/float64(len(b))
	out.SE = math.Sqrt(va + vb)
	if !(out.SE > 0) {
		return out, nil
	}
	out.DF = (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	out.finish()
	return out, nil
}

// variance is the sample variance (n − 1 in the denominator).
func variance(xs []float64) float64 {
	m := Mean(xs)
	ss := 0.0
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return ss / float64(len(xs)-1)
}

// FloorMeans compares launch values b with a (logs of speeds) when a noise floor gives
// the launch-to-launch standard deviation sd (its upper bound): the z test of the
// difference of means, with its interval at conf. One launch per arm suffices.
func FloorMeans(a, b []float64, sd, conf float64) (LaunchTest, error) {
	for _, x := range append(append([]float64(nil), a...), b...) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return LaunchTest{}, fmt.Errorf("stats: noise floor z test: value %g is not finite", x)
		}
	}
	if !(conf > 0 && conf < 1) {
		return LaunchTest{}, fmt.Errorf("stats: noise floor z test: confidence %g is not in (0, 1)", conf)
	}
	if !(sd >= 0) || math.IsInf(sd, 0) {
		return LaunchTest{}, fmt.Errorf("stats: noise floor z test: standard deviation %g is not finite and non-negative", sd)
	}
	nan := math.NaN()
	out := LaunchTest{LaunchesA: len(a), LaunchesB: len(b), Conf: conf, MeanA: nan, MeanB: nan, Difference: nan,
		SE: nan, T: nan, P: nan, DF: math.Inf(1), CI: Interval{nan, nan}}
	if len(a) == 0 || len(b) == 0 {
		return out, nil
	}
	out.MeanA, out.MeanB = Mean(a), Mean(b)
	out.Difference = out.MeanB - out.MeanA
	out.SE = sd * math.Sqrt(1/float64(len(a))+1/float64(len(b)))
	out.finish()
	return out, nil
}

// fRatio is the between- to within-launch mean-square ratio of launches' counts: +Inf
// when all the spread is between launches, 0 when there is none.
func fRatio(launches []ClusterCounts) float64 {
	s := sumClusters(launches)
	yf := float64(s.y)
	if s.n == 0 {
		return 0
	}
	msb := (s.sumY2M - yf*yf/float64(s.n)) / float64(s.k-1)
	msw := (yf - s.sumY2M) / float64(s.n-s.k)
	if !(msw > 0) {
		if msb > 0 {
			return math.Inf(1)
		}
		return 0
	}
	return msb / msw
}
