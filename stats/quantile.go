package stats

import (
	"math"
	"slices"
)

// Quantile is the q-quantile of xs by linear interpolation between order statistics
// (Hyndman and Fan's type 7, numpy's and R's default): with n values sorted, the value at
// position q·(n−1), counting from 0. Its median is the usual one, the mean of the middle
// two of an even count. NaN for no values. xs is not changed. Every quantile arbiter
// reports (medians of sessions and launches, p95s, divergence depths) is this one.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return SortedQuantile(s, q)
}

// Median is Quantile(xs, 0.5).
func Median(xs []float64) float64 { return Quantile(xs, 0.5) }

// Mean is the arithmetic mean of xs; NaN for no values.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// SortedQuantile is Quantile of values already sorted in increasing order, without the
// copy and the sort: several quantiles of one large sample sort it once.
func SortedQuantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}
