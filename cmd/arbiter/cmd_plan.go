package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/plan"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newPlanCmd) }

type planOptions struct {
	simulate   bool
	reps       int
	seed       uint64
	noiseFloor string
	// rates are --p0 and --p1, by name, where given: they replace analysis.plan's.
	rates map[string]float64
	// cv and ratio plan a speed claim: how much launches differ, and the true ratio of
	// the arm's tok/s per request to the baseline's.
	cv, ratio float64
	// from is the recorded experiment whose figures replace the plan's assumptions
	// (default: the newest of the spec's name).
	from string
}

func newPlanCmd(g *globals) *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan SPEC",
		Short: "How many launches per arm an experiment needs, with and without a noise floor, and how long it will take",
		Long: `Plan an experiment before spending GPU hours on it. Every claim of a verdict is tested on
launches, so plan leads with launches: the power of the claim on the primary outcome for 1 to
32 launches per arm, at the rates the spec declares (analysis.plan: {p0, p1, power, launch_icc,
turn_seconds}) when launches of one configuration differ by launch_icc (or, undeclared, as
much as the newest recorded run of the spec measured within its arms), with the tests and
levels the verdict will use. Without a noise floor that is nothing at one launch per arm,
Welch's test on launch rates at two or three, the randomization test from four; with one (an
A/A experiment of the same engine, workload and hardware, --noise-floor or
analysis.noise_floor) the floor's test, which weighs one launch per arm against the floor's
upper bound of how much launches differ. Then the launches per arm that reach the plan's power
with and without the floor, what the spec's own launches can claim, what the sessions alone
would give if launches were replicas (exact Fisher power, sessions needed) and the expected
wall time. For a sequential spec it says the earliest look that can stop with a claim; with
--simulate it checks the design by simulation: its false-claim rate under the null and its
power and launches used at the plan's rates.

An abort cascade's claim is on wedges, one yes or no per launch: p0 and p1 are then the
shares of launches that wedge, and the power by launches per arm is exact (the randomization
test on the launches' yes or no).

A throughput spec's claim is a speed (tok/s per request, phase by phase, non-inferior within
analysis.throughput_margin or changed beyond analysis.min_effect), tested by the t test on the
logs of the launches' medians. Its power depends on how much launches of one configuration
differ, which plan reads from the newest recorded experiment of the spec's name (in --db),
from a noise floor's A/A launches, or from --cv; it then gives, phase by phase, that spread
with its upper bound, the launches per arm that reach the target power (analysis.plan.power,
default 0.8) at each, and the power by launches per arm. --ratio is the arm's true tok/s over
the baseline's to plan for (default 1: no cost).`,
		Example: `  arbiter plan examples/sequential.yaml --simulate
  arbiter plan examples/quickstart.yaml --p0 0 --p1 0.15   # the rates a verdict saw
  arbiter plan examples/throughput.yaml                    # after a run: the launches its spread needs`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.rates = map[string]float64{}
			for _, name := range []string{"p0", "p1"} {
				if cmd.Flags().Changed(name) {
					o.rates[name], _ = cmd.Flags().GetFloat64(name)
				}
			}
			return runPlan(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().Float64("p0", 0, "the baseline's corruption rate (an abort cascade: its share of launches that wedge) to plan for, 0 to 1 (replaces analysis.plan.p0)")
	cmd.Flags().Float64("p1", 0, "the rate (or share of launches that wedge) the experiment must tell from p0, 0 to 1 (replaces analysis.plan.p1)")
	cmd.Flags().Float64Var(&o.cv, "cv", 0, "a throughput spec: how much launches of one configuration differ in tok/s per request, as a share (0.03 for 3%; replaces what a recorded run measured)")
	cmd.Flags().Float64Var(&o.ratio, "ratio", 0, "a throughput spec: the arm's true tok/s per request over the baseline's to plan for (default 1 under a margin: no cost)")
	cmd.Flags().StringVar(&o.from, "from", "", "the recorded experiment (id or name, in --db) whose launches and pace to plan from (default: the newest of the spec's name)")
	cmd.Flags().BoolVar(&o.simulate, "simulate", false, "simulate the sequential design (type I error and sessions used)")
	cmd.Flags().IntVar(&o.reps, "reps", 10000, "simulated experiments per scenario")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed of the simulation")
	cmd.Flags().StringVar(&o.noiseFloor, "noise-floor", "", "plan with the launch-to-launch variation an A/A experiment (id or name, in --db) measured")
	return experimentFlag(experimentFlag(addDBFlag(cmd, g), g, "noise-floor"), g, "from")
}

