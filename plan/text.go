package plan

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbiterlab/arbiter/stats"
)

// WriteText writes the plan for a person at a terminal: launches first, since the
// launch is the unit every claim is tested on.
func (p Plan) WriteText(w io.Writer) {
	if p.Outcome == "wedges" {
		p.writeWedges(w)
		return
	}
	fmt.Fprintf(w, "plan for %s\n", p.Spec)
	fmt.Fprintf(w, "  detect %.1f%% against %.1f%% at alpha %g", 100*p.P1, 100*p.P0, p.Alpha)
	if p.Comparisons > 1 {
		fmt.Fprintf(w, ", %d arms against the baseline", p.Comparisons)
	}
	per := p.SessionsPerArm / max(p.LaunchesPerArm, 1)
	fmt.Fprintf(w, "; %d sessions per launch, launches differing with ICC %.3g (%s; design effect %.2f)\n",
		per, p.LaunchICC, p.LaunchICCBasis, p.LaunchDesignEffect)
	floor := fmt.Sprintf("with a noise floor (ICC bound %.3g)", p.FloorICC)
	fmt.Fprintf(w, "  power by launches per arm (simulated; the level is each claim's share of alpha):\n")
	fmt.Fprintf(w, "    %8s  %-30s  %s\n", "launches", "without a floor", floor)
	for _, r := range p.PowerByLaunches {
		plain := "cannot test"
		if r.Level > 0 {
			plain = fmt.Sprintf("%.2f  %s at %.3g", r.Power, r.Test, r.Level)
		}
		fl := "cannot test"
		if r.FloorLevel > 0 {
			fl = fmt.Sprintf("%.2f  at %.3g", r.FloorPower, r.FloorLevel)
		}
		mark := " "
		if r.Launches == p.LaunchesPerArm {
			mark = "*"
		}
		fmt.Fprintf(w, "   %s%8d  %-30s  %s\n", mark, r.Launches, plain, fl)
	}
	fmt.Fprintf(w, "    (the floor: %s)\n", p.FloorICCBasis)
	fmt.Fprintf(w, "  launches per arm for power %.2f: %s without a floor, %s with one\n",
		p.TargetPower, launchesText(p.LaunchesNeeded), launchesText(p.LaunchesNeededFloor))
	fixed := ""
	if p.Sequential != nil {
		fixed = " judged once at the end (its sequential looks are below)"
	}
	if p.LaunchLevel > 0 {
		// A t test's p has no floor; the randomization test's is the smallest its
		// launches allow.
		floorP := ""
		if p.LaunchMinP > 0 {
			floorP = fmt.Sprintf(" (its smallest p with these launches %.3g)", p.LaunchMinP)
		}
		fmt.Fprintf(w, "  this spec (*): %d launch(es) per arm%s, decided by the %s test at %.3g%s: power %.2f\n",
			p.LaunchesPerArm, fixed, testText(p.LaunchTest), p.LaunchLevel, floorP, p.LaunchPower)
	} else {
		fmt.Fprintf(w, "  this spec (*): %d launch(es) per arm%s, which no test can decide on\n", p.LaunchesPerArm, fixed)
	}
	fmt.Fprintf(w, "  if launches were replicas (they are not): %d sessions per arm would have power %.2f (exact, Fisher's test at %.3g)",
		p.SessionsPerArm, p.Power, p.AlphaPerComparison)
	if p.SessionsNeeded > 0 {
		fmt.Fprintf(w, ", and %d sessions per arm power %.2f", p.SessionsNeeded, p.TargetPower)
	}
	fmt.Fprintln(w)
	if p.Unit == "response" {
		fmt.Fprintf(w, "  %.1f turns per session, design effect %.2f\n", p.TurnsPerSession, p.DesignEffect)
	}
	if p.WallTimeSeconds != nil {
		fmt.Fprintf(w, "  expected wall time: %s (%s)\n", (time.Duration(*p.WallTimeSeconds * float64(time.Second))).Round(time.Second), p.WallTimeBasis)
	} else {
		fmt.Fprintf(w, "  expected wall time: %s\n", p.WallTimeBasis)
	}
	if s := p.Sequential; s != nil {
		fmt.Fprintf(w, "  sequential: %d looks, one launch per arm and look (%d sessions each); the claim's share %.3g is spent over the looks that can reach their level, each testing the launches so far at %.3g\n",
			s.Looks, s.SessionsPerLaunch, s.Share, s.LevelPerLook)
		if s.EarliestStop > 0 {
			fmt.Fprintf(w, "    the earliest look that can stop with a claim: %d (%d launches per arm); the looks before it are not charged\n", s.EarliestStop, s.EarliestStop)
		} else {
			fmt.Fprintf(w, "    no look can reach %.3g: %d launches per arm are needed, so give the design at least %d looks\n",
				s.Share, stats.LaunchesNeeded(s.Share), stats.LaunchesNeeded(s.Share))
		}
		if s.Null != nil {
			fmt.Fprintf(w, "  simulation, %d experiments under the null (both arms at %.1f%%, launch ICC %.3g): claims %.4f, at or below %.3g: %v\n",
				s.Null.Reps, 100*s.Null.Rate, p.LaunchICC, s.Null.RejectRate, s.Share, s.Null.RejectRate <= s.Share)
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

// writeWedges writes the plan of an abort cascade's claim on wedges: launches alone.
func (p Plan) writeWedges(w io.Writer) {
	fmt.Fprintf(w, "plan for %s (wedges: each launch wedges or not, whatever its sessions)\n", p.Spec)
	fmt.Fprintf(w, "  detect launches that wedge %.0f%% of the time against %.0f%% at alpha %g", 100*p.P1, 100*p.P0, p.Alpha)
	if p.Comparisons > 1 {
		fmt.Fprintf(w, ", %d arms against the baseline", p.Comparisons)
	}
	fmt.Fprintf(w, "\n  power by launches per arm (exact: the randomization test on the launches' yes or no, Fisher's test with as many a side; the level is each claim's share of alpha):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "    \tlaunches\tpower\t\n")
	for _, r := range p.PowerByLaunches {
		mark, cell := "", "cannot test"
		if r.Launches == p.LaunchesPerArm {
			mark = "*"
		}
		if r.Level > 0 {
			cell = fmt.Sprintf("%.2f at %.3g", r.Power, r.Level)
		}
		fmt.Fprintf(tw, "    %s\t%d\t%s\t\n", mark, r.Launches, cell)
	}
	tw.Flush()
	fmt.Fprintf(w, "  launches per arm for power %.2f: %s\n", p.TargetPower, launchesText(p.LaunchesNeeded))
	if p.LaunchLevel > 0 {
		fmt.Fprintf(w, "  this spec (*): %d launch(es) per arm, decided by the randomization test at %.3g (its smallest p with these launches %.3g): power %.2f\n",
			p.LaunchesPerArm, p.LaunchLevel, p.LaunchMinP, p.LaunchPower)
	} else {
		fmt.Fprintf(w, "  this spec (*): %d launch(es) per arm, which no test can decide on\n", p.LaunchesPerArm)
	}
	if p.WallTimeSeconds != nil {
		fmt.Fprintf(w, "  expected wall time: %s (%s)\n", (time.Duration(*p.WallTimeSeconds * float64(time.Second))).Round(time.Second), p.WallTimeBasis)
	}
	for _, n := range p.Notes {
		if strings.HasPrefix(n, "turns per session assumed") {
			continue // the sessions' pace is not this claim's
		}
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// launchesText is a number of launches per arm, or that more than the plan searches
// would be needed.
func launchesText(n int) string {
	if n == 0 {
		return fmt.Sprintf("more than %d", MaxPlannedLaunches)
	}
	return fmt.Sprint(n)
}

// speedLaunchesText is a speed claim's launches per arm, or that more than the plan
// searches would be needed.
func speedLaunchesText(n int) string {
	if n == 0 {
		return fmt.Sprintf("more than %d", MaxSpeedLaunches)
	}
	return fmt.Sprint(n)
}

// testText names a launch test in a sentence.
func testText(kind string) string {
	if kind == string(stats.TestFloor) {
		return "noise floor's"
	}
	return kind
}

// WriteText writes the speed plan for a person at a terminal: each phase's spread and
// the launches its claim needs, then the power table.
func (p SpeedPlan) WriteText(w io.Writer) {
	fmt.Fprintf(w, "plan for %s (a speed: tok/s per request, phase by phase)\n", p.Spec)
	against := p.Baseline
	if p.Comparisons > 1 {
		against = fmt.Sprintf("%s, each of %d arms", p.Baseline, p.Comparisons)
	}
	if p.Margin > 0 {
		fmt.Fprintf(w, "  claim: non-inferior to %s within the %g%% margin, planned for a true ratio of %.3g (%s)\n",
			against, 100*p.Margin, p.Ratio, ratioWords(p.Ratio))
	} else {
		fmt.Fprintf(w, "  claim: a change against %s beyond analysis.min_effect (%g%%), planned for a true ratio of %.3g (%s)\n",
			against, 100*p.MinEffect, p.Ratio, ratioWords(p.Ratio))
	}
	fmt.Fprintf(w, "  tested on launches: the t test on the logs of the launches' medians")
	if p.NoiseFloor != "" {
		fmt.Fprintf(w, ", or with 1 or 2 launches per arm the z test against noise floor %s", p.NoiseFloor)
	}
	fmt.Fprintf(w, ", at each claim's share of alpha %g\n", p.Alpha)
	fmt.Fprintf(w, "  how much launches of one configuration differ (the SD of the logs of their medians), and the launches per arm for power %.2f:\n", p.TargetPower)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	floorHead := ""
	if p.NoiseFloor != "" {
		floorHead = "\tthe floor's bound"
	}
	fmt.Fprintf(tw, "    phase\tlaunch CV\tits %g%% bound%s\tlaunches per arm\tat the bound\tpower with %d (this spec)\tfrom\n",
		100*stats.FloorConf, floorHead, p.LaunchesPerArm)
	for _, ph := range p.Phases {
		bound, atBound, floor := "-", "-", ""
		if ph.CVUpper > 0 {
			bound, atBound = percent(ph.CVUpper), speedLaunchesText(ph.NeededUpper)
		}
		if p.NoiseFloor != "" {
			floor = "\t-"
			if ph.FloorBound > 0 {
				floor = "\t" + percent(ph.FloorBound)
			}
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s%s\t%s\t%s\t%.2f\t%s\n", ph.Phase, percent(ph.CV), bound, floor, speedLaunchesText(ph.Needed), atBound, ph.SpecPower, ph.Basis)
	}
	tw.Flush()
	fmt.Fprintf(w, "  power by launches per arm (* this spec's):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "    \tlaunches\tlevel\t")
	for _, ph := range p.Phases {
		fmt.Fprintf(tw, "%s\t", ph.Phase)
	}
	fmt.Fprintln(tw)
	for i, k := range TableLaunches {
		mark := ""
		if k == p.LaunchesPerArm {
			mark = "*"
		}
		level := "-"
		if l := p.Phases[0].Power[i].Level; l > 0 {
			level = fmt.Sprintf("%.3g", l)
		}
		fmt.Fprintf(tw, "    %s\t%d\t%s\t", mark, k, level)
		for _, ph := range p.Phases {
			r := ph.Power[i]
			cell := "-"
			if r.Level > 0 {
				cell = fmt.Sprintf("%.2f", r.Power)
				if r.Test == TestFloorZ {
					cell += " (floor)"
				}
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if p.Phases[0].Power[0].Level == 0 {
		fmt.Fprintf(w, "    (-: one launch per arm cannot be tested without a noise floor)\n")
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// percent is a share as a percentage of two significant digits: "0.55%", "6.9%".
func percent(x float64) string {
	return strconv.FormatFloat(100*x, 'g', 2, 64) + "%"
}

// ratioWords says what a ratio of tok/s per request means: "no difference", "3% slower".
func ratioWords(r float64) string {
	switch {
	case math.Abs(r-1) < 1e-9:
		return "the arms truly do not differ; --ratio 0.98 plans for a true cost of 2%"
	case r < 1:
		return fmt.Sprintf("%.3g%% slower", 100*(1-r))
	default:
		return fmt.Sprintf("%.3g%% faster", 100*(r-1))
	}
}
