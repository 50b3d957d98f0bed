package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// inverseBinomial draws Binomial(n, p) from one uniform by walking the cdf up from 0:
// a few steps at the rates of serving faults.
func inverseBinomial(rng *rand.Rand, n int, p float64) int {
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return n
	}
	u := rng.Float64()
	f := math.Pow(1-p, float64(n))
	cdf := f
	x := 0
	for cdf < u && x < n {
		f *= float64(n-x) / float64(x+1) * p / (1 - p)
		x++
		cdf += f
	}
	return x
}

// launchRate draws one launch's corruption probability: a beta distribution with mean
// mu whose intra-class correlation rho is the share of the session-level variance that
// lies between launches.
func launchRate(rng *rand.Rand, mu, rho float64) float64 {
	if rho == 0 {
		return mu
	}
	s := 1/rho - 1
	return distuv.Beta{Alpha: mu * s, Beta: (1 - mu) * s, Src: rng}.Rand()
}

// The launch unit's size: under the null (both arms' launches drawn alike) the test
// must reject in [0.04, 0.055] of experiments at 2, 4 and 8 launches per arm, 60
// sessions per launch, base rates 0.05 to 0.2 and launches that differ between
// themselves (intra-launch correlation 0.01 and 0.02: at 10% a launch's own rate then
// varies by 3 to 4 points). The chi-square test corrected by a design effect, which the
// launch unit used before, is logged beside it: it rejects too often with few launches.
func TestLaunchTTestSizeWithFewLaunches(t *testing.T) {
	t.Parallel()
	for _, launches := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("%d launches", launches), func(t *testing.T) {
			t.Parallel()
			launchSize(t, launches)
		})
	}
}

// launchSize simulates null experiments with the given launches per arm.
func launchSize(t *testing.T, launches int) {
	const reps = 20000
	for _, mu := range []float64{0.05, 0.1, 0.2} {
		for _, rho := range []float64{0.01, 0.02} {
			rng := rand.New(rand.NewPCG(uint64(launches), math.Float64bits(mu)^math.Float64bits(rho)))
			a := make([]ClusterCounts, launches)
			b := make([]ClusterCounts, launches)
			rejected, donner := 0, 0
			for r := 0; r < reps; r++ {
				for j := 0; j < launches; j++ {
					a[j] = ClusterCounts{Events: inverseBinomial(rng, 60, launchRate(rng, mu, rho)), Responses: 60}
					b[j] = ClusterCounts{Events: inverseBinomial(rng, 60, launchRate(rng, mu, rho)), Responses: 60}
				}
				lt, err := LaunchTTest(a, b, 0.95)
				if err != nil {
					t.Fatal(err)
				}
				if Reject(lt.P, 0.05) {
					rejected++
				}
				if d, err := DonnerAdjusted(a, b); err == nil && Reject(d.P, 0.05) {
					donner++
				}
			}
			size := float64(rejected) / reps
			t.Logf("%d launches per arm, rate %.2f, intra-launch correlation %.2f: size %.4f over %d null experiments (the design-effect chi-square: %.4f)",
				launches, mu, rho, size, reps, float64(donner)/reps)
			if size < 0.04 || size > 0.055 {
				t.Errorf("%d launches, rate %.2f, rho %.2f: size %.4f outside [0.04, 0.055]", launches, mu, rho, size)
			}
		}
	}
}

func TestLaunchTTestNeedsTwoLaunchesPerArm(t *testing.T) {
	one := []ClusterCounts{{0, 60}}
	two := []ClusterCounts{{9, 60}, {7, 60}}
	lt, err := LaunchTTest(one, two, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	if lt.Possible || !math.IsNaN(lt.P) || len(lt.Warnings) == 0 || !strings.Contains(string(lt.Warnings[len(lt.Warnings)-1]), "no launch-level conclusion is possible") {
		t.Errorf("one launch against two: %+v", lt)
	}
	// A launch that produced no analysed session does not count towards the minimum.
	lt, _ = LaunchTTest([]ClusterCounts{{0, 60}, {0, 0}}, two, 0.95)
	if lt.Possible || lt.LaunchesA != 1 {
		t.Errorf("a launch without sessions counted: %+v", lt)
	}
	lt, _ = LaunchTTest([]ClusterCounts{{0, 60}, {0, 60}}, two, 0.95)
	if !lt.Possible || lt.DF != 2 || !Reject(lt.P, 0.05) {
		t.Errorf("0/60, 0/60 against 9/60, 7/60: %+v", lt)
	}
	if _, err := LaunchTTest([]ClusterCounts{{3, 2}}, two, 0.95); err == nil {
		t.Error("3 events of 2 sessions accepted")
	}
}

func TestLaunchTestJSONWritesUndefinedFiguresAsNull(t *testing.T) {
	lt, _ := LaunchTTest([]ClusterCounts{{0, 60}}, []ClusterCounts{{9, 60}, {7, 60}}, 0.95)
	b, err := json.Marshal(lt)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if m["possible"] != false || m["p"] != nil || m["ci95"].([]any)[0] != nil {
		t.Errorf("no conclusion possible: %s", b)
	}
	f, _ := FactorialFamily(FactorialFamilyInput{Alpha: 0.05, Arms: []string{"a", "b"}, Cells: []FactorialCell{
		{Levels: map[string]int{"x": 0}, N: 10}, {Levels: map[string]int{"x": 1}, N: 0}}})
	if _, err := json.Marshal(f); err != nil {
		t.Errorf("a family with untested claims does not marshal: %v", err)
	}
}
