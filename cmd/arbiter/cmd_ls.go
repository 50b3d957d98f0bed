package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
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
			if g.json {
				o.format = "json"
			}
			switch o.format {
			case "table", "json", "csv":
			default:
				return withCode(exitUsage, fmt.Errorf("--format %q: want table, csv or json", o.format))
			}
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
	switch {
	case o.quiet:
		for _, e := range exps {
			fmt.Fprintln(g.stdout, e.ID)
		}
		return nil
	case o.format == "json":
		if exps == nil {
			exps = []store.ExperimentSummary{}
		}
		return json.NewEncoder(g.stdout).Encode(exps)
	case o.format == "csv":
		cw := csv.NewWriter(g.stdout)
		cw.Write([]string{"id", "name", "status", "created_at", "arms", "sessions", "corrupted_sessions", "lost_sessions"})
		for _, e := range exps {
			cw.Write([]string{fmt.Sprint(e.ID), e.Name, string(e.Status), e.CreatedAt, fmt.Sprint(e.Arms), fmt.Sprint(e.Sessions),
				fmt.Sprint(e.Corrupted), fmt.Sprint(e.Lost)})
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	// Sessions as the verdict counts them: analysed (finished) and lost.
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSTARTED\tARMS\tSESSIONS\tCORRUPTED\tLOST")
	for _, e := range exps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", e.ID, e.Name, e.Status, e.CreatedAt, e.Arms, e.Sessions, e.Corrupted, e.Lost)
	}
	return tw.Flush()
}
