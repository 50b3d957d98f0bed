package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newPlanCmd) }

type planOptions struct {
	simulate bool
	reps     int
	seed     uint64
}

func newPlanCmd(g *globals) *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan SPEC",
		Short: "How many sessions an experiment needs, its exact power, and how long it will take",
		Long: `Plan an experiment before spending GPU hours on it. From the rates the spec declares
(analysis.plan: {p0, p1, power, icc, turn_seconds}) plan computes the exact power of the
spec's design (Fisher's exact test, by enumeration), the sessions per arm needed for the
wanted power (inflated by the design effect when responses are the unit), and the expected
wall time. For a sequential spec it prints the boundaries, and with --simulate it checks the
design by simulation: its type I error under the null and the sessions it uses on average
against a fixed design of equal power.`,
		Example: `  arbiter plan examples/sequential.yaml --simulate`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.simulate, "simulate", false, "simulate the sequential design (type I error and sessions used)")
	cmd.Flags().IntVar(&o.reps, "reps", 10000, "simulated experiments per scenario")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed of the simulation")
	return cmd
}

// Plan is what `arbiter plan --json` prints.
type Plan struct {
	Spec               string   `json:"spec"`
	Unit               string   `json:"unit"`
	Arms               int      `json:"arms"`
	Comparisons        int      `json:"comparisons"`
	Alpha              float64  `json:"alpha"`
	AlphaPerComparison float64  `json:"alpha_per_comparison"`
	P0                 float64  `json:"p0"`
	P1                 float64  `json:"p1"`
	TargetPower        float64  `json:"target_power"`
	SessionsPerArm     int      `json:"sessions_per_arm"`
	TurnsPerSession    float64  `json:"turns_per_session"`
	DesignEffect       float64  `json:"design_effect"`
	Power              float64  `json:"power"`
	SessionsNeeded     int      `json:"sessions_needed_per_arm"`
	WallTimeSeconds    *float64 `json:"wall_time_s"`
	WallTimeBasis      string   `json:"wall_time_basis"`
	Sequential         *SeqPlan `json:"sequential,omitempty"`
	Notes              []string `json:"notes,omitempty"`
}

// SeqPlan is the sequential part of a plan.
type SeqPlan struct {
	Looks      int              `json:"looks"`
	Boundaries []stats.Boundary `json:"boundaries"`
	Null       *SimFigures      `json:"null,omitempty"`
	Alt        *SimFigures      `json:"alternative,omitempty"`
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
	FixedSessions   int     `json:"fixed_sessions,omitempty"`
	SessionRatio    float64 `json:"session_ratio,omitempty"`
}

