package stats

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"
)

// A bisection step compares a configuration that applies some of a bad deploy's changes
// (arm B) with the good configuration (arm A), and must end in one of three answers:
// the subset corrupts (it holds a culprit), it is clean (it holds none), or the launches
// it was allowed could not tell. "Not significant" is not "clean": a search that read it
// so would send itself away from the culprit after every unlucky step. Each look of a
// step is one block: one engine launch of each side. The launch is the unit, since the
// sessions of one launch share its clocks, memory layout and first batches and are not
// independent draws. So a step has two boundaries, each with its own error:
//
//   - corrupts: the randomization test of the launches' corruption rates (B's launches
//     against A's, LaunchPermutation) reaches the look's level. The step's alpha is split
//     evenly over the looks whose launches can reach it at all (with k launches a side
//     the test cannot give a p below 2/C(2k, k)), so the error of calling a clean subset
//     corrupting is at most alpha however much launches differ.
//   - clean: the one-sided upper confidence bound of p_B − p_A falls below the effect,
//     the smallest excess a culprit is assumed to cause. The bound is the larger of two:
//     Clopper-Pearson's upper bound for B minus its lower bound for A, each at half the
//     look's level, on counts shrunk by the design effect 1 + (m − 1)·ICC of launches of
//     m sessions whose rates differ with intra-launch correlation up to LaunchICC; and
//     the t bound of the launches' mean rates from their own spread, which holds when
//     launches differ more than that (and needs two launches a side). Every look gets
//     alpha/looks (Bonferroni over looks), so that a subset whose excess really is
//     effect or more is called clean with probability at most about alpha however early
//     the step stops.
//
// A subset is either clean (excess 0) or holds a culprit (excess at least effect), so at
// most one of the two errors is possible in any step: the step errs with probability at
// most alpha. Stopping for one boundary never raises the other's error.

// StepDesign is the three-way group-sequential test of one bisection step on launches.
type StepDesign struct {
	// Looks is how many launches of each side an undecided step may take: its budget.
	Looks int
	// Alpha is the step's share of the bisection's error budget.
	Alpha float64
	// Effect is the smallest excess corruption rate (B over A) that the culprit causes;
	// a subset whose excess is shown below it is clean.
	Effect float64
	// LaunchICC is the largest intra-launch correlation of corruption the clean bound
	// allows for.
	LaunchICC float64
	// Levels are the two-sided levels of the launch randomization test at each look:
	// Alpha split evenly over the looks from FirstLook on, 0 before it (LookLevels).
	Levels []float64
	// FirstLook is the first look whose launches can reach its level: the earliest a
	// step can call a subset corrupting.
	FirstLook int
	// CleanLevel is the one-sided level of the clean bound at every look, Alpha/Looks.
	CleanLevel float64
}

// StepLooksNeeded is the fewest looks (launches a side) with which a step at alpha can
// call a subset corrupting at all.
func StepLooksNeeded(alpha float64) int { return LaunchesNeeded(alpha) }

// NewStepDesign lays out a step of looks launches a side at alpha for the given effect,
// its clean bound allowing for launches that differ with intra-launch correlation icc.
func NewStepDesign(looks int, alpha, effect, icc float64) (StepDesign, error) {
	if looks < 1 {
		return StepDesign{}, fmt.Errorf("stats: bisection step needs at least one look, got %d", looks)
	}
	if !(alpha > 0 && alpha < 0.5) {
		return StepDesign{}, fmt.Errorf("stats: bisection step: alpha %g is not in (0, 0.5)", alpha)
	}
	if !(effect > 0 && effect < 1) {
		return StepDesign{}, fmt.Errorf("stats: bisection step: effect %g is not a rate difference in (0, 1)", effect)
	}
	if !(icc >= 0 && icc < 1) {
		return StepDesign{}, fmt.Errorf("stats: bisection step: intra-launch correlation %g is not in [0, 1)", icc)
	}
	d := StepDesign{Looks: looks, Alpha: alpha, Effect: effect, LaunchICC: icc, CleanLevel: alpha / float64(looks)}
	minP := make([]float64, looks)
	for k := range minP {
		minP[k] = MinAttainableP(k+1, k+1)
	}
	if d.Levels, d.FirstLook = LookLevels(alpha, minP); d.FirstLook > 0 {
		return d, nil
	}
	return StepDesign{}, fmt.Errorf("stats: a bisection step of %d looks cannot call a subset corrupting at alpha %.3g: the launch randomization test needs at least %d launches a side to reach it",
		looks, alpha, StepLooksNeeded(alpha))
}

