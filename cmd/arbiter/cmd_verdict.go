package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() {
	subcommands = append(subcommands, newVerdictCmd, newShowCmd)
}

func newVerdictCmd(g *globals) *cobra.Command {
	var out, failOn string
	var allowInconclusive bool
	cmd := &cobra.Command{
		Use:   "verdict [EXP]",
		Short: "Write the markdown verdict of an experiment (default: the newest)",
		Long: `Judge a recorded experiment again from the database: counts, intervals, exact tests,
caveats. EXP is an experiment id or name (the newest of that name); without it, the newest
experiment. Without -o the markdown goes to stdout; with -o it is written with its charts.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if failOn != "" && !verdict.IsGate(failOn) {
				return withCode(exitUsage, fmt.Errorf("--fail-on %q: want one of %s", failOn, strings.Join(verdict.Gates(), ", ")))
			}
			v, err := loadVerdict(cmd, g, args)
			if err != nil {
				return err
			}
			switch {
			case out != "":
				if err := v.WriteFiles(out); err != nil {
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
			return gate(v, failOn, allowInconclusive)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the verdict (and its SVG charts) to this file")
	addGateFlags(cmd, &failOn, &allowInconclusive)
	return addDBFlag(cmd, g)
}

func newShowCmd(g *globals) *cobra.Command {
	return addDBFlag(&cobra.Command{
		Use:   "show [EXP]",
		Short: "Summarise an experiment: arms, runs, corrupted sessions, decisions",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadVerdict(cmd, g, args)
			if err != nil {
				return err
			}
			if g.json {
				return json.NewEncoder(g.stdout).Encode(v.Summary())
			}
			for _, line := range v.Headline() {
				fmt.Fprintln(g.stdout, line)
			}
			return nil
		},
	}, g)
}

// loadVerdict judges the experiment the optional argument names, else the newest.
func loadVerdict(cmd *cobra.Command, g *globals, args []string) (*verdict.Verdict, error) {
	ref := ""
	if len(args) == 1 {
		ref = args[0]
	}
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if ref == "" {
		e, err := store.LatestExperiment(cmd.Context(), db)
		if err != nil {
			return nil, err
		}
		ref = fmt.Sprint(e.ID)
	}
	return verdict.Build(cmd.Context(), db, ref)
}
