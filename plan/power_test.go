package plan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// The plan's power table is the verdict's tests at the verdict's levels: nothing at one
// launch per arm without a floor, Welch's test at two and three, the randomization test
// from four, each primary claim at its share of alpha (0.6 of it, split over the
// comparisons, beside the speed claims); the floor's test from one launch.
func TestPowerTableUsesTheVerdictsTestsAndLevels(t *testing.T) {
	s := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0.05, p1: 0.15, launch_icc: 0.1}", "")
	p, err := Compute(Options{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.PowerByLaunches) != len(TableLaunches) {
		t.Fatalf("table %+v", p.PowerByLaunches)
	}
	for _, r := range p.PowerByLaunches {
		test, level := "randomization", 0.03
		switch {
		case r.Launches == 1:
			test, level = "", 0
		case r.Launches < 4:
			test = "Welch"
		}
		if r.Test != test || math.Abs(r.Level-level) > 1e-12 || math.Abs(r.FloorLevel-0.03) > 1e-12 {
			t.Errorf("%d launches: %+v, want %q at %g and the floor's at 0.03", r.Launches, r, test, level)
		}
		if r.Launches == 1 && r.Power != 0 {
			t.Errorf("one launch without a floor has power %g", r.Power)
		}
	}
	three, err := arms.Parse("plan.yaml", []byte(`version: 1
name: plan-test
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
  other:     {env: {BF16_INDEX_K: "2"}}
workload: {kind: toolcall-agent, sessions: 60, rounds: 4, seed: 1}
analysis: {baseline: control, plan: {p0: 0.05, p1: 0.15, launch_icc: 0.1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err = Compute(Options{Spec: three})
	if err != nil {
		t.Fatal(err)
	}
	if r, six := p.PowerByLaunches[3], p.PowerByLaunches[4]; p.Comparisons != 2 || r.Level != 0 || math.Abs(six.Level-0.015) > 1e-12 {
		t.Errorf("two comparisons: at 4 launches %+v (the randomization test cannot reach 0.015), at 6 %+v", r, six)
	}
}

// The power without a floor at 4 launches per arm, 5% against 15% at ICC 0.1 and 60
// sessions a launch, agrees with a simulation written apart from the plan's: gonum's
// beta and binomial draws and stats.LaunchPermutation at the claim's level 0.03.
func TestPowerMatchesAnIndependentSimulation(t *testing.T) {
	s := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0.05, p1: 0.15, launch_icc: 0.1}", "launches: 4")
	p, err := Compute(Options{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	const reps, icc, m = 3000, 0.1, 60
	rng := rand.New(rand.NewPCG(7, 11))
	rate := func(mu float64) float64 {
		k := (1 - icc) / icc
		q := distuv.Beta{Alpha: mu * k, Beta: (1 - mu) * k, Src: rng}.Rand()
		return distuv.Binomial{N: m, P: q, Src: rng}.Rand() / m
	}
	hits := 0
	for range reps {
		a, b := make([]float64, 4), make([]float64, 4)
		for i := range a {
			a[i], b[i] = rate(0.05), rate(0.15)
		}
		r, err := stats.LaunchPermutation(a, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.P <= 0.03 && r.Difference > 0 {
			hits++
		}
	}
	want := float64(hits) / reps
	row := p.PowerByLaunches[3]
	se := math.Sqrt(want*(1-want)/reps + row.Power*(1-row.Power)/float64(row.Reps))
	t.Logf("4 launches per arm: plan %.3f over %d, independent %.3f over %d", row.Power, row.Reps, want, reps)
	if row.Launches != 4 || math.Abs(row.Power-want) > 3*se || p.LaunchPower != row.Power {
		t.Errorf("plan's power %.3f (%+v), independent simulation %.3f ± %.3f", row.Power, row, want, 3*se)
	}
	// A difference this size against launches this varied needs far more than 8
	// launches per arm: the search goes past them.
	if n := p.LaunchesNeeded; n <= 8 || n > 24 {
		t.Errorf("launches needed %d, want between 9 and 24", n)
	} else {
		model := newPowerModel(s, 2, 0.05, 0.15, icc, icc, m, 1)
		if model.row(n).Power < 0.8 || model.row(n-1).Power >= 0.8 {
			t.Errorf("launches needed %d: power %g there, %g at one fewer", n, model.row(n).Power, model.row(n-1).Power)
		}
	}
}

// With a measured floor (its upper bound of the ICC), one launch per arm decides a large
// difference: 0% against 50% is claimed almost always, and the plan says the verdict
// will use the floor's test.
func TestPlanWithAFloorDecidesWithOneLaunch(t *testing.T) {
	s := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0, p1: 0.5}", "")
	p, err := Compute(Options{Spec: s, NoiseFloorICC: 0.05, NoiseFloorBasis: "the 95% upper bound measured by A/A experiment 3"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.FloorMeasured || p.LaunchTest != string(stats.TestFloor) || math.Abs(p.LaunchLevel-0.03) > 1e-12 || p.LaunchICC != 0.05 || p.FloorICC != 0.05 {
		t.Errorf("floor plan: %+v", p)
	}
	if p.LaunchPower < 0.9 || p.LaunchesNeededFloor != 1 || p.PowerByLaunches[0].Power != 0 {
		t.Errorf("one launch with the floor: power %g, launches needed %d; without: %g", p.LaunchPower, p.LaunchesNeededFloor, p.PowerByLaunches[0].Power)
	}
	var text strings.Builder
	p.WriteText(&text)
	for _, want := range []string{"decided by the noise floor's test at 0.03", "with a noise floor (ICC bound 0.05)", "A/A experiment 3"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// From three launches per arm the verdict tests the arms on their own launches, floor or
// not, so the plan's floor column is the plain one there.
func TestPlanFloorColumnFromThreeLaunchesIsThePlainOne(t *testing.T) {
	s := spec(t, "sessions: 60, rounds: 4, seed: 1", "plan: {p0: 0, p1: 0.12}", "")
	p, err := Compute(Options{Spec: s, NoiseFloorICC: 0.1, NoiseFloorBasis: "the 90% upper bound measured by A/A experiment 3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.PowerByLaunches {
		if r.Launches >= 3 && (r.FloorPower != r.Power || r.FloorLevel != r.Level) {
			t.Errorf("%d launches: floor power %g at %g, plain %g at %g; want the same", r.Launches, r.FloorPower, r.FloorLevel, r.Power, r.Level)
		}
		if r.Launches == 1 && (r.FloorLevel == 0 || r.Level != 0) {
			t.Errorf("1 launch: the floor's level %g, plain %g; only the floor can test one launch", r.FloorLevel, r.Level)
		}
	}
}

// countsP is the launch randomization test itself: on counts of equal launches it gives
// stats.LaunchPermutation's p exactly, ties, empty launches and unequal arms included.
func TestCountsPIsTheLaunchTest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var ways []float64
	for trial := range 400 {
		na, nb := 1+rng.IntN(7), 1+rng.IntN(7)
		m := 1 + rng.IntN(60)
		a, b := make([]int, na), make([]int, nb)
		ra, rb := make([]float64, na), make([]float64, nb)
		for i := range a {
			a[i] = rng.IntN(min(m, 1+trial%8) + 1)
			ra[i] = float64(a[i]) / float64(m)
		}
		for i := range b {
			b[i] = rng.IntN(m + 1)
			rb[i] = float64(b[i]) / float64(m)
		}
		var p float64
		p, ways = countsP(a, b, ways)
		want, err := stats.LaunchPermutation(ra, rb, 0)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(p-want.P) > 1e-12 {
			t.Fatalf("a %v b %v of %d: p %g, stats %g", a, b, m, p, want.P)
		}
	}
}

// BenchmarkCompute is the cost of `arbiter plan` for a difference that needs many
// launches: the table and the search past it.
func BenchmarkCompute(b *testing.B) {
	s, err := specFor("sessions: 240, rounds: 4, seed: 1", "plan: {p0: 0.05, p1: 0.15, launch_icc: 0.1}", "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Compute(Options{Spec: s}); err != nil {
			b.Fatal(err)
		}
	}
}
