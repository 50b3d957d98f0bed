package plan

import (
	"fmt"
	"math"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

// A throughput spec's primary claim is a speed: each arm's tok/s per request against the
// baseline's, phase by phase, tested on the logs of the launches' medians (the t test on
// launches, or the z test against a noise floor for one or two launches per arm). Its
// power depends on how much launches of one configuration differ in each phase, which
// no spec declares: it is measured, by a recorded run of the spec or by an A/A noise
// floor, or given (--cv).

// SpeedOptions are one plan request for a speed claim.
type SpeedOptions struct {
	Spec     *arms.Spec
	SpecPath string
	// CV, when positive, is how much launches of one configuration differ in every phase
	// (the standard deviation of the logs of their medians); it replaces what was
	// recorded.
	CV float64
	// Ratio is the arm's true tok/s per request over the baseline's to plan for: 1 (no
	// cost) when 0 and the spec declares a margin; without a margin, the change to find.
	Ratio float64
	// Recorded are the spreads a recorded experiment of the spec showed
	// (verdict.SpeedSpreads), Experiment its id.
	Recorded   []verdict.GroupSpread
	Experiment int64
	// Floor is the noise floor the verdict would weigh one or two launches per arm
	// against; nil for none.
	Floor *verdict.Floor
}

// SpeedPlan is what `arbiter plan --json` prints for a throughput spec.
type SpeedPlan struct {
	Spec        string  `json:"spec"`
	Arms        int     `json:"arms"`
	Comparisons int     `json:"comparisons"`
	Alpha       float64 `json:"alpha"`
	Baseline    string  `json:"baseline"`
	// Margin is analysis.throughput_margin (0: none; the claim is then a change beyond
	// analysis.min_effect, MinEffect).
	Margin    float64 `json:"margin"`
	MinEffect float64 `json:"min_effect"`
	// Ratio is the true ratio of the arm's tok/s per request to the baseline's planned for.
	Ratio       float64 `json:"true_ratio"`
	TargetPower float64 `json:"target_power"`
	// LaunchesPerArm is the spec's launches (blocks); NoiseFloor names the floor planned
	// with ("" for none).
	LaunchesPerArm int          `json:"launches_per_arm"`
	NoiseFloor     string       `json:"noise_floor,omitempty"`
	Phases         []SpeedPhase `json:"phases"`
	Notes          []string     `json:"notes,omitempty"`
}

// SpeedPhase is the plan of one phase's claim.
type SpeedPhase struct {
	Phase string `json:"phase"`
	// CV is how much launches of one configuration differ (the standard deviation of the
	// logs of their medians), CVUpper its upper bound at stats.FloorConf (0: not
	// measured, given), Basis where it comes from.
	CV      float64 `json:"cv"`
	CVUpper float64 `json:"cv_upper,omitempty"`
	Basis   string  `json:"basis"`
	// FloorBound is the noise floor's bound the z test weighs one or two launches per arm
	// with (0: no floor for this phase).
	FloorBound float64    `json:"floor_bound,omitempty"`
	Power      []SpeedRow `json:"power_by_launches"`
	// Needed is the launches per arm that reach the target power at CV, NeededUpper at
	// CVUpper (0: more than MaxSpeedLaunches, or no bound); SpecPower the power of the
	// spec's own launches.
	Needed      int     `json:"launches_needed_per_arm"`
	NeededUpper int     `json:"launches_needed_per_arm_at_upper,omitempty"`
	SpecPower   float64 `json:"power_at_spec_launches"`
}

// SpeedRow is the power of one phase's claim with a number of launches per arm, the test
// that decides it and its level (0: no test can, and Power is 0).
type SpeedRow struct {
	Launches int     `json:"launches"`
	Test     string  `json:"test"`
	Level    float64 `json:"level"`
	Power    float64 `json:"power"`
}

// TestFloorZ is SpeedRow.Test for the z test against a noise floor.
const TestFloorZ = "z test against the noise floor"

// ComputeSpeed plans the speed claim of a throughput spec.
func ComputeSpeed(o SpeedOptions) (SpeedPlan, error) {
	spec := o.Spec
	if spec == nil || !verdict.PlannedSpeedPrimary(spec) || spec.Workload.Throughput == nil {
		return SpeedPlan{}, fmt.Errorf("%w: %s: not a throughput spec, whose claim is a speed", ErrInvalid, o.SpecPath)
	}
	armList, err := spec.Expand()
	if err != nil {
		return SpeedPlan{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	a := spec.Analysis
	p := SpeedPlan{Spec: o.SpecPath, Arms: len(armList), Comparisons: max(len(armList)-1, 1), Alpha: a.Alpha,
		Margin: a.ThroughputMargin, MinEffect: a.MinEffect, Ratio: o.Ratio, TargetPower: a.Plan.Power,
		LaunchesPerArm: max(spec.Blocks, 1), Baseline: a.Baseline}
	if p.Baseline == "" && len(armList) > 0 {
		p.Baseline = armList[0].Name
	}
	if p.TargetPower == 0 {
		p.TargetPower = DefaultPower
	}
	if p.Ratio == 0 && p.Margin > 0 {
		p.Ratio = 1
	}
	if !(p.Ratio > 0) {
		return SpeedPlan{}, fmt.Errorf("%w: %s: without analysis.throughput_margin the claim is a change of tok/s per request beyond analysis.min_effect (%g%%): give the change to find as the arm's true ratio to the baseline, e.g. arbiter plan %s --ratio 0.9 (10%% slower)",
			ErrInvalid, o.SpecPath, 100*p.MinEffect, o.SpecPath)
	}
	if o.Floor != nil {
		p.NoiseFloor = fmt.Sprintf("experiment %d (%s)", o.Floor.Experiment, o.Floor.Name)
	}
	shift, side := p.threshold()
	if !(shift > 0) {
		if p.Margin > 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("a true ratio of %.3g is not within the %g%% margin: no number of launches shows it non-inferior (the power is at most the level)", p.Ratio, 100*p.Margin))
		} else {
			p.Notes = append(p.Notes, fmt.Sprintf("a true ratio of %.3g is within analysis.min_effect (%g%%), which the verdict calls negligible, never better or worse: no number of launches finds it", p.Ratio, 100*p.MinEffect))
		}
	}
	var missing []string
	for _, name := range spec.Workload.Throughput.PhaseNames() {
		ph := SpeedPhase{Phase: name}
		var floorSpread verdict.Spread
		hasFloor := false
		if o.Floor != nil {
			floorSpread, hasFloor = o.Floor.SpeedSpread(name)
		}
		switch {
		case o.CV > 0:
			ph.CV, ph.Basis = o.CV, "--cv"
		case recordedSpread(o.Recorded, name) != nil:
			r := recordedSpread(o.Recorded, name)
			ph.CV, ph.CVUpper = r.Spread.SD, r.Spread.Upper
			ph.Basis = fmt.Sprintf("experiment %d, %d launches", o.Experiment, r.Launches)
		case hasFloor:
			ph.CV, ph.CVUpper = floorSpread.SD, floorSpread.Upper
			ph.Basis = fmt.Sprintf("noise floor %d, %d degrees of freedom", o.Floor.Experiment, floorSpread.DF)
		default:
			missing = append(missing, name)
			continue
		}
		if !(ph.CV > 0) {
			// Launches that agreed exactly say nothing of how others would differ.
			missing = append(missing, name)
			continue
		}
		if hasFloor {
			ph.FloorBound = floorSpread.Upper
		}
		for _, k := range TableLaunches {
			ph.Power = append(ph.Power, p.row(spec, k, ph.CV, ph.FloorBound, shift, side))
		}
		ph.Needed = p.needed(spec, ph.CV, ph.FloorBound, shift, side)
		if ph.CVUpper > 0 {
			ph.NeededUpper = p.needed(spec, ph.CVUpper, ph.FloorBound, shift, side)
		}
		ph.SpecPower = p.row(spec, p.LaunchesPerArm, ph.CV, ph.FloorBound, shift, side).Power
		p.Phases = append(p.Phases, ph)
	}
	if len(p.Phases) == 0 {
		read := "which nothing measured here"
		if o.Experiment > 0 {
			read = fmt.Sprintf("which experiment %d, with fewer than two launches of an arm, did not measure", o.Experiment)
		}
		return SpeedPlan{}, fmt.Errorf("%w: %s: a speed claim's power depends on how much launches of one configuration differ, %s: run the spec once with two or more launches per arm (plan reads the newest experiment named %q in --db), give an A/A noise floor (--noise-floor), or give it (--cv 0.03 for 3%%)",
			ErrInvalid, o.SpecPath, read, spec.Name)
	}
	if len(missing) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("not planned, since nothing measured how its launches differ: %s", strings.Join(missing, ", ")))
	}
	if len(armList) > 2 {
		p.Notes = append(p.Notes, "each arm against the baseline is its own claim; the power is each claim's")
	}
	return p, nil
}

