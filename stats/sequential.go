package stats

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/integrate/quad"
	"gonum.org/v1/gonum/mathext"
)

// A group-sequential experiment looks at its counts after every block and may stop as
// soon as the evidence is overwhelming. Looking K times at a fixed α inflates the type I
// error, so every look gets its own, stricter threshold: the Lan-DeMets spending function
// of O'Brien-Fleming type spends almost nothing early and leaves the last look close to
// the fixed design's α.
//
// Convention: the two-sided α is split into α/2 per side and each side spends
// α_s(t) = 2 − 2Φ(z_{α_s/2}/√t) with α_s = α/2, Lan and DeMets' one-sided form. This is
// the convention of the published tables (DeMets & Lan 1994; R's ldbounds and gsDesign):
// K = 4 equally spaced looks at two-sided α = 0.05 give z = 4.333, 2.963, 2.359, 2.014.
// Plugging the two-sided α into the one-sided form instead gives 3.92, 2.77, 2.30, 2.04.

// Boundary is the efficacy boundary of one look of a group-sequential design.
type Boundary struct {
	Look       int     // 1-based
	Fraction   float64 // information fraction t_k (share of the planned sessions seen)
	Z          float64 // two-sided critical value on the z scale
	NominalP   float64 // 2·(1 − Φ(Z)): stop when the look's exact p is at or below it
	AlphaSpent float64 // cumulative α(t_k) spent up to and including this look
}

// obfSpent is the cumulative two-sided α spent by information fraction t: twice the
// one-sided Lan-DeMets O'Brien-Fleming spending of α/2.
func obfSpent(alpha, t float64) float64 {
	z := -mathext.NormalQuantile(alpha / 4)
	return 2 * math.Erfc(z/math.Sqrt(2*t))
}

// normalLower is Φ(x), accurate in the lower tail.
func normalLower(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// seqNodes lays composite Gauss-Legendre nodes over [-b, b] with panels no wider than
// width, so that a Gaussian kernel of that scale is integrated to near machine precision.
func seqNodes(b, width float64) (x, w []float64) {
	const perPanel = 16
	panels := max(4, int(math.Ceil(2*b/width)))
	x = make([]float64, panels*perPanel)
	w = make([]float64, panels*perPanel)
	h := 2 * b / float64(panels)
	for p := 0; p < panels; p++ {
		lo := -b + float64(p)*h
		quad.Legendre{}.FixedLocations(x[p*perPanel:(p+1)*perPanel], w[p*perPanel:(p+1)*perPanel], lo, lo+h)
	}
	return x, w
}

// Boundaries computes the two-sided efficacy boundaries of a K-look design with
// O'Brien-Fleming-type Lan-DeMets α spending, by the recursive numerical integration of
// Armitage, McPherson and Rowe (1969) over the Brownian motion S(t) = Z(t)·√t. fractions
// are the information fractions of the looks (strictly increasing, the last one 1); nil
// means equally spaced looks k/K.
func Boundaries(K int, alpha float64, fractions []float64) ([]Boundary, error) {
	if K < 1 {
		return nil, fmt.Errorf("stats: sequential design needs at least one look, got %d", K)
	}
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("stats: sequential design: alpha %g is not in (0, 1)", alpha)
	}
	t := fractions
	if t == nil {
		t = make([]float64, K)
		for k := range t {
			t[k] = float64(k+1) / float64(K)
		}
	}
	if len(t) != K {
		return nil, fmt.Errorf("stats: sequential design: %d information fractions for %d looks", len(t), K)
	}
	for k := range t {
		prev := 0.0
		if k > 0 {
			prev = t[k-1]
		}
		if !(t[k] > prev && t[k] <= 1) {
			return nil, fmt.Errorf("stats: sequential design: information fraction %d is %g; fractions must increase within (0, 1]", k+1, t[k])
		}
	}
	if t[K-1] != 1 {
		return nil, fmt.Errorf("stats: sequential design: the last information fraction is %g, want 1", t[K-1])
	}
	out := make([]Boundary, K)
	spentBefore := 0.0
	var nodes, weights, dens []float64
	for k := 0; k < K; k++ {
		spent := obfSpent(alpha, t[k])
		pi := spent - spentBefore
		var c float64
		if k == 0 {
			c = -mathext.NormalQuantile(pi / 2)
		} else {
			sigma := math.Sqrt(t[k] - t[k-1])
			sqt := math.Sqrt(t[k])
			// cross is the probability of continuing to look k and crossing there, minus
			// the α to spend, with its derivative in c.
			cross := func(c float64) (f, df float64) {
				for i, x := range nodes {
					u, v := (-c*sqt-x)/sigma, (-c*sqt+x)/sigma
					m := weights[i] * dens[i]
					f += m * (normalLower(u) + normalLower(v))
					df -= m * (normalDensity(u) + normalDensity(v))
				}
				return f - pi, df * sqt / sigma
			}
			// The crossing probability falls as the boundary rises: Newton's method kept
			// inside a bracket, bisecting whenever a step would leave it.
			lo, hi := 0.0, 1.0
			for f, _ := cross(hi); f > 0; f, _ = cross(hi) {
				lo, hi = hi, 2*hi
				if hi > 1e3 {
					return nil, fmt.Errorf("stats: sequential design: look %d: cannot place a boundary for α increment %g", k+1, pi)
				}
			}
			c = (lo + hi) / 2
			for i := 0; i < 200; i++ {
				f, df := cross(c)
				if f > 0 {
					lo = c
				} else {
					hi = c
				}
				next := c - f/df
				if !(next > lo && next < hi) {
					next = (lo + hi) / 2
				}
				if math.Abs(next-c) <= 1e-15*c || hi-lo <= 1e-15*hi {
					c = next
					break
				}
				c = next
			}
		}
		out[k] = Boundary{Look: k + 1, Fraction: t[k], Z: c, NominalP: math.Erfc(c / math.Sqrt2), AlphaSpent: spent}
		spentBefore = spent
		if k == K-1 {
			break
		}
		// Density of S(t_k) on the continuation region |S| < c·√t_k, sub-probability.
		b := c * math.Sqrt(t[k])
		scale := math.Sqrt(t[k+1] - t[k])
		if k == 0 {
			scale = math.Min(scale, math.Sqrt(t[0]))
		} else {
			scale = math.Min(scale, math.Sqrt(t[k]-t[k-1]))
		}
		nx, nw := seqNodes(b, 2*scale)
		nd := make([]float64, len(nx))
		if k == 0 {
			sd := math.Sqrt(t[0])
			for i, x := range nx {
				nd[i] = normalDensity(x/sd) / sd
			}
		} else {
			sigma := math.Sqrt(t[k] - t[k-1])
			for i, x := range nx {
				var s float64
				for j, u := range nodes {
					s += weights[j] * dens[j] * normalDensity((x-u)/sigma)
				}
				nd[i] = s / sigma
			}
		}
		nodes, weights, dens = nx, nw, nd
	}
	return out, nil
}

