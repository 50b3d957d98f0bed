package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// floorRef is testdata/floor/reference.json, written by gen.py with numpy and scipy.
type floorRef struct {
	ICC []struct {
		Counts, Sizes []int
		Est           float64
	}
	Spread []struct {
		Groups          [][]float64
		Conf, SD, Upper float64
		DF              int
	}
	Welch []struct {
		A, B                []float64
		Conf, P, DF, Lo, Hi float64
	}
	Contrast []struct {
		Terms                [][3]float64
		Conf, Est, Lo, Hi, P float64
	}
	Effective []struct {
		Counts, Sizes    []int
		ICC              float64
		Events, Sessions float64
	}
}

func loadFloorRef(t *testing.T) floorRef {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "floor", "reference.json"))
	if err != nil {
		t.Fatalf("reference values (regenerate with testdata/floor/gen.py): %v", err)
	}
	var ref floorRef
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatalf("testdata/floor/reference.json: %v", err)
	}
	if len(ref.ICC) < 20 || len(ref.Spread) < 20 || len(ref.Welch) < 20 || len(ref.Contrast) < 20 || len(ref.Effective) < 20 {
		t.Fatalf("testdata/floor/reference.json holds too few cases: %d icc, %d spread, %d welch, %d contrast, %d effective",
			len(ref.ICC), len(ref.Spread), len(ref.Welch), len(ref.Contrast), len(ref.Effective))
	}
	return ref
}

func launchesOf(counts, sizes []int) []ClusterCounts {
	out := make([]ClusterCounts, len(counts))
	for i := range counts {
		out[i] = ClusterCounts{Events: counts[i], Responses: sizes[i]}
	}
	return out
}

func TestFloorStatisticsMatchReference(t *testing.T) {
	ref := loadFloorRef(t)
	for i, c := range ref.ICC {
		est, upper := ICCBound(launchesOf(c.Counts, c.Sizes), 0.95)
		if !closeTo(est, c.Est, 1e-9, 1e-12) {
			t.Errorf("icc case %d %v/%v: estimate %.12g, scipy %.12g", i, c.Counts, c.Sizes, est, c.Est)
		}
		if !(upper >= est) || upper > 1 {
			t.Errorf("icc case %d %v/%v: upper bound %g is not in [estimate %g, 1]", i, c.Counts, c.Sizes, upper, est)
		}
	}
	for i, c := range ref.Spread {
		sd, upper, df := SpreadBound(c.Groups, c.Conf)
		if df != c.DF || !closeTo(sd, c.SD, 1e-9, 1e-14) || !closeTo(upper, c.Upper, 1e-7, 1e-14) {
			t.Errorf("spread case %d: sd %.12g upper %.12g df %d, scipy %.12g %.12g %d", i, sd, upper, df, c.SD, c.Upper, c.DF)
		}
	}
	for i, c := range ref.Welch {
		r, err := LaunchWelch(c.A, c.B, c.Conf)
		if err != nil {
			t.Fatalf("welch case %d: %v", i, err)
		}
		if !closeTo(r.P, c.P, 1e-6, 1e-12) || !closeTo(r.DF, c.DF, 1e-9, 1e-12) ||
			!closeTo(r.CI.Lo, c.Lo, 1e-6, 1e-10) || !closeTo(r.CI.Hi, c.Hi, 1e-6, 1e-10) {
			t.Errorf("welch case %d %v %v: p %.10g df %.10g [%.10g, %.10g], scipy p %.10g df %.10g [%.10g, %.10g]",
				i, c.A, c.B, r.P, r.DF, r.CI.Lo, r.CI.Hi, c.P, c.DF, c.Lo, c.Hi)
		}
	}
	for i, c := range ref.Contrast {
		terms := make([]RateTerm, len(c.Terms))
		for j, tm := range c.Terms {
			terms[j] = RateTerm{Coef: tm[0], Events: tm[1], Sessions: tm[2]}
		}
		est, ci, p := Contrast(terms, c.Conf)
		if !closeTo(est, c.Est, 1e-9, 1e-12) || !closeTo(ci.Lo, c.Lo, 1e-7, 1e-10) || !closeTo(ci.Hi, c.Hi, 1e-7, 1e-10) ||
			!closeTo(p, c.P, 1e-5, 1e-12) {
			t.Errorf("contrast case %d %v: %.10g [%.10g, %.10g] p %.8g, scipy %.10g [%.10g, %.10g] p %.8g",
				i, c.Terms, est, ci.Lo, ci.Hi, p, c.Est, c.Lo, c.Hi, c.P)
		}
	}
	for i, c := range ref.Effective {
		got := EffectiveCounts(1, launchesOf(c.Counts, c.Sizes), c.ICC)
		if !closeTo(got.Events, c.Events, 1e-12, 1e-12) || !closeTo(got.Sessions, c.Sessions, 1e-12, 1e-12) {
			t.Errorf("effective case %d: %g of %g, python %g of %g", i, got.Events, got.Sessions, c.Events, c.Sessions)
		}
	}
}

