package stats

import (
	"errors"
	"fmt"
	"math"
)

// A bisection step compares a configuration that applies some of a bad deploy's changes
// (arm B) with the good configuration (arm A), and must end in one of three answers:
// the subset corrupts (it holds a culprit), it is clean (it holds none), or the sessions
// it was allowed could not tell. "Not significant" is not "clean": a search that read it
// so would send itself away from the culprit after every unlucky step. So a step has two
// boundaries, each with its own error:
//
//   - corrupts: the two-sided Fisher exact test crosses the Lan-DeMets O'Brien-Fleming
//     boundary of a design at the step's alpha (the same design an experiment's
//     analysis.sequential.looks gets, so the step's own verdict agrees). Its error is the
//     probability that a clean subset is called corrupting: at most alpha.
//   - clean: the one-sided upper confidence bound of p_B − p_A falls below the effect,
//     the smallest excess a culprit is assumed to cause. The bound is exact and
//     conservative: Clopper-Pearson's upper bound for B minus Clopper-Pearson's lower
//     bound for A, each at half the look's level, so it covers with at least the look's
//     confidence whatever the rates. Every look gets alpha/looks (Bonferroni over looks),
//     so that a subset whose excess really is effect or more is called clean with
//     probability at most alpha however early the step stops.
//
// A subset is either clean (excess 0) or holds a culprit (excess at least effect), so at
// most one of the two errors is possible in any step: the step errs with probability at
// most alpha. Stopping for one boundary never raises the other's error.

// StepDesign is the three-way group-sequential test of one bisection step.
type StepDesign struct {
	// Looks is how many blocks of sessions an undecided step may take: its budget.
	Looks int
	// Alpha is the step's share of the bisection's error budget.
	Alpha float64
	// Effect is the smallest excess corruption rate (B over A) that the culprit causes;
	// a subset whose excess is shown below it is clean.
	Effect float64
	// Efficacy is the corrupts boundary: two-sided O'Brien-Fleming at Alpha.
	Efficacy []Boundary
	// CleanLevel is the one-sided level of the clean bound at every look, Alpha/Looks.
	CleanLevel float64
}

