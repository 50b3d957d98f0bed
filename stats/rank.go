package stats

import (
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// Continuous outcomes (latency, inter-token latency, tokens per second) are compared the
// way benchstat compares timings: by ranks, which ask nothing of the distribution's shape
// (latencies are skewed, with long tails), with the Mann-Whitney U test for the p-value and
// the Hodges-Lehmann estimate for the size of the shift, with its distribution-free
// interval (Moses). The unit is whatever the caller passes: arbiter passes one summary per
// session, since the turns of one session are correlated.

// exactRankLimit is the largest n1+n2 for which RankCompare uses the exact null
// distribution of U (when there are no ties). Beyond it the normal approximation is within
// a few percent of the exact p for the p-values a verdict prints.
const exactRankLimit = 100

// RankResult compares sample B with sample A by ranks.
type RankResult struct {
	N1, N2           int
	MedianA, MedianB float64
	// U is the Mann-Whitney statistic of B: the number of pairs (a, b) with b > a, ties
	// counting one half. U/(N1·N2) estimates P(B > A) + P(B = A)/2.
	U float64
	// P is the two-sided p-value of the Mann-Whitney test; Exact says whether it comes
	// from the exact null distribution (no ties, N1+N2 <= 100) or from the normal
	// approximation with tie and continuity corrections (as scipy's mannwhitneyu).
	P     float64
	Exact bool
	// Shift is the Hodges-Lehmann estimate of the shift of B relative to A, the median of
	// every difference b − a; ShiftCI its distribution-free interval (Moses): order
	// statistics of those differences chosen from the null distribution of U. A bound is
	// ±Inf when the samples are too small to reach the confidence level.
	Shift   float64
	ShiftCI Interval
	// Ratio and RatioCI are the same estimate on the log scale, B/A as a factor (1.05 is
	// 5% more), when every value of both samples is positive; NaN otherwise. The p-value
	// is the same on either scale: ranks do not change under the logarithm.
	Ratio   float64
	RatioCI Interval
	// Conf is the interval's nominal level; the achieved level of an exact interval is at
	// least that.
	Conf     float64
	Warnings []Warning
}

// RankCompare compares b with a: the Mann-Whitney U test (two-sided), the Hodges-Lehmann
// shift of b relative to a with its conf interval, and, for positive samples, the same as
// a ratio. NaN values are refused; a sample of fewer than two values gives a result whose
// p is 1 and whose interval is unbounded, with a warning.
func RankCompare(a, b []float64, conf float64) (RankResult, error) {
	conf = coreConf(conf)
	for _, s := range [][]float64{a, b} {
		for _, x := range s {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return RankResult{}, fmt.Errorf("stats: rank comparison: value %v is not a finite number", x)
			}
		}
	}
	r := RankResult{N1: len(a), N2: len(b), Conf: conf, Ratio: math.NaN(), RatioCI: Interval{math.NaN(), math.NaN()}}
	if r.N1 == 0 || r.N2 == 0 {
		return r, fmt.Errorf("stats: rank comparison needs values on both sides (got %d and %d)", r.N1, r.N2)
	}
	r.MedianA, r.MedianB = Median(a), Median(b)
	var ties bool
	r.U, ties = mannWhitneyU(a, b)
	m, n := float64(r.N1), float64(r.N2)
	tieTerm := tieCorrection(a, b)
	// sigma is the standard deviation of U under the null, tie-corrected.
	N := m + n
	sigma := math.Sqrt(m * n / 12 * ((N + 1) - tieTerm/(N*(N-1))))
	if N < 2 {
		sigma = 0
	}
	var dist []float64 // exact null distribution of U, when used
	if !ties && r.N1+r.N2 <= exactRankLimit {
		dist = exactUDist(r.N1, r.N2)
		r.Exact = true
		r.P = exactTwoSided(dist, r.U)
	} else {
		r.P = normalTwoSided(r.U, m*n/2, sigma)
	}

	lo, hi := mosesRanks(r.N1, r.N2, conf, dist, sigma)
	r.Shift, r.ShiftCI = hodgesLehmann(a, b, lo, hi, func(x float64) float64 { return x })
	if positive(a) && positive(b) {
		var ci Interval
		r.Ratio, ci = hodgesLehmann(a, b, lo, hi, math.Log)
		r.Ratio, r.RatioCI = math.Exp(r.Ratio), Interval{math.Exp(ci.Lo), math.Exp(ci.Hi)}
	}
	if r.N1 < 2 || r.N2 < 2 {
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("%d and %d values: too few to compare by ranks", r.N1, r.N2)))
	} else if math.IsInf(r.ShiftCI.Lo, 0) || math.IsInf(r.ShiftCI.Hi, 0) {
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("%d and %d values are too few for a %g%% interval of the shift: it is unbounded", r.N1, r.N2, 100*conf)))
	}
	return r, nil
}

