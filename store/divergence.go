package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// DivergenceDetector is the detector name of the labels the divergence pass writes when
// a spec counts divergence as corruption.
const DivergenceDetector = "divergence"

// OutputTurn is one stored turn as the divergence pass compares it: what the engine
// wrote, and whether the request completed.
type OutputTurn struct {
	RunID        int64          `db:"run_id"`
	ArmID        int64          `db:"arm_id"`
	Session      int            `db:"session_index"`
	Index        int            `db:"turn_index"`
	Content      string         `db:"content"`
	ToolCalls    sql.NullString `db:"tool_calls"`
	FinishReason string         `db:"finish_reason"`
	StatusCode   int            `db:"status_code"`
	Error        sql.NullString `db:"error"`
}

// OutputTurns lists the turns of an experiment's launches in the analysis
// (InAnalysis), by arm, session and turn.
func (s *Store) OutputTurns(ctx context.Context, experimentID int64) ([]OutputTurn, error) {
	read, err := Detach(ctx)
	if err != nil {
		return nil, fmt.Errorf("divergence: read turns of experiment %d: %w", experimentID, err)
	}
	// Sized first, from the index: grown row by row, the slice was copied and cleared
	// again and again, a sixth of the read.
	var n int
	if err := s.db.GetContext(read, &n, `SELECT count(*) FROM turns WHERE experiment_id = ?`, experimentID); err != nil {
		return nil, fmt.Errorf("divergence: read turns of experiment %d: %w", experimentID, err)
	}
	out := make([]OutputTurn, 0, n)
	err = s.db.SelectContext(read, &out, `SELECT t.run_id, t.arm_id, t.session_index, t.turn_index,
			t.content, t.tool_calls, t.finish_reason, t.status_code, t.error
		FROM turns t JOIN runs r ON r.id = t.run_id
		WHERE t.experiment_id = ? AND `+inAnalysis("r")+`
		ORDER BY t.arm_id, t.session_index, t.turn_index, t.run_id`, experimentID)
	if err != nil {
		return nil, fmt.Errorf("divergence: read turns of experiment %d: %w", experimentID, err)
	}
	return out, nil
}

// SessionDivergence is one compared session of a non-baseline arm: a row of divergences.
type SessionDivergence struct {
	RunID         int64 `db:"run_id"`
	Session       int   `db:"session_index"`
	BaselineRunID int64 `db:"baseline_run_id"`
	// Compared counts the turns both sides completed, compared in order.
	Compared int `db:"compared_turns"`
	// Turn is the first turn that differs; invalid when none did.
	Turn sql.NullInt64 `db:"turn_index"`
	// Field, Rune and the excerpts say where and how it differs (see
	// detectors.Divergence); empty when nothing did.
	Field           sql.NullString `db:"field"`
	Rune            sql.NullInt64  `db:"rune"`
	BaselineExcerpt sql.NullString `db:"baseline_excerpt"`
	ArmExcerpt      sql.NullString `db:"arm_excerpt"`
}

// DivergenceLabel is one label the divergence pass gives a turn when the spec counts
// divergence as corruption.
type DivergenceLabel struct {
	RunID     int64
	Session   int
	Turn      int
	Corrupted bool
	Reason    string
}

