package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() {
	subcommands = append(subcommands, newVerdictCmd, newShowCmd)
}

func newVerdictCmd(g *globals) *cobra.Command {
	var out, failOn, floor string
	var allowInconclusive bool
	cmd := &cobra.Command{
		Use:   "verdict [EXP]",
		Short: "Write the markdown verdict of an experiment (default: the newest)",
		Long: `Judge a recorded experiment again from the database: counts, intervals, exact tests,
caveats. EXP is an experiment id or name (the newest of that name); without it, the newest
experiment. Without -o the markdown goes to stdout; with -o it is written with its charts.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkGates(failOn); err != nil {
				return err
			}
			v, err := loadVerdictWith(cmd, g, args, verdict.Options{NoiseFloor: floor})
			if err != nil {
				return err
			}
			switch {
			case out != "":
				if err := v.WriteFiles(out, outfile.Guard{Database: g.dbPath()}); err != nil {
					return err
				}
				fmt.Fprintln(g.stdout, out)
			case g.json:
				if err := json.NewEncoder(g.stdout).Encode(v.Summary()); err != nil {
					return err
				}
			default:
				if err := v.Markdown(g.stdout); err != nil {
					return err
				}
			}
			return gateTo(v, failOn, allowInconclusive, g.stderr)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the verdict (and its SVG charts) to this file")
	cmd.Flags().StringVar(&floor, "noise-floor", "", "judge against the launch spread this A/A experiment (id or name) measured, in place of the one the experiment recorded")
	addGateFlags(cmd, &failOn, &allowInconclusive)
	return experimentFlag(experimentArg(addDBFlag(cmd, g), g), g, "noise-floor")
}

func newShowCmd(g *globals) *cobra.Command {
	return experimentArg(addDBFlag(&cobra.Command{
		Use:   "show [EXP]",
		Short: "Summarise an experiment: its status, each arm's launches, sessions, corrupted and lost, the decisions",
		Long: `Summarise a recorded experiment (default: the newest): its status and arbiter version, one
line per arm (its pins, its launches by how they ended, analysed sessions, corrupted, lost,
and the decision against the baseline), then the verdict's headline. arbiter verdict writes
the whole verdict.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadVerdict(cmd, g, args)
			if err != nil {
				return err
			}
			if g.json {
				sum, err := showSummary(cmd.Context(), g, v)
				if err != nil {
					return err
				}
				return json.NewEncoder(g.stdout).Encode(sum)
			}
			return v.WriteSummary(g.stdout)
		},
	}, g), g)
}

// showSummary is the verdict's JSON summary with each arm's pins as data, {"env": {...},
// "args": [...]}, read from the database: an arm that pins nothing has {} and [], not words.
func showSummary(ctx context.Context, g *globals, v *verdict.Verdict) (map[string]any, error) {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := store.Arms(ctx, db, v.Experiment.ID)
	if err != nil {
		return nil, err
	}
	pins := map[string]store.ArmPins{}
	for _, a := range rows {
		if pins[a.Name], err = a.PinSet(); err != nil {
			return nil, err
		}
	}
	sum := v.Summary()
	arms, _ := sum["arms"].([]map[string]any)
	for _, a := range arms {
		name, _ := a["name"].(string)
		p, ok := pins[name]
		if !ok {
			return nil, fmt.Errorf("experiment %d: arm %q has no row in the database", v.Experiment.ID, name)
		}
		a["pins"] = p
	}
	return sum, nil
}

// loadVerdict judges the experiment the optional argument names, else the newest.
func loadVerdict(cmd *cobra.Command, g *globals, args []string) (*verdict.Verdict, error) {
	return loadVerdictWith(cmd, g, args, verdict.Options{})
}

// loadVerdictWith is loadVerdict with options (another noise floor).
func loadVerdictWith(cmd *cobra.Command, g *globals, args []string, o verdict.Options) (*verdict.Verdict, error) {
	ref := ""
	if len(args) == 1 {
		ref = args[0]
	}
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	e, err := store.FindExperiment(cmd.Context(), db, ref)
	if err != nil {
		return nil, err
	}
	v, err := verdict.BuildWith(cmd.Context(), db, e.ID, o)
	if err != nil {
		if o.NoiseFloor != "" {
			return nil, withCode(exitNotFound, err)
		}
		return nil, err
	}
	v.DB = g.namedDB()
	return v, nil
}
