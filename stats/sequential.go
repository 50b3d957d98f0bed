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
	Crossed   bool    // P ≤ Threshold
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
	Complete        bool
	SessionsUsed    int     // sessions of both arms at the last look taken
	SessionsPlanned int     // sessions of both arms the final look would have needed
	SavedFraction   float64 // 1 − SessionsUsed/SessionsPlanned
	Decision        string  // a plain sentence for the verdict
	Warnings        []Warning
}

// SequentialDecision applies a design's boundaries to the cumulative counts of the looks
// taken so far: the experiment stops for efficacy at the first look whose two-sided
// Fisher exact p is at or below that look's nominal threshold. There is no futility
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
		r := LookResult{Look: i + 1, P: p, Threshold: design[i].NominalP, Crossed: p <= design[i].NominalP}
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
	frac := design[last.Look-1].Fraction
	out.SessionsPlanned = int(math.Round(float64(out.SessionsUsed) / frac))
	if out.SessionsPlanned > 0 {
		out.SavedFraction = 1 - float64(out.SessionsUsed)/float64(out.SessionsPlanned)
	}
	switch {
	case out.Significant:
		out.Decision = fmt.Sprintf("Stopped for efficacy at look %d of %d: exact p = %.3g is below the look's threshold %.3g, so the arms differ at overall α %.3g despite the repeated looks; %d of a planned %d sessions were run (%.0f%% saved).",
			last.Look, len(design), last.P, last.Threshold, design[len(design)-1].AlphaSpent, out.SessionsUsed, out.SessionsPlanned, 100*out.SavedFraction)
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
	return out, nil
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
	// FixedSessions is the sessions (both arms) of the fixed design, two-sided Fisher
	// exact at the same α, whose exact power reaches ExactRejectRate (SessionsFor); 0
	// under the null. The exact power is used rather than the simulated one, which is 1 whenever
	// no replication fails and would then ask the fixed design for certainty.
	FixedSessions int
	FixedPower    float64 // the exact power of that fixed design
	// SessionRatio is ExactMeanSessions / FixedSessions: below 1 the sequential design
	// is cheaper on average than a fixed design of equal power.
	SessionRatio float64
	Boundaries   []Boundary
	Warnings     []Warning
}

// SimulateSequential runs reps experiments of K looks with nPerLook new sessions per arm
// per look, corruption probabilities p0 (arm A) and p1 (arm B), under the Lan-DeMets
// O'Brien-Fleming design at two-sided alpha, and compares the average sessions used with
// the fixed design of equal power. The seed makes the run reproducible.
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
	// Cumulative tables repeat across replications; their exact p is computed once.
	cache := map[[3]int]bool{}
	crossed := func(look, a, b int) bool {
		key := [3]int{look, a, b}
		if v, ok := cache[key]; ok {
			return v
		}
		n := (look + 1) * nPerLook
		v := FisherExact(a, n, b, n).PTwoSided <= design[look].NominalP
		cache[key] = v
		return v
	}
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
	if p0 == p1 {
		return out
	}
	// A power that rounds to 1 asks the fixed design for certainty; cap it just below.
	n := SessionsFor(p0, p1, alpha, math.Min(out.ExactRejectRate, 1-1e-9), 1)
	if n == 0 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("no fixed design reaches power %.4f", out.ExactRejectRate)))
		return out
	}
	out.FixedSessions, out.FixedPower = 2*n, FisherPower(p0, p1, n, n, alpha)
	out.SessionRatio = out.ExactMeanSessions / float64(out.FixedSessions)
	return out
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
