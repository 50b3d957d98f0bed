// Package plan says, before any GPU hour is spent, what an experiment spec can detect and
// what it will cost: the exact power of its design for the rates its analysis.plan
// declares, the sessions per arm a fixed design needs for the plan's target power, the
// expected wall time and, for a group-sequential spec, its boundaries and the sessions
// it uses on average, measured against that fixed design. `arbiter plan` is a thin shim
// over Compute and Plan.WriteText.
package plan

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
)

// ErrInvalid marks a request that cannot be planned as asked (no rates declared, a
// simulation of a design that is not sequential): the caller's mistake, not a failure.
var ErrInvalid = errors.New("cannot plan")

// DefaultPower is the target power when analysis.plan.power is not set.
const DefaultPower = 0.8

// Options are one plan request. The zero value of every field but Spec is valid.
type Options struct {
	// Spec is the loaded spec; SpecPath names it in messages and in the plan.
	Spec     *arms.Spec
	SpecPath string
	// Simulate also checks a sequential design by simulation: its type I error under the
	// null and its power and sessions at the plan's rates.
	Simulate bool
	// Reps is the number of simulated experiments per scenario of Simulate (default
	// 10,000); the power table sizes its own simulations (powerRepsMax).
	Reps int
	// Seed makes the simulation reproducible (default 1).
	Seed uint64
	// History holds figures from a recorded run of the same spec (LastRecorded); zero
	// when there is none, and assumptions are then stated in the notes.
	History Recorded
	// NoiseFloorICC, when NoiseFloorBasis is set, is the upper confidence bound of the
	// intra-launch correlation an A/A experiment measured (stats.ICCBound), which the
	// verdict weighs one launch per arm against: the plan then assumes the experiment is
	// judged with that floor, and that its launches differ as much as the bound allows
	// (it replaces analysis.plan.launch_icc).
	NoiseFloorICC   float64
	NoiseFloorBasis string
}

// Plan is what `arbiter plan --json` prints.
type Plan struct {
	Spec string `json:"spec"`
	// Outcome is what the primary claim is on: "corruption" (sessions that corrupted),
	// or "wedges" (launches that wedged, one yes or no per launch, for an abort cascade),
	// where P0 and P1 are shares of launches and the sessions' figures do not apply.
	Outcome            string  `json:"outcome"`
	Unit               string  `json:"unit"`
	Arms               int     `json:"arms"`
	Comparisons        int     `json:"comparisons"`
	Alpha              float64 `json:"alpha"`
	AlphaPerComparison float64 `json:"alpha_per_comparison"`
	P0                 float64 `json:"p0"`
	P1                 float64 `json:"p1"`
	TargetPower        float64 `json:"target_power"`
	SessionsPerArm     int     `json:"sessions_per_arm"`
	TurnsPerSession    float64 `json:"turns_per_session"`
	DesignEffect       float64 `json:"design_effect"`
	// Power is the exact power of the spec's design (all its blocks, no early stop).
	Power float64 `json:"power"`
	// SessionsNeeded is the sessions per arm of the fixed design that reaches
	// TargetPower: the yardstick every sequential saving is measured against.
	SessionsNeeded int `json:"sessions_needed_per_arm"`
	// The launch is the experimental unit: every claim is tested on launches.
	// PowerByLaunches is the power of the claim on the primary outcome by launches per
	// arm, with and without a noise floor, at the plan's rates when launches of one
	// configuration differ with intra-launch correlation LaunchICC (LaunchICCBasis says
	// where it comes from; LaunchDesignEffect, 1 + (sessions per launch − 1) · ICC, is
	// what it costs). FloorICC is the upper bound of the correlation the floor's test
	// weighs launches with (FloorICCBasis: measured, or the planned correlation when no
	// floor was given). FloorMeasured is true when a measured floor was given: the
	// verdict will then use the floor's test.
	PowerByLaunches    []PowerRow `json:"power_by_launches"`
	LaunchICC          float64    `json:"launch_icc"`
	LaunchICCBasis     string     `json:"launch_icc_basis"`
	LaunchDesignEffect float64    `json:"launch_design_effect"`
	FloorICC           float64    `json:"floor_icc"`
	FloorICCBasis      string     `json:"floor_icc_basis"`
	FloorMeasured      bool       `json:"floor_measured"`
	// LaunchesNeeded and LaunchesNeededFloor are the launches per arm that reach the
	// target power without and with the floor (0: more than MaxPlannedLaunches).
	LaunchesNeeded      int `json:"launches_needed_per_arm"`
	LaunchesNeededFloor int `json:"launches_needed_per_arm_with_floor"`
	// LaunchesPerArm is the spec's launches (blocks) and LaunchTest the test its claim
	// on the primary outcome will be decided by (with the floor when one was given;
	// empty when none can be run); LaunchLevel the level it is tested at (its share of
	// alpha, stats.AllotAlpha; 0 when the test cannot reach any), LaunchMinP the smallest
	// p that test can give with these launches, and LaunchPower its power.
	LaunchesPerArm  int      `json:"launches_per_arm"`
	LaunchTest      string   `json:"launch_test"`
	LaunchLevel     float64  `json:"launch_level"`
	LaunchMinP      float64  `json:"launch_min_p"`
	LaunchPower     float64  `json:"launch_power"`
	WallTimeSeconds *float64 `json:"wall_time_s"`
	WallTimeBasis   string   `json:"wall_time_basis"`
	Sequential      *SeqPlan `json:"sequential,omitempty"`
	Notes           []string `json:"notes,omitempty"`
}