// threshold is how far, on the log scale, the planned true ratio clears what the test
// must exclude, and the one-sided level's share of the claim's level: all of it for
// non-inferiority (the verdict's one-sided bound at 1 − level), half for a change (its
// two-sided interval at 1 − level must clear 1 ± min_effect).
func (p SpeedPlan) threshold() (shift, side float64) {
	r := math.Log(p.Ratio)
	switch {
	case p.Margin > 0:
		return r - math.Log(1-p.Margin), 1
	case p.Ratio < 1:
		return math.Log(1-p.MinEffect) - r, 0.5
	default:
		return r - math.Log(1+p.MinEffect), 0.5
	}
}

// row is the power of a phase's claim with k launches per arm: the floor's z test where
// a floor is given and weighs k launches, the t test from two launches, none at one.
func (p SpeedPlan) row(spec *arms.Spec, k int, cv, floorBound, shift, side float64) SpeedRow {
	floor := floorBound > 0 && stats.FloorWeighs(k, k)
	r := SpeedRow{Launches: k, Level: verdict.PlannedLevel(spec, p.Arms, k, floor)}
	switch {
	case !(r.Level > 0):
		r.Level = 0
	case floor:
		r.Test, r.Power = TestFloorZ, stats.LaunchZPower(k, cv, floorBound, shift, side*r.Level)
	case k >= 2:
		r.Test, r.Power = TestLaunchMedians, stats.LaunchTPower(k, cv, shift, side*r.Level)
	default:
		r.Level = 0
	}
	if math.IsNaN(r.Power) {
		r.Power = 0
	}
	return r
}

// MaxSpeedLaunches is the most launches per arm a speed plan searches: its power is
// exact and cheap, and a load whose launches differ by more than the margin may need a
// hundred, which is worth knowing before deciding to run it at all.
const MaxSpeedLaunches = 256

// needed is the fewest launches per arm, at most MaxSpeedLaunches, whose claim reaches
// the target power at spread cv; 0 when none does.
func (p SpeedPlan) needed(spec *arms.Spec, cv, floorBound, shift, side float64) int {
	for k := 1; k <= MaxSpeedLaunches; k++ {
		if p.row(spec, k, cv, floorBound, shift, side).Power >= p.TargetPower {
			return k
		}
	}
	return 0
}

func recordedSpread(rs []verdict.GroupSpread, group string) *verdict.GroupSpread {
	for i := range rs {
		if rs[i].Group == group && rs[i].Spread.SD >= 0 {
			return &rs[i]
		}
	}
	return nil
}
