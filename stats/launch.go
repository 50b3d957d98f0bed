package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// The launch (one engine run) is the experimental unit. The sessions of a launch share
// its memory layout, its warm-up, its clocks and its node, so they are correlated, and
// two launches of one configuration are not replicas: an experiment has only as many
// independent units as it has launches, a few per arm. A test that counts sessions (or
// requests) as independent calls the launch-to-launch difference a finding: at an
// intra-launch correlation of only 0.02, Fisher's test on one launch per arm claims a
// difference under a true null about 11% of the time.
//
// The tests here take one number per launch (its corruption rate, whether it wedged, the
// log of its median tok/s) and compare the arms' launches:
//   - LaunchPermutation, the exact randomization test over launch labels, for rates and
//     other bounded outcomes: its size is at most alpha with any number of launches and
//     any spread between them, zero included, because it conditions on the values seen;
//     with few launches it simply cannot reach small p-values (MinAttainableP), and then
//     nothing can be claimed;
//   - LaunchMeans, the two-sample t test on launch values, for speed summaries on the log
//     scale, where a launch's slowdown is multiplicative and close to normal; it needs
//     two launches per arm and a non-zero spread, since a spread of zero is no evidence.

// LaunchPermutationTest is the randomization test of arm B's launches against arm A's.
type LaunchPermutationTest struct {
	LaunchesA, LaunchesB int
	// MeanA and MeanB are the means of the launches' values; Difference is MeanB − MeanA.
	MeanA, MeanB, Difference float64
	// P is the two-sided p-value: the share of the relabellings of the launches as A or
	// B (keeping each arm's number) whose |difference| is at least the observed one.
	P float64
	// MinP is the smallest p-value this number of launches can give at all
	// (MinAttainableP): when it exceeds the level a claim is tested at, no data could
	// support a claim, and the verdict says so instead of testing.
	MinP float64
	// Exact is true when every relabelling was enumerated; otherwise P is a Monte Carlo
	// estimate over Draws seeded relabellings, (1 + extreme) / (1 + Draws), which keeps
	// its size.
	Exact bool
	Draws int
	// CI is the interval of shifts δ of B's values that the test at 1 − Conf does not
	// reject (the test inverted): it excludes 0 exactly when P ≤ 1 − Conf. A bound is
	// ±Inf when MinP exceeds 1 − Conf. NaN when no interval was asked for.
	CI   Interval
	Conf float64
}

// PrimaryShare is the share of alpha that a verdict's claims on its workload's primary
// outcome split between them (corruption for agents and traces, wedged launches for
// abort cascades, tok/s for throughput runs); every other claim shares the rest
// (weighted Bonferroni), so that a verdict claims anything falsely at most alpha of the
// time. 0.6 lets two arms of 4 launches each claim their primary outcome at alpha 0.05:
// the randomization test's smallest p there is 2/70 = 0.029 ≤ 0.03.
const PrimaryShare = 0.6

// PrimaryLevel is the level each of comparisons claims on the primary outcome is tested
// at when other claims share the rest of alpha.
func PrimaryLevel(alpha float64, comparisons int) float64 {
	return alpha * PrimaryShare / float64(max(comparisons, 1))
}

// permutationLimit is the most relabellings enumerated; beyond it (more than about 12
// launches per arm) the test draws permutationDraws of them.
const (
	permutationLimit = 1 << 20
	permutationDraws = 100_000
)

// binomial is C(n, k) as a float64 (exact up to 2^53).
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	k = min(k, n-k)
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return math.Round(c)
}

// MinAttainableP is the smallest two-sided p-value the launch randomization test can
// give with na and nb launches, whatever they show: 2 / C(na+nb, na) with equal arms
// (the most extreme labelling and its mirror), 1 / C(na+nb, na) otherwise. 1 with no
// launch in an arm.
func MinAttainableP(na, nb int) float64 {
	if na < 1 || nb < 1 {
		return 1
	}
	c := binomial(na+nb, na)
	if na == nb {
		return math.Min(1, 2/c)
	}
	return math.Min(1, 1/c)
}