// The bound is used as if the true correlation were at or below it: it must cover the
// truth at least its confidence of the time, also at the low rates where the normal
// model's bound does not (0.64 at a correlation of 0.1 and a rate of 2%).
func TestICCBoundCoversTheTruth(t *testing.T) {
	cells := []struct {
		icc, p float64
		k      int
	}{{0.02, 0.1, 8}, {0.1, 0.02, 8}, {0.1, 0.15, 16}}
	if testing.Short() {
		cells = cells[:2]
	}
	const reps = 200
	for _, c := range cells {
		rng := rand.New(rand.NewPCG(uint64(c.k), math.Float64bits(c.icc+c.p)))
		cover, defined := 0, 0
		for r := 0; r < reps; r++ {
			ls := make([]ClusterCounts, c.k)
			for i := range ls {
				ls[i] = ClusterCounts{Events: BetaBinomialDraw(rng, 60, c.p, c.icc), Responses: 60}
			}
			_, up := ICCBound(ls, 0.95)
			if math.IsNaN(up) {
				continue
			}
			defined++
			if up >= c.icc {
				cover++
			}
		}
		// 0.95 less three binomial standard errors of 200 draws (0.046).
		if defined < reps/2 || float64(cover)/float64(defined) < 0.95-0.046 {
			t.Errorf("ICC %.2f, rate %.2f, %d launches of 60: the 95%% bound covered the truth in %d of %d",
				c.icc, c.p, c.k, cover, defined)
		}
	}
}

func TestICCBoundEdges(t *testing.T) {
	if est, up := ICCBound([]ClusterCounts{{0, 60}, {0, 60}}, 0.95); !math.IsNaN(est) || !math.IsNaN(up) {
		t.Errorf("launches without an event: %g, %g; want NaN (they say nothing of the spread)", est, up)
	}
	if est, up := ICCBound([]ClusterCounts{{3, 60}}, 0.95); !math.IsNaN(est) || !math.IsNaN(up) {
		t.Errorf("one launch: %g, %g; want NaN", est, up)
	}
	if est, up := ICCBound([]ClusterCounts{{60, 60}, {0, 60}}, 0.95); est != 1 || up != 1 {
		t.Errorf("one launch all events, one none: %g, %g; want 1, 1", est, up)
	}
	same := []ClusterCounts{{6, 60}, {6, 60}, {6, 60}, {6, 60}, {6, 60}, {6, 60}, {6, 60}, {6, 60}}
	_, up := ICCBound(same, 0.95)
	if !(up >= 0 && up < 0.02) {
		t.Errorf("eight identical launches at 10%%: bound %g, want a small one", up)
	}
	_, again := ICCBound(same, 0.95)
	if again != up {
		t.Errorf("the bound moved between two readings of the same launches: %g, then %g", up, again)
	}
	spread := []ClusterCounts{{0, 60}, {12, 60}, {2, 60}, {20, 60}, {1, 60}, {9, 60}, {3, 60}, {15, 60}}
	_, wide := ICCBound(spread, 0.95)
	_, wider := ICCBound(spread, 0.99)
	if !(wide > up && wider >= wide) {
		t.Errorf("launches that differ: bound %g at 95%% and %g at 99%%, want above %g and growing with confidence", wide, wider, up)
	}
}

