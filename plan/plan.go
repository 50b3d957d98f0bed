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
	// Reps is the number of simulated experiments per scenario (default 10,000).
	Reps int
	// Seed makes the simulation reproducible (default 1).
	Seed uint64
	// History holds figures from a recorded run of the same spec (LastRecorded); zero
	// when there is none, and assumptions are then stated in the notes.
	History Recorded
	// NoiseFloorICC, when NoiseFloorBasis is set, is an intra-launch correlation measured
	// by an A/A experiment; it replaces analysis.plan.launch_icc.
	NoiseFloorICC   float64
	NoiseFloorBasis string
}

// Plan is what `arbiter plan --json` prints.
type Plan struct {
	Spec               string  `json:"spec"`
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
	// LaunchesPerArm is the spec's launches (blocks); LaunchLevel the level each claim
	// on the primary outcome is tested at (its share of alpha); LaunchMinP the smallest
	// p the launch randomization test can give with these launches (above LaunchLevel
	// nothing can be attributed to the arms); LaunchICC the intra-launch correlation
	// planned for (LaunchICCBasis says where it comes from) and LaunchDesignEffect what
	// it costs, 1 + (sessions per launch − 1) · ICC; LaunchPower the launch test's power
	// at the plan's rates, and LaunchesNeeded the launches per arm that reach the target
	// power (0: more than MaxPlannedLaunches).
	LaunchesPerArm     int      `json:"launches_per_arm"`
	LaunchLevel        float64  `json:"launch_level"`
	LaunchMinP         float64  `json:"launch_min_p"`
	LaunchICC          float64  `json:"launch_icc"`
	LaunchICCBasis     string   `json:"launch_icc_basis"`
	LaunchDesignEffect float64  `json:"launch_design_effect"`
	LaunchPower        float64  `json:"launch_power"`
	LaunchesNeeded     int      `json:"launches_needed_per_arm"`
	WallTimeSeconds    *float64 `json:"wall_time_s"`
	WallTimeBasis      string   `json:"wall_time_basis"`
	Sequential         *SeqPlan `json:"sequential,omitempty"`
	Notes              []string `json:"notes,omitempty"`
}

