package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

func init() { subcommands = append(subcommands, newGcCmd) }

type gcOptions struct {
	dryRun     bool
	force      bool
	host       string
	spec       string
	experiment string
}

func newGcCmd(g *globals) *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove the containers, engine processes and Slurm jobs that killed arbiters left behind",
		Long: `Remove the containers the docker runtime started for this results database's experiments
and never removed: an arbiter killed with SIGKILL, or a daemon that failed to remove a
container, leaves them behind. Only containers labelled with this database's id
(arbiter.database) are considered, and of those only the ones whose experiment is over or
abandoned (no arbiter renewed its lease within the last 30s); a container of an experiment
that an arbiter is still running is left alone and listed, unless --force is given, which
kills it (and so that experiment's running arm) after saying which. Containers of other
databases are never touched. Engine logs stay where they are.

Also end the engine process groups of the process runtime, recorded in the database, whose
arbiter no longer runs and whose supervisor did not end them (SIGTERM, then SIGKILL after
10s). Processes are checked on Linux only.

Also cancel the Slurm jobs of the slurm runtime that Slurm still holds (queued or running)
for this database's experiments, found by their comment (arbiter:db=ID,exp=N,run=M) on the
cluster the Slurm commands here talk to ($SLURM_CONF), by the same rule as containers.

A daemon that does not answer (or Slurm's commands failing) is listed as not checked, and
gc exits 1 after sweeping the rest: what it holds is unknown.`,
		Example: `  arbiter gc --dry-run                  # list what would go
  arbiter gc --experiment 12            # only experiment 12's
  arbiter gc --db results.db --host tcp://127.0.0.1:2375 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gc(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list the containers and what gc would do, without removing any")
	cmd.Flags().BoolVar(&o.force, "force", false, "also kill the containers of experiments an arbiter is still running")
	cmd.Flags().StringVar(&o.experiment, "experiment", "", "only the containers of this experiment ID")
	cmd.Flags().StringVar(&o.host, "host", "", "Docker daemon, unix://, tcp:// or ssh:// (default $DOCKER_HOST, else the local socket)")
	cmd.Flags().StringVar(&o.spec, "spec", "", "look on every node of this spec's docker runtime (with the nodes' TLS files) instead of one daemon")
	return addDBFlag(cmd, g)
}

func gc(ctx context.Context, g *globals, o gcOptions) error {
	var exp int64
	if o.experiment != "" {
		id, err := strconv.ParseInt(o.experiment, 10, 64)
		if err != nil || id < 1 {
			return withCode(exitUsage, fmt.Errorf("gc: --experiment %q: an experiment's id is a positive number, as `arbiter ls` lists them", o.experiment))
		}
		exp = id
	}
	path := g.dbPath()
	if _, err := os.Stat(path); err != nil {
		return withCode(exitUsage, fmt.Errorf("gc: no results database at %s: gc removes only the containers of one database's experiments, known by its id; give --db or set $ARBITER_DB (%w)", path, err))
	}
	opts := orchestrator.GCOptions{Experiment: exp, DryRun: o.dryRun, Force: o.force,
		Nodes: []orchestrator.GCNode{{Docker: runtime.Docker{Host: o.host}}}, Ambient: o.host == "" && o.spec == "",
		Killing: func(e orchestrator.GCEntry) {
			fmt.Fprintf(g.stderr, "arbiter gc --force: killing %s (%s): %s\n", e.Name, e.State, e.Reason)
		}}
	if o.spec != "" {
		spec, err := arms.Load(o.spec)
		if err != nil {
			return withCode(exitUsage, err)
		}
		if opts.Nodes, err = orchestrator.GCNodes(spec); err != nil {
			return withCode(exitUsage, fmt.Errorf("gc --spec: %w", err))
		}
	}
	res, err := orchestrator.GC(ctx, path, opts)
	if errors.Is(err, runtime.ErrBadHost) {
		return withCode(exitUsage, err)
	}
	if res.NoDaemon {
		fmt.Fprintln(g.stderr, "arbiter gc: no Docker daemon answers; only engine processes and Slurm jobs were checked")
	}
	if res.OtherDatabases+res.Unlabelled > 0 {
		fmt.Fprintf(g.stderr, "arbiter gc: left alone: %d container(s) of other results databases and %d without a database label (an older arbiter's; docker ps -a --filter label=%s=1 lists them)\n",
			res.OtherDatabases, res.Unlabelled, runtime.LabelManaged)
	}
	entries := res.Entries
	if g.json {
		if entries == nil {
			entries = []orchestrator.GCEntry{}
		}
		if jerr := json.NewEncoder(g.stdout).Encode(entries); jerr != nil {
			return jerr
		}
		return err
	}
	switch {
	case len(entries) == 0 && len(res.Unchecked) == 0:
		fmt.Fprintln(g.stdout, "no leftover containers, engine processes or Slurm jobs")
	case len(entries) == 0:
		fmt.Fprintln(g.stdout, "no leftover found where gc could look")
	}
	for _, u := range res.Unchecked {
		fmt.Fprintf(g.stdout, "not checked: %s\n", u)
	}
	for _, e := range entries {
		switch e.Kind {
		case orchestrator.LeftoverProcessGroup:
			printGroup(g, o, e)
		case orchestrator.LeftoverSlurmJob:
			printJob(g, o, e)
		default:
			printContainer(g, o, e)
		}
	}
	return err
}

func printContainer(g *globals, o gcOptions, e orchestrator.GCEntry) {
	verb := gcVerb(o, e, "remove", "removed")
	if e.Action == orchestrator.GCKill {
		verb = gcVerb(o, e, "kill", "killed")
	}
	fmt.Fprintf(g.stdout, "%s %s (%s", verb, e.Name, e.State)
	if e.Node != "" {
		fmt.Fprintf(g.stdout, ", node %s", e.Node)
	}
	if e.Run != "" {
		fmt.Fprintf(g.stdout, ", run %s", e.Run)
	}
	fmt.Fprintf(g.stdout, ", image %s): %s", e.Image, e.Reason)
	if e.Action == orchestrator.GCLeave {
		fmt.Fprint(g.stdout, "; --force kills it")
	}
	if e.Error != "" {
		fmt.Fprintf(g.stdout, ": %s", e.Error)
	}
	fmt.Fprintln(g.stdout)
}

func printGroup(g *globals, o gcOptions, e orchestrator.GCEntry) {
	verb := "ended"
	switch {
	case o.dryRun:
		verb = "would end"
	case !e.Removed:
		verb = "could not end"
	}
	fmt.Fprintf(g.stdout, "%s %s (%d processes, experiment %s, run %s)\n", verb, e.Name, e.Processes, e.Experiment, e.Run)
}

// gcVerb says what gc did, or would do with --dry-run, to a leftover whose removal is
// called do (done when done): left alone, done, or not done for an error.
func gcVerb(o gcOptions, e orchestrator.GCEntry, do, done string) string {
	switch {
	case e.Action == orchestrator.GCLeave && o.dryRun:
		return "would leave"
	case e.Action == orchestrator.GCLeave:
		return "left"
	case o.dryRun:
		return "would " + do
	case !e.Removed:
		return "could not " + do
	}
	return done
}

func printJob(g *globals, o gcOptions, e orchestrator.GCEntry) {
	verb := gcVerb(o, e, "cancel", "cancelled")
	fmt.Fprintf(g.stdout, "%s Slurm job %s (%s, %s", verb, e.ID, e.Name, e.State)
	if e.Run != "" {
		fmt.Fprintf(g.stdout, ", run %s", e.Run)
	}
	fmt.Fprintf(g.stdout, "): %s", e.Reason)
	if e.Action == orchestrator.GCLeave {
		fmt.Fprint(g.stdout, "; --force cancels it")
	}
	if e.Error != "" {
		fmt.Fprintf(g.stdout, ": %s", e.Error)
	}
	fmt.Fprintln(g.stdout)
}