// WriteDivergence replaces the experiment's divergence rows and divergence labels with
// these, in one transaction, and brings the corrupted flags of its turns and sessions
// (and each session's first corrupted turn) in line with all of its labels. Running it
// again, as a resumed experiment does, leaves exactly what the last pass found.
func (s *Store) WriteDivergence(ctx context.Context, experimentID int64, rows []SessionDivergence, labels []DivergenceLabel) error {
	// The pass is one transaction: a cancellation is seen before its commit, and
	// nothing of it is kept.
	bg, err := Detach(ctx)
	if err != nil {
		return fmt.Errorf("divergence: %w", err)
	}
	tx, err := s.db.BeginTxx(bg, nil)
	if err != nil {
		return fmt.Errorf("divergence: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(bg, `DELETE FROM divergences WHERE experiment_id = ?`, experimentID); err != nil {
		return fmt.Errorf("divergence: clear: %w", err)
	}
	cleared, err := tx.ExecContext(bg, `DELETE FROM labels WHERE experiment_id = ? AND detector = '`+DivergenceDetector+`'`, experimentID)
	if err != nil {
		return fmt.Errorf("divergence: clear: %w", err)
	}
	stale, err := cleared.RowsAffected()
	if err != nil {
		return fmt.Errorf("divergence: clear: %w", err)
	}
	insertRow, err := tx.PreparexContext(bg, `INSERT INTO divergences (experiment_id, run_id, session_index, baseline_run_id,
			compared_turns, turn_index, field, rune, baseline_excerpt, arm_excerpt) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("divergence: %w", err)
	}
	defer insertRow.Close()
	for _, r := range rows {
		_, err := insertRow.Exec(experimentID, r.RunID, r.Session, r.BaselineRunID, r.Compared, r.Turn, r.Field, r.Rune,
			s.redactNull(r.BaselineExcerpt), s.redactNull(r.ArmExcerpt))
		if err != nil {
			return fmt.Errorf("divergence: session %d of run %d: %w", r.Session, r.RunID, err)
		}
	}
	insertLabel, err := tx.PreparexContext(bg, `INSERT OR REPLACE INTO labels
			(experiment_id, run_id, session_index, turn_index, detector, corrupted, reason) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("divergence: %w", err)
	}
	defer insertLabel.Close()
	for _, l := range labels {
		_, err := insertLabel.Exec(experimentID, l.RunID, l.Session, l.Turn, DivergenceDetector, l.Corrupted, s.redact(l.Reason))
		if err != nil {
			return fmt.Errorf("divergence: label turn %d/%d of run %d: %w", l.Session, l.Turn, l.RunID, err)
		}
	}
	// Where the pass changed no label (divergence recorded only, now and before), the
	// flags follow the labels already: every other label is written with its turn,
	// whose flag it sets (Turn.Corrupted). Checking every turn's labels again was a
	// third of the pass.
	if stale > 0 || len(labels) > 0 {
		if err := syncCorrupted(bg, tx, experimentID); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("divergence: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("divergence: commit: %w", err)
	}
	return nil
}

func (s *Store) redactNull(v sql.NullString) sql.NullString {
	if v.Valid {
		v.String = s.redact(v.String)
	}
	return v
}

// syncCorrupted sets every turn's corrupted flag from its labels, and every session's
// flag and first corrupted turn from its turns: the rule the live labelling follows (a
// turn is corrupted when any detector says so; a session when any turn is). Only rows
// whose values change are written: SQLite rewrites a row whole, stored bodies included,
// even to set a flag to what it was, and rewriting every turn of a run was most of the
// divergence pass's time.
func syncCorrupted(ctx context.Context, tx *sqlx.Tx, experimentID int64) error {
	const turnBad = `EXISTS (SELECT 1 FROM labels l WHERE l.run_id = turns.run_id AND l.session_index = turns.session_index
			AND l.turn_index = turns.turn_index AND l.corrupted = 1)`
	if _, err := tx.ExecContext(ctx, `UPDATE turns SET corrupted = `+turnBad+`
		WHERE experiment_id = ? AND corrupted IS NOT `+turnBad, experimentID); err != nil {
		return fmt.Errorf("divergence: turn flags: %w", err)
	}
	const sessionBad = `EXISTS (SELECT 1 FROM turns t WHERE t.run_id = sessions.run_id
			AND t.session_index = sessions.session_index AND t.corrupted = 1)`
	const firstBad = `(SELECT min(t.turn_index) FROM turns t WHERE t.run_id = sessions.run_id
			AND t.session_index = sessions.session_index AND t.corrupted = 1)`
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET corrupted = `+sessionBad+`, first_corrupted_turn = `+firstBad+`
		WHERE experiment_id = ? AND (corrupted IS NOT `+sessionBad+` OR first_corrupted_turn IS NOT `+firstBad+`)`,
		experimentID); err != nil {
		return fmt.Errorf("divergence: session flags: %w", err)
	}
	return nil
}

// DivergenceCount is, for one arm, how many of its sessions were compared with the
// baseline's and how many departed from it.
type DivergenceCount struct {
	ArmID    int64 `db:"arm_id"`
	Compared int   `db:"compared"`
	Diverged int   `db:"diverged"`
	// Sessions are the arm's sessions with any turn recorded: those not compared (aborted
	// on purpose, cut off or failed before a turn both sides completed, or without a
	// baseline session) are Sessions − Compared.
	Sessions int `db:"sessions"`
}

// DivergenceCounts counts compared and diverged sessions per non-baseline arm, over the
// runs that count. An experiment the pass did not run on (temperature above 0, or
// recorded before schema version 5) has none.
func DivergenceCounts(ctx context.Context, db *sqlx.DB, experimentID int64) ([]DivergenceCount, error) {
	var out []DivergenceCount
	err := db.SelectContext(ctx, &out, `SELECT r.arm_id, count(*) AS compared, count(d.turn_index) AS diverged,
			(SELECT count(*) FROM (SELECT DISTINCT t.run_id, t.session_index FROM turns t JOIN runs r2 ON r2.id = t.run_id
				WHERE t.experiment_id = d.experiment_id AND t.arm_id = r.arm_id AND `+inAnalysis("r2")+`)) AS sessions
		FROM divergences d JOIN runs r ON r.id = d.run_id
		WHERE d.experiment_id = ? AND `+inAnalysis("r")+`
		GROUP BY r.arm_id ORDER BY r.arm_id`, experimentID)
	return out, readErr(err, "divergence counts of experiment %d", experimentID)
}

// Divergences lists an experiment's compared sessions with where each diverged, over
// the runs that count, by run and session.
func Divergences(ctx context.Context, db *sqlx.DB, experimentID int64) ([]SessionDivergence, error) {
	var out []SessionDivergence
	err := db.SelectContext(ctx, &out, `SELECT d.run_id, d.session_index, d.baseline_run_id, d.compared_turns,
			d.turn_index, d.field, d.rune, d.baseline_excerpt, d.arm_excerpt
		FROM divergences d JOIN runs r ON r.id = d.run_id
		WHERE d.experiment_id = ? AND `+inAnalysis("r")+`
		ORDER BY d.run_id, d.session_index`, experimentID)
	return out, readErr(err, "divergences of experiment %d", experimentID)
}
