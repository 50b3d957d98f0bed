package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newLsCmd) }

type lsOptions struct {
	format string
	quiet  bool
}

func newLsCmd(g *globals) *cobra.Command {
	var o lsOptions
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the experiments in the results database",
		Long: `List the experiments in the results database, newest first: id, name, status (running,
done, interrupted, failed, or abandoned: recorded as running, but its arbiter is gone), when
it started, its arms, and its sessions as the verdict counts them (analysed, corrupted, lost).`,
		Example: `  arbiter ls
  arbiter ls --format csv > experiments.csv
  arbiter ls -q | xargs -n1 arbiter show   # every experiment's headline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := listFormat(g, o.format)
			if err != nil {
				return err
			}
			o.format = format
			db, err := store.OpenReadOnly(g.dbPath())
			if err != nil {
				return err
			}
			defer db.Close()
			exps, err := store.ListExperiments(cmd.Context(), db)
			if err != nil {
				return err
			}
			return writeExperiments(g, exps, o)
		},
	}
	cmd.Flags().StringVar(&o.format, "format", "table", "output format: table, csv or json (--json is --format json)")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print only the experiment ids, one a line")
	return addDBFlag(cmd, g)
}

func writeExperiments(g *globals, exps []store.ExperimentSummary, o lsOptions) error {
	for i := range exps {
		exps[i].CreatedAt = toTheSecond(exps[i].CreatedAt)
	}
	// Sessions as the verdict counts them: analysed (finished) and lost.
	return listing[store.ExperimentSummary]{
		items:     exps,
		id:        func(e store.ExperimentSummary) int64 { return e.ID },
		columns:   []string{"id", "name", "status", "created_at", "arms", "sessions", "corrupted_sessions", "lost_sessions"},
		tableHead: []string{"ID", "NAME", "STATUS", "STARTED", "ARMS", "SESSIONS", "CORRUPTED", "LOST"},
		csvRow: func(e store.ExperimentSummary) []string {
			return []string{fmt.Sprint(e.ID), e.Name, string(e.Status), e.CreatedAt, fmt.Sprint(e.Arms), fmt.Sprint(e.Sessions),
				fmt.Sprint(e.Corrupted), fmt.Sprint(e.Lost)}
		},
		tableRow: func(e store.ExperimentSummary) []string {
			return []string{fmt.Sprint(e.ID), e.Name, string(e.Status), verdict.When(e.CreatedAt), fmt.Sprint(e.Arms), fmt.Sprint(e.Sessions),
				fmt.Sprint(e.Corrupted), fmt.Sprint(e.Lost)}
		},
	}.write(g, o.format, o.quiet)
}