func normalDensity(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }

// LookCounts are the cumulative counts of both arms at one look: corrupted sessions and
// sessions completed so far.
type LookCounts struct {
	EventsA, SessionsA int
	EventsB, SessionsB int
}

// LookResult is the exact test at one look against that look's threshold.
type LookResult struct {
	Look      int
	P         float64 // two-sided Fisher exact p on the cumulative counts
	Threshold float64 // the design's nominal p for this look
	Crossed   bool    // Reject(P, Threshold)
}

// SequentialResult is the decision of a group-sequential experiment.
type SequentialResult struct {
	Looks []LookResult // the looks that were taken, up to the stopping look
	// StoppedAt is the 1-based look at which the efficacy boundary was crossed; 0 when it
	// was not crossed.
	StoppedAt int
	// Significant is true when a boundary was crossed: the arms differ at the design's
	// overall α despite the repeated looks.
	Significant bool
	// Complete is true when the experiment has reached a decision: stopped for efficacy,
	// or every planned look taken.
	Complete bool
	// Difference is p_B − p_A on the cumulative counts of the last look taken. After an
	// early stop it tends to overstate the true difference.
	Difference float64
	// Interval is the repeated confidence interval of p_B − p_A at the last look taken
	// (RepeatedInterval): unlike the fixed-sample interval on the same counts, it keeps
	// its coverage whichever look the experiment stopped at.
	Interval Interval
	// IntervalConf is the interval's nominal level at that look, 1 − the look's
	// NominalP; the simultaneous level over all looks is 1 − the design's α.
	IntervalConf float64
	SessionsUsed int // sessions of both arms at the last look taken
	// SessionsMax is the sessions of both arms had every planned look been taken. It is
	// the design's ceiling, not a fixed design's size: what an early stop saves is
	// measured against the fixed design of the plan's power (FixedDesignSessions).
	SessionsMax int
	Decision    string // a plain sentence for the verdict
	Warnings    []Warning
}

