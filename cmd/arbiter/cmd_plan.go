package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/plan"
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
spec's design (Fisher's exact test, by enumeration), the sessions per arm a fixed design needs
for the plan's power (inflated by the design effect when responses are the unit), and the
expected wall time. For a sequential spec it prints the boundaries and, computed exactly, the
design's power and the sessions it uses on average, against the fixed design at the plan's
power; with --simulate it also checks the design by simulation: its type I error under the
null and its power at the plan's rates.`,
		Example: `  arbiter plan examples/sequential.yaml --simulate`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.simulate, "simulate", false, "simulate the sequential design (type I error and sessions used)")
	cmd.Flags().IntVar(&o.reps, "reps", 10000, "simulated experiments per scenario")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed of the simulation")
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
	p, err := plan.Compute(plan.Options{Spec: spec, SpecPath: path, Simulate: o.simulate, Reps: o.reps, Seed: o.seed,
		History: plan.LastRecorded(ctx, g.dbPath(), spec.Name)})
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