// mannWhitneyU is U of b (pairs with b > a, ties one half) and whether any value occurs
// more than once in the pooled sample.
func mannWhitneyU(a, b []float64) (u float64, ties bool) {
	type item struct {
		x   float64
		inB bool
	}
	all := make([]item, 0, len(a)+len(b))
	for _, x := range a {
		all = append(all, item{x, false})
	}
	for _, x := range b {
		all = append(all, item{x, true})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].x < all[j].x })
	rankSumB := 0.0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].x == all[i].x {
			j++
		}
		if j-i > 1 {
			ties = true
		}
		mid := float64(i+j+1) / 2 // mean of ranks i+1 .. j
		for k := i; k < j; k++ {
			if all[k].inB {
				rankSumB += mid
			}
		}
		i = j
	}
	n := float64(len(b))
	return rankSumB - n*(n+1)/2, ties
}

// tieCorrection is Σ (t³ − t) over groups of tied values in the pooled sample.
func tieCorrection(a, b []float64) float64 {
	all := append(append(make([]float64, 0, len(a)+len(b)), a...), b...)
	sort.Float64s(all)
	s := 0.0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j] == all[i] {
			j++
		}
		t := float64(j - i)
		s += t*t*t - t
		i = j
	}
	return s
}

// exactUDist is the null distribution of U for samples of m and n without ties:
// dist[u] = P(U = u), from the counting recurrence c(m, n, u) = c(m−1, n, u−n) + c(m, n−1, u).
func exactUDist(m, n int) []float64 {
	size := m*n + 1
	// prev[j][u] holds c(i−1, j, u); cur[j][u] holds c(i, j, u).
	prev := make([][]float64, n+1)
	for j := range prev {
		prev[j] = make([]float64, size)
		prev[j][0] = 1 // c(0, j, 0) = 1
	}
	for i := 1; i <= m; i++ {
		cur := make([][]float64, n+1)
		cur[0] = make([]float64, size)
		cur[0][0] = 1 // c(i, 0, 0) = 1
		for j := 1; j <= n; j++ {
			row := make([]float64, size)
			for u := 0; u <= i*j; u++ {
				v := cur[j-1][u]
				if u >= j {
					v += prev[j][u-j]
				}
				row[u] = v
			}
			cur[j] = row
		}
		prev = cur
	}
	counts := prev[n]
	total := 0.0
	for _, c := range counts {
		total += c
	}
	out := make([]float64, size)
	for u, c := range counts {
		out[u] = c / total
	}
	return out
}

// exactTwoSided is the exact two-sided p of U: twice the smaller tail, at most 1 (as
// scipy's mannwhitneyu with method="exact").
func exactTwoSided(dist []float64, u float64) float64 {
	mn := float64(len(dist) - 1)
	k := int(math.Round(math.Max(u, mn-u))) // the upper tail is the smaller one
	tail := 0.0
	for i := k; i < len(dist); i++ {
		tail += dist[i]
	}
	return math.Min(1, 2*tail)
}

// normalTwoSided is the two-sided p of U under the normal approximation with a continuity
// correction of one half (scipy's default).
func normalTwoSided(u, mean, sigma float64) float64 {
	if sigma == 0 {
		return 1
	}
	z := (math.Abs(u-mean) - 0.5) / sigma
	if z <= 0 {
		return 1
	}
	return math.Min(1, 2*distuv.UnitNormal.Survival(z))
}

// mosesRanks are the 1-based positions, in the sorted m·n differences, of the bounds of
// the conf interval of the shift: [D(k), D(mn+1−k)], with k the largest integer whose
// lower tail P(U <= k−1) stays within (1−conf)/2 under the exact distribution, or
// k = floor(mn/2 − z·sigma) under the normal one. A position below 1 means that bound is
// unbounded.
func mosesRanks(m, n int, conf float64, dist []float64, sigma float64) (lo, hi int) {
	mn := m * n
	half := (1 - conf) / 2
	k := 0
	if dist != nil {
		cum := 0.0
		for u := 0; u < len(dist); u++ {
			cum += dist[u]
			if cum > half*(1+1e-12) {
				break
			}
			k = u + 1
		}
	} else {
		k = int(math.Floor(float64(mn)/2 - coreZ(conf)*sigma))
	}
	return k, mn + 1 - k
}

// hodgesLehmann is the median of the differences f(b) − f(a) and the interval between the
// lo-th and hi-th smallest of them (1-based; outside 1..mn is unbounded). The m·n
// differences are not written out: each order statistic is found from the two sorted
// samples (pairDiffs.kth), so that two samples of 3,000 sessions cost milliseconds, not
// the seconds a sort of nine million differences took.
func hodgesLehmann(a, b []float64, lo, hi int, f func(float64) float64) (float64, Interval) {
	d := newPairDiffs(a, b, f)
	mn := len(a) * len(b)
	ci := Interval{math.Inf(-1), math.Inf(1)}
	if lo >= 1 && lo <= mn {
		ci.Lo = d.kth(lo)
	}
	if hi >= 1 && hi <= mn && lo >= 1 {
		ci.Hi = d.kth(hi)
	}
	// The median as sortedMedian takes it from the sorted differences.
	h := 0.5 * float64(mn-1)
	k := int(math.Floor(h))
	if k+1 >= mn {
		return d.kth(mn), ci
	}
	below, above := d.kth(k+1), d.kth(k+2)
	return below + (h-float64(k))*(above-below), ci
}

