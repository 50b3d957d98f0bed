package plan

import (
	"fmt"
	"io"
	"time"
)

// WriteText writes the plan for a person at a terminal.
func (p Plan) WriteText(w io.Writer) {
	fmt.Fprintf(w, "plan for %s\n", p.Spec)
	fmt.Fprintf(w, "  detect %.1f%% against %.1f%% at alpha %g", 100*p.P1, 100*p.P0, p.Alpha)
	if p.Comparisons > 1 {
		fmt.Fprintf(w, " (%g per comparison, %d comparisons)", p.AlphaPerComparison, p.Comparisons)
	}
	fmt.Fprintf(w, ", unit %s\n", p.Unit)
	if p.Unit == "response" {
		fmt.Fprintf(w, "  %.1f turns per session, design effect %.2f\n", p.TurnsPerSession, p.DesignEffect)
	}
	fmt.Fprintf(w, "  power with %d sessions per arm: %.2f (exact, Fisher's test)\n", p.SessionsPerArm, p.Power)
	if p.SessionsNeeded > 0 {
		fmt.Fprintf(w, "  fixed design at the plan's power %.2f: %d sessions per arm (%d in all)\n", p.TargetPower, p.SessionsNeeded, 2*p.SessionsNeeded)
	}
	if p.WallTimeSeconds != nil {
		fmt.Fprintf(w, "  expected wall time: %s (%s)\n", (time.Duration(*p.WallTimeSeconds * float64(time.Second))).Round(time.Second), p.WallTimeBasis)
	} else {
		fmt.Fprintf(w, "  expected wall time: %s\n", p.WallTimeBasis)
	}
	if s := p.Sequential; s != nil {
		fmt.Fprintf(w, "  sequential: %d looks of %d sessions per arm, Lan-DeMets O'Brien-Fleming\n", s.Looks, s.SessionsPerArm)
		for _, b := range s.Boundaries {
			fmt.Fprintf(w, "    look %d at %3.0f%% of the sessions: stop if Fisher p <= %.3g (z %.2f)\n", b.Look, 100*b.Fraction, b.NominalP, b.Z)
		}
		fmt.Fprintf(w, "  at %.1f%% vs %.1f%% it has power %.3f and uses %.1f sessions on average, at most %d (exact)\n",
			100*p.P0, 100*p.P1, s.Power, s.ExpectedSessions, s.MaxSessions)
		if s.SavedFraction != nil {
			switch saved := *s.SavedFraction; {
			case s.Power < p.TargetPower:
				fmt.Fprintf(w, "    it falls short of the plan's power %.2f, so it is not comparable with the fixed design at that power (%d sessions)\n", p.TargetPower, s.FixedSessions)
			case saved >= 0:
				fmt.Fprintf(w, "    against the fixed design at power %.2f (%d sessions) it saves %.0f%% on average\n", p.TargetPower, s.FixedSessions, 100*saved)
			default:
				fmt.Fprintf(w, "    against the fixed design at power %.2f (%d sessions) it uses %.0f%% more on average: its looks are larger than the plan needs\n",
					p.TargetPower, s.FixedSessions, -100*saved)
			}
		}
		if s.PerLookForTarget > 0 && s.PerLookForTarget != s.SessionsPerArm {
			fmt.Fprintf(w, "    %d looks reach power %.2f with %d sessions per arm and look, %.1f sessions on average\n",
				s.Looks, p.TargetPower, s.PerLookForTarget, s.ExpectedForTarget)
		}
		if s.Null != nil {
			fmt.Fprintf(w, "  simulation, %d experiments under the null (both arms at %.1f%%, the worst of p0, p1 and between): type I error %.4f (exact %.4f), at or below alpha %g: %v\n",
				s.Null.Reps, 100*s.Null.Rate, s.Null.RejectRate, s.Null.ExactRejectRate, p.AlphaPerComparison, s.Null.ExactRejectRate <= p.AlphaPerComparison)
		}
		if s.Alt != nil {
			fmt.Fprintf(w, "  simulation, %d experiments at %.1f%% vs %.1f%%: power %.3f, %.0f sessions on average of at most %d\n",
				s.Alt.Reps, 100*p.P0, 100*p.P1, s.Alt.RejectRate, s.Alt.MeanSessions, s.Alt.MaxSessions)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}