func runPlan(ctx context.Context, g *globals, path string, o planOptions) error {
	if o.reps < 1 {
		return withCode(exitUsage, fmt.Errorf("--reps %d: simulate at least one experiment", o.reps))
	}
	spec, err := arms.Load(path)
	if err != nil {
		return withCode(exitUsage, err)
	}
	armList, err := spec.Expand()
	if err != nil {
		return withCode(exitUsage, err)
	}
	pl := spec.Analysis.Plan
	if pl.P0 == pl.P1 {
		return withCode(exitUsage, fmt.Errorf("%s: analysis.plan: declare the rates to plan for, e.g. plan: {p0: 0, p1: 0.12, power: 0.8}", path))
	}
	p := Plan{Spec: path, Unit: spec.Analysis.Unit, Arms: len(armList), Comparisons: max(len(armList)-1, 1),
		Alpha: spec.Analysis.Alpha, P0: pl.P0, P1: pl.P1, TargetPower: pl.Power}
	if p.TargetPower == 0 {
		p.TargetPower = 0.8
	}
	// Several comparisons with the baseline share alpha (Bonferroni; the verdict's Holm
	// adjustment is at least as powerful, so the plan is on the safe side).
	p.AlphaPerComparison = p.Alpha / float64(p.Comparisons)
	blocks := max(spec.Blocks, 1)
	p.SessionsPerArm = spec.Workload.Sessions * blocks

	history := lastRecorded(ctx, g.dbPath(), spec.Name)
	p.TurnsPerSession = 2 * float64(spec.Workload.Rounds) // a tool call and an answer per round
	if history.turnsPerSession > 0 {
		p.TurnsPerSession = history.turnsPerSession
	} else {
		p.Notes = append(p.Notes, "turns per session assumed 2 per round (a tool call and its answer); a recorded run of this spec gives the real figure")
	}
	p.DesignEffect = 1
	n := p.SessionsPerArm
	if p.Unit == "response" {
		p.DesignEffect = 1 + (p.TurnsPerSession-1)*pl.ICC
		if pl.ICC == 0 {
			p.Notes = append(p.Notes, "responses are the unit but analysis.plan.icc is 0: responses of a session are rarely independent; declare the expected correlation")
		}
		// Responses count for less than their number: the effective sample size is
		// responses / design effect.
		n = int(math.Floor(float64(p.SessionsPerArm) * p.TurnsPerSession / p.DesignEffect))
	}
	if p.Unit == "launch" {
		p.Notes = append(p.Notes, fmt.Sprintf("launches are the unit: the figures treat sessions as independent, but the verdict clusters them in %d launch(es) per arm; it needs at least 2 (blocks), and more launches buy more power than more sessions per launch", blocks))
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
	if turn == 0 && history.turnSeconds > 0 {
		turn, p.WallTimeBasis = history.turnSeconds, fmt.Sprintf("median turn of experiment %d", history.id)
	}
	if turn > 0 {
		conc := max(spec.Workload.Concurrency, 1)
		waves := math.Ceil(float64(spec.Workload.Sessions) / float64(conc))
		perRun := waves*p.TurnsPerSession*turn + history.startupSeconds
		w := perRun * float64(len(armList)*blocks)
		p.WallTimeSeconds = &w
	} else {
		p.WallTimeBasis = "unknown: declare analysis.plan.turn_seconds or run the spec once"
	}

	if looks := spec.Analysis.Sequential.Looks; looks > 1 {
		design, err := stats.Boundaries(looks, p.AlphaPerComparison, nil)
		if err != nil {
			return err
		}
		p.Sequential = &SeqPlan{Looks: looks, Boundaries: design}
		if o.simulate {
			per := spec.Workload.Sessions
			// The type I error depends on the common rate under the null; a null at 0%
			// can never reject, so the worst of the rates between p0 and p1 is reported.
			var worst stats.SimResult
			worstRate := -1.0
			for _, r := range []float64{pl.P0, (pl.P0 + pl.P1) / 2, pl.P1} {
				if r == 0 {
					continue
				}
				sim := stats.SimulateSequential(r, r, per, looks, p.AlphaPerComparison, o.reps, o.seed)
				if worstRate < 0 || sim.ExactRejectRate > worst.ExactRejectRate {
					worst, worstRate = sim, r
				}
			}
			alt := stats.SimulateSequential(pl.P0, pl.P1, per, looks, p.AlphaPerComparison, o.reps, o.seed+1)
			p.Sequential.Null = simFigures(worst)
			p.Sequential.Null.Rate = worstRate
			p.Sequential.Alt = simFigures(alt)
		}
	} else if o.simulate {
		return withCode(exitUsage, errors.New("--simulate checks a sequential design: the spec has no analysis.sequential.looks"))
	}
	if g.json {
		return json.NewEncoder(g.stdout).Encode(p)
	}
	printPlan(g.stdout, p)
	return nil
}

func simFigures(r stats.SimResult) *SimFigures {
	return &SimFigures{Reps: r.Reps, RejectRate: r.RejectRate, ExactRejectRate: r.ExactRejectRate,
		MeanSessions: r.MeanSessions, MaxSessions: r.MaxSessions, FixedSessions: r.FixedSessions, SessionRatio: r.SessionRatio}
}

func printPlan(w io.Writer, p Plan) {
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
		fmt.Fprintf(w, "  sessions per arm for power %.2f: %d\n", p.TargetPower, p.SessionsNeeded)
	}
	if p.WallTimeSeconds != nil {
		fmt.Fprintf(w, "  expected wall time: %s (%s)\n", (time.Duration(*p.WallTimeSeconds * float64(time.Second))).Round(time.Second), p.WallTimeBasis)
	} else {
		fmt.Fprintf(w, "  expected wall time: %s\n", p.WallTimeBasis)
	}
	if s := p.Sequential; s != nil {
		fmt.Fprintf(w, "  sequential: %d looks, Lan-DeMets O'Brien-Fleming\n", s.Looks)
		for _, b := range s.Boundaries {
			fmt.Fprintf(w, "    look %d at %3.0f%% of the sessions: stop if Fisher p <= %.3g (z %.2f)\n", b.Look, 100*b.Fraction, b.NominalP, b.Z)
		}
		if s.Null != nil {
			fmt.Fprintf(w, "  simulation, %d experiments under the null (both arms at %.1f%%, the worst of p0, p1 and between): type I error %.4f (exact %.4f), at or below alpha %g: %v\n",
				s.Null.Reps, 100*s.Null.Rate, s.Null.RejectRate, s.Null.ExactRejectRate, p.AlphaPerComparison, s.Null.ExactRejectRate <= p.AlphaPerComparison)
		}
		if s.Alt != nil {
			fmt.Fprintf(w, "  simulation, %d experiments at %.1f%% vs %.1f%%: power %.3f, %.0f sessions on average of at most %d;\n",
				s.Alt.Reps, 100*p.P0, 100*p.P1, s.Alt.RejectRate, s.Alt.MeanSessions, s.Alt.MaxSessions)
			if s.Alt.FixedSessions > 0 {
				fmt.Fprintf(w, "    a fixed design of equal power needs %d sessions: the sequential design uses %.0f%% of them\n",
					s.Alt.FixedSessions, 100*s.Alt.SessionRatio)
			}
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// recorded are figures from the last recorded experiment of the same name.
type recorded struct {
	id              int64
	turnsPerSession float64
	turnSeconds     float64
	startupSeconds  float64
}

func lastRecorded(ctx context.Context, dbPath, name string) recorded {
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return recorded{}
	}
	defer db.Close()
	e, err := store.FindExperiment(ctx, db, name)
	if err != nil {
		return recorded{}
	}
	r := recorded{id: e.ID}
	if pace, err := store.RecordedPace(ctx, db, e.ID); err == nil {
		r.turnsPerSession, r.turnSeconds = pace.TurnsPerSession, pace.MedianTurn.Seconds()
	}
	runs, _ := store.Runs(ctx, db, e.ID)
	var startup []float64
	for _, run := range runs {
		if run.ReadyAt.Valid {
			a, err1 := time.Parse(time.RFC3339Nano, run.StartedAt)
			b, err2 := time.Parse(time.RFC3339Nano, run.ReadyAt.String)
			if err1 == nil && err2 == nil {
				startup = append(startup, b.Sub(a).Seconds())
			}
		}
	}
	for _, s := range startup {
		r.startupSeconds += s / float64(len(startup))
	}
	return r
}
