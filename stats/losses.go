package stats

import (
	"fmt"
)

// A session that crashed, timed out or errored carries no label, and dropping it is
// harmless only when both arms lose sessions alike and for reasons unrelated to
// corruption. A wedged engine or a crash under load is often the very fault being
// studied, so arbiter compares loss rates between arms and shows how far the verdict
// could move had the lost sessions been labelled.

// ArmOutcome tallies one arm's sessions by how they ended.
type ArmOutcome struct {
	Completed int // sessions that finished every turn and were labelled
	Corrupted int // of the completed sessions, those labelled corrupted
	Crashed   int // lost because the engine died
	TimedOut  int // lost to a request or stall timeout
	Errored   int // lost to a transport or protocol error
}

// Lost is the number of sessions that ended without a label.
func (o ArmOutcome) Lost() int { return o.Crashed + o.TimedOut + o.Errored }

// Sessions is the number of sessions started.
func (o ArmOutcome) Sessions() int { return o.Completed + o.Lost() }

// LossResult compares two arms' losses and bounds their effect on the corruption
// comparison.
type LossResult struct {
	LossRateA, LossRateB float64
	// LossP is the two-sided Fisher exact p of lost against completed sessions.
	LossP float64
	// Observed is the corruption rate difference p_B − p_A among completed sessions, and
	// ObservedP its two-sided Fisher exact p.
	Observed  float64
	ObservedP float64
	// Bounds are the extremes of p_B − p_A over all started sessions: Lo when every lost
	// session of A had been corrupted and every lost one of B clean, Hi the reverse.
	Bounds Interval
	// LoP and HiP are the Fisher exact p of the tables at those two extremes.
	LoP, HiP float64
	Alpha    float64
	// Straddles is true when the two extremes lead to different decisions (B higher, A
	// higher, or no difference shown at Alpha): the verdict then depends on sessions
	// that carry no label.
	Straddles bool
	Warnings  []Warning
}

// Losses compares the loss rates of arms A and B and computes tipping-point bounds for
// the corruption rate difference, at two-sided level alpha.
func Losses(a, b ArmOutcome, alpha float64) (LossResult, error) {
	for _, arm := range []struct {
		name string
		o    ArmOutcome
	}{{"A", a}, {"B", b}} {
		o := arm.o
		if o.Completed < 0 || o.Corrupted < 0 || o.Crashed < 0 || o.TimedOut < 0 || o.Errored < 0 || o.Corrupted > o.Completed {
			return LossResult{}, fmt.Errorf("stats: losses: arm %s: %+v is not a valid tally", arm.name, o)
		}
		if o.Sessions() == 0 {
			return LossResult{}, fmt.Errorf("stats: losses: arm %s started no sessions", arm.name)
		}
	}
	if !(alpha > 0 && alpha < 1) {
		return LossResult{}, fmt.Errorf("stats: losses: alpha %g is not in (0, 1)", alpha)
	}
	out := LossResult{Alpha: alpha}
	na, nb := a.Sessions(), b.Sessions()
	out.LossRateA = float64(a.Lost()) / float64(na)
	out.LossRateB = float64(b.Lost()) / float64(nb)
	out.LossP = FisherExact(a.Lost(), na, b.Lost(), nb).PTwoSided
	if a.Completed > 0 && b.Completed > 0 {
		out.Observed = float64(b.Corrupted)/float64(b.Completed) - float64(a.Corrupted)/float64(a.Completed)
		out.ObservedP = FisherExact(a.Corrupted, a.Completed, b.Corrupted, b.Completed).PTwoSided
	} else {
		out.ObservedP = 1
		out.Warnings = append(out.Warnings, "an arm completed no session: the observed corruption difference is undefined")
	}
	loA, loB := a.Corrupted+a.Lost(), b.Corrupted
	hiA, hiB := a.Corrupted, b.Corrupted+b.Lost()
	out.Bounds = Interval{
		Lo: float64(loB)/float64(nb) - float64(loA)/float64(na),
		Hi: float64(hiB)/float64(nb) - float64(hiA)/float64(na),
	}
	out.LoP = FisherExact(loA, na, loB, nb).PTwoSided
	out.HiP = FisherExact(hiA, na, hiB, nb).PTwoSided
	decision := func(p, diff float64) int {
		switch {
		case !Reject(p, alpha):
			return 0
		case diff > 0:
			return 1
		default:
			return -1
		}
	}
	out.Straddles = decision(out.LoP, out.Bounds.Lo) != decision(out.HiP, out.Bounds.Hi)
	if Reject(out.LossP, alpha) {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("loss rates differ between arms (%d/%d vs %d/%d lost, Fisher p = %.3g): lost sessions are not missing at random and may be the fault itself",
			a.Lost(), na, b.Lost(), nb, out.LossP)))
	}
	if out.Straddles {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("the verdict depends on the %d lost sessions: counted as corrupted in one arm and clean in the other, the difference ranges from %+.1f to %+.1f points (p = %.3g and %.3g)",
			a.Lost()+b.Lost(), 100*out.Bounds.Lo, 100*out.Bounds.Hi, out.LoP, out.HiP)))
	}
	return out, nil
}
