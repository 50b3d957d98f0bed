package stats

import (
	"fmt"
)

// NonInferiorityResult is a one-sided test that arm B's corruption rate is no worse than
// arm A's by more than a margin. It answers the question a fix or a new flag raises:
// "is this at least as good?", which a non-significant difference test cannot answer.
type NonInferiorityResult struct {
	RateA, RateB float64
	Difference   float64 // p_B − p_A
	// Upper is the one-sided (1 − Alpha) upper confidence bound of p_B − p_A: the upper
	// limit of Newcombe's hybrid score interval (his method 10, from two Wilson
	// intervals) at two-sided level 1 − 2·Alpha.
	Upper       float64
	Margin      float64
	Alpha       float64
	NonInferior bool   // Upper < Margin
	Sentence    string // a plain sentence for the verdict
	Warnings    []Warning
}

// NonInferiority tests whether arm B (b corrupted of n2 sessions) is non-inferior to arm
// A (a of n1): B is declared non-inferior when the one-sided (1 − alpha) upper bound of
// p_B − p_A is below margin. When it is not, the result says "not shown", never "no
// difference" or "worse".
func NonInferiority(a, n1, b, n2 int, margin, alpha float64) (NonInferiorityResult, error) {
	if a < 0 || b < 0 || n1 < 1 || n2 < 1 || a > n1 || b > n2 {
		return NonInferiorityResult{}, fmt.Errorf("stats: non-inferiority: counts %d/%d and %d/%d are not valid tallies of at least one session", a, n1, b, n2)
	}
	if !(margin > 0 && margin < 1) {
		return NonInferiorityResult{}, fmt.Errorf("stats: non-inferiority: margin %g must be a rate difference in (0, 1)", margin)
	}
	if !(alpha > 0 && alpha < 0.5) {
		return NonInferiorityResult{}, fmt.Errorf("stats: non-inferiority: one-sided alpha %g must be in (0, 0.5)", alpha)
	}
	out := NonInferiorityResult{Margin: margin, Alpha: alpha}
	out.RateA, out.RateB = float64(a)/float64(n1), float64(b)/float64(n2)
	out.Difference = out.RateB - out.RateA
	out.Upper = newcombeUpper(a, n1, b, n2, alpha)
	out.NonInferior = out.Upper < margin
	level := fmt.Sprintf("%g%%", 100*(1-alpha))
	if out.NonInferior {
		out.Sentence = fmt.Sprintf("B is non-inferior to A: its corruption rate (%d/%d) is at most %.1f points above A's (%d/%d) (one-sided %s upper bound), inside the margin of %.1f points.",
			b, n2, 100*out.Upper, a, n1, level, 100*margin)
	} else {
		out.Sentence = fmt.Sprintf("Non-inferiority not shown: B's corruption rate (%d/%d) may be up to %.1f points above A's (%d/%d) (one-sided %s upper bound), beyond the margin of %.1f points; this is not evidence that B is worse, only that these sessions cannot rule it out.",
			b, n2, 100*out.Upper, a, n1, level, 100*margin)
		if out.Difference <= 0 {
			out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("B's observed rate is not above A's, but %d and %d sessions are too few to bound the difference below %.1f points", n1, n2, 100*margin)))
		}
	}
	return out, nil
}

// newcombeUpper is the upper limit of Newcombe's hybrid score interval for p_B − p_A at
// two-sided level 1 − 2·alpha, that is the one-sided (1 − alpha) upper bound.
func newcombeUpper(a, n1, b, n2 int, alpha float64) float64 {
	return Newcombe(a, n1, b, n2, 1-2*alpha).Hi
}
