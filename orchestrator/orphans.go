package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// An engine of the process runtime is recorded (store.EngineProcess) with its process
// group and the arbiter that started it. Normally the engine's supervisor ends the group
// when that arbiter dies; should the supervisor die too, `arbiter resume` and
// `arbiter gc` end what is left.

// Orphan is an engine process group whose arbiter is gone while the group still runs.
type Orphan struct {
	ExperimentID int64 `json:"experiment"`
	RunID        int64 `json:"run"`
	PGID         int   `json:"pgid"`
	// Processes is how many processes the group held when it was found.
	Processes int `json:"processes"`
	// Ended is true once the group is gone; false in a dry run or when ending it failed
	// (Err says why).
	Ended bool   `json:"ended"`
	Err   string `json:"error,omitempty"`
}

// ReapOrphans ends, with SIGTERM and SIGKILL after runtime.DefaultGrace, every engine
// process group recorded in st on this boot of this machine whose arbiter no longer
// runs: of experiment experimentID, or of every experiment when it is 0. dryRun only
// lists them. Groups found gone are marked ended. Where processes cannot be identified
// (outside Linux) it finds none.
func ReapOrphans(ctx context.Context, st *store.Store, experimentID int64, dryRun bool) ([]Orphan, error) {
	self, err := runtime.Self()
	if err != nil {
		return nil, nil
	}
	recs, err := st.OpenEngineProcesses(ctx, self.BootID, experimentID)
	if err != nil {
		return nil, err
	}
	var out []Orphan
	for _, r := range recs {
		// The group is live while the arbiter that started it runs: a running arbiter
		// ends its own engines. The group and its arbiter are on this machine (same boot
		// id), so the process check is exact; the experiment's lease adds nothing here,
		// and would even hide the orphans of the experiment a resume has just taken over.
		arbiter := runtime.ProcessID{Pid: r.ArbiterPID, Start: r.ArbiterStart, BootID: r.BootID}
		if arbiter.Alive() {
			continue
		}
		leader := runtime.ProcessID{Pid: r.PGID, Start: r.LeaderStart, BootID: r.BootID}
		members, err := runtime.GroupMembers(leader)
		if errors.Is(err, runtime.ErrNotOurs) || (err == nil && len(members) == 0) {
			// The recorded group is gone; its id may since be someone else's.
			if !dryRun {
				if err := st.EngineProcessEnded(ctx, r.RunID, time.Now()); err != nil {
					return out, err
				}
			}
			continue
		}
		o := Orphan{ExperimentID: r.ExperimentID, RunID: r.RunID, PGID: r.PGID, Processes: len(members)}
		if err != nil {
			o.Err = err.Error()
			out = append(out, o)
			continue
		}
		if dryRun {
			out = append(out, o)
			continue
		}
		if _, err := runtime.ReapGroup(ctx, leader, runtime.DefaultGrace); err != nil {
			o.Err = err.Error()
		} else {
			o.Ended = true
			if err := st.EngineProcessEnded(ctx, r.RunID, time.Now()); err != nil {
				return append(out, o), err
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// reapOrphans ends orphaned engines before a resume, saying what it ended.
func reapOrphans(ctx context.Context, st *store.Store, log *slog.Logger) {
	orphans, err := ReapOrphans(ctx, st, 0, false)
	if err != nil {
		log.Warn("could not check for engines a killed arbiter left running", "err", err)
	}
	for _, o := range orphans {
		if o.Ended {
			log.Warn("ended an engine a killed arbiter left running", "of_experiment", o.ExperimentID, "run", o.RunID,
				"pgid", o.PGID, "processes", o.Processes)
		} else {
			log.Warn("could not end an engine a killed arbiter left running", "of_experiment", o.ExperimentID,
				"run", o.RunID, "pgid", o.PGID, "err", o.Err)
		}
	}
}

// recordEngineProcess records the process group of a started engine, when the runtime
// runs it as one and this platform can identify processes; it reports whether it did.
func (e *experiment) recordEngineProcess(ctx context.Context, inst runtime.Instance, runID int64, log *slog.Logger) bool {
	g, ok := inst.(runtime.Grouped)
	if !ok || e.self.Pid == 0 {
		return false
	}
	leader, ok := g.Group()
	if !ok {
		return false
	}
	host, _ := os.Hostname()
	err := e.store.RecordEngineProcess(ctx, store.EngineProcess{RunID: runID, ExperimentID: e.id, Host: host,
		BootID: leader.BootID, PGID: leader.Pid, LeaderStart: leader.Start, ArbiterPID: e.self.Pid,
		ArbiterStart: e.self.Start})
	if err != nil {
		// The supervisor still ends the engine if arbiter dies; only the later reap is lost.
		log.Warn("could not record the engine's process group", "err", err)
		return false
	}
	return true
}

// cancelSlurmLeftovers cancels the Slurm jobs of an experiment that a killed arbiter left
// queued or running, before its resume submits their launches again.
func cancelSlurmLeftovers(ctx context.Context, dbID string, exp int64, log *slog.Logger) {
	jobs, err := runtime.SlurmLeftovers(ctx, dbID, strconv.FormatInt(exp, 10))
	if err != nil {
		log.Warn("could not list the Slurm jobs a killed arbiter left", "err", err)
		return
	}
	for _, j := range jobs {
		if err := runtime.CancelSlurmJob(ctx, j.ID); err != nil {
			log.Warn("could not cancel a Slurm job a killed arbiter left", "job", j.ID, "run", j.Run, "err", err)
			continue
		}
		log.Warn("cancelled a Slurm job a killed arbiter left", "job", j.ID, "name", j.Name, "state", j.State, "run", j.Run)
	}
}

// containerRuntime is a runtime whose engines are containers that outlive a killed
// arbiter (the docker runtime): a resume finds and removes them.
type containerRuntime interface {
	Leftovers(ctx context.Context, experiment string) ([]runtime.Leftover, error)
	Remove(ctx context.Context, id string) error
}

// removeLeftoverContainers removes, on every node whose runtime runs containers, the
// containers of experiment exp of database dbID that an earlier arbiter of it left: one
// killed (kill -9, a lost login) before it could tear its arms down leaves its engine
// running, holding its slot's GPUs and port. It runs while the resume holds the
// experiment's lease, so no arbiter still runs them, and before any launch reuses a
// slot. A node whose daemon does not answer is passed over (its launches find it lost);
// a container found and not removed is an error, since a launch beside it would share
// its GPUs. Containers without the database label (an older arbiter's) may be another
// database's and are left to `arbiter gc`.
func removeLeftoverContainers(ctx context.Context, runtimes map[string]runtime.Runtime, dbID string, exp int64, log *slog.Logger) error {
	var errs []error
	for _, node := range slices.Sorted(maps.Keys(runtimes)) {
		rt, ok := runtimes[node].(containerRuntime)
		if !ok {
			continue
		}
		left, err := rt.Leftovers(ctx, strconv.FormatInt(exp, 10))
		if err != nil {
			log.Warn("could not list the containers a killed arbiter may have left", "node", node, "err", err)
			continue
		}
		for _, c := range left {
			if c.Database != dbID {
				if c.Database == "" {
					log.Warn("left a container of an older arbiter that may be another database's; `arbiter gc` removes it",
						"node", node, "container", c.Name, "run", c.Run, "state", c.State)
				}
				continue
			}
			if err := rt.Remove(ctx, c.ID); err != nil {
				errs = append(errs, fmt.Errorf("node %s: container %s of run %s (%s), which a killed arbiter left, could not be removed: %w",
					node, c.Name, c.Run, c.State, err))
				continue
			}
			log.Warn("removed a container a killed arbiter left", "node", node, "container", c.Name, "run", c.Run, "state", c.State)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resume: %w; a launch beside it would share its slot's GPUs: remove it (arbiter gc) and resume again", err)
	}
	return nil
}