// EarliestClean is the first look at which a step of launches of sessions sessions a
// side can call a subset clean at all: when neither side corrupts a single session, the
// most favourable counts there are. 0 when no look of the design can: its clean bound,
// allowing for launches that differ up to LaunchICC, stays above the effect, and every
// step that does not corrupt ends inconclusive. More sessions a launch, more looks or a
// smaller LaunchICC (measured by an A/A experiment) bring it within reach.
func (d StepDesign) EarliestClean(sessions int) int {
	if sessions < 1 {
		return 0
	}
	blocks := make([]LookCounts, 0, d.Looks)
	for k := 1; k <= d.Looks; k++ {
		blocks = append(blocks, LookCounts{SessionsA: sessions, SessionsB: sessions})
		if sl, _ := d.Look(blocks); sl.Clean {
			return k
		}
	}
	return 0
}

// StepOutcome is what one bisection step decided.
type StepOutcome string

// Step outcomes.
const (
	// StepCorrupts: B corrupts significantly more than A; the subset holds a culprit.
	StepCorrupts StepOutcome = "corrupts"
	// StepClean: B's excess over A is shown below the effect; the subset holds none.
	StepClean StepOutcome = "clean"
	// StepInconclusive: the budget of looks ran out before either boundary was crossed,
	// or the step's engines crashed, wedged or lost too many sessions to judge.
	StepInconclusive StepOutcome = "inconclusive"
	// StepLower: B corrupts significantly less than A, which a subset of the changes
	// from good to bad cannot do if good is good: the search cannot use it.
	StepLower StepOutcome = "lower"
	// StepContinue: no boundary crossed yet and looks remain.
	StepContinue StepOutcome = "continue"
)

// Decided reports whether the outcome ends the step.
func (o StepOutcome) Decided() bool { return o != StepContinue && o != "" }

// StepLook is one look of a step: the launch randomization test against the look's
// level and the clean bound against the effect.
type StepLook struct {
	Look int
	// Counts are the sessions and corrupted sessions of every launch so far.
	Counts LookCounts
	// LaunchesA and LaunchesB are the launches with sessions on each side so far.
	LaunchesA, LaunchesB int
	// P is the two-sided randomization p of the launches' rates, Level the look's level
	// and Crossed is Reject(P, Level); before the design's FirstLook no launches can
	// reach a level, Level is 0 and P is 1, not computed.
	P, Level float64
	Crossed  bool
	// Upper is the one-sided (1 − CleanLevel) upper bound of p_B − p_A allowing for the
	// design's intra-launch correlation; Clean is Upper < Effect.
	Upper float64
	Clean bool
}

// StepResult is a step's decision from the looks taken so far.
type StepResult struct {
	Looks   []StepLook
	Outcome StepOutcome
	// DecidedAt is the look whose boundary decided, 0 when none did.
	DecidedAt int
	// Difference is p_B − p_A at the last look taken: the mean of B's launch rates less
	// the mean of A's.
	Difference float64
	// Sessions are the sessions of both arms at the last look taken.
	Sessions int
	// Sentence says the decision with the numbers that took it.
	Sentence string
}

