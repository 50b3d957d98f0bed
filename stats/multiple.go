package stats

import (
	"fmt"
	"math"
	"sort"
)

// Holm returns Holm's step-down adjusted p-values, in the order given: they control the
// family-wise error rate under any dependence between the tests (statsmodels'
// multipletests(method='holm')). Every p must lie in [0, 1].
func Holm(p []float64) ([]float64, error) {
	order, err := coreSortedOrder("Holm", p)
	if err != nil {
		return nil, err
	}
	m := len(p)
	adj := make([]float64, m)
	run := 0.0
	for rank, i := range order {
		run = max(run, float64(m-rank)*p[i])
		adj[i] = min(1, run)
	}
	return adj, nil
}

// BenjaminiHochberg returns Benjamini-Hochberg adjusted p-values (q-values), in the order
// given: they control the false discovery rate for independent or positively dependent
// tests (statsmodels' multipletests(method='fdr_bh')). Every p must lie in [0, 1].
func BenjaminiHochberg(p []float64) ([]float64, error) {
	order, err := coreSortedOrder("BenjaminiHochberg", p)
	if err != nil {
		return nil, err
	}
	m := len(p)
	adj := make([]float64, m)
	run := 1.0
	for rank := m - 1; rank >= 0; rank-- {
		i := order[rank]
		run = min(run, p[i]*float64(m)/float64(rank+1))
		adj[i] = run
	}
	return adj, nil
}

// coreSortedOrder checks p and returns the indices that sort it ascending (stable, so
// tied p-values keep their order, as numpy's mergesort in statsmodels).
func coreSortedOrder(where string, p []float64) ([]int, error) {
	for i, v := range p {
		if math.IsNaN(v) || v < 0 || v > 1 {
			return nil, fmt.Errorf("stats: %s: p-value %d is %v, want a value in [0, 1]", where, i, v)
		}
	}
	order := make([]int, len(p))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return p[order[x]] < p[order[y]] })
	return order, nil
}