// LaunchesNeeded is the fewest launches per arm, the same in both, with which the launch
// randomization test can reach a two-sided p at or below alpha: 4 at 0.05, 5 at 0.01.
// It is a floor, not a power calculation: see LaunchPower.
func LaunchesNeeded(alpha float64) int {
	for n := 1; n < 64; n++ {
		if Reject(MinAttainableP(n, n), alpha) {
			return n
		}
	}
	return 64
}

// LaunchPermutation compares launch values b with a by the exact randomization test, and
// inverts it for an interval of the shift at confidence conf (0 leaves CI NaN; the
// inversion costs about sixty tests). Values must be finite.
func LaunchPermutation(a, b []float64, conf float64) (LaunchPermutationTest, error) {
	for _, x := range append(append([]float64(nil), a...), b...) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return LaunchPermutationTest{}, fmt.Errorf("stats: launch permutation: value %g is not finite", x)
		}
	}
	nan := math.NaN()
	out := LaunchPermutationTest{LaunchesA: len(a), LaunchesB: len(b), MeanA: nan, MeanB: nan, Difference: nan,
		P: 1, MinP: MinAttainableP(len(a), len(b)), CI: Interval{nan, nan}, Conf: conf}
	if len(a) == 0 || len(b) == 0 {
		return out, nil
	}
	out.MeanA, out.MeanB = Mean(a), Mean(b)
	out.Difference = out.MeanB - out.MeanA
	out.P, out.Exact, out.Draws = permutationP(a, b, 0)
	if conf > 0 && conf < 1 {
		out.CI = shiftInterval(a, b, out.Difference, 1-conf, out.MinP)
	}
	return out, nil
}

// permutationP is the two-sided randomization p-value of b − delta against a.
func permutationP(a, b []float64, delta float64) (p float64, exact bool, draws int) {
	na, nb := len(a), len(b)
	n := na + nb
	x := make([]float64, 0, n)
	x = append(x, a...)
	for _, v := range b {
		x = append(x, v-delta)
	}
	total := 0.0
	for _, v := range x {
		total += v
	}
	// For fixed arm sizes the difference of means is an increasing function of the sum of
	// the values labelled B, so a relabelling is as extreme as the observed one when its
	// difference is at least as far from 0.
	diff := func(sumB float64) float64 { return sumB/float64(nb) - (total-sumB)/float64(na) }
	obsSum := 0.0
	for _, v := range x[na:] {
		obsSum += v
	}
	obs := math.Abs(diff(obsSum))
	// Relabellings whose difference equals the observed one up to rounding count as
	// extreme: ties must never make the test anti-conservative.
	tol := 1e-9 * (1 + math.Abs(obs) + math.Abs(total)/float64(n))
	extreme := func(sumB float64) bool { return math.Abs(diff(sumB)) >= obs-tol }
	if p, ok := countedP(x, nb, extreme); ok {
		return p, true, int(min(binomial(n, nb), math.MaxInt))
	}
	if binomial(n, nb) <= permutationLimit {
		return enumeratedP(x, nb, extreme), true, int(binomial(n, nb))
	}
	return drawnP(x, nb, extreme), false, permutationDraws
}

// Launch values that are rates of a few dozen sessions take few distinct values, and so
// do the sums of nb of them: counting the labellings by their sum B is exact and far
// quicker than walking them, and stays exact where walking would have to sample.
const (
	countedScale    = 1e12    // values are counted on a grid of 1e-12, far below the ties' tolerance
	countedMaxValue = 1e3     // beyond it the grid's sums could overflow
	countedMaxSums  = 1 << 14 // distinct sums per number of B labels before counting gives up
)