// SeqPlan is the sequential part of a plan: a look after every block, each arm's
// launches so far tested against the baseline's by the randomization test at the look's
// level, stopping at the first rejection. Levels are the levels of the looks
// (stats.SequentialLookLevels: the primary claim's share of alpha spread over the looks
// whose launches can reach it, 0 at the looks before, which are not charged);
// LevelPerLook is the level of each charged look.
type SeqPlan struct {
	Looks             int       `json:"looks"`
	SessionsPerLaunch int       `json:"sessions_per_launch"`
	Levels            []float64 `json:"levels"`
	LevelPerLook      float64   `json:"level_per_look"`
	// Share is the alpha the looks spend together.
	Share float64 `json:"share"`
	// EarliestStop is the first look at which the launch test can reach its level (0: no
	// look can, and the design can never claim).
	EarliestStop int `json:"earliest_stop"`
	// Null and Alt are simulations of the design (--simulate): under the null at the
	// plan's p0, and at p0 against p1; both with the plan's launch ICC.
	Null *SimFigures `json:"null,omitempty"`
	Alt  *SimFigures `json:"alternative,omitempty"`
}

// SimFigures are a simulation's headline figures.
type SimFigures struct {
	// Rate is the common corruption rate of both arms in a null scenario.
	Rate         float64 `json:"rate,omitempty"`
	Reps         int     `json:"reps"`
	RejectRate   float64 `json:"reject_rate"`
	MeanLaunches float64 `json:"mean_launches_per_arm"`
}

// DefaultLaunchICC is the intra-launch correlation planned for when the spec declares
// none (docs/results).
const DefaultLaunchICC = arms.DefaultLaunchICC

