package stats

import (
	"math"
	"testing"
)

func TestLookLevelsChargesOnlyLooksThatCanReject(t *testing.T) {
	// Eight looks of a randomization test adding one launch per arm per look. Spread over
	// looks k..8, 0.03 gives each 0.03/(9 − k); the first look whose smallest p (2/C(2k, k))
	// is within that is look 6 (2/924 against 0.01); look 5 needs 2/252 = 0.0079 against
	// 0.0075.
	var minP []float64
	for k := 1; k <= 8; k++ {
		minP = append(minP, MinAttainableP(k, k))
	}
	levels, first := LookLevels(0.03, minP)
	if first != 6 {
		t.Fatalf("first charged look %d, want 6; levels %v", first, levels)
	}
	for k, l := range levels {
		want := 0.0
		if k+1 >= first {
			want = 0.03 / 3
		}
		if !closeTo(l, want, 1e-12, 0) {
			t.Errorf("look %d level %g, want %g", k+1, l, want)
		}
	}
	if sum := sumOf(levels); sum > 0.03*(1+1e-12) {
		t.Errorf("looks charged %g in all, above the share 0.03", sum)
	}
	if _, first := LookLevels(0.01, []float64{1, 1.0 / 3}); first != 0 {
		t.Errorf("looks that can never reach 0.01 were charged from look %d", first)
	}
}

func sumOf(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func TestAllotAlpha(t *testing.T) {
	t.Run("a claim that cannot reach passes its share on", func(t *testing.T) {
		// Four launches a side: corruption (primary) and 16 speed rows on the
		// randomization test, whose smallest p is 2/70 = 0.029. No speed row can reach
		// 0.4·0.05/16, so the corruption claim gets the whole alpha.
		claims := []Reach{FixedReach(true, 2.0/70)}
		for i := 0; i < 16; i++ {
			claims = append(claims, FixedReach(false, 2.0/70))
		}
		got := AllotAlpha(0.05, claims)
		if !closeTo(got[0].Level(), 0.05, 1e-12, 0) {
			t.Errorf("primary level %g, want the whole 0.05", got[0].Level())
		}
		for i, a := range got[1:] {
			if a.Testable() || a.Level() != 0 {
				t.Errorf("speed row %d given %g though its test cannot reach it", i, a.Level())
			}
		}
	})
	t.Run("claims that can all reach share by weight", func(t *testing.T) {
		got := AllotAlpha(0.05, []Reach{FixedReach(true, 0), FixedReach(false, 0), FixedReach(false, 0)})
		want := []float64{0.03, 0.01, 0.01}
		for i, a := range got {
			if !closeTo(a.Level(), want[i], 1e-12, 0) {
				t.Errorf("claim %d level %g, want %g", i, a.Level(), want[i])
			}
		}
	})
	t.Run("dropping one lets the others reach", func(t *testing.T) {
		// A primary claim that can never reach is dropped first; the two others then share
		// the whole 0.05 (0.025 each), below 2/70, so that one is dropped and the last
		// takes all of it.
		got := AllotAlpha(0.05, []Reach{FixedReach(true, 1), FixedReach(false, 2.0/70), FixedReach(false, 0.015)})
		if got[0].Testable() {
			t.Errorf("a primary claim that can never reach was given %g", got[0].Level())
		}
		if got[1].Testable() {
			t.Errorf("claim at min p 2/70 given %g; the claim that could reach should take the share", got[1].Level())
		}
		if !closeTo(got[2].Level(), 0.05, 1e-12, 0) {
			t.Errorf("the only claim that can reach has level %g, want the whole 0.05", got[2].Level())
		}
	})
	t.Run("levels never sum above alpha", func(t *testing.T) {
		for n := 1; n <= 20; n++ {
			var claims []Reach
			for i := 0; i < n; i++ {
				claims = append(claims, Reach{Primary: i%3 == 0, MinP: []float64{1, 0.2, float64(i%5) / 100}})
			}
			total := 0.0
			for _, a := range AllotAlpha(0.05, claims) {
				total += sumOf(a.Looks)
				if a.Testable() && !(a.Looks[a.FirstLook-1] > 0) {
					t.Fatalf("a testable claim has a zero level at its first look")
				}
			}
			if total > 0.05*(1+1e-12) || math.IsNaN(total) {
				t.Errorf("%d claims: levels sum to %g, above alpha", n, total)
			}
		}
	})
}
