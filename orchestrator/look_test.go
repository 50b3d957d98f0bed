package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// Options.Look sees each arm's cumulative analysed sessions after every block but the
// last, and a stop it asks for ends scheduling there with its reason recorded, as a
// crossed boundary does.
func TestLookStopsSchedulingWithItsReason(t *testing.T) {
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "blocks: 3\n")
	var seen [][]ArmCounts
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.leak = arm == "treatment"
			return e
		}),
		Look: func(block int, counts []ArmCounts) (bool, string) {
			seen = append(seen, counts)
			return block == 1, fmt.Sprintf("enough after block %d", block)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 4 || res.StoppedEarly != "enough after block 1" {
		t.Fatalf("%d runs, stopped early %q; want 4 runs and the look's reason", len(res.Runs), res.StoppedEarly)
	}
	want := [][]ArmCounts{{{6, 0}, {6, 6}}, {{12, 0}, {12, 12}}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("looks saw %v, want %v", seen, want)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	e, err := store.FindExperiment(context.Background(), ro, fmt.Sprint(res.ExperimentID))
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != store.ExperimentDone || e.StoppedEarly.String != "enough after block 1" {
		t.Fatalf("stored %s, stopped early %v", e.Status, e.StoppedEarly)
	}
}
