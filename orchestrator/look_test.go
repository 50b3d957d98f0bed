package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// Options.Look sees each arm's cumulative analysed sessions after every block but the
// last, and a stop it asks for ends scheduling there with its reason recorded, as a
// crossed boundary does.
func TestLookStopsSchedulingWithItsReason(t *testing.T) {
	t.Parallel()
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
	// What the looks saw is what the analysis counts: cumulative, every finished
	// treatment session corrupted and no control one, the last look the whole record.
	// (A session may be lost on a loaded machine; the look does not count it.)
	if len(seen) != 2 {
		t.Fatalf("looks saw %v, want two looks", seen)
	}
	for k, look := range seen {
		control, treatment := look[0], look[1]
		if control.Corrupted != 0 || treatment.Corrupted != treatment.Sessions || control.Sessions > 6*(k+1) || control.Sessions < 1 || treatment.Sessions < 1 {
			t.Fatalf("look %d saw %v", k+1, look)
		}
		if k > 0 && (control.Sessions < seen[k-1][0].Sessions || treatment.Sessions < seen[k-1][1].Sessions) {
			t.Fatalf("looks are not cumulative: %v", seen)
		}
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	recorded, err := store.ArmSessionCounts(context.Background(), ro, res.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	var got []ArmCounts
	for _, c := range recorded {
		got = append(got, ArmCounts{Sessions: c.Analysed, Corrupted: c.Corrupted})
	}
	if !slices.ContainsFunc(got, func(c ArmCounts) bool { return c == seen[1][0] }) || !slices.ContainsFunc(got, func(c ArmCounts) bool { return c == seen[1][1] }) {
		t.Fatalf("the last look saw %v, the store records %v", seen[1], got)
	}
	e, err := store.FindExperiment(context.Background(), ro, fmt.Sprint(res.ExperimentID))
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != store.ExperimentDone || e.StoppedEarly.String != "enough after block 1" {
		t.Fatalf("stored %s, stopped early %v", e.Status, e.StoppedEarly)
	}
}