// planLaunches says what launches per arm can claim, with and without a noise floor,
// and what the spec's own launches can.
func (p *Plan) planLaunches(spec *arms.Spec, blocks int, o Options) {
	pl := spec.Analysis.Plan
	p.LaunchesPerArm = blocks
	p.LaunchICC, p.LaunchICCBasis = DefaultLaunchICC, "assumed; measure it with an A/A experiment of several launches per arm and declare analysis.plan.launch_icc"
	if h := o.History; pl.LaunchICCSet {
		p.LaunchICC, p.LaunchICCBasis = pl.LaunchICC, "analysis.plan.launch_icc"
	} else if h.ICCMeasured {
		p.LaunchICC, p.LaunchICCBasis = h.LaunchICC, fmt.Sprintf("measured within the arms of experiment %d, %d launches; analysis.plan.launch_icc replaces it", h.ExperimentID, h.ICCLaunches)
	}
	p.FloorICC, p.FloorICCBasis = p.LaunchICC, "assumed to bound the ICC at the planned launch ICC; an A/A experiment measures it: arbiter plan --noise-floor EXP"
	if o.NoiseFloorBasis != "" {
		// The floor's bound is what the test assumes, and launches that differ as much as
		// it allows are the hardest case the test is valid for.
		p.LaunchICC, p.LaunchICCBasis = o.NoiseFloorICC, o.NoiseFloorBasis
		p.FloorICC, p.FloorICCBasis, p.FloorMeasured = o.NoiseFloorICC, o.NoiseFloorBasis, true
	}
	m := max(spec.Workload.Sessions, 1)
	p.LaunchDesignEffect = stats.DesignEffect(float64(m), p.LaunchICC)
	model := newPowerModel(spec, p.Arms, pl.P0, pl.P1, p.LaunchICC, p.FloorICC, m, o.Seed)
	p.PowerByLaunches = model.table()
	p.LaunchesNeeded = model.needed(p.TargetPower, false)
	p.LaunchesNeededFloor = model.needed(p.TargetPower, true)
	own := model.row(blocks)
	kind := stats.RateTestFor(blocks, blocks, p.FloorMeasured, false, false)
	p.LaunchTest, p.LaunchMinP = string(kind), kind.MinP(blocks, blocks)
	p.LaunchLevel, p.LaunchPower = own.Level, own.Power
	if p.FloorMeasured {
		p.LaunchLevel, p.LaunchPower = own.FloorLevel, own.FloorPower
	}
	if !(p.LaunchLevel > 0) {
		p.Notes = append(p.Notes, fmt.Sprintf("with %d launch(es) per arm and no noise floor no test can reach a level: the verdict will report what it sees but cannot attribute it to the arms (two launches per arm, or a noise floor, can test; the table says with what power)", blocks))
	}
}

// planWedges plans an abort cascade's claim, on wedges: each launch wedges or not, so the
// launch is the whole sample, its sessions count for nothing, and no floor weighs it.
func (p *Plan) planWedges(spec *arms.Spec, blocks int) {
	p.Outcome, p.LaunchesPerArm = "wedges", blocks
	p.LaunchICCBasis = "a launch wedges or not: one yes or no per launch, whatever its sessions"
	p.FloorICCBasis = "a noise floor does not weigh wedges"
	p.LaunchDesignEffect, p.DesignEffect = 1, 1
	// The sessions' figures describe corruption, which is not this plan's claim.
	p.Power, p.SessionsNeeded = 0, 0
	model := newPowerModel(spec, p.Arms, p.P0, p.P1, 0, 0, 1, 1)
	model.wedges = true
	p.PowerByLaunches = model.table()
	p.LaunchesNeeded = model.needed(p.TargetPower, false)
	p.LaunchesNeededFloor = p.LaunchesNeeded
	own := model.row(blocks)
	kind := stats.RateTestFor(blocks, blocks, false, true, false)
	p.LaunchTest, p.LaunchMinP = string(kind), kind.MinP(blocks, blocks)
	p.LaunchLevel, p.LaunchPower = own.Level, own.Power
	if !(p.LaunchLevel > 0) {
		p.Notes = append(p.Notes, fmt.Sprintf("with %d launch(es) per arm no test on wedges can reach a level: %d per arm can", blocks, stats.LaunchesNeeded(stats.PrimaryLevel(p.Alpha, p.Comparisons))))
	}
}

