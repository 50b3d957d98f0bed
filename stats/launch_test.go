package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

func TestMinAttainablePAndLaunchesNeeded(t *testing.T) {
	for _, c := range []struct {
		na, nb int
		want   float64
	}{{1, 1, 1}, {2, 2, 2.0 / 6}, {3, 3, 0.1}, {4, 4, 2.0 / 70}, {8, 8, 2.0 / 12870}, {2, 3, 0.1}, {0, 4, 1}} {
		if got := MinAttainableP(c.na, c.nb); !closeTo(got, c.want, 1e-12, 0) {
			t.Errorf("MinAttainableP(%d, %d) = %g, want %g", c.na, c.nb, got, c.want)
		}
	}
	for _, c := range []struct {
		alpha float64
		want  int
	}{{0.05, 4}, {0.03, 4}, {0.025, 5}, {0.01, 5}, {0.001, 7}} {
		if got := LaunchesNeeded(c.alpha); got != c.want {
			t.Errorf("LaunchesNeeded(%g) = %d, want %d", c.alpha, got, c.want)
		}
	}
}

// TestLaunchPermutationReference holds the exact test to p-values computed by brute force
// in Python (testdata/launch/permutation.py).
func TestLaunchPermutationReference(t *testing.T) {
	b, err := os.ReadFile("testdata/launch/permutation.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			A, B []float64
			P    float64
		}
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 100 {
		t.Fatalf("only %d reference cases", len(ref.Cases))
	}
	for i, c := range ref.Cases {
		r, err := LaunchPermutation(c.A, c.B, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Exact || !closeTo(r.P, c.P, 1e-12, 0) {
			t.Errorf("case %d (A %v, B %v): p %g (exact %v), want %g", i, c.A, c.B, r.P, r.Exact, c.P)
		}
		if r.P < r.MinP-1e-12 {
			t.Errorf("case %d: p %g below the attainable minimum %g", i, r.P, r.MinP)
		}
	}
}

// Every launch of each arm with the same rate is no evidence: 0/60, 0/60 against 1/60,
// 1/60 is the least extreme thing two launches per arm can show beyond equality.
func TestLaunchPermutationZeroSpreadIsNoEvidence(t *testing.T) {
	r, err := LaunchPermutation([]float64{0, 0}, []float64{1.0 / 60, 1.0 / 60}, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	if Reject(r.P, 0.05) || !closeTo(r.P, 1.0/3, 1e-12, 0) {
		t.Errorf("p = %g, want 1/3", r.P)
	}
	if !math.IsInf(r.CI.Lo, -1) || !math.IsInf(r.CI.Hi, 1) {
		t.Errorf("two launches per arm cannot bound a shift at 95%%: %+v", r.CI)
	}
}

// The inverted interval excludes 0 exactly when the test rejects at its level, and
// contains the observed difference.
func TestLaunchPermutationIntervalAgreesWithTest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	agree := 0
	for k := 0; k < 200; k++ {
		n := 4 + rng.IntN(3)
		a, b := make([]float64, n), make([]float64, n)
		shift := []float64{0, 0.05, 0.1}[k%3]
		for j := range n {
			a[j] = float64(BetaBinomialDraw(rng, 60, 0.1, 0.05)) / 60
			b[j] = float64(BetaBinomialDraw(rng, 60, 0.1+shift, 0.05)) / 60
		}
		r, err := LaunchPermutation(a, b, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(r.CI.Lo) {
			continue
		}
		agree++
		excludes := r.CI.Lo > 0 || r.CI.Hi < 0
		if excludes != Reject(r.P, 0.05) {
			// At the interval's edge the p-value steps: allow a hair of bisection error.
			p0, _, _ := permutationP(a, b, 0)
			t.Errorf("A %v B %v: interval %+v, p %g (%g)", a, b, r.CI, r.P, p0)
		}
		if r.Difference < r.CI.Lo-1e-9 || r.Difference > r.CI.Hi+1e-9 {
			t.Errorf("A %v B %v: interval %+v misses the difference %g", a, b, r.CI, r.Difference)
		}
	}
	if agree < 190 {
		t.Errorf("only %d of 200 intervals computed", agree)
	}
}

// The drawn test (more launches than are enumerated or counted) keeps its size, and
// agrees with the exact one where both apply; rates of as many launches are counted
// exactly.
func TestLaunchPermutationDrawnKeepsSize(t *testing.T) {
	if testing.Short() {
		t.Skip("draws a hundred thousand relabellings per experiment")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	a, b := make([]float64, 13), make([]float64, 13)
	rejected := 0
	const reps = 60
	for k := 0; k < reps; k++ {
		// Speeds (log tok/s) take as many sums as relabellings: too many to count.
		for j := range a {
			a[j] = 4 + 0.05*rng.NormFloat64()
			b[j] = 4 + 0.05*rng.NormFloat64()
		}
		r, _ := LaunchPermutation(a, b, 0)
		if r.Exact || r.Draws != permutationDraws {
			t.Fatalf("26 launches enumerated: %+v", r)
		}
		if Reject(r.P, 0.05) {
			rejected++
		}
	}
	// 60 null experiments: more than 10 rejections at 5% has probability below 1e-3.
	if rejected > 10 {
		t.Errorf("%d of %d null experiments rejected", rejected, reps)
	}
	for j := range a {
		a[j] = float64(BetaBinomialDraw(rng, 60, 0.1, 0.05)) / 60
		b[j] = float64(BetaBinomialDraw(rng, 60, 0.1, 0.05)) / 60
	}
	if r, _ := LaunchPermutation(a, b, 0); !r.Exact {
		t.Errorf("26 launches' rates of 60 sessions were not counted exactly: %+v", r)
	}
	// Where both apply, the drawn p is the enumerated one within its Monte Carlo error.
	x := []float64{0.1, 0.2, 0.15, 0.3, 0.05, 0.12, 0.3, 0.25, 0.4, 0.2, 0.35, 0.33}
	obs := Mean(x[6:]) - Mean(x[:6])
	extreme := func(sumB float64) bool {
		d := sumB/6 - (Mean(x)*12-sumB)/6
		return math.Abs(d) >= math.Abs(obs)-1e-12
	}
	exact, drawn := enumeratedP(x, 6, extreme), drawnP(x, 6, extreme)
	if se := math.Sqrt(exact * (1 - exact) / permutationDraws); math.Abs(drawn-exact) > 4*se+1e-5 {
		t.Errorf("drawn p %g, enumerated %g", drawn, exact)
	}
}

// The launch test's size under launch-heterogeneous nulls: at most alpha at every number
// of launches per arm, rate and intra-launch correlation. The session-level Fisher test on
// the same experiments is logged beside it: it claims far more often.
func TestLaunchPermutationSizeWithFewLaunches(t *testing.T) {
	t.Parallel()
	reps := 4000
	if testing.Short() {
		reps = 500
	}
	for _, launches := range []int{2, 4, 8} {
		for _, mu := range []float64{0.02, 0.1} {
			for _, rho := range []float64{0, 0.05, 0.2} {
				rng := rand.New(rand.NewPCG(uint64(launches), math.Float64bits(mu)^math.Float64bits(rho)))
				a, b := make([]float64, launches), make([]float64, launches)
				rejected, fisher := 0, 0
				for r := 0; r < reps; r++ {
					ea, eb := 0, 0
					for j := 0; j < launches; j++ {
						ka, kb := BetaBinomialDraw(rng, 60, mu, rho), BetaBinomialDraw(rng, 60, mu, rho)
						a[j], b[j] = float64(ka)/60, float64(kb)/60
						ea, eb = ea+ka, eb+kb
					}
					p, _, _ := permutationP(a, b, 0)
					if Reject(p, 0.05) {
						rejected++
					}
					if Reject(FisherExact(ea, 60*launches, eb, 60*launches).PTwoSided, 0.05) {
						fisher++
					}
				}
				size := float64(rejected) / float64(reps)
				t.Logf("%d launches per arm, rate %.2f, intra-launch correlation %.2f: size %.4f (Fisher on sessions %.4f)",
					launches, mu, rho, size, float64(fisher)/float64(reps))
				// Binomial noise at reps: 3 standard errors above 0.05.
				if limit := 0.05 + 3*math.Sqrt(0.05*0.95/float64(reps)); size > limit {
					t.Errorf("%d launches, rate %.2f, rho %.2f: size %.4f above %.4f", launches, mu, rho, size, limit)
				}
			}
		}
	}
}

func TestLaunchMeansReference(t *testing.T) {
	ref := loadDecisions(t)
	if len(ref.LaunchT) < 200 {
		t.Fatalf("only %d reference cases", len(ref.LaunchT))
	}
	rates := func(pairs [][2]int) []float64 {
		var r []float64
		for _, p := range pairs {
			if p[1] > 0 {
				r = append(r, float64(p[0])/float64(p[1]))
			}
		}
		return r
	}
	for i, c := range ref.LaunchT {
		r, err := LaunchMeans(rates(c.A), rates(c.B), c.Conf)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !r.Possible || r.DF != float64(c.DF) {
			t.Fatalf("case %d: %+v, want %d degrees of freedom", i, r, c.DF)
		}
		for _, ch := range []struct {
			name      string
			got, want float64
		}{
			{"difference", r.Difference, c.Difference}, {"SE", r.SE, c.SE}, {"t", r.T, c.T},
			{"p", r.P, c.P}, {"CI low", r.CI.Lo, c.Lo}, {"CI high", r.CI.Hi, c.Hi},
		} {
			if !closeTo(ch.got, ch.want, 1e-7, 1e-12) {
				t.Errorf("case %d %s: got %.12g, want %.12g (A %v B %v)", i, ch.name, ch.got, ch.want, c.A, c.B)
			}
		}
	}
}

func TestLaunchMeansNeedsSpread(t *testing.T) {
	for _, c := range []struct{ a, b []float64 }{
		{[]float64{1}, []float64{2, 3}},
		{[]float64{0, 0}, []float64{0.1, 0.1}},
	} {
		r, err := LaunchMeans(c.a, c.b, 0.95)
		if err != nil {
			t.Fatal(err)
		}
		if r.Possible || !math.IsNaN(r.P) {
			t.Errorf("A %v B %v: %+v", c.a, c.b, r)
		}
	}
	if _, err := LaunchMeans([]float64{1, math.Inf(1)}, []float64{1, 2}, 0.95); err == nil {
		t.Error("an infinite launch value accepted")
	}
	r, _ := LaunchMean([]float64{0.01, 0.03, 0.02}, 0.9)
	if !r.Possible || r.DF != 2 || !closeTo(r.Difference, 0.02, 1e-12, 0) {
		t.Errorf("one-sample: %+v", r)
	}
}

func TestLaunchICC(t *testing.T) {
	// Identical launches: no spread between them.
	if icc := LaunchICC([]ClusterCounts{{6, 60}, {6, 60}, {6, 60}}); icc != 0 {
		t.Errorf("identical launches: ICC %g", icc)
	}
	if icc := LaunchICC([]ClusterCounts{{0, 60}, {30, 60}}); icc < 0.4 {
		t.Errorf("0/60 against 30/60: ICC %g", icc)
	}
	if !math.IsNaN(LaunchICC([]ClusterCounts{{3, 60}})) || !math.IsNaN(LaunchICC([]ClusterCounts{{0, 60}, {0, 60}})) {
		t.Error("ICC defined without two launches or without events")
	}
	// The estimator recovers the drawn correlation on average.
	rng := rand.New(rand.NewPCG(1, 2))
	sum := 0.0
	const reps = 400
	for r := 0; r < reps; r++ {
		cs := make([]ClusterCounts, 20)
		for j := range cs {
			cs[j] = ClusterCounts{Events: BetaBinomialDraw(rng, 60, 0.2, 0.1), Responses: 60}
		}
		sum += LaunchICC(cs)
	}
	if m := sum / reps; m < 0.07 || m > 0.13 {
		t.Errorf("mean ICC estimate %g for a drawn 0.1", m)
	}
}

// Power of the launch test at 4 launches of 60 sessions per arm, 0% against 12%,
// intra-launch correlation 0.05, next to the one-launch Fisher test it replaces.
func TestLaunchPower(t *testing.T) {
	p4 := LaunchPower(0, 0.12, 0.05, 60, 4, 0.05, 2000, 3)
	t.Logf("power at 4 launches of 60 sessions per arm, 0%% against 12%%, ICC 0.05: %.3f", p4)
	// A treatment launch with no corrupted session ties with the control's zeros and
	// costs the claim: with rate 12% and ICC 0.05 that happens in about 1 of 30 launches.
	if p4 < 0.82 || p4 > 0.92 {
		t.Errorf("power at 4 launches: %g", p4)
	}
	if p := LaunchPower(0, 0.12, 0.05, 60, 3, 0.05, 200, 3); p != 0 {
		t.Errorf("3 launches per arm cannot reach 0.05, power %g", p)
	}
	if n := LaunchesForPower(0.02, 0.14, 0.05, 60, 0.05, 0.8, 12); n < 4 || n > 8 {
		t.Errorf("launches for 80%% power, 2%% against 14%%: %d", n)
	}
}

// Counting labellings by their sum gives the p-value that walking every labelling
// gives, on rates of launches (many ties) and on values without ties.
func TestCountedPermutationAgreesWithEnumeration(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		na, nb := 1+rng.IntN(8), 1+rng.IntN(8)
		x := make([]float64, na+nb)
		for i := range x {
			switch trial % 3 {
			case 0: // rates of 40 sessions
				x[i] = float64(rng.IntN(6)) / 40
			case 1: // rates of unequal launches
				n := 20 + rng.IntN(41)
				x[i] = float64(rng.IntN(n/4+1)) / float64(n)
			default: // speeds
				x[i] = 50 + 10*rng.NormFloat64()
			}
		}
		obs := 0.0
		for _, v := range x[na:] {
			obs += v
		}
		total := 0.0
		for _, v := range x {
			total += v
		}
		diff := func(sumB float64) float64 { return sumB/float64(nb) - (total-sumB)/float64(na) }
		o := math.Abs(diff(obs))
		extreme := func(sumB float64) bool { return math.Abs(diff(sumB)) >= o-1e-9*(1+o+math.Abs(total)/float64(na+nb)) }
		got, ok := countedP(x, nb, extreme)
		if !ok {
			t.Fatalf("trial %d: %v could not be counted", trial, x)
		}
		if want := enumeratedP(x, nb, extreme); math.Abs(got-want) > 1e-12 {
			t.Fatalf("trial %d: %v with %d labelled B: counted p = %.15g, walked %.15g", trial, x, nb, got, want)
		}
	}
}