// countedP is enumeratedP by dynamic programming over the distinct sums of B values:
// ways[j][s] is the number of ways to label j of the values seen so far as B with sum s.
// ok is false when the values are too large or their sums too many to count.
func countedP(x []float64, nb int, extreme func(sumB float64) bool) (p float64, ok bool) {
	grid := make([]int64, len(x))
	for i, v := range x {
		if math.Abs(v) > countedMaxValue {
			return 0, false
		}
		grid[i] = int64(math.Round(v * countedScale))
	}
	ways := make([]map[int64]float64, nb+1)
	ways[0] = map[int64]float64{0: 1}
	for i, g := range grid {
		for j := min(i+1, nb); j >= 1; j-- {
			prev := ways[j-1]
			if prev == nil {
				continue
			}
			if ways[j] == nil {
				ways[j] = map[int64]float64{}
			}
			cur := ways[j]
			for sum, w := range prev {
				cur[sum+g] += w
			}
			if len(cur) > countedMaxSums {
				return 0, false
			}
		}
	}
	hit, all := 0.0, 0.0
	for sum, w := range ways[nb] {
		all += w
		if extreme(float64(sum) / countedScale) {
			hit += w
		}
	}
	return hit / all, all > 0
}

// enumeratedP is the share of every labelling of nb of the values x as B whose sum of B
// values is extreme.
func enumeratedP(x []float64, nb int, extreme func(sumB float64) bool) float64 {
	n := len(x)
	count, all := 0, 0
	var walk func(start, left int, sum float64)
	walk = func(start, left int, sum float64) {
		if left == 0 {
			all++
			if extreme(sum) {
				count++
			}
			return
		}
		for i := start; i <= n-left; i++ {
			walk(i+1, left-1, sum+x[i])
		}
	}
	walk(0, nb, 0)
	return float64(count) / float64(all)
}

// drawnP estimates enumeratedP from permutationDraws seeded labellings, counting the
// observed one among them so that the estimate never falls below what the test allows.
func drawnP(x []float64, nb int, extreme func(sumB float64) bool) float64 {
	n := len(x)
	// A fixed seed: the same launches give the same p-value on every re-judging.
	rng := rand.New(rand.NewPCG(0x61726269, 0x74657221))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	count := 0
	for d := 0; d < permutationDraws; d++ {
		sum := 0.0
		for k := 0; k < nb; k++ {
			j := k + rng.IntN(n-k)
			idx[k], idx[j] = idx[j], idx[k]
			sum += x[idx[k]]
		}
		if extreme(sum) {
			count++
		}
	}
	return float64(1+count) / float64(1+permutationDraws)
}

// shiftInterval inverts the randomization test: the shifts δ for which b − δ against a
// gives p > level, bracketed by bisection on each side of the observed difference.
func shiftInterval(a, b []float64, observed, level, minP float64) Interval {
	if !(minP <= level*(1+rejectTolerance)) {
		return Interval{math.Inf(-1), math.Inf(1)}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range append(append([]float64(nil), a...), b...) {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	// Beyond a shift of the whole range every B value lies past every A value: the
	// relabelling is the most extreme one, and p = MinP ≤ level.
	reach := 2*(hi-lo) + math.Abs(observed) + 1e-12
	rejects := func(delta float64) bool {
		p, _, _ := permutationP(a, b, delta)
		return Reject(p, level)
	}
	edge := func(inside, outside float64) float64 {
		for range 60 {
			mid := (inside + outside) / 2
			if rejects(mid) {
				outside = mid
			} else {
				inside = mid
			}
		}
		return (inside + outside) / 2
	}
	if rejects(observed) {
		// Only possible with a degenerate sample; say nothing rather than a wrong interval.
		return Interval{math.NaN(), math.NaN()}
	}
	return Interval{edge(observed, observed-reach), edge(observed, observed+reach)}
}

// LaunchTest is the two-sample t test of arm B's launch values against arm A's, for
// speed summaries on the log scale.
type LaunchTest struct {
	LaunchesA, LaunchesB int
	// Possible is false when an arm has fewer than two launches or the launches of both
	// arms agree exactly (no spread to weigh a difference against): then no claim is
	// possible, and P, CI and Lower are NaN.
	Possible   bool
	MeanA      float64
	MeanB      float64
	Difference float64 // MeanB − MeanA
	SE         float64 // standard error of Difference
	T          float64 // Difference / SE
	// DF is the t test's degrees of freedom: LaunchesA + LaunchesB − 2 pooled, Welch's
	// Satterthwaite figure, or +Inf when the spread is known (a noise floor's z test).
	DF   float64
	P    float64  // two-sided, Student's t with DF degrees of freedom
	CI   Interval // two-sided t interval at Conf
	Conf float64
}

// LaunchMeans compares launch values b with a by the pooled two-sample t test on
// launches − 2 degrees of freedom, with its two-sided interval at conf.
func LaunchMeans(a, b []float64, conf float64) (LaunchTest, error) {
	for _, x := range append(append([]float64(nil), a...), b...) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return LaunchTest{}, fmt.Errorf("stats: launch t test: value %g is not finite", x)
		}
	}
	if !(conf > 0 && conf < 1) {
		return LaunchTest{}, fmt.Errorf("stats: launch t test: confidence %g is not in (0, 1)", conf)
	}
	nan := math.NaN()
	out := LaunchTest{LaunchesA: len(a), LaunchesB: len(b), Conf: conf, MeanA: nan, MeanB: nan, Difference: nan,
		SE: nan, T: nan, P: nan, CI: Interval{nan, nan}}
	if len(a) > 0 && len(b) > 0 {
		out.MeanA, out.MeanB = Mean(a), Mean(b)
		out.Difference = out.MeanB - out.MeanA
	}
	if len(a) < 2 || len(b) < 2 {
		return out, nil
	}
	ss := 0.0
	for _, x := range a {
		ss += (x - out.MeanA) * (x - out.MeanA)
	}
	for _, x := range b {
		ss += (x - out.MeanB) * (x - out.MeanB)
	}
	out.DF = float64(len(a) + len(b) - 2)
	out.SE = math.Sqrt(ss / out.DF * (1/float64(len(a)) + 1/float64(len(b))))
	out.finish()
	return out, nil
}

