package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

// ErrNothingToResume reports an experiment that already ran its whole plan.
var ErrNothingToResume = errors.New("nothing to resume")

// runKey names one launch of the plan: an arm (by index) in a block.
type runKey struct{ arm, block int }

// priorRun is a launch recorded before a resume.
type priorRun struct {
	id     int64
	done   bool
	counts armCounts
}

// reopen prepares a recorded experiment to be resumed by owner: it takes the
// experiment's lease (refusing an experiment another arbiter is running, see
// store.AcquireLease), the spec must be the one it was recorded with, and the launches
// that finished are kept. A resumed experiment follows the same seeded plan, so the
// launches it still runs are the ones it would have run. leftovers, when not nil, ends
// what earlier arbiters of the experiment left running; it runs once the lease is
// held (none of them runs any more), and its error leaves the experiment as it was.
func reopen(ctx context.Context, st *store.Store, id int64, spec *arms.Spec, armList []arms.Arm,
	owner store.Owner, leftovers func(context.Context) error) (int64, []int64, map[runKey]priorRun, *store.Lease, error) {
	if _, err := store.ExperimentByID(ctx, st.DB(), id); err != nil {
		return 0, nil, nil, nil, err
	}
	lease, err := st.AcquireLease(ctx, id, owner, time.Now())
	if err != nil {
		return 0, nil, nil, nil, err
	}
	armIDs, prior, err := resumable(ctx, st, id, spec, armList)
	if err != nil {
		// Nothing was changed: let go of the experiment as it was.
		_ = lease.Release(context.WithoutCancel(ctx))
		return 0, nil, nil, nil, err
	}
	if leftovers != nil {
		if err := leftovers(ctx); err != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
			return 0, nil, nil, nil, err
		}
	}
	if err := st.ReopenExperiment(ctx, id); err != nil {
		_ = lease.Release(context.WithoutCancel(ctx))
		return 0, nil, nil, nil, err
	}
	return id, armIDs, prior, lease, nil
}

// resumable checks that experiment id can be resumed with spec and reads the launches it
// recorded.
func resumable(ctx context.Context, st *store.Store, id int64, spec *arms.Spec, armList []arms.Arm) ([]int64, map[runKey]priorRun, error) {
	db := st.DB()
	exp, err := store.ExperimentByID(ctx, db, id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case exp.Status == store.ExperimentDone:
		return nil, nil, fmt.Errorf("experiment %d is done: %w", id, ErrNothingToResume)
	case exp.StoppedEarly.Valid:
		return nil, nil, fmt.Errorf("experiment %d stopped at a sequential boundary: %w", id, ErrNothingToResume)
	case exp.Spec != string(spec.RedactedSource()):
		return nil, nil, fmt.Errorf("experiment %d was recorded with another spec than %s: resume needs the same one", id, spec.Path)
	}
	rows, err := store.Arms(ctx, db, id)
	if err != nil {
		return nil, nil, err
	}
	if len(rows) != len(armList) {
		return nil, nil, fmt.Errorf("experiment %d has %d arms, the spec %d", id, len(rows), len(armList))
	}
	armIDs := make([]int64, len(rows))
	index := map[int64]int{}
	for i, r := range rows {
		if r.Name != armList[i].Name {
			return nil, nil, fmt.Errorf("experiment %d: arm %d is %s, the spec's is %s", id, i, r.Name, armList[i].Name)
		}
		armIDs[i], index[r.ID] = r.ID, i
	}
	runs, err := store.Runs(ctx, db, id)
	if err != nil {
		return nil, nil, err
	}
	prior := map[runKey]priorRun{}
	for _, r := range runs {
		if r.SupersededBy.Valid {
			continue
		}
		if r.Status == store.RunRefused {
			// A refusal is the experiment's answer, not an accident to run again: the
			// engine did not run as the spec pins it, and a resume would launch the
			// same engine and judge it as if it had.
			why := ""
			if r.Error.Valid {
				why = " (" + r.Error.String + ")"
			}
			return nil, nil, fmt.Errorf("experiment %d was refused: launch %s's engine did not run as pinned%s; fix the engine or the pins and start a new experiment with arbiter run: %w",
				id, store.LaunchName(rows[index[r.ArmID]].Name, r.Block), why, ErrPinsNotHeld)
		}
		p := priorRun{id: r.ID, done: r.Status == store.RunDone}
		if p.done {
			// A kept launch counts toward the sequential looks as the verdict counts it.
			c, err := store.RunSessionCounts(ctx, db, r.ID)
			if err != nil {
				return nil, nil, err
			}
			p.counts = armCounts{sessions: c.Analysed, corrupted: c.Corrupted}
		}
		prior[runKey{index[r.ArmID], r.Block}] = p
	}
	return armIDs, prior, nil
}
