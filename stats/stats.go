// Package stats holds arbiter's statistical judge: exact tests, intervals, power,
// stratified and clustered analyses and sequential boundaries. Every function is a pure
// function over counts, checked against reference values computed by an independent
// implementation (see testdata/).
package stats

// Interval is a two-sided confidence interval.
type Interval struct {
	Lo, Hi float64
}

// Warning is a caveat attached to a result, printed by the verdict (too few sessions,
// sparse strata, zero cells, unequal losses, ...).
type Warning string
