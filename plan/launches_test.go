package plan

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// loadExample loads the example spec of that name and counts its arms.
func loadExample(t *testing.T, name string) (*arms.Spec, int) {
	t.Helper()
	s, err := arms.Load(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	return s, len(a)
}

// SpecLaunches on the examples: four launches per arm reach the corruption claim's 0.03
// with the randomization test's smallest p 2/70 (what make demo prints); one launch per
// arm reaches nothing; of eight looks, only the last three (six launches per arm and more)
// can reach a level, so 0.03 is spread over them: 0.01 each.
func TestSpecLaunchesOfTheExamples(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	s, n := loadExample(t, "quickstart-launches.yaml")
	l := SpecLaunches(s, n)
	if l.PerArm != 4 || l.Test != string(stats.TestRandomization) || !near(l.MinP, 2.0/70) || !near(l.PrimaryLevel, 0.03) || !l.CanClaim {
		t.Errorf("quickstart-launches: %+v; want 4 per arm, randomization, min p 2/70, level 0.03, a claim", l)
	}

	s, n = loadExample(t, "quickstart.yaml")
	if l := SpecLaunches(s, n); l.PerArm != 1 || l.Test != string(stats.TestNone) || l.CanClaim {
		t.Errorf("quickstart: %+v; want one launch per arm and no test", l)
	}

	// A throughput run's primary claims are tok/s, one per phase (three here), which
	// share the primary part of alpha as the verdict shares it.
	s, n = loadExample(t, "throughput.yaml")
	if l := SpecLaunches(s, n); l.PerArm != 4 || !near(l.PrimaryLevel, 0.01) {
		t.Errorf("throughput: %+v; want 4 per arm, each primary claim at 0.03 / 3 phases", l)
	}
	// Those claims are tested on the logs of the launches' medians, which reach any level
	// from two launches a side: the verdict of four launches per arm tests them at 0.01,
	// and validate must not say that only five could (the randomization test's count).
	for _, b := range []int{2, 4} {
		s.Blocks = b
		if l := SpecLaunches(s, n); !l.CanClaim || l.Test != TestLaunchMedians || !strings.Contains(l.Sentence(), "by the t test on the logs of the launches' medians") || !strings.Contains(l.Sentence(), "`arbiter plan` reads from a recorded run") {
			t.Errorf("throughput, %d launches per arm: %+v (%s); want the t test on launch medians, able to claim", b, l, l.Sentence())
		}
	}
	s.Blocks = 1
	if l := SpecLaunches(s, n); l.CanClaim || l.Needed != 2 || !strings.Contains(l.Sentence(), "one launch per arm cannot be tested") {
		t.Errorf("throughput, one launch per arm: %+v (%s)", l, l.Sentence())
	}
	s.Analysis.NoiseFloor = "aa"
	if l := SpecLaunches(s, n); !l.CanClaim || l.Test != string(stats.TestFloor) {
		t.Errorf("throughput, one launch per arm against a floor: %+v", l)
	}

	s, n = loadExample(t, "sequential.yaml")
	l = SpecLaunches(s, n)
	if l.PerArm != 8 || l.Test != string(stats.TestRandomization) || !near(l.PrimaryLevel, 0.01) || !l.CanClaim {
		t.Errorf("sequential: %+v; want 8 per arm, randomization at 0.01 on the last look, a claim", l)
	}
	if levels := stats.SequentialLookLevels(0.05, 1, 8); levels[4] != 0 || !near(levels[5], 0.01) {
		t.Errorf("sequential.yaml's looks: levels %v; want none before look 6, 0.01 from it", levels)
	}
}

// What the spec's launches can claim (validate's and plan's line) and the power table's
// row of as many launches test the primary claim at one level: both count the claims the
// verdict makes (four speed claims per arm and group beside each rate claim), with a
// floor and without, for every example.
func TestSpecLaunchesAndThePowerTableAgree(t *testing.T) {
	for _, name := range []string{"quickstart.yaml", "quickstart-launches.yaml", "factorial.yaml", "throughput.yaml", "abort-wedge.yaml", "noise-floor.yaml"} {
		s, nArms := loadExample(t, name)
		for _, launches := range []int{1, 2, 4, 8} {
			s.Blocks = launches
			l := SpecLaunches(s, nArms)
			m := newPowerModel(s, nArms, 0.01, 0.2, 0.02, 0.02, 60, 1)
			want := m.level(launches, s.Analysis.NoiseFloor != "")
			if want > 0 && math.Abs(l.PrimaryLevel-want) > 1e-12 {
				t.Errorf("%s, %d launches per arm: validate tests the primary claim at %g, the power table at %g", name, launches, l.PrimaryLevel, want)
			}
		}
	}
}

// Launches that cannot reach their claims' level are told how many can: the KV-cache
// example's four arms test each claim at 0.01, which four launches per arm cannot reach
// (smallest p 2/70) and five can (2/252); two launches, where Welch's test would take
// over, is not the advice for someone who already runs four.
func TestSpecLaunchesAdviseLaunchesThatReachTheLevel(t *testing.T) {
	s, n := loadExample(t, "ollama-kv-cache.yaml")
	s.Blocks = 4
	l := SpecLaunches(s, n)
	if l.CanClaim || l.Needed != 5 || l.PrimaryLevel != 0.01 {
		t.Errorf("four launches of ollama-kv-cache: %+v; want no claim at 0.01 and 5 launches advised", l)
	}
	s.Blocks = 5
	if l := SpecLaunches(s, n); !l.CanClaim {
		t.Errorf("five launches of ollama-kv-cache: %+v; want a claim", l)
	}
}
