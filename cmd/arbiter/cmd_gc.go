package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

func init() { subcommands = append(subcommands, newGcCmd) }

type gcOptions struct {
	dryRun     bool
	host       string
	experiment string
}

// gcEntry is one leftover, a container or an engine process group, as gc reports it.
type gcEntry struct {
	// Kind is "container" or "process group".
	Kind string `json:"kind"`
	runtime.Leftover
	// Processes is how many processes a leftover process group held.
	Processes int    `json:"processes,omitempty"`
	Removed   bool   `json:"removed"`
	Error     string `json:"error,omitempty"`
}

func newGcCmd(g *globals) *cobra.Command {
	var o gcOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove arbiter's leftover containers and engine processes",
		Long: `Remove the containers the docker runtime started and never removed (labelled
arbiter.managed=1), running or stopped: an experiment killed with SIGKILL, or a daemon that
failed to remove a container, leaves them behind. Engine logs stay where they are.

Also end the engine process groups of the process runtime, recorded in the database, whose
arbiter no longer runs and whose supervisor did not end them (SIGTERM, then SIGKILL after
10s). Processes are checked on Linux only, and only when the database exists.`,
		Example: `  arbiter gc --dry-run                  # list them
  arbiter gc --experiment 12            # only experiment 12's
  arbiter gc --host tcp://127.0.0.1:2375 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return gc(cmd.Context(), g, o)
		},
	}
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list the leftover containers without removing them")
	cmd.Flags().StringVar(&o.experiment, "experiment", "", "only the containers of this experiment ID")
	cmd.Flags().StringVar(&o.host, "host", "", "Docker daemon, unix:// or tcp:// (default $DOCKER_HOST, else the local socket)")
	return cmd
}

func gc(ctx context.Context, g *globals, o gcOptions) error {
	groups, groupErr := gcEngineGroups(ctx, g, o)
	d := runtime.Docker{Host: o.host}
	left, err := d.Leftovers(ctx, o.experiment)
	switch {
	case errors.Is(err, runtime.ErrSSHHost):
		return withCode(exitUsage, err)
	case err != nil && o.host == "" && client.IsErrConnectionFailed(err):
		// No local daemon: nothing of the docker runtime can be left on it.
		fmt.Fprintln(g.stderr, "arbiter gc: no Docker daemon answers; only engine processes were checked")
		left = nil
	case err != nil:
		return errors.Join(groupErr, err)
	}
	entries := make([]gcEntry, len(left))
	errs := []error{groupErr}
	for i, l := range left {
		entries[i].Kind, entries[i].Leftover = "container", l
		if o.dryRun {
			continue
		}
		if err := d.Remove(ctx, l.ID); err != nil {
			entries[i].Error = err.Error()
			errs = append(errs, err)
			continue
		}
		entries[i].Removed = true
	}
	entries = append(groups, entries...)
	if g.json {
		if err := json.NewEncoder(g.stdout).Encode(entries); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	if len(entries) == 0 {
		fmt.Fprintln(g.stdout, "no leftover containers")
	}
	for _, e := range entries {
		if e.Kind != "container" {
			printGroup(g, o, e)
			continue
		}
		verb := "removed"
		switch {
		case o.dryRun:
			verb = "would remove"
		case !e.Removed:
			verb = "could not remove"
		}
		fmt.Fprintf(g.stdout, "%s %s (%s", verb, e.Name, e.State)
		if e.Experiment != "" {
			fmt.Fprintf(g.stdout, ", experiment %s", e.Experiment)
		}
		if e.Run != "" {
			fmt.Fprintf(g.stdout, ", run %s", e.Run)
		}
		fmt.Fprintf(g.stdout, ", image %s)\n", e.Image)
	}
	return errors.Join(errs...)
}