// RepeatedInterval is the repeated confidence interval (Jennison and Turnbull 1989) of
// the rate difference p_B − p_A at one look of a group-sequential design: Newcombe's
// hybrid score interval on that look's cumulative counts at the look's critical value
// (level 1 − NominalP). Intervals built this way at every look cover the true difference
// at all looks at once with probability at least 1 − α, so the interval at whichever
// look the experiment stopped at, early or not, covers with at least that probability;
// the fixed-sample 95% interval on the same counts does not.
func RepeatedInterval(l LookCounts, b Boundary) Interval {
	return Newcombe(l.EventsA, l.SessionsA, l.EventsB, l.SessionsB, 1-b.NominalP)
}

// SequentialDecision applies a design's boundaries to the cumulative counts of the looks
// taken so far: the experiment stops for efficacy at the first look whose two-sided
// Fisher exact p reaches that look's nominal threshold (Reject). There is no futility
// boundary; an experiment that never crosses runs all its looks.
func SequentialDecision(looks []LookCounts, design []Boundary) (SequentialResult, error) {
	var out SequentialResult
	if len(design) == 0 {
		return out, errors.New("stats: sequential decision needs a design with at least one look")
	}
	if len(looks) == 0 {
		return out, errors.New("stats: sequential decision needs at least one look of counts")
	}
	if len(looks) > len(design) {
		return out, fmt.Errorf("stats: sequential decision: %d looks taken but the design plans %d", len(looks), len(design))
	}
	prev := LookCounts{}
	for i, l := range looks {
		if l.EventsA < 0 || l.EventsB < 0 || l.EventsA > l.SessionsA || l.EventsB > l.SessionsB {
			return out, fmt.Errorf("stats: sequential decision: look %d: counts %d/%d and %d/%d are not valid tallies", i+1, l.EventsA, l.SessionsA, l.EventsB, l.SessionsB)
		}
		if l.SessionsA < prev.SessionsA || l.SessionsB < prev.SessionsB || l.EventsA < prev.EventsA || l.EventsB < prev.EventsB {
			return out, fmt.Errorf("stats: sequential decision: look %d: counts must be cumulative, but they fall from the previous look", i+1)
		}
		prev = l
		p := FisherExact(l.EventsA, l.SessionsA, l.EventsB, l.SessionsB).PTwoSided
		r := LookResult{Look: i + 1, P: p, Threshold: design[i].NominalP, Crossed: Reject(p, design[i].NominalP)}
		out.Looks = append(out.Looks, r)
		out.SessionsUsed = l.SessionsA + l.SessionsB
		if r.Crossed {
			out.StoppedAt, out.Significant, out.Complete = i+1, true, true
			break
		}
	}
	last := out.Looks[len(out.Looks)-1]
	if !out.Significant && len(looks) == len(design) {
		out.Complete = true
	}
	lc := looks[last.Look-1]
	out.Difference = coreRate(lc.EventsB, lc.SessionsB) - coreRate(lc.EventsA, lc.SessionsA)
	out.Interval = RepeatedInterval(lc, design[last.Look-1])
	out.IntervalConf = 1 - design[last.Look-1].NominalP
	frac := design[last.Look-1].Fraction
	out.SessionsMax = int(math.Round(float64(out.SessionsUsed) / frac))
	overall := design[len(design)-1].AlphaSpent
	switch {
	case out.Significant:
		out.Decision = fmt.Sprintf("Stopped for efficacy at look %d of %d: exact p = %.3g reaches the look's threshold %.3g, so the arms differ at overall α %.3g despite the repeated looks; %d of at most %d sessions were run.",
			last.Look, len(design), last.P, last.Threshold, overall, out.SessionsUsed, out.SessionsMax)
	case out.Complete:
		out.Decision = fmt.Sprintf("No boundary crossed in %d looks (final exact p = %.3g, threshold %.3g): a difference was not shown, which does not mean there is none.",
			len(design), last.P, last.Threshold)
	default:
		out.Decision = fmt.Sprintf("Continue: look %d of %d has exact p = %.3g, above its threshold %.3g.", last.Look, len(design), last.P, last.Threshold)
	}
	if len(looks) > 1 {
		for i := 1; i < len(looks); i++ {
			dA := looks[i].SessionsA - looks[i-1].SessionsA
			dB := looks[i].SessionsB - looks[i-1].SessionsB
			if dA != dB {
				out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("look %d added %d sessions to arm A and %d to arm B: unbalanced blocks make the information fractions approximate", i+1, dA, dB)))
				break
			}
		}
	}
	if out.Significant && out.StoppedAt < len(design) {
		out.Warnings = append(out.Warnings, "stopped early: the observed difference tends to overstate the true one; the repeated confidence interval keeps its coverage, the fixed-sample interval does not")
	}
	return out, nil
}

