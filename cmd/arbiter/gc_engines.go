package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// gcEngineGroups ends (or, with --dry-run, lists) the engine process groups recorded in
// the database whose arbiter is gone. A database that does not exist holds none, and is
// not created.
func gcEngineGroups(ctx context.Context, g *globals, o gcOptions) ([]gcEntry, error) {
	var exp int64
	if o.experiment != "" {
		n, err := strconv.ParseInt(o.experiment, 10, 64)
		if err != nil {
			return nil, nil // not an experiment id: no process group carries it
		}
		exp = n
	}
	if _, err := os.Stat(g.dbPath()); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	st, err := store.Open(g.dbPath(), store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	orphans, err := orchestrator.ReapOrphans(ctx, st, exp, o.dryRun)
	var out []gcEntry
	var errs []error
	for _, r := range orphans {
		e := gcEntry{Kind: "process group", Processes: r.Processes, Removed: r.Ended, Error: r.Err,
			Leftover: runtime.Leftover{ID: strconv.Itoa(r.PGID), Name: fmt.Sprintf("engine process group %d", r.PGID),
				State: "running", Experiment: strconv.FormatInt(r.ExperimentID, 10), Run: strconv.FormatInt(r.RunID, 10)}}
		if r.Err != "" {
			errs = append(errs, fmt.Errorf("%s: %s", e.Name, r.Err))
		}
		out = append(out, e)
	}
	return out, errors.Join(append(errs, err)...)
}

func printGroup(g *globals, o gcOptions, e gcEntry) {
	verb := "ended"
	switch {
	case o.dryRun:
		verb = "would end"
	case !e.Removed:
		verb = "could not end"
	}
	fmt.Fprintf(g.stdout, "%s %s (%d processes, experiment %s, run %s)\n", verb, e.Name, e.Processes, e.Experiment, e.Run)
}
