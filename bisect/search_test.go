package bisect

import (
	"fmt"
	"slices"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// oracle answers a probe exactly: it corrupts when it holds every change of some culprit.
func oracle(culprits ...[]int) func(Probe) stats.StepOutcome {
	return func(p Probe) stats.StepOutcome {
		for _, c := range culprits {
			holds := true
			for _, x := range c {
				if !slices.Contains(p.Changes, x) {
					holds = false
				}
			}
			if holds {
				return stats.StepCorrupts
			}
		}
		return stats.StepClean
	}
}

// drive runs a search to its end with answer deciding every step.
func drive(t *testing.T, s *Search, answer func(Probe) stats.StepOutcome) []Probe {
	t.Helper()
	for range 1000 {
		p, ok := s.Next()
		if !ok {
			return slices.Clone(s.probes)
		}
		if err := s.Record(answer(p)); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the search never ended")
	return nil
}

// subsets lists every k-subset of 0..n-1.
func subsets(n, k int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) == k {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := start; i < n; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

func TestMaxSteps(t *testing.T) {
	for _, tc := range []struct{ n, k, want int }{
		{8, 1, 5}, {8, 2, 9}, {8, 3, 13}, {1, 1, 2}, {2, 2, 4}, {16, 1, 6}, {5, 2, 8},
	} {
		if got := MaxSteps(tc.n, tc.k); got != tc.want {
			t.Errorf("MaxSteps(%d, %d) = %d, want %d", tc.n, tc.k, got, tc.want)
		}
	}
}

// Every culprit of one, two or three changes among 1 to 8 is found exactly, confirmed
// by a step that applies exactly it, within MaxSteps; for 8 changes a single one takes
// at most ceil(log2 8) + 2 = 5 steps and a pair at most 12.
func TestSearchFindsEveryCulpritExactly(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for k := 1; k <= min(3, n); k++ {
			worst := 0
			for _, culprit := range subsets(n, k) {
				s, err := NewSearch(n, MaxSteps(n, k), false)
				if err != nil {
					t.Fatal(err)
				}
				probes := drive(t, s, oracle(culprit))
				c := s.Conclusion()
				if c.Status != store.ConclusionCulprit || !slices.Equal(c.Culprit, culprit) {
					t.Fatalf("n=%d culprit %v: concluded %s %v (%s)", n, culprit, c.Status, c.Culprit, c.Reason)
				}
				last := probes[c.ConfirmedBy-1]
				if last.Role != store.RoleConfirm || !slices.Equal(last.Changes, culprit) {
					t.Fatalf("n=%d culprit %v: confirmed by %+v", n, culprit, last)
				}
				if probes[0].Role != store.RoleReproduce || len(probes[0].Changes) != n {
					t.Fatalf("n=%d: first step %+v is not the reproduction", n, probes[0])
				}
				worst = max(worst, len(probes))
			}
			if worst > MaxSteps(n, k) {
				t.Errorf("n=%d k=%d: took %d steps, MaxSteps says %d", n, k, worst, MaxSteps(n, k))
			}
			if n == 8 && k == 1 && worst > 5 {
				t.Errorf("a single culprit among 8 took %d steps, more than ceil(log2 8) + 2 = 5", worst)
			}
			if n == 8 && k == 2 && worst > 12 {
				t.Errorf("a pair among 8 took %d steps, more than 12", worst)
			}
			t.Logf("n=%d, culprit of %d: at most %d steps", n, k, worst)
		}
	}
}

// The refserve story: changes 3 and 6 (1-based) corrupt only together. Every subset
// with one of them and not the other is clean; the search names the pair in 8 steps.
func TestSearchPairNeitherAloneCorrupts(t *testing.T) {
	s, _ := NewSearch(8, MaxSteps(8, 2), false)
	probes := drive(t, s, oracle([]int{2, 5}))
	var got []string
	for _, p := range probes {
		got = append(got, fmt.Sprint(p.Role, p.Changes))
	}
	want := []string{
		"reproduce[0 1 2 3 4 5 6 7]", "search[0 1 2 3]", "search[0 1 2 3 4 5]", "search[0 1 2 3 4]",
		"confirm[5]", "search[0 1 5]", "search[0 1 2 5]", "confirm[2 5]",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("steps\n%v\nwant\n%v", got, want)
	}
	if c := s.Conclusion(); !slices.Equal(c.Culprit, []int{2, 5}) || c.ConfirmedBy != 8 {
		t.Fatalf("conclusion %+v", c)
	}
}

// With two culprits the search names one of them, minimal; the revert check then says
// that another remains.
func TestSearchTwoCulpritsRevertCheck(t *testing.T) {
	s, _ := NewSearch(8, MaxSteps(8, 2)+1, true)
	probes := drive(t, s, oracle([]int{1}, []int{4, 6}))
	c := s.Conclusion()
	if c.Status != store.ConclusionCulprit || !(slices.Equal(c.Culprit, []int{1}) || slices.Equal(c.Culprit, []int{4, 6})) {
		t.Fatalf("conclusion %+v", c)
	}
	if c.Revert != string(stats.StepCorrupts) || probes[c.RevertStep-1].Role != store.RoleRevert {
		t.Fatalf("revert check %s at step %d, want corrupts", c.Revert, c.RevertStep)
	}
	s, _ = NewSearch(8, MaxSteps(8, 2)+1, true)
	drive(t, s, oracle([]int{3}))
	if c := s.Conclusion(); c.Revert != string(stats.StepClean) {
		t.Fatalf("single culprit: revert %s, want clean (%s)", c.Revert, c.Reason)
	}
}

func TestSearchEndings(t *testing.T) {
	t.Run("not reproduced", func(t *testing.T) {
		s, _ := NewSearch(8, 9, false)
		drive(t, s, oracle())
		if c := s.Conclusion(); c.Status != store.ConclusionNotReproduced || c.Steps != 1 {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("inconclusive search step", func(t *testing.T) {
		s, _ := NewSearch(8, 9, false)
		truth := oracle([]int{5})
		drive(t, s, func(p Probe) stats.StepOutcome {
			if p.Step == 3 {
				return stats.StepInconclusive
			}
			return truth(p)
		})
		c := s.Conclusion()
		// Step 2 applied changes 1-4 (clean), step 3 changes 1-6: the culprit's last
		// member lies among changes 5 to 8.
		if c.Status != store.ConclusionUncertain || c.StoppedAt != 3 || !slices.Equal(c.Candidates, []int{4, 5, 6, 7}) || len(c.Known) != 0 {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("lower ends the search", func(t *testing.T) {
		s, _ := NewSearch(8, 9, false)
		drive(t, s, func(Probe) stats.StepOutcome { return stats.StepLower })
		if c := s.Conclusion(); c.Status != store.ConclusionUncertain || c.StoppedAt != 1 {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("contradiction", func(t *testing.T) {
		// The culprit is change 1: steps 2-4 shrink the prefix to it, and its
		// confirmation comes out clean, against step 4.
		s, _ := NewSearch(8, 9, false)
		truth := oracle([]int{0})
		drive(t, s, func(p Probe) stats.StepOutcome {
			if p.Role == store.RoleConfirm {
				return stats.StepClean
			}
			return truth(p)
		})
		if c := s.Conclusion(); c.Status != store.ConclusionUncertain || c.StoppedAt != 5 || !slices.Equal(c.Known, []int{0}) {
			t.Fatalf("%+v", c)
		}
	})
	t.Run("budget", func(t *testing.T) {
		s, _ := NewSearch(8, MaxSteps(8, 2), false)
		probes := drive(t, s, oracle([]int{1, 3, 6}))
		c := s.Conclusion()
		if c.Status != store.ConclusionUncertain || len(probes) != MaxSteps(8, 2) || len(c.Known) != 2 {
			t.Fatalf("%d steps, %+v", len(probes), c)
		}
	})
	t.Run("too few steps", func(t *testing.T) {
		if _, err := NewSearch(8, 4, false); err == nil {
			t.Fatal("a budget of 4 steps for 8 changes was accepted")
		}
	})
}

// Replaying recorded outcomes asks for the same steps: a resumed bisection continues
// where the killed one stopped.
func TestSearchReplay(t *testing.T) {
	truth := oracle([]int{2, 5})
	a, _ := NewSearch(8, 9, false)
	full := drive(t, a, truth)
	b, _ := NewSearch(8, 9, false)
	for i := range 4 {
		p, _ := b.Next()
		if again, _ := b.Next(); !slices.Equal(again.Changes, p.Changes) || again.Step != p.Step {
			t.Fatalf("Next before Record changed the probe: %+v then %+v", p, again)
		}
		if !slices.Equal(p.Changes, full[i].Changes) {
			t.Fatalf("step %d: %v, first run %v", i+1, p.Changes, full[i].Changes)
		}
		b.Record(truth(p))
	}
	rest := drive(t, b, truth)
	if len(rest) != len(full) {
		t.Fatalf("replayed search took %d steps, first run %d", len(rest), len(full))
	}
	if err := b.Record(stats.StepClean); err == nil {
		t.Fatal("an outcome after the end was accepted")
	}
}