// DesignEffect is the variance inflation of a rate pooled over launches of m sessions
// each whose sessions correlate at icc within a launch: 1 + (m − 1)·icc.
func DesignEffect(m, icc float64) float64 { return 1 + math.Max(m-1, 0)*icc }

// ExcessUpperBound is a one-sided (1 − level) upper confidence bound of p_B − p_A for a
// events of n1 in A and b of n2 in B, pooled over launches whose design effect is de
// (1: independent sessions): Clopper-Pearson's upper bound of p_B minus its lower bound
// of p_A, each at level/2, on the counts divided by de (the effective sample size). By
// the union bound it covers with probability at least 1 − level for every pair of rates
// when de is 1; 1 for an empty arm.
func ExcessUpperBound(a, n1, b, n2 int, level, de float64) float64 {
	coreCheckCounts("ExcessUpperBound", a, n1, b, n2)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	de = math.Max(de, 1)
	tail := level / 2
	xa, na := float64(a)/de, float64(n1)/de
	xb, nb := float64(b)/de, float64(n2)/de
	loA, hiB := 0.0, 1.0
	if xa > 0 {
		loA = distuv.Beta{Alpha: xa, Beta: na - xa + 1}.Quantile(tail)
	}
	if xb < nb {
		hiB = distuv.Beta{Alpha: xb + 1, Beta: nb - xb}.Quantile(1 - tail)
	}
	return hiB - loA
}

// spreadUpperBound is the one-sided (1 − level) upper t bound of Mean(b) − Mean(a)
// from the launches' own spread (pooled variance, launches − 2 degrees of freedom): the
// bound that holds when launches differ more than a design's LaunchICC allows for. 1
// with fewer than two launches a side, whose spread cannot be seen; with launches that
// all agree it is the difference itself, and the design's bound decides.
func spreadUpperBound(a, b []float64, level float64) float64 {
	if len(a) < 2 || len(b) < 2 {
		return 1
	}
	l, err := LaunchMeans(a, b, 0.5)
	if err != nil {
		return 1
	}
	if !l.Possible {
		return l.Difference
	}
	return l.Difference + studentQuantile(l.DF, 1-level)*l.SE
}

// Look applies the step's rule to the blocks taken so far (blocks[i] holds block i's
// own counts, one launch a side, A the good arm and B the subset): a crossed level
// decides corrupts (lower when B's launches corrupt less than A's), else an upper bound
// below the effect decides clean, else the step continues. A side without sessions
// decides nothing.
func (d StepDesign) Look(blocks []LookCounts) (StepLook, StepOutcome) {
	k := len(blocks)
	sl := StepLook{Look: k, P: 1, Upper: 1}
	if k >= 1 && k <= len(d.Levels) {
		sl.Level = d.Levels[k-1]
	}
	var a, b []float64
	for _, c := range blocks {
		sl.Counts.EventsA += c.EventsA
		sl.Counts.SessionsA += c.SessionsA
		sl.Counts.EventsB += c.EventsB
		sl.Counts.SessionsB += c.SessionsB
		if c.SessionsA > 0 {
			a = append(a, float64(c.EventsA)/float64(c.SessionsA))
		}
		if c.SessionsB > 0 {
			b = append(b, float64(c.EventsB)/float64(c.SessionsB))
		}
	}
	sl.LaunchesA, sl.LaunchesB = len(a), len(b)
	if len(a) == 0 || len(b) == 0 {
		return sl, StepContinue
	}
	c := sl.Counts
	// Before FirstLook no p can reach a level, and the test is not worth its cost.
	if sl.Level > 0 {
		sl.P, _, _ = permutationP(a, b, 0)
		sl.Crossed = Reject(sl.P, sl.Level)
	}
	m := float64(c.SessionsA+c.SessionsB) / float64(len(a)+len(b))
	sl.Upper = math.Max(ExcessUpperBound(c.EventsA, c.SessionsA, c.EventsB, c.SessionsB, d.CleanLevel, DesignEffect(m, d.LaunchICC)),
		spreadUpperBound(a, b, d.CleanLevel))
	sl.Clean = sl.Upper < d.Effect
	switch {
	case sl.Crossed && Mean(b) > Mean(a):
		return sl, StepCorrupts
	case sl.Crossed:
		return sl, StepLower
	case sl.Clean:
		return sl, StepClean
	}
	return sl, StepContinue
}

