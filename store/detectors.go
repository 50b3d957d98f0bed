package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// DetectorRun is how one detector fared in one launch: the responses it judged, those
// it failed on, and those it was not asked about once it had run past its time.
type DetectorRun struct {
	ExperimentID int64  `db:"experiment_id"`
	RunID        int64  `db:"run_id"`
	Detector     string `db:"detector"`
	Judged       int    `db:"judged"`
	Failed       int    `db:"failed"`
	Skipped      int    `db:"skipped"`
	// Error is the first failure's words; empty when it never failed.
	Error string `db:"error"`
}

// RecordDetectorRuns stores how each detector fared in a launch, replacing what a run
// of the same id recorded before.
func (s *Store) RecordDetectorRuns(ctx context.Context, runs []DetectorRun) error {
	if len(runs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record detector runs: %w", err)
	}
	defer tx.Rollback()
	for _, r := range runs {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO detector_runs
			(experiment_id, run_id, detector, judged, failed, skipped, error) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.ExperimentID, r.RunID, r.Detector, r.Judged, r.Failed, r.Skipped, s.nullText(r.Error)); err != nil {
			return fmt.Errorf("record detector %s of run %d: %w", r.Detector, r.RunID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record detector runs: %w", err)
	}
	return nil
}

// DetectorRuns lists how each detector fared in the experiment's launches that count
// (InAnalysis), by run and detector.
func DetectorRuns(ctx context.Context, db *sqlx.DB, experimentID int64) ([]DetectorRun, error) {
	var out []DetectorRun
	err := db.SelectContext(ctx, &out, `SELECT experiment_id, run_id, detector, judged, failed, skipped, coalesce(error, '') AS error
		FROM detector_runs WHERE experiment_id = ? AND run_id IN (SELECT r.id FROM runs r WHERE `+inAnalysis("r")+`)
		ORDER BY run_id, detector`, experimentID)
	if err != nil {
		return nil, fmt.Errorf("detector runs: %w", err)
	}
	return out, nil
}
