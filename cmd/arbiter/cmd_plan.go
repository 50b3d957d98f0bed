package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/plan"
)

func init() { subcommands = append(subcommands, newPlanCmd) }

type planOptions struct {
	simulate   bool
	reps       int
	seed       uint64
	noiseFloor string
}

func newPlanCmd(g *globals) *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan SPEC",
		Short: "How many sessions an experiment needs, its exact power, and how long it will take",
		Long: `Plan an experiment before spending GPU hours on it. Every claim of a verdict is tested on
launches, so plan says first what the spec's launches per arm (launches:, or blocks:) can
claim: the level each claim on the primary outcome is tested at, the smallest p the launch
test can give with these launches, its power at the rates the spec declares
(analysis.plan: {p0, p1, power, launch_icc, turn_seconds}) when launches of one configuration
differ by launch_icc (or by what an A/A experiment measured, --noise-floor), and the launches
per arm that reach the plan's power. It also gives what the sessions alone would give if
launches were replicas (exact Fisher power, sessions needed) and the expected wall time. For
a sequential spec it says the earliest look that can stop with a claim; with --simulate it
checks the design by simulation: its false-claim rate under the null and its power and
launches used at the plan's rates.`,
		Example: `  arbiter plan examples/sequential.yaml --simulate`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.simulate, "simulate", false, "simulate the sequential design (type I error and sessions used)")
	cmd.Flags().IntVar(&o.reps, "reps", 10000, "simulated experiments per scenario")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed of the simulation")
	cmd.Flags().StringVar(&o.noiseFloor, "noise-floor", "", "plan with the launch-to-launch variation an A/A experiment (id or name, in --db) measured")
	return addDBFlag(cmd, g)
}

func runPlan(ctx context.Context, g *globals, path string, o planOptions) error {
	if o.reps < 1 {
		return withCode(exitUsage, errors.New("--reps: simulate at least one experiment"))
	}
	spec, err := arms.Load(path)
	if err != nil {
		return withCode(exitUsage, err)
	}
	po := plan.Options{Spec: spec, SpecPath: path, Simulate: o.simulate, Reps: o.reps, Seed: o.seed,
		History: plan.LastRecorded(ctx, g.dbPath(), spec.Name)}
	if o.noiseFloor != "" {
		if po.NoiseFloorICC, po.NoiseFloorBasis, err = noiseFloor(ctx, g.dbPath(), o.noiseFloor, spec, g.stderr); err != nil {
			return err
		}
	}
	p, err := plan.Compute(po)
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

// noiseFloor reads the intra-launch correlation an A/A experiment measured, as the
// upper bound the verdict will weigh launches with, after the same checks as run's
// --noise-floor (same engine, workload and pins as spec).
func noiseFloor(ctx context.Context, dbPath, ref string, spec *arms.Spec, warn io.Writer) (float64, string, error) {
	f, err := resolveNoiseFloor(ctx, dbPath, ref, spec, warn)
	if err != nil {
		return 0, "", err
	}
	if math.IsNaN(f.ICCUpper) {
		return 0, "", withCode(exitUsage, fmt.Errorf("--noise-floor %s: experiment %d had %d corrupted sessions of %d, so how launches differ in corruption was not measured", ref, f.Experiment, f.Corrupted, f.Sessions))
	}
	return f.ICCUpper, fmt.Sprintf("the %g%% upper bound measured by A/A experiment %d over %d launches (estimate %.3g)", 100*f.Conf, f.Experiment, f.Launches, f.ICC), nil
}