// StepDecision applies a step's two boundaries look by look to the blocks taken
// (blocks[i] holds block i's own counts, A the good arm and B the subset): at each look
// in turn, a crossed level decides corrupts (or lower, when B's launches corrupt less
// than A's), else an upper bound below the effect decides clean. With every look taken
// and neither, the step is inconclusive.
func StepDecision(blocks []LookCounts, d StepDesign) (StepResult, error) {
	var out StepResult
	if len(d.Levels) == 0 || d.Looks != len(d.Levels) {
		return out, errors.New("stats: bisection step decision needs a design from NewStepDesign")
	}
	if len(blocks) == 0 {
		return out, errors.New("stats: bisection step decision needs at least one look of counts")
	}
	if len(blocks) > d.Looks {
		return out, fmt.Errorf("stats: bisection step: %d looks taken but the design plans %d", len(blocks), d.Looks)
	}
	for i, l := range blocks {
		if l.EventsA < 0 || l.EventsB < 0 || l.EventsA > l.SessionsA || l.EventsB > l.SessionsB {
			return out, fmt.Errorf("stats: bisection step: look %d: counts %d/%d and %d/%d are not valid tallies", i+1, l.EventsA, l.SessionsA, l.EventsB, l.SessionsB)
		}
	}
	for i := range blocks {
		sl, o := d.Look(blocks[:i+1])
		out.Looks = append(out.Looks, sl)
		out.Sessions = sl.Counts.SessionsA + sl.Counts.SessionsB
		out.Difference = launchDifference(blocks[:i+1])
		out.Outcome = o
		if out.Outcome != StepContinue {
			out.DecidedAt = i + 1
			break
		}
	}
	if out.Outcome == StepContinue && len(blocks) == d.Looks {
		out.Outcome = StepInconclusive
	}
	out.Sentence = d.sentence(out)
	return out, nil
}

// launchDifference is the mean of B's launch rates less the mean of A's.
func launchDifference(blocks []LookCounts) float64 {
	var a, b []float64
	for _, c := range blocks {
		if c.SessionsA > 0 {
			a = append(a, float64(c.EventsA)/float64(c.SessionsA))
		}
		if c.SessionsB > 0 {
			b = append(b, float64(c.EventsB)/float64(c.SessionsB))
		}
	}
	if len(a) == 0 || len(b) == 0 {
		return math.NaN()
	}
	return Mean(b) - Mean(a)
}

func (d StepDesign) sentence(r StepResult) string {
	last := r.Looks[len(r.Looks)-1]
	c := last.Counts
	counts := fmt.Sprintf("%d/%d against %d/%d over %d and %d launches", c.EventsB, c.SessionsB, c.EventsA, c.SessionsA, last.LaunchesB, last.LaunchesA)
	// The bound's level is the look's share of the step's alpha, seldom a round
	// percentage ("99.94%"): it is named as a level.
	level := fmt.Sprintf("at level %.3g", d.CleanLevel)
	reach := fmt.Sprintf("launch p = %s above the look's level %.3g", pText(last.P), last.Level)
	if last.Level == 0 {
		reach = fmt.Sprintf("no launch p can reach the step's alpha before look %d", d.FirstLook)
	}
	switch r.Outcome {
	case StepCorrupts:
		return fmt.Sprintf("corrupts: %s at look %d of %d, launch p = %s reaches the look's level %.3g (step alpha %.3g)",
			counts, last.Look, d.Looks, pText(last.P), last.Level, d.Alpha)
	case StepLower:
		return fmt.Sprintf("corrupts less than good: %s at look %d of %d, launch p = %s reaches the look's level %.3g",
			counts, last.Look, d.Looks, pText(last.P), last.Level)
	case StepClean:
		return fmt.Sprintf("clean: %s at look %d of %d; the excess is at most %+.1f points (one-sided bound %s, launches allowed to differ up to ICC %.2g), below the effect of %.1f points",
			counts, last.Look, d.Looks, 100*last.Upper, level, d.LaunchICC, 100*d.Effect)
	case StepInconclusive:
		return fmt.Sprintf("inconclusive after all %d looks: %s, %s, and the excess may be up to %+.1f points (one-sided bound %s), not below the effect of %.1f points",
			d.Looks, counts, reach, 100*last.Upper, level, 100*d.Effect)
	}
	return fmt.Sprintf("undecided at look %d of %d: %s (%s), excess up to %+.1f points",
		last.Look, d.Looks, counts, reach, 100*last.Upper)
}