// FixedDesignSessions is the size of the fixed (single-look) design that reaches the
// target power for rates p0 and p1 with the two-sided Fisher test at alpha: sessions per
// arm, and of both arms. It is what an early stop is measured against: "saved" means
// fewer sessions than this design, which has the power the plan asks for, not fewer than
// the sequential design's own ceiling. Zero when no size reaches it (see SessionsFor).
func FixedDesignSessions(p0, p1, alpha, power float64) (perArm, total int) {
	n := SessionsFor(p0, p1, alpha, power, 1)
	return n, 2 * n
}

// SimResult summarizes simulated group-sequential experiments.
type SimResult struct {
	Reps       int
	Rejected   int     // experiments that crossed a boundary
	RejectRate float64 // type I error when p0 == p1, power otherwise
	// StoppedAt counts, per look (index 0 is look 1), the experiments that stopped there.
	StoppedAt []int
	// MeanSessions is the average number of sessions (both arms) an experiment used.
	MeanSessions float64
	MaxSessions  int // 2·K·nPerLook, the sessions of an experiment that never stops
	// ExactRejectRate and ExactMeanSessions are the same two figures computed exactly,
	// by summing over every path of cumulative counts; the simulation must agree with
	// them within its Monte Carlo error.
	ExactRejectRate   float64
	ExactMeanSessions float64
	Boundaries        []Boundary
	Warnings          []Warning
}

// SimulateSequential runs reps experiments of K looks with nPerLook new sessions per arm
// per look, corruption probabilities p0 (arm A) and p1 (arm B), under the Lan-DeMets
// O'Brien-Fleming design at two-sided alpha, and computes the same rejection rate and
// average sessions exactly. The seed makes the run reproducible.
func SimulateSequential(p0, p1 float64, nPerLook, K int, alpha float64, reps int, seed uint64) SimResult {
	out := SimResult{Reps: reps, MaxSessions: 2 * K * nPerLook}
	if nPerLook < 1 || reps < 1 || !(p0 >= 0 && p0 <= 1 && p1 >= 0 && p1 <= 1) {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("simulation not run: needs nPerLook ≥ 1, reps ≥ 1 and probabilities in [0, 1] (got %d, %d, %g, %g)", nPerLook, reps, p0, p1)))
		return out
	}
	design, err := Boundaries(K, alpha, nil)
	if err != nil {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("simulation not run: %v", err)))
		return out
	}
	out.Boundaries = design
	out.StoppedAt = make([]int, K)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	crossed := lookCrossing(design, nPerLook)
	var total int
	for r := 0; r < reps; r++ {
		a, b := 0, 0
		used := out.MaxSessions
		for k := 0; k < K; k++ {
			a += binomialDraw(rng, nPerLook, p0)
			b += binomialDraw(rng, nPerLook, p1)
			if crossed(k, a, b) {
				out.Rejected++
				out.StoppedAt[k]++
				used = 2 * (k + 1) * nPerLook
				break
			}
		}
		total += used
	}
	out.RejectRate = float64(out.Rejected) / float64(reps)
	out.MeanSessions = float64(total) / float64(reps)
	out.ExactRejectRate, out.ExactMeanSessions = sequentialExact(p0, p1, nPerLook, design, crossed)
	return out
}

// lookCrossing returns whether cumulative counts (a, b) cross the boundary of look k
// (0-based) of a design with nPerLook sessions per arm per look. Cumulative tables
// repeat across replications and paths; their exact p is computed once.
func lookCrossing(design []Boundary, nPerLook int) func(look, a, b int) bool {
	cache := map[[3]int]bool{}
	return func(look, a, b int) bool {
		key := [3]int{look, a, b}
		if v, ok := cache[key]; ok {
			return v
		}
		n := (look + 1) * nPerLook
		v := Reject(FisherExact(a, n, b, n).PTwoSided, design[look].NominalP)
		cache[key] = v
		return v
	}
}

