package plan

import (
	"fmt"
	"io"
	"time"

	"github.com/arbiterlab/arbiter/stats"
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
	fmt.Fprintf(w, "  power with %d sessions per arm, if launches were replicas: %.2f (exact, Fisher's test)\n", p.SessionsPerArm, p.Power)
	if p.SessionsNeeded > 0 {
		fmt.Fprintf(w, "  fixed design at the plan's power %.2f: %d sessions per arm (%d in all)\n", p.TargetPower, p.SessionsNeeded, 2*p.SessionsNeeded)
	}
	fmt.Fprintf(w, "  launches: %d per arm; each claim on the primary outcome is tested at %.3g (its share of alpha %g); the launch test's smallest p with these launches is %.3g\n",
		p.LaunchesPerArm, p.LaunchLevel, p.Alpha, p.LaunchMinP)
	fmt.Fprintf(w, "  launch-level power with %d sessions per launch, launch ICC %.3g (%s; design effect %.2f): %.2f\n",
		p.SessionsPerArm/max(p.LaunchesPerArm, 1), p.LaunchICC, p.LaunchICCBasis, p.LaunchDesignEffect, p.LaunchPower)
	if p.LaunchesNeeded > 0 {
		fmt.Fprintf(w, "  launches per arm for power %.2f: %d\n", p.TargetPower, p.LaunchesNeeded)
	} else {
		fmt.Fprintf(w, "  launches per arm for power %.2f: more than %d\n", p.TargetPower, MaxPlannedLaunches)
	}
	if p.WallTimeSeconds != nil {
		fmt.Fprintf(w, "  expected wall time: %s (%s)\n", (time.Duration(*p.WallTimeSeconds * float64(time.Second))).Round(time.Second), p.WallTimeBasis)
	} else {
		fmt.Fprintf(w, "  expected wall time: %s\n", p.WallTimeBasis)
	}
	if s := p.Sequential; s != nil {
		fmt.Fprintf(w, "  sequential: %d looks, one launch per arm and look (%d sessions each), each look testing the launches so far at %.3g\n",
			s.Looks, s.SessionsPerLaunch, s.LevelPerLook)
		if s.EarliestStop > 0 {
			fmt.Fprintf(w, "    the earliest look that can stop with a claim: %d (%d launches per arm)\n", s.EarliestStop, s.EarliestStop)
		} else {
			fmt.Fprintf(w, "    no look can reach %.3g: %d launches per arm are needed, so give the design at least %d looks\n",
				s.LevelPerLook, stats.LaunchesNeeded(s.LevelPerLook), stats.LaunchesNeeded(s.LevelPerLook))
		}
		if s.Null != nil {
			fmt.Fprintf(w, "  simulation, %d experiments under the null (both arms at %.1f%%, launch ICC %.3g): claims %.4f, at or below %.3g: %v\n",
				s.Null.Reps, 100*s.Null.Rate, p.LaunchICC, s.Null.RejectRate, s.LevelPerLook*float64(s.Looks), s.Null.RejectRate <= s.LevelPerLook*float64(s.Looks))
		}
		if s.Alt != nil {
			fmt.Fprintf(w, "  simulation, %d experiments at %.1f%% vs %.1f%%: power %.3f, %.1f launches per arm on average of at most %d\n",
				s.Alt.Reps, 100*p.P0, 100*p.P1, s.Alt.RejectRate, s.Alt.MeanLaunches, s.Looks)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}
