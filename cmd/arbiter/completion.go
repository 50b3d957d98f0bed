package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
)

// completeExperiments completes an argument or flag that names an experiment: the ids
// of the experiments in the --db, newest first, each described by its name and status.
// A database that is not there, or not arbiter's, offers nothing, and never a file name.
func completeExperiments(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if _, err := os.Stat(g.dbPath()); errors.Is(err, os.ErrNotExist) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		db, err := store.OpenReadOnly(g.dbPath())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer db.Close()
		ctx := cmd.Context()
		if ctx == nil {
			// Completion runs the command's completer outside its execution.
			ctx = context.Background()
		}
		exps, err := store.ListExperiments(ctx, db)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, e := range exps {
			out = append(out, cobra.CompletionWithDesc(fmt.Sprint(e.ID), fmt.Sprintf("%s (%s)", e.Name, e.Status)))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// experimentArg makes cmd complete its one experiment argument from the --db's
// experiments.
func experimentArg(cmd *cobra.Command, g *globals) *cobra.Command {
	complete := completeExperiments(g)
	cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return complete(c, args, toComplete)
	}
	return cmd
}

// experimentFlag makes cmd's flag name, which names an experiment, complete from the
// --db's experiments.
func experimentFlag(cmd *cobra.Command, g *globals, name string) *cobra.Command {
	// The flag is the command's own, defined with it: failing here is arbiter's mistake.
	if err := cmd.RegisterFlagCompletionFunc(name, completeExperiments(g)); err != nil {
		panic(fmt.Sprintf("arbiter %s --%s: %v", cmd.Name(), name, err))
	}
	return cmd
}
