package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Departure is one session's comparison with the baseline's, turn by turn: the turn at
// which it first departed (Departed), or the last turn compared while it was still alike
// (not Departed: censored there).
type Departure struct {
	Turn     int
	Departed bool
}

// DepartureTest is the log-rank comparison of how soon two groups of sessions depart
// from the baseline, judged by permutation.
type DepartureTest struct {
	// Observed and Expected are group B's departures and those it would have had at the
	// pooled per-turn rate; B departs sooner or more often when Observed > Expected.
	Observed, Expected float64
	// P is the one-sided p that B departs no sooner than A: the share of the relabellings
	// of the sessions (keeping each group's size) whose log-rank statistic is at least the
	// observed one. Exact when every relabelling was enumerated, else over Draws seeded
	// draws, (1 + extreme) / (1 + Draws).
	P     float64
	Exact bool
	Draws int
}

// maxDepartureEnumeration bounds the relabellings enumerated exactly; beyond it the
// test draws departureDraws relabellings.
const (
	maxDepartureEnumeration = 200_000
	departureDraws          = 20_000
)

// DepartureLogRank tests whether the sessions of b depart from the baseline sooner, or
// more often, than those of a: the log-rank statistic, observed minus expected departures
// of b summed over turns with the sessions still alike before each turn at risk, judged
// against its permutation distribution (sessions exchangeable between the groups under
// the null hypothesis that both depart alike). It uses every turn: a group that departs
// at the first turn is told apart from one that departs by the last even when both
// depart in every session.
func DepartureLogRank(a, b []Departure) (DepartureTest, error) {
	for _, d := range append(append([]Departure(nil), a...), b...) {
		if d.Turn < 0 {
			return DepartureTest{}, fmt.Errorf("stats: departure at turn %d", d.Turn)
		}
	}
	out := DepartureTest{P: 1}
	if len(a) == 0 || len(b) == 0 {
		return out, nil
	}
	all := append(append([]Departure(nil), a...), b...)
	turns := 0
	for _, d := range all {
		turns = max(turns, d.Turn+1)
	}
	// The pooled risk set per turn does not depend on the labels: at risk at t are the
	// sessions whose Turn ≥ t; departures at t those that departed there.
	atRisk, departed := make([]float64, turns), make([]float64, turns)
	for _, d := range all {
		for t := 0; t <= d.Turn; t++ {
			atRisk[t]++
		}
		if d.Departed {
			departed[d.Turn]++
		}
	}
	// A session's score is its departure minus its share of the expected departures over
	// the turns it was at risk; the statistic is the sum of group B's scores, so the
	// permutation distribution is that of a sum of len(b) of the scores.
	scores := make([]float64, len(all))
	for i, d := range all {
		var e float64
		for t := 0; t <= d.Turn; t++ {
			e += departed[t] / atRisk[t]
		}
		if d.Departed {
			scores[i] = 1 - e
		} else {
			scores[i] = -e
		}
		if i >= len(a) {
			out.Expected += e
			if d.Departed {
				out.Observed++
			}
		}
	}
	observed := out.Observed - out.Expected
	// Equal scores would make ties of sums fall either side by rounding alone.
	tol := 1e-9 * (1 + math.Abs(observed))
	extreme := func(sum float64) bool { return sum >= observed-tol }
	if binomial(len(all), len(b)) <= maxDepartureEnumeration {
		count, total := 0, 0
		enumerateSums(scores, len(b), func(sum float64) {
			total++
			if extreme(sum) {
				count++
			}
		})
		out.P, out.Exact = float64(count)/float64(total), true
		return out, nil
	}
	rng := rand.New(rand.NewPCG(0x64657061, 0x72747572))
	idx := make([]int, len(all))
	for i := range idx {
		idx[i] = i
	}
	count := 0
	for range departureDraws {
		// A random subset of len(b) sessions: a partial Fisher-Yates shuffle.
		var sum float64
		for j := range len(b) {
			k := j + rng.IntN(len(idx)-j)
			idx[j], idx[k] = idx[k], idx[j]
			sum += scores[idx[j]]
		}
		if extreme(sum) {
			count++
		}
	}
	out.P, out.Draws = float64(1+count)/float64(1+departureDraws), departureDraws
	return out, nil
}

// enumerateSums calls f with the sum of every subset of k of xs.
func enumerateSums(xs []float64, k int, f func(float64)) {
	var walk func(start, left int, sum float64)
	walk = func(start, left int, sum float64) {
		if left == 0 {
			f(sum)
			return
		}
		for i := start; i <= len(xs)-left; i++ {
			walk(i+1, left-1, sum+xs[i])
		}
	}
	walk(0, k, 0)
}