// NewStepDesign lays out a step of looks blocks at alpha for the given effect.
func NewStepDesign(looks int, alpha, effect float64) (StepDesign, error) {
	if looks < 1 {
		return StepDesign{}, fmt.Errorf("stats: bisection step needs at least one look, got %d", looks)
	}
	if !(alpha > 0 && alpha < 0.5) {
		return StepDesign{}, fmt.Errorf("stats: bisection step: alpha %g is not in (0, 0.5)", alpha)
	}
	if !(effect > 0 && effect < 1) {
		return StepDesign{}, fmt.Errorf("stats: bisection step: effect %g is not a rate difference in (0, 1)", effect)
	}
	eff, err := Boundaries(looks, alpha, nil)
	if err != nil {
		return StepDesign{}, err
	}
	return StepDesign{Looks: looks, Alpha: alpha, Effect: effect, Efficacy: eff, CleanLevel: alpha / float64(looks)}, nil
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

// StepLook is one look of a step: the exact test against the efficacy threshold and the
// clean bound against the effect.
type StepLook struct {
	Look   int
	Counts LookCounts
	// P is the two-sided Fisher exact p on the cumulative counts, Threshold the look's
	// nominal p (Reject(P, Threshold) crosses).
	P, Threshold float64
	Crossed      bool
	// Upper is the one-sided (1 − CleanLevel) upper bound of p_B − p_A; Clean is Upper <
	// Effect.
	Upper float64
	Clean bool
}

// StepResult is a step's decision from the looks taken so far.
type StepResult struct {
	Looks   []StepLook
	Outcome StepOutcome
	// DecidedAt is the look whose boundary decided, 0 when none did.
	DecidedAt int
	// Difference is p_B − p_A at the last look taken.
	Difference float64
	// Sessions are the sessions of both arms at the last look taken.
	Sessions int
	// Sentence says the decision with the numbers that took it.
	Sentence string
}

// ExcessUpperBound is a one-sided (1 − level) upper confidence bound of p_B − p_A for a
// events of n1 in A and b of n2 in B: Clopper-Pearson's upper bound of p_B minus its
// lower bound of p_A, each at level/2. By the union bound it covers with probability at
// least 1 − level for every pair of rates; 1 for an empty arm.
func ExcessUpperBound(a, n1, b, n2 int, level float64) float64 {
	coreCheckCounts("ExcessUpperBound", a, n1, b, n2)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	// A two-sided interval at conf leaves (1 − conf)/2 in each tail; each bound here
	// takes level/2 in one tail.
	conf := 1 - level
	hiB := ClopperPearson(b, n2, conf).Hi
	loA := ClopperPearson(a, n1, conf).Lo
	return hiB - loA
}

// Look applies the step's rule at look k (1-based) to the cumulative counts c, A the
// good arm and B the subset: a crossed efficacy boundary decides corrupts (lower when
// B's rate is below A's), else an upper bound below the effect decides clean, else the
// step continues. An arm without sessions decides nothing.
func (d StepDesign) Look(k int, c LookCounts) (StepLook, StepOutcome) {
	sl := StepLook{Look: k, Counts: c, P: 1, Threshold: d.Efficacy[k-1].NominalP, Upper: 1}
	if c.SessionsA == 0 || c.SessionsB == 0 {
		return sl, StepContinue
	}
	sl.P = FisherExact(c.EventsA, c.SessionsA, c.EventsB, c.SessionsB).PTwoSided
	sl.Crossed = Reject(sl.P, sl.Threshold)
	sl.Upper = ExcessUpperBound(c.EventsA, c.SessionsA, c.EventsB, c.SessionsB, d.CleanLevel)
	sl.Clean = sl.Upper < d.Effect
	switch {
	case sl.Crossed && c.EventsB*c.SessionsA > c.EventsA*c.SessionsB:
		return sl, StepCorrupts
	case sl.Crossed:
		return sl, StepLower
	case sl.Clean:
		return sl, StepClean
	}
	return sl, StepContinue
}

// StepDecision applies a step's two boundaries to the cumulative counts of the looks
// taken (A is the good arm, B the subset): at each look in turn, a crossed efficacy
// boundary decides corrupts (or lower, when B's rate is below A's), else an upper bound
// below the effect decides clean. With every look taken and neither, the step is
// inconclusive.
func StepDecision(looks []LookCounts, d StepDesign) (StepResult, error) {
	var out StepResult
	if len(d.Efficacy) == 0 || d.Looks != len(d.Efficacy) {
		return out, errors.New("stats: bisection step decision needs a design from NewStepDesign")
	}
	if len(looks) == 0 {
		return out, errors.New("stats: bisection step decision needs at least one look of counts")
	}
	if len(looks) > d.Looks {
		return out, fmt.Errorf("stats: bisection step: %d looks taken but the design plans %d", len(looks), d.Looks)
	}
	prev := LookCounts{}
	for i, l := range looks {
		if l.EventsA < 0 || l.EventsB < 0 || l.EventsA > l.SessionsA || l.EventsB > l.SessionsB {
			return out, fmt.Errorf("stats: bisection step: look %d: counts %d/%d and %d/%d are not valid tallies", i+1, l.EventsA, l.SessionsA, l.EventsB, l.SessionsB)
		}
		if l.SessionsA < prev.SessionsA || l.SessionsB < prev.SessionsB || l.EventsA < prev.EventsA || l.EventsB < prev.EventsB {
			return out, fmt.Errorf("stats: bisection step: look %d: counts must be cumulative, but they fall from the previous look", i+1)
		}
		prev = l
		sl, o := d.Look(i+1, l)
		out.Looks = append(out.Looks, sl)
		out.Sessions = l.SessionsA + l.SessionsB
		out.Difference = coreRate(l.EventsB, l.SessionsB) - coreRate(l.EventsA, l.SessionsA)
		out.Outcome = o
		if out.Outcome != StepContinue {
			out.DecidedAt = i + 1
			break
		}
	}
	if out.Outcome == StepContinue && len(looks) == d.Looks {
		out.Outcome = StepInconclusive
	}
	out.Sentence = d.sentence(out)
	return out, nil
}

func (d StepDesign) sentence(r StepResult) string {
	last := r.Looks[len(r.Looks)-1]
	c := last.Counts
	counts := fmt.Sprintf("%d/%d against %d/%d", c.EventsB, c.SessionsB, c.EventsA, c.SessionsA)
	level := fmt.Sprintf("%.4g%%", 100*(1-d.CleanLevel))
	switch r.Outcome {
	case StepCorrupts:
		return fmt.Sprintf("corrupts: %s at look %d of %d, exact p = %.3g reaches the look's threshold %.3g (step alpha %.3g)",
			counts, last.Look, d.Looks, last.P, last.Threshold, d.Alpha)
	case StepLower:
		return fmt.Sprintf("corrupts less than good: %s at look %d of %d, exact p = %.3g reaches the look's threshold %.3g",
			counts, last.Look, d.Looks, last.P, last.Threshold)
	case StepClean:
		return fmt.Sprintf("clean: %s at look %d of %d; the excess is at most %+.1f points (one-sided %s bound), below the effect of %.1f points",
			counts, last.Look, d.Looks, 100*last.Upper, level, 100*d.Effect)
	case StepInconclusive:
		return fmt.Sprintf("inconclusive after all %d looks: %s, exact p = %.3g above the threshold %.3g, and the excess may be up to %+.1f points (one-sided %s bound), not below the effect of %.1f points",
			d.Looks, counts, last.P, last.Threshold, 100*last.Upper, level, 100*d.Effect)
	}
	return fmt.Sprintf("undecided at look %d of %d: %s, exact p = %.3g above the threshold %.3g, excess up to %+.1f points",
		last.Look, d.Looks, counts, last.P, last.Threshold, 100*last.Upper)
}

// StepOperating is what a step design does at given rates, computed exactly over every
// path of cumulative counts.
type StepOperating struct {
	// Corrupts, Clean, Lower and Inconclusive are the probabilities of each outcome;
	// they sum to 1.
	Corrupts, Clean, Lower, Inconclusive float64
	// MeanSessions is the expected number of sessions of both arms; MaxSessions the
	// sessions of a step that takes every look.
	MeanSessions float64
	MaxSessions  int
}

// StepOperatingExact computes a step design's outcome probabilities and expected
// sessions for rates pA (good) and pB (subset), with nPerLook sessions per arm per look
// and none lost.
func StepOperatingExact(pA, pB float64, nPerLook int, d StepDesign) (StepOperating, error) {
	if nPerLook < 1 || len(d.Efficacy) == 0 || !(pA >= 0 && pA <= 1 && pB >= 0 && pB <= 1) {
		return StepOperating{}, fmt.Errorf("stats: step operating figures need nPerLook ≥ 1, a design and rates in [0, 1] (got %d, %d looks, %g, %g)", nPerLook, len(d.Efficacy), pA, pB)
	}
	K := d.Looks
	out := StepOperating{MaxSessions: 2 * K * nPerLook}
	fa, fb := binomialPMF(nPerLook, pA), binomialPMF(nPerLook, pB)
	size := K*nPerLook + 1
	cont := newSquare(size)
	cont[0][0] = 1
	tmp := newSquare(size)
	type key struct{ look, a, b int }
	decided := map[key]StepOutcome{}
	decide := func(k, a, b int) StepOutcome {
		kk := key{k, a, b}
		if o, ok := decided[kk]; ok {
			return o
		}
		n := (k + 1) * nPerLook
		_, o := d.Look(k+1, LookCounts{EventsA: a, SessionsA: n, EventsB: b, SessionsB: n})
		decided[kk] = o
		return o
	}
	remaining := 1.0
	for k := 0; k < K; k++ {
		top := k * nPerLook
		addLook(cont, tmp, top, nPerLook, fa, fb)
		used := float64(2 * (k + 1) * nPerLook)
		for a := 0; a <= top+nPerLook; a++ {
			for b := 0; b <= top+nPerLook; b++ {
				m := cont[a][b]
				if m <= 0 {
					continue
				}
				switch decide(k, a, b) {
				case StepCorrupts:
					out.Corrupts += m
				case StepLower:
					out.Lower += m
				case StepClean:
					out.Clean += m
				default:
					continue
				}
				out.MeanSessions += m * used
				remaining -= m
				cont[a][b] = 0
			}
		}
	}
	out.Inconclusive = math.Max(0, remaining)
	out.MeanSessions += out.Inconclusive * float64(out.MaxSessions)
	return out, nil
}