// StepOperating is what a step design does at given rates, estimated over simulated
// steps.
type StepOperating struct {
	// Corrupts, Clean, Lower and Inconclusive are the shares of each outcome; they sum
	// to 1.
	Corrupts, Clean, Lower, Inconclusive float64
	// MeanLaunches is the expected number of launches a side; MeanSessions the expected
	// sessions of both arms; MaxSessions the sessions of a step that takes every look.
	MeanLaunches, MeanSessions float64
	MaxSessions                int
	Reps                       int
}

// SimulateStep estimates a step design's outcome shares and expected launches for mean
// rates pA (good) and pB (subset), nPerLook sessions a launch and none lost, each
// launch's rate drawn with intra-launch correlation icc, over reps seeded steps.
func SimulateStep(pA, pB, icc float64, nPerLook int, d StepDesign, reps int, seed uint64) (StepOperating, error) {
	if nPerLook < 1 || reps < 1 || len(d.Levels) == 0 || !(pA >= 0 && pA <= 1 && pB >= 0 && pB <= 1) || !(icc >= 0 && icc < 1) {
		return StepOperating{}, fmt.Errorf("stats: step operating figures need nPerLook ≥ 1, reps ≥ 1, a design, rates in [0, 1] and an ICC in [0, 1) (got %d, %d, %d looks, %g, %g, %g)", nPerLook, reps, len(d.Levels), pA, pB, icc)
	}
	out := StepOperating{MaxSessions: 2 * d.Looks * nPerLook, Reps: reps}
	rng := rand.New(rand.NewPCG(seed, 0x73746570))
	blocks := make([]LookCounts, 0, d.Looks)
	launches := 0
	for range reps {
		blocks = blocks[:0]
		o := StepInconclusive
		for k := 1; k <= d.Looks; k++ {
			blocks = append(blocks, LookCounts{
				EventsA: BetaBinomialDraw(rng, nPerLook, pA, icc), SessionsA: nPerLook,
				EventsB: BetaBinomialDraw(rng, nPerLook, pB, icc), SessionsB: nPerLook})
			if _, lo := d.Look(blocks); lo != StepContinue {
				o = lo
				break
			}
		}
		launches += len(blocks)
		switch o {
		case StepCorrupts:
			out.Corrupts++
		case StepClean:
			out.Clean++
		case StepLower:
			out.Lower++
		default:
			out.Inconclusive++
		}
	}
	n := float64(reps)
	out.Corrupts, out.Clean, out.Lower, out.Inconclusive = out.Corrupts/n, out.Clean/n, out.Lower/n, out.Inconclusive/n
	out.MeanLaunches = float64(launches) / n
	out.MeanSessions = 2 * out.MeanLaunches * float64(nPerLook)
	return out, nil
}

// pText writes a p-value for a step's sentence.
func pText(p float64) string {
	if p < 1e-4 {
		return fmt.Sprintf("%.2e", p)
	}
	return fmt.Sprintf("%.3g", p)
}
