package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
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
the environment again.

An experiment that another arbiter is still running (its lease was renewed within the last
30s) is refused, with who holds it; an abandoned one (its arbiter was killed) is taken over.
A done experiment whose verdict file is missing or incomplete (an older arbiter was killed
while writing it, or the disk was full) gets its verdict written.`,
		Example: `  arbiter resume 3
  arbiter resume bf16-index-k-decisive --spec examples/quickstart.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkGates(o.run.failOn); err != nil {
				return err
			}
			return resume(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.spec, "spec", "", "the experiment's spec file (default: the text recorded with it)")
	addOutputFlag(cmd, &o.run.verdictPath)
	cmd.Flags().StringVar(&o.run.logDir, "log-dir", "", "engine logs, under DIR/DB/exp-ID (default arbiter-logs beside the database)")
	addGateFlags(cmd, &o.run.failOn, &o.run.allowInconclusive)
	return experimentArg(addDBFlag(cmd, g), g)
}

func resume(ctx context.Context, g *globals, ref string, o resumeOptions) error {
	exp, err := findForResume(ctx, g.dbPath(), ref)
	if err != nil {
		return err
	}
	if exp.Status == store.ExperimentDone {
		return finishDone(ctx, g, exp, o.run)
	}
	// Said before anything else (a missing --spec, say); the orchestrator's own check
	// when it takes the lease is the one that holds under a race.
	if err := exp.Held(time.Now()); err != nil {
		return err
	}
	spec, err := arms.ResumeSpec(fmt.Sprintf("experiment %d", exp.ID), o.spec, exp.SpecPath, exp.Spec)
	if err != nil {
		return withCode(exitUsage, err)
	}
	err = execute(ctx, g, spec, exp.ID, o.run)
	if errors.Is(err, orchestrator.ErrNothingToResume) {
		return withCode(exitUsage, err)
	}
	return err
}

// findForResume looks the experiment up in the database at path, which resume (a
// command that writes) upgrades to this arbiter's schema first; it never creates one.
func findForResume(ctx context.Context, path, ref string) (store.ExperimentRow, error) {
	st, err := store.OpenExisting(path, store.Options{})
	if errors.Is(err, store.ErrNotArbiterDatabase) {
		return store.ExperimentRow{}, withCode(exitUsage, err)
	}
	if err != nil {
		return store.ExperimentRow{}, fmt.Errorf("resume: %w", err)
	}
	defer st.Close()
	exp, err := store.FindExperiment(ctx, st.DB(), ref)
	if err != nil {
		return exp, withCode(exitUsage, err)
	}
	return exp, nil
}

// finishDone handles the resume of an experiment that ran its whole plan: an arbiter
// killed while it wrote the verdict leaves the experiment done without one, so a missing
// verdict is written now; with the verdict there, there is nothing to resume.
func finishDone(ctx context.Context, g *globals, exp store.ExperimentRow, o runOptions) error {
	path, err := verdictPath(ctx, g, o, exp.Name, exp.ID)
	if err != nil {
		return err
	}
	keep := outfile.Guard{Database: g.dbPath(), Specs: []string{exp.SpecPath}}
	if err := checkOutput(keep, verdict.Files(path)...); err != nil {
		return err
	}
	// Only a whole verdict counts: an older arbiter killed while writing it, or a full
	// disk, left an empty or cut file, which is written again.
	was := "missing"
	md, err := os.ReadFile(path)
	switch {
	case err == nil && verdict.Complete(md, exp.ID):
		return withCode(exitUsage, fmt.Errorf("experiment %d is done and its verdict is at %s: %w (rebuild the verdict with %s -o FILE)",
			exp.ID, path, orchestrator.ErrNothingToResume, verdict.Command(fmt.Sprint("verdict ", exp.ID), g.namedDB())))
	case err == nil:
		was = fmt.Sprintf("incomplete (%d bytes)", len(md))
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	v, err := writeVerdict(ctx, g, exp.ID, path, keep)
	if err != nil {
		return err
	}
	if g.json {
		return json.NewEncoder(g.stdout).Encode(map[string]any{"experiment_id": exp.ID, "name": exp.Name,
			"status": exp.Status, "verdict": path, "database": g.dbPath(), "verdict_written": true, "summary": v.Summary()})
	}
	fmt.Fprintf(g.stdout, "experiment %d (%s): done; nothing left to run, but its verdict was %s: written now\n", exp.ID, exp.Name, was)
	for _, line := range v.Headline() {
		fmt.Fprintf(g.stdout, "  %s\n", line)
	}
	fmt.Fprintf(g.stdout, "verdict: %s\n", path)
	return gateTo(v, o.failOn, o.allowInconclusive, g.stderr)
}
