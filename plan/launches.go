package plan

import (
	"fmt"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

// LaunchClaims says what a spec's launches per arm (blocks) let a verdict attribute to the
// arms: the level each claim on the primary outcome is tested at, the smallest p the
// launch test can give with these launches, and the launches per arm it needs to reach
// that level at all. arbiter validate prints it.
type LaunchClaims struct {
	PerArm       int     `json:"per_arm"`
	PrimaryLevel float64 `json:"primary_level"`
	// Test is the test of the primary claims: randomization, Welch, noise floor,
	// TestLaunchMedians (a speed), or "" (none can be made).
	Test       string  `json:"test"`
	NoiseFloor string  `json:"noise_floor,omitempty"`
	MinP       float64 `json:"min_p"`
	CanClaim   bool    `json:"can_claim"`
	Needed     int     `json:"needed_per_arm"`
}

// SpecLaunches is what the launches of spec s, expanded to nArms arms, can claim: for a
// sequential design, at the last look's level; otherwise at the level the verdict gives
// each primary claim beside every other claim it makes (verdict.PlannedLevel), as the
// power table's row of as many launches does.
func SpecLaunches(s *arms.Spec, nArms int) LaunchClaims {
	b, looks := s.Blocks, s.Analysis.Sequential.Looks
	binary := s.Workload.Kind == arms.WorkloadAbortCascade
	floor := s.Analysis.NoiseFloor != ""
	if looks > 1 {
		levels := stats.SequentialLookLevels(s.Analysis.Alpha, nArms-1, looks)
		minP := stats.MinAttainableP(looks, looks)
		return LaunchClaims{PerArm: b, PrimaryLevel: levels[looks-1], Test: string(stats.TestRandomization), MinP: minP,
			CanClaim: levels[looks-1] > 0, Needed: stats.LaunchesNeeded(stats.SequentialShare(s.Analysis.Alpha, nArms-1))}
	}
	level := verdict.PlannedLevel(s, nArms, b, floor)
	if level == 0 {
		level = stats.PrimaryLevel(s.Analysis.Alpha, nArms-1)
	}
	if verdict.PlannedSpeedPrimary(s) {
		// A speed is tested on the logs of the launches' medians, which reach any level
		// from two launches a side; one is weighed against a floor, or not at all.
		l := LaunchClaims{PerArm: b, PrimaryLevel: level, Test: TestLaunchMedians, CanClaim: b >= 2, Needed: 2}
		if b < 2 {
			l.Test, l.MinP = string(stats.TestNone), 1
			if floor {
				l.Test, l.CanClaim, l.NoiseFloor = string(stats.TestFloor), true, s.Analysis.NoiseFloor
			}
		}
		return l
	}
	kind := stats.RateTestFor(b, b, floor, binary, false)
	minP := kind.MinP(b, b)
	// One launch per arm cannot be tested; two or three are (Welch's test); from four
	// the randomization test decides, and it needs as many as its level takes.
	needed := 2
	if binary || b >= 4 {
		needed = stats.LaunchesNeeded(level)
	}
	l := LaunchClaims{PerArm: b, PrimaryLevel: level, Test: string(kind), MinP: minP, CanClaim: kind != stats.TestNone && stats.Reject(minP, level), Needed: needed}
	if kind == stats.TestFloor {
		l.NoiseFloor = s.Analysis.NoiseFloor
	}
	return l
}

// TestLaunchMedians is LaunchClaims.Test for a speed: the t test on the logs of the
// launches' medians.
const TestLaunchMedians = "t test on launch medians"

// Sentence says what the launches can claim, as validate prints it: "4 per arm (one per
// block); each primary claim is tested at 0.03 by the randomization test on launches,
// which can reach it (smallest p 0.0286)", or why they cannot and what would.
func (l LaunchClaims) Sentence() string {
	var claim string
	switch {
	case l.CanClaim && l.Test == string(stats.TestFloor):
		claim = fmt.Sprintf("against the noise floor of %s (its launches' spread, at its %g%% upper bound)", l.NoiseFloor, 100*stats.FloorConf)
	case l.CanClaim && l.Test == string(stats.TestWelch):
		claim = "by Welch's t test on the launches' rates"
	case l.CanClaim && l.Test == TestLaunchMedians:
		claim = "by the t test on the logs of the launches' medians, which two launches a side can reach; with what power depends on how much its launches differ, which `arbiter plan` reads from a recorded run (or --cv)"
	case l.Test == string(stats.TestNone) && l.MinP >= 1:
		claim = fmt.Sprintf("but one launch per arm cannot be tested, so the verdict can report differences but not attribute them to the arms: %d launches per arm can, or one per arm against a noise floor (`analysis.noise_floor`)", l.Needed)
	case l.CanClaim:
		claim = fmt.Sprintf("by the randomization test on launches, which can reach it (smallest p %.3g)", l.MinP)
	default:
		claim = fmt.Sprintf("but these launches cannot reach it (smallest p %.3g), so the verdict can report differences but not attribute them to the arms: %d launches per arm can, or one per arm against a noise floor (`analysis.noise_floor`)", l.MinP, l.Needed)
	}
	tested := "is tested"
	if !l.CanClaim {
		tested = "would be tested"
	}
	return fmt.Sprintf("%d per arm (one per block); each primary claim %s at %.3g %s", l.PerArm, tested, l.PrimaryLevel, claim)
}