// finish fills in the test from Difference, SE, DF and Conf; it leaves the test not
// Possible when SE is zero (no spread to weigh the difference against).
func (l *LaunchTest) finish() {
	if !(l.SE > 0) {
		return
	}
	l.Possible = true
	l.T = l.Difference / l.SE
	l.P = min(1, 2*tSurvival(l.DF, math.Abs(l.T)))
	tq := studentQuantile(l.DF, 1-(1-l.Conf)/2)
	l.CI = Interval{l.Difference - tq*l.SE, l.Difference + tq*l.SE}
}

// tSurvival is Student's t survival function, the normal's at infinite degrees of freedom.
func tSurvival(df, x float64) float64 {
	if math.IsInf(df, 1) {
		return distuv.UnitNormal.Survival(x)
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Survival(x)
}

// PAbove is the one-sided p-value of the hypothesis that the difference is at most x
// (non-inferiority: x is the margin on the log scale); NaN when the test was not
// possible.
func (l LaunchTest) PAbove(x float64) float64 {
	if !l.Possible {
		return math.NaN()
	}
	return tSurvival(l.DF, (l.Difference-x)/l.SE)
}

// LaunchMean is the one-sample t interval of launch values (the log-ratios of each
// launch's after to its before, say) at two-sided confidence conf; Possible as for
// LaunchMeans, with two launches.
func LaunchMean(x []float64, conf float64) (LaunchTest, error) {
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return LaunchTest{}, fmt.Errorf("stats: launch t interval: value %g is not finite", v)
		}
	}
	nan := math.NaN()
	out := LaunchTest{LaunchesB: len(x), Conf: conf, MeanA: 0, MeanB: nan, Difference: nan, SE: nan, T: nan, P: nan,
		CI: Interval{nan, nan}}
	if len(x) == 0 {
		return out, nil
	}
	out.MeanB = Mean(x)
	out.Difference = out.MeanB
	if len(x) < 2 {
		return out, nil
	}
	ss := 0.0
	for _, v := range x {
		ss += (v - out.MeanB) * (v - out.MeanB)
	}
	out.DF = float64(len(x) - 1)
	out.SE = math.Sqrt(ss / out.DF / float64(len(x)))
	out.finish()
	return out, nil
}

// studentQuantiles memoizes Student's t quantiles by (df, probability): the inverse
// incomplete beta costs microseconds, and a verdict or a simulation asks for the same
// few again and again. At infinite degrees of freedom it is the normal quantile.
var studentQuantiles sync.Map