// Compute plans the spec in o.
func Compute(o Options) (Plan, error) {
	if o.Spec == nil {
		return Plan{}, fmt.Errorf("%w: no spec", ErrInvalid)
	}
	if o.Reps == 0 {
		o.Reps = 10000
	}
	if o.Reps < 1 {
		return Plan{}, fmt.Errorf("%w: %d simulated experiments: simulate at least one", ErrInvalid, o.Reps)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	spec := o.Spec
	armList, err := spec.Expand()
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	pl := spec.Analysis.Plan
	if pl.P0 == pl.P1 {
		if spec.Workload.Kind == arms.WorkloadAbortCascade {
			return Plan{}, fmt.Errorf("%w: %s: analysis.plan: declare the shares of launches that wedge to plan for, e.g. plan: {p0: 0, p1: 0.9, power: 0.8} (or give them: arbiter plan --p0 0 --p1 0.9)", ErrInvalid, o.SpecPath)
		}
		return Plan{}, fmt.Errorf("%w: %s: analysis.plan: declare the rates to plan for, e.g. plan: {p0: 0, p1: 0.12, power: 0.8} (or give them: arbiter plan --p0 0 --p1 0.12)", ErrInvalid, o.SpecPath)
	}
	looks := spec.Analysis.Sequential.Looks
	if o.Simulate && looks <= 1 {
		return Plan{}, fmt.Errorf("%w: --simulate checks a sequential design: the spec has no analysis.sequential.looks", ErrInvalid)
	}
	p := Plan{Spec: o.SpecPath, Outcome: "corruption", Unit: spec.Analysis.Unit, Arms: len(armList), Comparisons: max(len(armList)-1, 1),
		Alpha: spec.Analysis.Alpha, P0: pl.P0, P1: pl.P1, TargetPower: pl.Power}
	if p.TargetPower == 0 {
		p.TargetPower = DefaultPower
	}
	// Several comparisons with the baseline share alpha (Bonferroni; the verdict's Holm
	// adjustment is at least as powerful, so the plan is on the safe side).
	p.AlphaPerComparison = p.Alpha / float64(p.Comparisons)
	if len(spec.Factors) > 1 {
		p.Notes = append(p.Notes, "a factorial verdict also tests main effects and interactions and adjusts every claim together (Holm): each arm's comparison is judged in a larger family than the arms alone, so the power figures here are an upper bound")
	}
	blocks := max(spec.Blocks, 1)
	p.SessionsPerArm = spec.Workload.Sessions * blocks

	h := o.History
	p.TurnsPerSession = 2 * float64(spec.Workload.Rounds) // a tool call and an answer per round
	if h.TurnsPerSession > 0 {
		p.TurnsPerSession = h.TurnsPerSession
	} else {
		p.Notes = append(p.Notes, "turns per session assumed 2 per round (a tool call and its answer); a recorded run of this spec gives the real figure")
	}
	p.DesignEffect = 1
	n := p.SessionsPerArm
	switch p.Unit {
	case "response":
		p.DesignEffect = 1 + (p.TurnsPerSession-1)*pl.ICC
		if pl.ICC == 0 {
			p.Notes = append(p.Notes, "responses are the unit but analysis.plan.icc is 0: responses of a session are rarely independent; declare the expected correlation")
		}
		// Responses count for less than their number: the effective sample size is
		// responses / design effect.
		n = int(math.Floor(float64(p.SessionsPerArm) * p.TurnsPerSession / p.DesignEffect))
	}
	p.Power = stats.FisherPower(pl.P0, pl.P1, n, n, p.AlphaPerComparison)
	need := stats.SessionsFor(pl.P0, pl.P1, p.AlphaPerComparison, p.TargetPower, p.DesignEffect)
	if p.Unit == "response" && need > 0 {
		need = int(math.Ceil(float64(need) / p.TurnsPerSession))
	}
	p.SessionsNeeded = need
	if need == 0 {
		p.Notes = append(p.Notes, "no feasible number of sessions reaches the target power for these rates")
	}
	if spec.Workload.Kind == arms.WorkloadAbortCascade {
		p.planWedges(spec, blocks)
	} else {
		p.planLaunches(spec, blocks, o)
	}

	p.wallTime(spec, blocks, len(armList), h)

	if looks > 1 {
		s, err := sequential(p, spec.Workload.Sessions, looks, o)
		if err != nil {
			return Plan{}, err
		}
		p.Sequential = s
	}
	return p, nil
}

// wallTime is the expected wall time. Declared turn_seconds give it from the turns'
// pace: each launch its waves of sessions at that pace, after its startup, and a block's
// arms in as many waves as the slots take. Otherwise the recorded experiment of the spec
// gives it, scaled by the launches (a cascade waits out stalls and recoveries, which no
// turn predicts), and failing that its median turn.
func (p *Plan) wallTime(spec *arms.Spec, blocks, nArms int, h Recorded) {
	turn, basis := spec.Analysis.Plan.TurnSeconds, "analysis.plan.turn_seconds"
	if turn == 0 && h.WallSeconds > 0 && h.LaunchesPerArm > 0 {
		w := h.WallSeconds * float64(blocks) / float64(h.LaunchesPerArm)
		p.WallTimeSeconds = &w
		p.WallTimeBasis = fmt.Sprintf("experiment %d took %s for %d launch(es) per arm", h.ExperimentID,
			time.Duration(h.WallSeconds*float64(time.Second)).Round(time.Second), h.LaunchesPerArm)
		return
	}
	if turn == 0 && h.TurnSeconds > 0 && p.Outcome != "wedges" {
		turn, basis = h.TurnSeconds, fmt.Sprintf("median turn of experiment %d", h.ExperimentID)
	}
	if !(turn > 0) {
		p.WallTimeBasis = "unknown: run the spec once"
		if p.Outcome != "wedges" {
			p.WallTimeBasis = "unknown: declare analysis.plan.turn_seconds or run the spec once"
		}
		return
	}
	slots := 1
	if ss, err := spec.Slots(); err == nil {
		slots = max(len(ss), 1)
	}
	conc := max(spec.Workload.Concurrency, 1)
	waves := math.Ceil(float64(spec.Workload.Sessions) / float64(conc))
	perRun := waves*p.TurnsPerSession*turn + h.StartupSeconds
	w := perRun * float64(blocks) * math.Ceil(float64(nArms)/float64(slots))
	p.WallTimeSeconds = &w
	p.WallTimeBasis = basis
}

// sequential plans a group-sequential spec: its looks' levels and earliest stop, and
// with o.Simulate its false-claim rate under the null and its power and launches used at
// the plan's rates, by simulation.
func sequential(p Plan, perLook, looks int, o Options) (*SeqPlan, error) {
	levels := stats.SequentialLookLevels(p.Alpha, p.Comparisons, looks)
	s := &SeqPlan{Looks: looks, SessionsPerLaunch: perLook, Levels: levels, LevelPerLook: levels[looks-1],
		Share: stats.SequentialShare(p.Alpha, p.Comparisons)}
	for k, l := range levels {
		if l > 0 {
			s.EarliestStop = k + 1
			break
		}
	}
	if !o.Simulate {
		return s, nil
	}
	// Under the null the design's error depends on the common rate; the worst of p0, p1
	// and between is reported.
	var worst seqSim
	worstRate := -1.0
	for _, r := range []float64{p.P0, (p.P0 + p.P1) / 2, p.P1} {
		n := simulateSequential(r, r, p.LaunchICC, perLook, levels, o.Reps, o.Seed)
		if worstRate < 0 || n.rejectRate > worst.rejectRate {
			worst, worstRate = n, r
		}
	}
	alt := simulateSequential(p.P0, p.P1, p.LaunchICC, perLook, levels, o.Reps, o.Seed+1)
	s.Null = &SimFigures{Rate: worstRate, Reps: o.Reps, RejectRate: worst.rejectRate, MeanLaunches: worst.meanLaunches}
	s.Alt = &SimFigures{Reps: o.Reps, RejectRate: alt.rejectRate, MeanLaunches: alt.meanLaunches}
	return s, nil
}

// seqSim is how simulated group-sequential experiments ended.
type seqSim struct{ rejectRate, meanLaunches float64 }

// simulateSequential runs reps group-sequential experiments: one launch per arm of
// sessions sessions at each look, rates p0 and p1 with intra-launch correlation icc, the
// randomization test of the launches so far at each look's level (none at a look whose
// level is 0), stopping at the first claim of either direction (the orchestrator stops
// on any rejection).
func simulateSequential(p0, p1, icc float64, sessions int, levels []float64, reps int, seed uint64) seqSim {
	rng := rand.New(rand.NewPCG(seed, 0x736571))
	looks := len(levels)
	a, b := make([]int, 0, looks), make([]int, 0, looks)
	var ways []float64
	rejected, used := 0, 0
	for range reps {
		a, b = a[:0], b[:0]
		stop := looks
		for k := 1; k <= looks; k++ {
			a = append(a, stats.BetaBinomialDraw(rng, sessions, p0, icc))
			b = append(b, stats.BetaBinomialDraw(rng, sessions, p1, icc))
			if !(levels[k-1] > 0) {
				continue
			}
			var pv float64
			if pv, ways = countsP(a, b, ways); stats.Reject(pv, levels[k-1]) {
				rejected++
				stop = k
				break
			}
		}
		used += stop
	}
	return seqSim{rejectRate: float64(rejected) / float64(max(reps, 1)), meanLaunches: float64(used) / float64(max(reps, 1))}
}