// SeqPlan is the sequential part of a plan: a look after every block, each arm's
// launches so far tested against the baseline's at LevelPerLook (the corruption claim's
// share of alpha over the looks), stopping at the first rejection.
type SeqPlan struct {
	Looks             int     `json:"looks"`
	SessionsPerLaunch int     `json:"sessions_per_launch"`
	LevelPerLook      float64 `json:"level_per_look"`
	// EarliestStop is the first look at which the launch test can reach the level at
	// all (0: no look can, and the design can never claim).
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

// MaxPlannedLaunches is the most launches per arm the plan searches for power.
const MaxPlannedLaunches = 8

// planLaunches says what the spec's launches per arm let a verdict claim, and how many
// it needs for the plan's rates at its target power.
func (p *Plan) planLaunches(spec *arms.Spec, blocks, looks int, o Options) {
	seed := o.Seed
	pl := spec.Analysis.Plan
	p.LaunchesPerArm = blocks
	p.LaunchLevel = stats.PrimaryLevel(p.Alpha, p.Comparisons)
	if looks > 1 {
		// A sequential arm tests its launches at every look: each look gets its share.
		p.LaunchLevel /= float64(looks)
	}
	p.LaunchMinP = stats.MinAttainableP(blocks, blocks)
	p.LaunchICC, p.LaunchICCBasis = DefaultLaunchICC, "assumed; measure it with an A/A experiment of several launches per arm and declare analysis.plan.launch_icc"
	switch {
	case o.NoiseFloorBasis != "":
		p.LaunchICC, p.LaunchICCBasis = o.NoiseFloorICC, o.NoiseFloorBasis
	case pl.LaunchICCSet:
		p.LaunchICC, p.LaunchICCBasis = pl.LaunchICC, "analysis.plan.launch_icc"
	}
	m := max(spec.Workload.Sessions, 1)
	p.LaunchDesignEffect = 1 + float64(m-1)*p.LaunchICC
	p.LaunchPower = stats.LaunchPower(pl.P0, pl.P1, p.LaunchICC, m, blocks, p.LaunchLevel, 2000, seed)
	p.LaunchesNeeded = stats.LaunchesForPower(pl.P0, pl.P1, p.LaunchICC, m, p.LaunchLevel, p.TargetPower, MaxPlannedLaunches)
	if !stats.Reject(p.LaunchMinP, p.LaunchLevel) {
		p.Notes = append(p.Notes, fmt.Sprintf("with %d launch(es) per arm the launch test's smallest p is %.3g, above the %.3g each claim is tested at: the verdict will report what it sees but cannot attribute it to the arms (%d launches per arm can)",
			blocks, p.LaunchMinP, p.LaunchLevel, stats.LaunchesNeeded(p.LaunchLevel)))
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
		return Plan{}, fmt.Errorf("%w: %s: analysis.plan: declare the rates to plan for, e.g. plan: {p0: 0, p1: 0.12, power: 0.8}", ErrInvalid, o.SpecPath)
	}
	looks := spec.Analysis.Sequential.Looks
	if o.Simulate && looks <= 1 {
		return Plan{}, fmt.Errorf("%w: --simulate checks a sequential design: the spec has no analysis.sequential.looks", ErrInvalid)
	}
	p := Plan{Spec: o.SpecPath, Unit: spec.Analysis.Unit, Arms: len(armList), Comparisons: max(len(armList)-1, 1),
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
	p.planLaunches(spec, blocks, looks, o)

	turn := pl.TurnSeconds
	p.WallTimeBasis = "analysis.plan.turn_seconds"
	if turn == 0 && h.TurnSeconds > 0 {
		turn, p.WallTimeBasis = h.TurnSeconds, fmt.Sprintf("median turn of experiment %d", h.ExperimentID)
	}
	if turn > 0 {
		conc := max(spec.Workload.Concurrency, 1)
		waves := math.Ceil(float64(spec.Workload.Sessions) / float64(conc))
		perRun := waves*p.TurnsPerSession*turn + h.StartupSeconds
		w := perRun * float64(len(armList)*blocks)
		p.WallTimeSeconds = &w
	} else {
		p.WallTimeBasis = "unknown: declare analysis.plan.turn_seconds or run the spec once"
	}

	if looks > 1 {
		s, err := sequential(p, spec.Workload.Sessions, looks, o)
		if err != nil {
			return Plan{}, err
		}
		p.Sequential = s
	}
	return p, nil
}

// sequential plans a group-sequential spec: its boundaries, its exact power and
// expected sessions at the plan's rates against the fixed design at the target power,
// and with o.Simulate the same checked by simulation.
func sequential(p Plan, perLook, looks int, o Options) (*SeqPlan, error) {
	level := stats.PrimaryLevel(p.Alpha, p.Comparisons) / float64(looks)
	sim := stats.SimulateLaunchSequential(p.P0, p.P0, p.LaunchICC, perLook, looks, level, 0, o.Seed)
	s := &SeqPlan{Looks: looks, SessionsPerLaunch: perLook, LevelPerLook: level, EarliestStop: sim.EarliestStop}
	if !o.Simulate {
		return s, nil
	}
	// Under the null the design's error depends on the common rate; the worst of p0, p1
	// and between is reported.
	var worst stats.LaunchSequential
	worstRate := -1.0
	for _, r := range []float64{p.P0, (p.P0 + p.P1) / 2, p.P1} {
		n := stats.SimulateLaunchSequential(r, r, p.LaunchICC, perLook, looks, level, o.Reps, o.Seed)
		if worstRate < 0 || n.RejectRate > worst.RejectRate {
			worst, worstRate = n, r
		}
	}
	alt := stats.SimulateLaunchSequential(p.P0, p.P1, p.LaunchICC, perLook, looks, level, o.Reps, o.Seed+1)
	s.Null = &SimFigures{Rate: worstRate, Reps: worst.Reps, RejectRate: worst.RejectRate, MeanLaunches: worst.MeanLaunches}
	s.Alt = &SimFigures{Reps: alt.Reps, RejectRate: alt.RejectRate, MeanLaunches: alt.MeanLaunches}
	return s, nil
}
