package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// TraceCalibration is one row of trace_calibrations: what a length trace's probes
// measured of one launch's engine.
type TraceCalibration struct {
	ExperimentID   int64   `db:"experiment_id"`
	RunID          int64   `db:"run_id"`
	ArmID          int64   `db:"arm_id"`
	ShortBytes     int     `db:"short_bytes"`
	ShortTokens    int     `db:"short_tokens"`
	LongBytes      int     `db:"long_bytes"`
	LongTokens     int     `db:"long_tokens"`
	BytesPerToken  float64 `db:"bytes_per_token"`
	TemplateTokens int     `db:"template_tokens"`
	Note           string  `db:"note"`
}

// AddTraceCalibration records a launch's calibration; recording one again (a resumed
// run) replaces it.
func (s *Store) AddTraceCalibration(ctx context.Context, c TraceCalibration) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO trace_calibrations
		(experiment_id, run_id, arm_id, short_bytes, short_tokens, long_bytes, long_tokens, bytes_per_token, template_tokens, note)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.ExperimentID, c.RunID, c.ArmID, c.ShortBytes, c.ShortTokens, c.LongBytes, c.LongTokens, c.BytesPerToken,
		c.TemplateTokens, s.nullText(c.Note))
	if err != nil {
		return fmt.Errorf("trace calibration of run %d: %w", c.RunID, err)
	}
	return nil
}

// TraceCalibrations reads an experiment's calibrations, in the order of their runs.
func TraceCalibrations(ctx context.Context, db *sqlx.DB, experiment int64) ([]TraceCalibration, error) {
	var out []TraceCalibration
	err := db.SelectContext(ctx, &out, `SELECT experiment_id, run_id, arm_id, short_bytes, short_tokens, long_bytes,
		long_tokens, bytes_per_token, template_tokens, coalesce(note, '') AS note
		FROM trace_calibrations WHERE experiment_id = ? ORDER BY run_id`, experiment)
	if err != nil {
		return nil, readErr(err, "trace calibrations of experiment %d", experiment)
	}
	return out, nil
}
