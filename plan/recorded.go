package plan

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// Recorded are figures from the last recorded experiment of the same name, which replace
// the plan's assumptions where they exist.
type Recorded struct {
	ExperimentID    int64
	TurnsPerSession float64 // mean turns of a completed session
	TurnSeconds     float64 // median latency of a turn
	StartupSeconds  float64 // mean time from launch to ready
	// WallSeconds is how long the experiment took from its creation to its end, and
	// LaunchesPerArm the most launches an arm ran in it (0 when it did not finish).
	WallSeconds    float64
	LaunchesPerArm int
	// LaunchICC is how much its launches differed in corruption within the arms
	// (verdict.CorruptionSpread), over ICCLaunches launches; ICCMeasured is false when no
	// arm showed it (one launch a side, or no corrupted session).
	LaunchICC   float64
	ICCLaunches int
	ICCMeasured bool
}

// LastRecorded reads the figures of the newest experiment named name in the database at
// dbPath. A missing database or experiment is not an error: the plan then states its
// assumptions.
func LastRecorded(ctx context.Context, dbPath, name string) Recorded {
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return Recorded{}
	}
	defer db.Close()
	e, err := store.FindExperiment(ctx, db, name)
	if err != nil {
		return Recorded{}
	}
	r := Recorded{ExperimentID: e.ID}
	if pace, err := store.RecordedPace(ctx, db, e.ID); err == nil {
		r.TurnsPerSession, r.TurnSeconds = pace.TurnsPerSession, pace.MedianTurn.Seconds()
	}
	runs, _ := store.Runs(ctx, db, e.ID)
	if e.FinishedAt.Valid {
		a, err1 := time.Parse(time.RFC3339Nano, e.CreatedAt)
		b, err2 := time.Parse(time.RFC3339Nano, e.FinishedAt.String)
		if err1 == nil && err2 == nil && b.After(a) {
			r.WallSeconds = b.Sub(a).Seconds()
		}
		perArm := map[int64]int{}
		for _, run := range runs {
			if !run.SupersededBy.Valid {
				perArm[run.ArmID]++
			}
		}
		for _, n := range perArm {
			r.LaunchesPerArm = max(r.LaunchesPerArm, n)
		}
	}
	if icc, n, err := verdict.CorruptionSpread(ctx, db, e.ID); err == nil && !math.IsNaN(icc) {
		r.LaunchICC, r.ICCLaunches, r.ICCMeasured = icc, n, true
	}
	var startup []float64
	for _, run := range runs {
		if run.ReadyAt.Valid {
			a, err1 := time.Parse(time.RFC3339Nano, run.StartedAt)
			b, err2 := time.Parse(time.RFC3339Nano, run.ReadyAt.String)
			if err1 == nil && err2 == nil {
				startup = append(startup, b.Sub(a).Seconds())
			}
		}
	}
	for _, s := range startup {
		r.StartupSeconds += s / float64(len(startup))
	}
	return r
}

// RecordedSpeed reads how much the launches of experiment ref (an id, or the newest of a
// name) in the database at dbPath differed in tok/s per request, phase by phase, and its
// id. A missing database or experiment is nothing recorded unless must is set, when it is
// an error.
func RecordedSpeed(ctx context.Context, dbPath, ref string, must bool) ([]verdict.GroupSpread, int64, error) {
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		if must {
			return nil, 0, err
		}
		return nil, 0, nil
	}
	defer db.Close()
	e, err := store.FindExperiment(ctx, db, ref)
	if err != nil {
		if must {
			return nil, 0, err
		}
		return nil, 0, nil
	}
	spreads, err := verdict.SpeedSpreads(ctx, db, e.ID)
	if err != nil {
		return nil, 0, fmt.Errorf("experiment %d (%s): %w", e.ID, e.Name, err)
	}
	return spreads, e.ID, nil
}
