package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// resolveNoiseFloor finds and measures the A/A experiment ref names in the results
// database, and checks it can be the noise floor of an experiment of spec: one on another
// engine, workload or pins is refused (exit 2) before anything is launched, and what only
// warns (another host, other session counts) is written to warn.
func resolveNoiseFloor(ctx context.Context, dbPath, ref string, spec *arms.Spec, warn io.Writer) (*verdict.Floor, error) {
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		return nil, withCode(exitNotFound, fmt.Errorf("noise floor %s: no results database at %s holds it (run the A/A experiment there first, or give --db)", ref, dbPath))
	}
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	e, err := store.FindExperiment(ctx, db, ref)
	if err != nil {
		return nil, fmt.Errorf("noise floor %s: %w", ref, err)
	}
	f, err := verdict.MeasureFloor(ctx, db, e.ID)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	verdict.CheckFloor(f, e, store.ExperimentRow{Name: spec.Name, SpecPath: spec.Path, Spec: string(spec.Source), Host: host})
	if !f.Used() {
		return nil, withCode(exitUsage, fmt.Errorf("noise floor %s refused: %s", ref, f.Refused))
	}
	for _, w := range f.Warnings {
		fmt.Fprintf(warn, "noise floor %s: %s\n", ref, w)
	}
	return f, nil
}