func studentQuantile(df float64, p float64) float64 {
	if math.IsInf(df, 1) {
		return distuv.UnitNormal.Quantile(p)
	}
	type key struct{ df, p float64 }
	k := key{df, p}
	if q, ok := studentQuantiles.Load(k); ok {
		return q.(float64)
	}
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(p)
	studentQuantiles.Store(k, q)
	return q
}

// LaunchICC estimates the intra-launch correlation of a binary session outcome from
// launches' counts (ANOVA estimator, truncated at 0): the share of the session-level
// variance that lies between launches of one configuration. NaN with fewer than two
// launches or no variance at all.
func LaunchICC(clusters []ClusterCounts) float64 {
	var k, n, events int
	for _, c := range clusters {
		if c.Responses == 0 {
			continue
		}
		k++
		n += c.Responses
		events += c.Events
	}
	if k < 2 || n <= k {
		return math.NaN()
	}
	p := float64(events) / float64(n)
	if p == 0 || p == 1 {
		return math.NaN()
	}
	var ssb, ssw, n2 float64
	for _, c := range clusters {
		if c.Responses == 0 {
			continue
		}
		m := float64(c.Responses)
		pi := float64(c.Events) / m
		ssb += m * (pi - p) * (pi - p)
		ssw += float64(c.Events) * (1 - pi)
		n2 += m * m
	}
	msb := ssb / float64(k-1)
	msw := ssw / float64(n-k)
	m0 := (float64(n) - n2/float64(n)) / float64(k-1)
	icc := (msb - msw) / (msb + (m0-1)*msw)
	return math.Max(0, icc)
}

// LaunchPower is the power of the launch randomization test at two-sided level alpha to
// tell a corruption rate p1 from p0 with launches per arm of sessions each, when launches
// of one configuration differ with intra-launch correlation icc (each launch's rate
// drawn from a beta distribution with that mean and correlation), estimated over sims
// seeded experiments.
func LaunchPower(p0, p1, icc float64, sessions, launches int, alpha float64, sims int, seed uint64) float64 {
	if launches < 1 || sessions < 1 || sims < 1 {
		return 0
	}
	if !Reject(MinAttainableP(launches, launches), alpha) {
		return 0
	}
	rng := rand.New(rand.NewPCG(seed, 0x706f776572))
	a, b := make([]float64, launches), make([]float64, launches)
	hits := 0
	for s := 0; s < sims; s++ {
		for k := range launches {
			a[k] = float64(BetaBinomialDraw(rng, sessions, p0, icc)) / float64(sessions)
			b[k] = float64(BetaBinomialDraw(rng, sessions, p1, icc)) / float64(sessions)
		}
		p, _, _ := permutationP(a, b, 0)
		if Reject(p, alpha) {
			hits++
		}
	}
	return float64(hits) / float64(sims)
}

// BetaBinomialDraw draws the corrupted sessions of one launch of n sessions whose rate
// is drawn from a beta distribution with mean mu and intra-launch correlation icc (icc
// 0: every launch has rate mu).
func BetaBinomialDraw(rng *rand.Rand, n int, mu, icc float64) int {
	p := mu
	if icc > 0 && mu > 0 && mu < 1 {
		s := 1/icc - 1
		p = distuv.Beta{Alpha: mu * s, Beta: (1 - mu) * s, Src: rng}.Rand()
	}
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return n
	}
	// Inverse cdf from 0: a few steps at the rates of serving faults.
	u := rng.Float64()
	f := math.Pow(1-p, float64(n))
	cdf := f
	x := 0
	for cdf < u && x < n {
		f *= float64(n-x) / float64(x+1) * p / (1 - p)
		x++
		cdf += f
	}
	return x
}

// LaunchesForPower is the fewest launches per arm (up to max) at which LaunchPower
// reaches power; 0 when none up to max does.
func LaunchesForPower(p0, p1, icc float64, sessions int, alpha, power float64, max int) int {
	for l := LaunchesNeeded(alpha); l <= max; l++ {
		if LaunchPower(p0, p1, icc, sessions, l, alpha, 1000, 1) >= power {
			return l
		}
	}
	return 0
}