// pairDiffs stands for the differences y − x of every y in ys and x in xs, both sorted.
type pairDiffs struct{ xs, ys []float64 }

func newPairDiffs(a, b []float64, f func(float64) float64) pairDiffs {
	d := pairDiffs{make([]float64, len(a)), make([]float64, len(b))}
	for i, x := range a {
		d.xs[i] = f(x)
	}
	for i, y := range b {
		d.ys[i] = f(y)
	}
	sort.Float64s(d.xs)
	sort.Float64s(d.ys)
	return d
}

// atMost counts the differences y − x (as computed, rounded) that are at most t. For a
// given y they are those of the x from some index on, and that index never moves back as
// y grows: a rounded subtraction is monotone in each operand.
func (d pairDiffs) atMost(t float64) int {
	n, i := 0, 0
	for _, y := range d.ys {
		for i < len(d.xs) && !(y-d.xs[i] <= t) {
			i++
		}
		n += len(d.xs) - i
	}
	return n
}

// kth is the k-th smallest difference (1-based, 1 <= k <= len(xs)·len(ys)). The count of
// differences at most t steps up only at a difference, so the smallest float64 t whose
// count reaches k is that difference itself: it is found by bisecting the float64 values
// between the smallest and the largest difference in their order, 64 steps at most.
func (d pairDiffs) kth(k int) float64 {
	lo := orderedKey(d.ys[0] - d.xs[len(d.xs)-1])
	hi := orderedKey(d.ys[len(d.ys)-1] - d.xs[0])
	for lo < hi {
		mid := lo + (hi-lo)/2
		if d.atMost(fromOrderedKey(mid)) >= k {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	v := fromOrderedKey(hi)
	if v == 0 {
		return 0 // −0 and +0 count alike; a difference of equal values is +0
	}
	return v
}

// orderedKey maps a float64 (not NaN) to an integer in the same order.
func orderedKey(f float64) uint64 {
	b := math.Float64bits(f)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

func fromOrderedKey(k uint64) float64 {
	if k>>63 == 1 {
		return math.Float64frombits(k &^ (1 << 63))
	}
	return math.Float64frombits(^k)
}

func positive(xs []float64) bool {
	for _, x := range xs {
		if !(x > 0) {
			return false
		}
	}
	return true
}

// sortedMedian is the median of values already sorted.
func sortedMedian(s []float64) float64 { return SortedQuantile(s, 0.5) }

// RatioNonInferiority judges whether B is at most margin worse than A as a ratio of
// typical values (the Hodges-Lehmann ratio on the log scale): for a metric where higher
// is better (throughput), B is non-inferior when the one-sided (1 − alpha) lower bound of
// B/A is above 1 − margin ("costs at most 5%"); where lower is better (latency), when the
// upper bound is below 1 + margin.
type RatioNonInferiority struct {
	Ratio float64 // B/A, the Hodges-Lehmann estimate
	// Bound is the one-sided (1 − Alpha) bound on the side that matters: the lower bound
	// of B/A when higher is better, the upper when lower is better (the limit of the
	// two-sided 1 − 2·Alpha interval).
	Bound        float64
	Margin       float64
	Alpha        float64
	HigherBetter bool
	NonInferior  bool
	Warnings     []Warning
}

// NonInferiorRatio tests non-inferiority of b to a on a positive metric within margin (a
// share, 0.05 for 5%).
func NonInferiorRatio(a, b []float64, margin, alpha float64, higherBetter bool) (RatioNonInferiority, error) {
	if !(margin > 0 && margin < 1) {
		return RatioNonInferiority{}, fmt.Errorf("stats: non-inferiority: margin %g must be a share in (0, 1)", margin)
	}
	if !(alpha > 0 && alpha < 0.5) {
		return RatioNonInferiority{}, fmt.Errorf("stats: non-inferiority: one-sided alpha %g must be in (0, 0.5)", alpha)
	}
	if !positive(a) || !positive(b) {
		return RatioNonInferiority{}, fmt.Errorf("stats: non-inferiority on a ratio needs positive values")
	}
	r, err := RankCompare(a, b, 1-2*alpha)
	if err != nil {
		return RatioNonInferiority{}, err
	}
	out := RatioNonInferiority{Ratio: r.Ratio, Margin: margin, Alpha: alpha, HigherBetter: higherBetter, Warnings: r.Warnings}
	if higherBetter {
		out.Bound = r.RatioCI.Lo
		out.NonInferior = out.Bound > 1-margin
	} else {
		out.Bound = r.RatioCI.Hi
		out.NonInferior = out.Bound < 1+margin
	}
	return out, nil
}