// With a floor's bound at or above the truth, one launch per arm claims a difference
// between identical arms at most alpha of the time, and finds 0% against 50% nearly always.
func TestFloorTestOneLaunchPerArm(t *testing.T) {
	const alpha, reps = 0.05, 2000
	rng := rand.New(rand.NewPCG(35, 1))
	claims := 0
	for r := 0; r < reps; r++ {
		a := []ClusterCounts{{BetaBinomialDraw(rng, 60, 0.1, 0.05), 60}}
		b := []ClusterCounts{{BetaBinomialDraw(rng, 60, 0.1, 0.05), 60}}
		res, err := CompareLaunchRates(TestFloor, a, b, 0.05, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Possible && Reject(res.P, alpha) {
			claims++
		}
	}
	// alpha plus three binomial standard errors.
	if limit := alpha + 3*math.Sqrt(alpha*(1-alpha)/reps); float64(claims)/reps > limit {
		t.Errorf("identical arms, ICC 0.05 and the floor's bound 0.05: %d of %d claimed, above %.3f", claims, reps, limit)
	}
	found := 0
	for r := 0; r < 200; r++ {
		a := []ClusterCounts{{BetaBinomialDraw(rng, 60, 0, 0.02), 60}}
		b := []ClusterCounts{{BetaBinomialDraw(rng, 60, 0.5, 0.02), 60}}
		res, err := CompareLaunchRates(TestFloor, a, b, 0.05, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if res.Possible && Reject(res.P, alpha) {
			found++
			if !(res.CI.Lo > 0) {
				t.Fatalf("claimed at p %g with an interval [%g, %g] that reaches 0", res.P, res.CI.Lo, res.CI.Hi)
			}
		}
	}
	if found < 190 {
		t.Errorf("0%% against 50%%, one launch of 60 per arm, floor bound 0.05: found in %d of 200", found)
	}
}

func TestRateTestFor(t *testing.T) {
	cases := []struct {
		na, nb                    int
		floor, binary, sequential bool
		want                      LaunchTestKind
	}{
		{1, 1, false, false, false, TestNone},
		{1, 1, true, false, false, TestFloor},
		{2, 2, false, false, false, TestWelch},
		{3, 2, false, false, false, TestWelch},
		{2, 2, false, false, true, TestRandomization},
		{4, 4, false, false, false, TestRandomization},
		{2, 2, true, false, false, TestFloor},
		{1, 4, true, false, false, TestFloor},
		{3, 3, true, false, false, TestWelch},
		{4, 4, true, false, false, TestRandomization},
		{2, 2, false, true, false, TestRandomization},
		{1, 1, false, true, false, TestNone},
		{4, 4, true, true, false, TestRandomization},
		{0, 4, true, false, false, TestNone},
	}
	for _, c := range cases {
		if got := RateTestFor(c.na, c.nb, c.floor, c.binary, c.sequential); got != c.want {
			t.Errorf("RateTestFor(%d, %d, floor %v, binary %v, sequential %v) = %q, want %q",
				c.na, c.nb, c.floor, c.binary, c.sequential, got, c.want)
		}
	}
}

// Welch's test on two or three launches' rates stays at its level for identical arms
// whose launches differ (the audit measured at most 0.054 at 0.05).
func TestLaunchWelchLevel(t *testing.T) {
	const alpha, reps = 0.05, 3000
	rng := rand.New(rand.NewPCG(2, 3))
	for _, n := range []int{2, 3} {
		claims, ran := 0, 0
		for r := 0; r < reps; r++ {
			a, b := make([]float64, n), make([]float64, n)
			for i := range a {
				a[i] = float64(BetaBinomialDraw(rng, 60, 0.15, 0.1)) / 60
				b[i] = float64(BetaBinomialDraw(rng, 60, 0.15, 0.1)) / 60
			}
			res, err := LaunchWelch(a, b, 0.95)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(res.P) {
				continue
			}
			ran++
			if Reject(res.P, alpha) {
				claims++
			}
		}
		if limit := alpha + 3*math.Sqrt(alpha*(1-alpha)/float64(ran)); float64(claims)/float64(ran) > limit {
			t.Errorf("%d launches per arm, ICC 0.1: Welch claimed in %d of %d, above %.3f", n, claims, ran, limit)
		}
	}
}

func TestFloorMeans(t *testing.T) {
	r, err := FloorMeans([]float64{math.Log(1000)}, []float64{math.Log(900)}, 0.02, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	// z = log(0.9) / (0.02·√2) = −3.725; p = 2·Φ(−3.725) = 1.953e-4 (scipy.stats.norm.sf).
	if !closeTo(r.P, 1.9529e-4, 1e-3, 0) || !(r.CI.Hi < 0) {
		t.Errorf("1000 against 900 tok/s, floor SD 0.02: p %g, interval [%g, %g]", r.P, r.CI.Lo, r.CI.Hi)
	}
	if _, err := FloorMeans([]float64{1}, []float64{1}, math.NaN(), 0.95); err == nil {
		t.Error("a floor SD of NaN was accepted")
	}
}