func runPlan(ctx context.Context, g *globals, path string, o planOptions) error {
	if o.reps < 1 {
		return withCode(exitUsage, errors.New("--reps: simulate at least one experiment"))
	}
	spec, err := arms.Load(path)
	if err != nil {
		return withCode(exitUsage, err)
	}
	for name, rate := range o.rates {
		if !(rate >= 0 && rate <= 1) {
			return withCode(exitUsage, fmt.Errorf("--%s: a rate is between 0 and 1, not %g", name, rate))
		}
		if name == "p0" {
			spec.Analysis.Plan.P0 = rate
		} else {
			spec.Analysis.Plan.P1 = rate
		}
	}
	if p0, ok := o.rates["p0"]; ok && o.rates["p1"] == p0 && len(o.rates) == 2 {
		return withCode(exitUsage, fmt.Errorf("--p0 and --p1 are both %g: a plan tells two rates apart", p0))
	}
	if verdict.PlannedSpeedPrimary(spec) {
		if len(o.rates) > 0 {
			// Its verdict tests corruption too, but beside the speed claims, at a share of
			// alpha that a plan of rates would not count.
			return withCode(exitUsage, fmt.Errorf("--p0 and --p1 plan corruption rates, and %s's claim is a speed: plan it from how much its launches differ (a recorded run, --noise-floor or --cv) and the true ratio (--ratio)", path))
		}
		return runSpeedPlan(ctx, g, path, spec, o)
	}
	if o.cv != 0 || o.ratio != 0 {
		return withCode(exitUsage, fmt.Errorf("--cv and --ratio plan a speed claim: %s's primary claim is on corruption rates (--p0, --p1)", path))
	}
	po := plan.Options{Spec: spec, SpecPath: path, Simulate: o.simulate, Reps: o.reps, Seed: o.seed,
		History: plan.LastRecorded(ctx, g.dbPath(), cmp.Or(o.from, spec.Name))}
	switch {
	case o.noiseFloor != "":
		if po.NoiseFloorICC, po.NoiseFloorBasis, err = floorBound(ctx, g, o.noiseFloor, spec); err != nil {
			return err
		}
	case spec.Analysis.NoiseFloor != "":
		// A floor the spec names may not have been measured yet: the plan then says what
		// one would give, and the run is where a missing floor stops.
		icc, basis, err := floorBound(ctx, g, spec.Analysis.NoiseFloor, spec)
		if err != nil {
			fmt.Fprintf(g.stderr, "analysis.noise_floor: %v; planned without it\n", err)
		} else {
			po.NoiseFloorICC, po.NoiseFloorBasis = icc, basis
		}
	}
	p, err := plan.Compute(po)
	return printPlan(g, p, err)
}

// printPlan prints a plan as JSON or text; a plan that cannot be made as asked is a
// usage error.
func printPlan(g *globals, p interface{ WriteText(io.Writer) }, err error) error {
	if errors.Is(err, plan.ErrInvalid) {
		return withCode(exitUsage, err)
	}
	if err != nil {
		return err
	}
	if g.json {
		return json.NewEncoder(g.stdout).Encode(p)
	}
	p.WriteText(g.stdout)
	return nil
}

// floorBound is the bound of how launches differ in corruption that the A/A experiment
// ref lends an experiment of spec.
func floorBound(ctx context.Context, g *globals, ref string, spec *arms.Spec) (float64, string, error) {
	f, err := noiseFloor(ctx, g, ref, spec)
	if err != nil {
		return 0, "", err
	}
	return f.CorruptionBound(ref)
}

// runSpeedPlan plans a throughput spec's speed claim from how much its launches differ:
// given (--cv), recorded by the newest experiment of the spec's name, or measured by a
// noise floor.
func runSpeedPlan(ctx context.Context, g *globals, path string, spec *arms.Spec, o planOptions) error {
	if o.cv < 0 || o.cv >= 1 {
		return withCode(exitUsage, fmt.Errorf("--cv: a share of a launch's tok/s between 0 and 1 (0.03 for 3%%), not %g", o.cv))
	}
	if o.ratio < 0 {
		return withCode(exitUsage, fmt.Errorf("--ratio: a ratio of tok/s is positive, not %g", o.ratio))
	}
	if o.simulate {
		return withCode(exitUsage, fmt.Errorf("--simulate checks a sequential design of corruption rates; %s's claim is a speed, whose power is exact", path))
	}
	so := plan.SpeedOptions{Spec: spec, SpecPath: path, CV: o.cv, Ratio: o.ratio}
	if o.cv == 0 {
		var err error
		if so.Recorded, so.Experiment, err = plan.RecordedSpeed(ctx, g.dbPath(), cmp.Or(o.from, spec.Name), o.from != ""); err != nil {
			if o.from != "" {
				return withCode(exitUsage, fmt.Errorf("--from %s: %w", o.from, err))
			}
			return err
		}
	}
	ref := o.noiseFloor
	if ref == "" {
		ref = spec.Analysis.NoiseFloor
	}
	if ref != "" {
		f, err := noiseFloor(ctx, g, ref, spec)
		if err == nil && !f.Used() {
			err = errors.New(f.Refused)
		}
		switch {
		case err != nil && o.noiseFloor != "":
			return withCode(exitUsage, fmt.Errorf("--noise-floor %s: %w", ref, err))
		case err != nil:
			// A floor the spec names may not have been measured yet.
			fmt.Fprintf(g.stderr, "analysis.noise_floor: %v; planned without it\n", err)
		default:
			so.Floor = f
		}
	}
	p, err := plan.ComputeSpeed(so)
	return printPlan(g, p, err)
}
