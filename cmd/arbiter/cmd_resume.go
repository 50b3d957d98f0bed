package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newResumeCmd) }

type resumeOptions struct {
	run  runOptions
	spec string
}

func newResumeCmd(g *globals) *cobra.Command {
	var o resumeOptions
	cmd := &cobra.Command{
		Use:   "resume EXP",
		Short: "Finish an interrupted or failed experiment",
		Long: `Continue a recorded experiment that did not finish (Ctrl-C, a killed arbiter, a failed
store): launches that finished are kept, and every other launch of the same seeded plan runs
again; a launch cut short is kept in the database but left out of the analysis. EXP is an
experiment id or name. The spec is the one recorded with the experiment; give --spec when the
recorded text had credentials redacted (the file must be the same spec). Secrets are read from
the environment again.`,
		Example: `  arbiter resume 3
  arbiter resume bf16-index-k-decisive --spec examples/quickstart.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.run.failOn != "" && !verdict.IsGate(o.run.failOn) {
				return withCode(exitUsage, fmt.Errorf("--fail-on %q: want one of %s", o.run.failOn, strings.Join(verdict.Gates(), ", ")))
			}
			return resume(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.spec, "spec", "", "the experiment's spec file (default: the text recorded with it)")
	cmd.Flags().StringVarP(&o.run.verdictPath, "verdict", "o", "", "verdict file (default verdicts/NAME-DB-ID.md beside the database, DB the database's short id)")
	cmd.Flags().StringVar(&o.run.logDir, "log-dir", "", "engine logs, under DIR/DB/exp-ID (default arbiter-logs beside the database)")
	addGateFlags(cmd, &o.run.failOn, &o.run.allowInconclusive)
	return cmd
}

func resume(ctx context.Context, g *globals, ref string, o resumeOptions) error {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return err
	}
	exp, err := store.FindExperiment(ctx, db, ref)
	db.Close()
	if err != nil {
		return withCode(exitUsage, err)
	}
	var spec *arms.Spec
	if o.spec != "" {
		spec, err = arms.Load(o.spec)
	} else {
		if strings.Contains(exp.Spec, arms.Redacted) {
			return withCode(exitUsage, fmt.Errorf("experiment %d: its recorded spec had credentials redacted; give the spec file with --spec", exp.ID))
		}
		spec, err = arms.Parse(exp.SpecPath, []byte(exp.Spec))
	}
	if err != nil {
		return withCode(exitUsage, err)
	}
	err = execute(ctx, g, spec, exp.ID, o.run)
	if errors.Is(err, orchestrator.ErrNothingToResume) {
		return withCode(exitUsage, err)
	}
	return err
}
