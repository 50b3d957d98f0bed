package stats

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// DeMets & Lan (1994); R's ldbounds and gsDesign print the same to four decimals.
func TestBoundariesPublished(t *testing.T) {
	got, err := Boundaries(4, 0.05, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{4.3326, 2.9631, 2.3590, 2.0141}
	for k, b := range got {
		if math.Abs(b.Z-want[k]) > 6e-5 {
			t.Errorf("look %d: z = %.5f, published %.4f", k+1, b.Z, want[k])
		}
		if !closeTo(b.NominalP, math.Erfc(b.Z/math.Sqrt2), 1e-12, 0) {
			t.Errorf("look %d: nominal p %.6g does not match z %.6f", k+1, b.NominalP, b.Z)
		}
	}
	if !closeTo(got[3].AlphaSpent, 0.05, 1e-12, 0) {
		t.Errorf("total alpha spent %.15g, want 0.05", got[3].AlphaSpent)
	}
}

func TestBoundariesReference(t *testing.T) {
	ref := loadExtra(t)
	if len(ref.Boundaries) < 200 {
		t.Fatalf("only %d boundary reference cases", len(ref.Boundaries))
	}
	for i, c := range ref.Boundaries {
		got, err := Boundaries(len(c.Fractions), c.Alpha, c.Fractions)
		if err != nil {
			t.Fatalf("case %d (alpha %g, t %v): %v", i, c.Alpha, c.Fractions, err)
		}
		for k := range got {
			if !closeTo(got[k].Z, c.Z[k], 1e-6, 0) {
				t.Errorf("case %d (alpha %g, t %v) look %d: z %.10f, want %.10f", i, c.Alpha, c.Fractions, k+1, got[k].Z, c.Z[k])
			}
			if !closeTo(got[k].NominalP, c.NominalP[k], 1e-5, 0) {
				t.Errorf("case %d look %d: nominal p %.8g, want %.8g", i, k+1, got[k].NominalP, c.NominalP[k])
			}
		}
	}
}

func TestBoundariesRejectsBadDesigns(t *testing.T) {
	for _, tc := range []struct {
		K     int
		alpha float64
		t     []float64
	}{
		{0, 0.05, nil}, {3, 0, nil}, {3, 1, nil}, {2, 0.05, []float64{0.5}},
		{2, 0.05, []float64{0.6, 0.5}}, {2, 0.05, []float64{0.5, 0.9}}, {2, 0.05, []float64{0, 1}},
	} {
		if _, err := Boundaries(tc.K, tc.alpha, tc.t); err == nil {
			t.Errorf("Boundaries(%d, %g, %v) accepted", tc.K, tc.alpha, tc.t)
		}
	}
}

// The sequential decisions and the loss comparison rest on the shared Fisher exact p.
func TestFisherReference(t *testing.T) {
	ref := loadExtra(t)
	for _, c := range ref.Fisher {
		if got := FisherExact(c.A, c.N1, c.B, c.N2).PTwoSided; !closeTo(got, c.P, 1e-9, 1e-15) {
			t.Errorf("Fisher %d/%d vs %d/%d: %.12g, want %.12g", c.A, c.N1, c.B, c.N2, got, c.P)
		}
	}
}

func TestSequentialDecision(t *testing.T) {
	design, err := Boundaries(4, 0.05, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Arm B corrupts 15%: 0/15 vs 2/15, then 0/30 vs 5/30, then 0/45 vs 10/45.
	looks := []LookCounts{{0, 15, 2, 15}, {0, 30, 5, 30}, {0, 45, 10, 45}, {0, 60, 13, 60}}
	res, err := SequentialDecision(looks, design)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Looks {
		t.Logf("look %d: p %.3g, threshold %.3g, crossed %v", l.Look, l.P, l.Threshold, l.Crossed)
	}
	t.Log(res.Decision)
	if res.StoppedAt != 3 || !res.Significant || !res.Complete || len(res.Looks) != 3 {
		t.Fatalf("want a stop at look 3, got %+v", res)
	}
	if p := FisherExact(0, 30, 5, 30).PTwoSided; p <= design[1].NominalP {
		t.Fatalf("look 2 p %.3g should be above its threshold %.3g", p, design[1].NominalP)
	}
	if res.SessionsUsed != 90 || res.SessionsMax != 120 {
		t.Errorf("sessions used %d of at most %d, want 90 of 120", res.SessionsUsed, res.SessionsMax)
	}
	if !strings.Contains(res.Decision, "Stopped for efficacy at look 3") || strings.Contains(res.Decision, "saved") {
		t.Errorf("decision %q", res.Decision)
	}
	// The interval after the stop is the repeated one, at look 3's critical value, wider
	// than the fixed-sample 95% interval on the same counts.
	fixed := Newcombe(0, 45, 10, 45, 0.95)
	if res.Interval != RepeatedInterval(looks[2], design[2]) || !(res.Interval.Lo < fixed.Lo && res.Interval.Hi > fixed.Hi) {
		t.Errorf("interval after the stop %+v, fixed-sample %+v", res.Interval, fixed)
	}
	if !closeTo(res.IntervalConf, 1-design[2].NominalP, 1e-15, 0) || !closeTo(res.Difference, 10.0/45, 1e-15, 0) {
		t.Errorf("interval level %.6f, difference %.4f", res.IntervalConf, res.Difference)
	}
	if !hasWarning(res.Warnings, "overstate") {
		t.Errorf("no warning about the early stop's estimate: %v", res.Warnings)
	}

	res, err = SequentialDecision(looks[:2], design)
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || res.Significant || !strings.HasPrefix(res.Decision, "Continue") {
		t.Errorf("two looks below the boundary should continue: %+v", res)
	}

	null := []LookCounts{{1, 15, 1, 15}, {2, 30, 3, 30}, {3, 45, 3, 45}, {4, 60, 5, 60}}
	res, _ = SequentialDecision(null, design)
	if res.Significant || !res.Complete || !strings.Contains(res.Decision, "not shown") {
		t.Errorf("null data: %+v", res)
	}

	if _, err := SequentialDecision([]LookCounts{{2, 30, 0, 30}, {1, 45, 0, 45}}, design); err == nil {
		t.Error("falling cumulative counts accepted")
	}
	if _, err := SequentialDecision(append(looks, looks[3]), design); err == nil {
		t.Error("more looks than planned accepted")
	}
	unbalanced, _ := SequentialDecision([]LookCounts{{0, 15, 0, 15}, {0, 30, 1, 25}}, design)
	if !hasWarning(unbalanced.Warnings, "unbalanced") {
		t.Errorf("unbalanced blocks not reported: %v", unbalanced.Warnings)
	}
}

// The acceptance figures: 10,000 simulated experiments per setting. Type I error must
// stay at or below α, and the simulated figures must agree with the exact path sums
// within Monte Carlo error.
func TestSequentialAcceptance(t *testing.T) {
	const reps, alpha = 10000, 0.05
	for _, p := range []float64{0.02, 0.1, 0.3} {
		r := SimulateSequential(p, p, 20, 6, alpha, reps, 7)
		t.Logf("null %.2f vs %.2f, K=6 x 20/arm: type I error %.4f (exact %.4f), mean sessions %.1f of %d",
			p, p, r.RejectRate, r.ExactRejectRate, r.MeanSessions, r.MaxSessions)
		if r.RejectRate > alpha || r.ExactRejectRate > alpha {
			t.Errorf("null %g: type I error %.4f (exact %.4f) above α %g", p, r.RejectRate, r.ExactRejectRate, alpha)
		}
		checkSimAgainstExact(t, r)
	}
	for _, d := range []struct{ K, n int }{{4, 15}, {6, 20}} {
		r := SimulateSequential(0, 0.15, d.n, d.K, alpha, reps, 11)
		t.Logf("0%% vs 15%%, K=%d x %d/arm: power %.4f (exact %.6f), mean sessions %.1f (exact %.2f) of max %d",
			d.K, d.n, r.RejectRate, r.ExactRejectRate, r.MeanSessions, r.ExactMeanSessions, r.MaxSessions)
		checkSimAgainstExact(t, r)
		op, err := SequentialExact(0, 0.15, d.n, r.Boundaries)
		if err != nil {
			t.Fatal(err)
		}
		if op.Power != r.ExactRejectRate || op.MeanSessions != r.ExactMeanSessions || op.MaxSessions != r.MaxSessions {
			t.Errorf("SequentialExact %+v disagrees with the simulation's exact figures", op)
		}
	}
}

// What an early stop saves is measured against the fixed design with the plan's own
// power: 0% against 15% at power 0.8 needs about 52 sessions per arm, not the 240 per
// arm of a four-look design of 60 per look.
func TestFixedDesignSessionsAtTargetPower(t *testing.T) {
	perArm, total := FixedDesignSessions(0, 0.15, 0.05, 0.8)
	t.Logf("fixed design for 0%% vs 15%% at power 0.8: %d per arm, %d in all (power %.4f)", perArm, total, FisherPower(0, 0.15, perArm, perArm, 0.05))
	if perArm < 45 || perArm > 60 || total != 2*perArm {
		t.Errorf("fixed design %d per arm (%d in all), want about 52", perArm, total)
	}
	if FisherPower(0, 0.15, perArm, perArm, 0.05) < 0.8 || FisherPower(0, 0.15, perArm-1, perArm-1, 0.05) >= 0.8 {
		t.Errorf("%d per arm is not where power first reaches 0.8", perArm)
	}
	if n, _ := FixedDesignSessions(0.1, 0.1, 0.05, 0.8); n != 0 {
		t.Errorf("equal rates need %d sessions, want 0 (unreachable)", n)
	}
	design, _ := Boundaries(4, 0.05, nil)
	op, err := SequentialExact(0, 0.15, 60, design)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 looks of 60 per arm: power %.4f, %.1f sessions expected, at most %d", op.Power, op.MeanSessions, op.MaxSessions)
	if op.MeanSessions <= float64(total) {
		t.Errorf("the four-look design of 60 per look expects %.1f sessions, below the %d of the fixed design at power 0.8: it is far more powerful than the plan asks", op.MeanSessions, total)
	}
	if _, err := SequentialExact(0, 1.5, 60, design); err == nil {
		t.Error("rate 1.5 accepted")
	}
}

func checkSimAgainstExact(t *testing.T, r SimResult) {
	t.Helper()
	p := r.ExactRejectRate
	se := math.Sqrt(p*(1-p)/float64(r.Reps)) + 1/float64(r.Reps)
	if math.Abs(r.RejectRate-p) > 4.5*se {
		t.Errorf("simulated rejection rate %.4f vs exact %.4f (SE %.4f)", r.RejectRate, p, se)
	}
	// Sessions used lie in [2n, MaxSessions]; a crude SE bound from that range.
	spread := float64(r.MaxSessions) / 2
	if math.Abs(r.MeanSessions-r.ExactMeanSessions) > 4.5*spread/math.Sqrt(float64(r.Reps)) {
		t.Errorf("simulated mean sessions %.2f vs exact %.2f", r.MeanSessions, r.ExactMeanSessions)
	}
	sum := 0
	for _, s := range r.StoppedAt {
		sum += s
	}
	if sum != r.Rejected {
		t.Errorf("stops per look sum to %d, rejections %d", sum, r.Rejected)
	}
}

func TestSimulateSequentialReproducible(t *testing.T) {
	a := SimulateSequential(0.02, 0.12, 10, 4, 0.05, 500, 3)
	b := SimulateSequential(0.02, 0.12, 10, 4, 0.05, 500, 3)
	if a.Rejected != b.Rejected || a.MeanSessions != b.MeanSessions {
		t.Errorf("same seed, different results: %+v vs %+v", a, b)
	}
	bad := SimulateSequential(0, 1.5, 10, 4, 0.05, 100, 1)
	if len(bad.Warnings) == 0 || bad.Rejected != 0 {
		t.Errorf("probability 1.5 accepted: %+v", bad)
	}
}

func BenchmarkBoundaries6(b *testing.B) {
	for b.Loop() {
		if _, err := Boundaries(6, 0.05, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSimulateSequential(b *testing.B) {
	for b.Loop() {
		SimulateSequential(0, 0.15, 20, 6, 0.05, 10000, 1)
	}
}

// After an early stop the verdict's interval is the repeated confidence interval at the
// stopping look: over simulated experiments at the design's boundaries it must cover the
// true difference at least 95% of the time, at every true difference tried, and also
// among the experiments that stopped early, where the fixed-sample 95% interval on the
// same counts falls to 0.93.
func TestRepeatedIntervalCoversAfterEarlyStop(t *testing.T) {
	const reps, alpha = 10000, 0.05
	for _, d := range []struct {
		K, n   int
		p0, p1 float64
	}{
		{4, 60, 0.05, 0.05}, {4, 60, 0.02, 0.07}, {4, 60, 0.02, 0.1}, {4, 60, 0, 0.15},
		{4, 60, 0.05, 0.2}, {4, 15, 0.02, 0.17}, {6, 20, 0.1, 0.3}, {4, 60, 0.2, 0.3},
	} {
		design, err := Boundaries(d.K, alpha, nil)
		if err != nil {
			t.Fatal(err)
		}
		crossed := lookCrossing(design, d.n)
		rng := rand.New(rand.NewPCG(uint64(d.n), math.Float64bits(d.p1-d.p0)))
		truth := d.p1 - d.p0
		covered, early, earlyCovered, fixedEarlyCovered := 0, 0, 0, 0
		for r := 0; r < reps; r++ {
			a, b, k := 0, 0, 0
			for ; k < d.K; k++ {
				a += binomialDraw(rng, d.n, d.p0)
				b += binomialDraw(rng, d.n, d.p1)
				if crossed(k, a, b) {
					break
				}
			}
			k = min(k, d.K-1)
			m := (k + 1) * d.n
			look := LookCounts{EventsA: a, SessionsA: m, EventsB: b, SessionsB: m}
			iv := RepeatedInterval(look, design[k])
			in := iv.Lo <= truth && truth <= iv.Hi
			if in {
				covered++
			}
			if k < d.K-1 {
				early++
				if in {
					earlyCovered++
				}
				if f := Newcombe(a, m, b, m, 0.95); f.Lo <= truth && truth <= f.Hi {
					fixedEarlyCovered++
				}
			}
		}
		cov := float64(covered) / reps
		earlyCov, fixedCov := math.NaN(), math.NaN()
		if early > 0 {
			earlyCov, fixedCov = float64(earlyCovered)/float64(early), float64(fixedEarlyCovered)/float64(early)
		}
		t.Logf("%d looks x %d per arm, %.2f vs %.2f: repeated interval covers %.4f of %d experiments; of the %d that stopped early %.4f (the fixed-sample 95%% interval %.4f)",
			d.K, d.n, d.p0, d.p1, cov, reps, early, earlyCov, fixedCov)
		if cov < 0.95 {
			t.Errorf("%.2f vs %.2f: coverage %.4f below 0.95", d.p0, d.p1, cov)
		}
		// Under the null an early stop is a false positive, which no interval consistent
		// with the decision can cover; with a real difference it must.
		if truth != 0 && early >= 200 && earlyCov < 0.95 {
			t.Errorf("%.2f vs %.2f: coverage after an early stop %.4f below 0.95", d.p0, d.p1, earlyCov)
		}
	}
}