// SequentialOperating is what a group-sequential design does at given rates, computed
// exactly over every path of cumulative counts.
type SequentialOperating struct {
	// Power is the probability of crossing a boundary at some look (the type I error
	// when p0 == p1).
	Power float64
	// MeanSessions is the expected number of sessions, both arms, the design uses.
	MeanSessions float64
	MaxSessions  int // 2·K·nPerLook
}

// SequentialExact computes a design's power and expected sessions exactly for rates p0
// and p1 with nPerLook sessions per arm per look: no simulation, so `arbiter plan` can
// say what a sequential spec costs on average before it runs.
func SequentialExact(p0, p1 float64, nPerLook int, design []Boundary) (SequentialOperating, error) {
	if nPerLook < 1 || len(design) == 0 || !(p0 >= 0 && p0 <= 1 && p1 >= 0 && p1 <= 1) {
		return SequentialOperating{}, fmt.Errorf("stats: sequential operating figures need nPerLook ≥ 1, a design and rates in [0, 1] (got %d, %d looks, %g, %g)", nPerLook, len(design), p0, p1)
	}
	pw, mean := sequentialExact(p0, p1, nPerLook, design, lookCrossing(design, nPerLook))
	return SequentialOperating{Power: pw, MeanSessions: mean, MaxSessions: 2 * len(design) * nPerLook}, nil
}

// sequentialExact sums over all paths of cumulative counts: the probability mass that
// has not yet crossed is carried from look to look as a table over (events A, events B).
func sequentialExact(p0, p1 float64, nPerLook int, design []Boundary, crossed func(look, a, b int) bool) (power, meanSessions float64) {
	fa, fb := binomialPMF(nPerLook, p0), binomialPMF(nPerLook, p1)
	K := len(design)
	size := K*nPerLook + 1
	cont := newSquare(size)
	cont[0][0] = 1
	tmp := newSquare(size)
	stopped := 0.0
	for k := 0; k < K; k++ {
		top := k * nPerLook // largest count before this look's block
		addLook(cont, tmp, top, nPerLook, fa, fb)
		used := float64(2 * (k + 1) * nPerLook)
		for a := 0; a <= top+nPerLook; a++ {
			for b := 0; b <= top+nPerLook; b++ {
				if m := cont[a][b]; m > 0 && crossed(k, a, b) {
					power += m
					meanSessions += m * used
					cont[a][b] = 0
				}
			}
		}
		stopped = power
	}
	meanSessions += (1 - stopped) * float64(2*K*nPerLook)
	return power, meanSessions
}

func binomialDraw(rng *rand.Rand, n int, p float64) int {
	var x int
	for i := 0; i < n; i++ {
		if rng.Float64() < p {
			x++
		}
	}
	return x
}

func binomialPMF(n int, p float64) []float64 {
	out := make([]float64, n+1)
	switch p {
	case 0:
		out[0] = 1
		return out
	case 1:
		out[n] = 1
		return out
	}
	lp, lq := math.Log(p), math.Log1p(-p)
	ln, _ := math.Lgamma(float64(n + 1))
	for x := 0; x <= n; x++ {
		lx, _ := math.Lgamma(float64(x + 1))
		ly, _ := math.Lgamma(float64(n - x + 1))
		out[x] = math.Exp(ln - lx - ly + float64(x)*lp + float64(n-x)*lq)
	}
	return out
}

// addLook moves the joint distribution of the two arms' event counts on by one look of
// nPerLook sessions per arm: cont holds the probabilities of (a, b) up to top each, of
// continuing past the earlier looks; fa and fb are each arm's binomial pmf over one
// look; tmp is scratch of cont's size.
func addLook(cont, tmp [][]float64, top, nPerLook int, fa, fb []float64) {
	for a := 0; a <= top+nPerLook; a++ {
		for b := 0; b <= top; b++ {
			tmp[a][b] = 0
		}
	}
	for a := 0; a <= top; a++ {
		for b := 0; b <= top; b++ {
			if m := cont[a][b]; m != 0 {
				for x, w := range fa {
					tmp[a+x][b] += m * w
				}
			}
		}
	}
	for a := 0; a <= top+nPerLook; a++ {
		for b := 0; b <= top+nPerLook; b++ {
			cont[a][b] = 0
		}
		for b := 0; b <= top; b++ {
			if m := tmp[a][b]; m != 0 {
				for y, w := range fb {
					cont[a][b+y] += m * w
				}
			}
		}
	}
}
