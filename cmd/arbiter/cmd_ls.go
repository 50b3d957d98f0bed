package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newLsCmd) }

func newLsCmd(g *globals) *cobra.Command {
	return addDBFlag(&cobra.Command{
		Use:   "ls",
		Short: "List the experiments in the results database",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.OpenReadOnly(g.dbPath())
			if err != nil {
				return err
			}
			defer db.Close()
			exps, err := store.ListExperiments(cmd.Context(), db)
			if err != nil {
				return err
			}
			if g.json {
				if exps == nil {
					exps = []store.ExperimentSummary{}
				}
				return json.NewEncoder(g.stdout).Encode(exps)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			// Sessions as the verdict counts them: analysed (finished) and lost.
			fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSTARTED\tARMS\tSESSIONS\tCORRUPTED\tLOST")
			for _, e := range exps {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", e.ID, e.Name, e.Status, e.CreatedAt, e.Arms, e.Sessions, e.Corrupted, e.Lost)
			}
			return tw.Flush()
		},
	}, g)
}
