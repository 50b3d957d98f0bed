package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// containerEngines is a runtime of fake engines whose node also lists containers left
// on it, as the docker runtime does; removeErr fails every removal.
type containerEngines struct {
	runtime.Runtime
	left      []runtime.Leftover
	removeErr error

	mu      sync.Mutex
	removed []string
}

func (c *containerEngines) Leftovers(_ context.Context, experiment string) ([]runtime.Leftover, error) {
	var out []runtime.Leftover
	for _, l := range c.left {
		if l.Experiment == experiment {
			out = append(out, l)
		}
	}
	return out, nil
}

func (c *containerEngines) Remove(_ context.Context, id string) error {
	if c.removeErr != nil {
		return c.removeErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed = append(c.removed, id)
	return nil
}

// A resume removes the containers of its own experiment in its own database, and no
// others; one it cannot remove stops the resume before anything runs, and leaves the
// experiment as it was.
func TestResumeRemovesOnlyItsOwnLeftoverContainers(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := Run(ctx, Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: engines(func(string) *engine {
		return newEngine(t, func(n int64, e *engine, r *http.Request) bool {
			cancel()
			return false
		})
	})})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first attempt: %v, %+v", err, first)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	dbID, err := store.DatabaseID(context.Background(), ro)
	ro.Close()
	if err != nil {
		t.Fatal(err)
	}
	left := []runtime.Leftover{
		{ID: "ours-running", Experiment: "1", Run: "1", Database: dbID, State: "running"},
		{ID: "ours-exited", Experiment: "1", Run: "1", Database: dbID, State: "exited"},
		{ID: "other-database", Experiment: "1", Run: "1", Database: "another-uuid", State: "running"},
		{ID: "older-arbiter", Experiment: "1", Run: "1", State: "running"},
		{ID: "other-experiment", Experiment: "2", Run: "9", Database: dbID, State: "running"},
	}

	refusing := &containerEngines{Runtime: engines(func(string) *engine { return newEngine(t, nil) }), left: left,
		removeErr: errors.New("daemon says no")}
	_, err = Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: first.ExperimentID, Runtime: refusing})
	if err == nil || !strings.Contains(err.Error(), "daemon says no") || !strings.Contains(err.Error(), "share its slot's GPUs") {
		t.Fatalf("resume with a container it cannot remove: %v", err)
	}
	ro, _ = store.OpenReadOnly(db)
	exp, err := store.FindExperiment(context.Background(), ro, "1")
	ro.Close()
	if err != nil || exp.Status != store.ExperimentInterrupted {
		t.Errorf("after a refused resume the experiment is %+v (%v), want it interrupted as it was", exp.Status, err)
	}

	rt := &containerEngines{Runtime: engines(func(string) *engine { return newEngine(t, nil) }), left: left}
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: first.ExperimentID, Runtime: rt})
	if err != nil || res.Status != store.ExperimentDone {
		t.Fatalf("resume: %v, %+v", err, res)
	}
	slices.Sort(rt.removed)
	if !slices.Equal(rt.removed, []string{"ours-exited", "ours-running"}) {
		t.Errorf("removed %v, want only this experiment's containers of this database", rt.removed)
	}
}
