package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// PinStatus is what an engine's report said of one pin (pin_checks.status).
type PinStatus string

// Pin outcomes.
const (
	// PinVerified: the engine reported the pinned value.
	PinVerified PinStatus = "verified"
	// PinNotInEffect: the engine reported another value; the run was refused.
	PinNotInEffect PinStatus = "not_in_effect"
	// PinUnverified: nothing reports the pin, or the report could not be read.
	PinUnverified PinStatus = "unverified"
)

// PinCheck is what one launch's engine reported about one pin once it was ready.
type PinCheck struct {
	RunID int64  `db:"run_id"`
	Pin   string `db:"pin"`
	// Want is the pinned value, "on" for a flag without one.
	Want string `db:"want"`
	// Got is the value the engine reported; empty when nothing was read.
	Got string `db:"got"`
	// Source is where it was read ("log /type_k = '([^']+)'/", "server_info page_size").
	Source string `db:"source"`
	// Evidence is the engine's own words: the log line or the reported JSON value.
	Evidence string    `db:"evidence"`
	Status   PinStatus `db:"status"`
	// Why says why a pin is unverified, or, for one not in effect, why an engine may
	// not hold it (the rule's note).
	Why string `db:"why"`
	// Common marks a setting every arm shares (engine.env, engine.args).
	Common bool `db:"common"`
}

// RecordPinChecks stores what run's engine reported about its pins.
func (s *Store) RecordPinChecks(ctx context.Context, checks []PinCheck) error {
	if len(checks) == 0 {
		return nil
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record pin checks: %w", err)
	}
	defer tx.Rollback()
	for _, c := range checks {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO pin_checks (run_id, pin, want, got, source, evidence, status, why, common)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.RunID, c.Pin, s.redact(c.Want), s.nullText(c.Got), c.Source,
			s.nullText(c.Evidence), c.Status, s.nullText(c.Why), c.Common); err != nil {
			return fmt.Errorf("record pin check of run %d: %w", c.RunID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record pin checks: %w", err)
	}
	return nil
}

// PinChecks lists what the engines of an experiment's runs reported about their pins,
// by run and pin.
func PinChecks(ctx context.Context, db *sqlx.DB, experimentID int64) ([]PinCheck, error) {
	var rows []struct {
		RunID    int64          `db:"run_id"`
		Pin      string         `db:"pin"`
		Want     string         `db:"want"`
		Got      sql.NullString `db:"got"`
		Source   string         `db:"source"`
		Evidence sql.NullString `db:"evidence"`
		Status   PinStatus      `db:"status"`
		Why      sql.NullString `db:"why"`
		Common   bool           `db:"common"`
	}
	err := db.SelectContext(ctx, &rows, `SELECT p.run_id, p.pin, p.want, p.got, p.source, p.evidence, p.status, p.why, p.common
		FROM pin_checks p JOIN runs r ON r.id = p.run_id WHERE r.experiment_id = ? ORDER BY p.run_id, p.common, p.pin`, experimentID)
	if err != nil {
		return nil, readErr(err, "pin checks of experiment %d", experimentID)
	}
	out := make([]PinCheck, len(rows))
	for i, r := range rows {
		out[i] = PinCheck{RunID: r.RunID, Pin: r.Pin, Want: r.Want, Got: r.Got.String, Source: r.Source,
			Evidence: r.Evidence.String, Status: r.Status, Why: r.Why.String, Common: r.Common}
	}
	return out, nil
}
