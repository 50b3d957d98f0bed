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
	SessionsNeeded  int      `json:"sessions_needed_per_arm"`
	WallTimeSeconds *float64 `json:"wall_time_s"`
	WallTimeBasis   string   `json:"wall_time_basis"`
	Sequential      *SeqPlan `json:"sequential,omitempty"`
	Notes           []string `json:"notes,omitempty"`
}

// SeqPlan is the sequential part of a plan.
type SeqPlan struct {
	Looks          int              `json:"looks"`
	SessionsPerArm int              `json:"sessions_per_look_per_arm"`
	Boundaries     []stats.Boundary `json:"boundaries"`
	// Power and ExpectedSessions are the design's exact power and expected sessions
	// (both arms) at the plan's rates p0 and p1; MaxSessions is its ceiling.
	Power            float64 `json:"power"`
	ExpectedSessions float64 `json:"expected_sessions"`
	MaxSessions      int     `json:"max_sessions"`
	// FixedSessions is the sessions (both arms) of the fixed design at the plan's target
	// power and the same alpha; 0 when no fixed design reaches it.
	FixedSessions int `json:"fixed_sessions_at_target_power"`
	// SavedFraction is 1 − ExpectedSessions/FixedSessions: positive when the sequential
	// design costs less on average than the fixed design the plan asks for, negative
	// when its looks are larger than the plan needs; nil without FixedSessions.
	SavedFraction *float64 `json:"saved_fraction,omitempty"`
	// PerLookForTarget is the fewest sessions per arm and look with which the same
	// looks reach the plan's target power, and ExpectedForTarget the sessions (both
	// arms) that design uses on average: how to size the blocks. Zero when the target
	// is out of reach.
	PerLookForTarget  int         `json:"sessions_per_look_for_target_power,omitempty"`
	ExpectedForTarget float64     `json:"expected_sessions_for_target_power,omitempty"`
	Null              *SimFigures `json:"null,omitempty"`
	Alt               *SimFigures `json:"alternative,omitempty"`
}

// SimFigures are a simulation's headline figures.
type SimFigures struct {
	// Rate is the common corruption rate of both arms in a null scenario.
	Rate            float64 `json:"rate,omitempty"`
	Reps            int     `json:"reps"`
	RejectRate      float64 `json:"reject_rate"`
	ExactRejectRate float64 `json:"exact_reject_rate"`
	MeanSessions    float64 `json:"mean_sessions"`
	MaxSessions     int     `json:"max_sessions"`
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
	case "launch":
		if blocks < stats.MinLaunchesPerArm {
			p.Notes = append(p.Notes, fmt.Sprintf("launches are the unit but the spec runs %d launch per arm: the verdict needs at least %d per arm (blocks) and will say no launch-level conclusion is possible", blocks, stats.MinLaunchesPerArm))
		} else {
			p.Notes = append(p.Notes, fmt.Sprintf("launches are the unit: the verdict compares the %d launches' rates per arm with a t test on %d degrees of freedom; the figures here treat sessions as independent and overstate its power, and more launches buy more power than more sessions per launch", blocks, 2*blocks-2))
		}
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
	design, err := stats.Boundaries(looks, p.AlphaPerComparison, nil)
	if err != nil {
		return nil, err
	}
	s := &SeqPlan{Looks: looks, SessionsPerArm: perLook, Boundaries: design}
	op, err := stats.SequentialExact(p.P0, p.P1, perLook, design)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.Power, s.ExpectedSessions, s.MaxSessions = op.Power, op.MeanSessions, op.MaxSessions
	// Sequential decisions count sessions, whatever the spec's unit.
	if _, total := stats.FixedDesignSessions(p.P0, p.P1, p.AlphaPerComparison, p.TargetPower); total > 0 {
		saved := 1 - s.ExpectedSessions/float64(total)
		s.FixedSessions, s.SavedFraction = total, &saved
	}
	if n, op := perLookFor(p, looks, design); n > 0 {
		s.PerLookForTarget, s.ExpectedForTarget = n, op.MeanSessions
	}
	if !o.Simulate {
		return s, nil
	}
	// The type I error depends on the common rate under the null; a null at 0% can
	// never reject, so the worst of the rates between p0 and p1 is reported.
	var worst stats.SimResult
	worstRate := -1.0
	for _, r := range []float64{p.P0, (p.P0 + p.P1) / 2, p.P1} {
		if r == 0 {
			continue
		}
		sim := stats.SimulateSequential(r, r, perLook, looks, p.AlphaPerComparison, o.Reps, o.Seed)
		if worstRate < 0 || sim.ExactRejectRate > worst.ExactRejectRate {
			worst, worstRate = sim, r
		}
	}
	alt := stats.SimulateSequential(p.P0, p.P1, perLook, looks, p.AlphaPerComparison, o.Reps, o.Seed+1)
	s.Null = simFigures(worst)
	s.Null.Rate = worstRate
	s.Alt = simFigures(alt)
	return s, nil
}

// perLookFor is the fewest sessions per arm and look at which the design's looks reach
// the plan's target power, found by bisection between the fixed design's size spread
// over the looks and the fixed design's size per look (which always overshoots). Exact
// power is a sawtooth in the sample size, so this is the crossing bisection finds, as
// in stats.SessionsFor.
func perLookFor(p Plan, looks int, design []stats.Boundary) (int, stats.SequentialOperating) {
	fixed, _ := stats.FixedDesignSessions(p.P0, p.P1, p.AlphaPerComparison, p.TargetPower)
	if fixed == 0 {
		return 0, stats.SequentialOperating{}
	}
	at := func(n int) stats.SequentialOperating {
		op, _ := stats.SequentialExact(p.P0, p.P1, n, design)
		return op
	}
	lo, hi := max(1, fixed/looks)-1, fixed
	if at(hi).Power < p.TargetPower {
		return 0, stats.SequentialOperating{}
	}
	for hi-lo > 1 { // at(hi) reaches the target; lo == 0 or at(lo) does not
		mid := lo + (hi-lo)/2
		if at(mid).Power >= p.TargetPower {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, at(hi)
}

func simFigures(r stats.SimResult) *SimFigures {
	return &SimFigures{Reps: r.Reps, RejectRate: r.RejectRate, ExactRejectRate: r.ExactRejectRate,
		MeanSessions: r.MeanSessions, MaxSessions: r.MaxSessions}
}
