package stats

import (
	"math"
	"testing"
)

// Two sessions that departed at the first turn against two alike through the second:
// the log-rank statistic worked by hand (turn 0: 2 of 4 at risk depart, so each
// session at risk expects 0.5; turn 1: none of 2) is O − E = 2 − 1 = 1, and of the six
// relabellings only the observed one reaches it.
func TestDepartureLogRankByHand(t *testing.T) {
	a := []Departure{{Turn: 1}, {Turn: 1}}
	b := []Departure{{Turn: 0, Departed: true}, {Turn: 0, Departed: true}}
	r, err := DepartureLogRank(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Observed != 2 || r.Expected != 1 || !r.Exact || math.Abs(r.P-1.0/6) > 1e-12 {
		t.Errorf("%+v, want observed 2, expected 1, exact p 1/6", r)
	}
	// The other way round nothing is extreme but the relabellings at least as large.
	if r, _ := DepartureLogRank(b, a); math.Abs(r.P-1) > 1e-12 || r.Observed != 0 {
		t.Errorf("reversed: %+v, want p 1", r)
	}
}

// Departing at the first turn is told apart from departing at the last, though both
// groups depart in every session: whole-session counts (Fisher) cannot see it.
func TestDepartureLogRankUsesTheTurns(t *testing.T) {
	var early, late []Departure
	for range 8 {
		early = append(early, Departure{Turn: 0, Departed: true})
		late = append(late, Departure{Turn: 3, Departed: true})
	}
	r, err := DepartureLogRank(late, early)
	if err != nil {
		t.Fatal(err)
	}
	// Complete separation: only the observed labelling of 8 of 16 reaches the statistic.
	if want := 1 / 12870.0; !r.Exact || math.Abs(r.P-want) > 1e-12 {
		t.Errorf("p = %g (exact %v), want 1/C(16,8) = %g", r.P, r.Exact, want)
	}
	if f := FisherExact(8, 8, 8, 8).PGreater; f != 1 {
		t.Errorf("Fisher on whole sessions: %g, want 1 (it cannot tell them apart)", f)
	}
}

// Beyond what is enumerated, the drawn p agrees with the exact one within its error.
func TestDepartureLogRankDrawsAgreeWithEnumeration(t *testing.T) {
	var a, b []Departure
	for i := range 13 {
		a = append(a, Departure{Turn: i % 4, Departed: i%3 == 0})
		b = append(b, Departure{Turn: i % 3, Departed: i%2 == 0})
	}
	r, err := DepartureLogRank(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exact || r.Draws != departureDraws {
		t.Fatalf("%+v: want drawn relabellings for C(26,13)", r)
	}
	// The exact p, by enumerating all C(26,13) = 10,400,600 relabellings.
	all := append(append([]Departure(nil), a...), b...)
	scores := departureScores(t, all)
	var obs float64
	for _, s := range scores[len(a):] {
		obs += s
	}
	count, total := 0, 0
	enumerateSums(scores, len(b), func(sum float64) {
		total++
		if sum >= obs-1e-9*(1+math.Abs(obs)) {
			count++
		}
	})
	exact := float64(count) / float64(total)
	if se := math.Sqrt(exact * (1 - exact) / departureDraws); math.Abs(r.P-exact) > 4*se+1e-4 {
		t.Errorf("drawn p %g, exact %g (se %g)", r.P, exact, se)
	}
}

// departureScores recomputes each session's log-rank score with the risk sets counted
// directly, as a check on DepartureLogRank's own.
func departureScores(t *testing.T, all []Departure) []float64 {
	t.Helper()
	out := make([]float64, len(all))
	for i, d := range all {
		var e float64
		for turn := 0; turn <= d.Turn; turn++ {
			n, k := 0.0, 0.0
			for _, o := range all {
				if o.Turn >= turn {
					n++
					if o.Departed && o.Turn == turn {
						k++
					}
				}
			}
			e += k / n
		}
		out[i] = -e
		if d.Departed {
			out[i] = 1 - e
		}
	}
	return out
}

func TestDepartureLogRankRefusesNegativeTurns(t *testing.T) {
	if _, err := DepartureLogRank([]Departure{{Turn: -1}}, []Departure{{Turn: 0}}); err == nil {
		t.Error("a negative turn was accepted")
	}
	if r, err := DepartureLogRank(nil, []Departure{{Turn: 0}}); err != nil || r.P != 1 {
		t.Errorf("an empty group: %+v, %v", r, err)
	}
}
