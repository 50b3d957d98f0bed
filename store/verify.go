package store

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// VerifyTurn is what a verify workload's scoring reads of one turn: the arm, the launch
// (its block), the request (the session), and what the engine answered.
type VerifyTurn struct {
	ArmID        int64          `db:"arm_id"`
	Block        int            `db:"block"`
	Session      int            `db:"session_index"`
	FinishReason string         `db:"finish_reason"`
	PromptTokens int            `db:"prompt_tokens"`
	ToolCalls    sql.NullString `db:"tool_calls"` // JSON array of structured calls
	Failed       bool           `db:"failed"`     // the request did not complete
	// SchemaBroken is true when toolcall-schema labelled the turn: a call that names no
	// offered tool, or whose arguments are not one JSON object valid against its schema.
	SchemaBroken bool `db:"schema_broken"`
}

// VerifyTurns lists every turn of an experiment's launches in the analysis (InAnalysis), for a verify
// workload's scoring, by arm, block and session.
func VerifyTurns(ctx context.Context, db *sqlx.DB, experimentID int64) ([]VerifyTurn, error) {
	var out []VerifyTurn
	err := db.SelectContext(ctx, &out, `SELECT t.arm_id, r.block, t.session_index, t.finish_reason, t.prompt_tokens,
		t.tool_calls, (t.error IS NOT NULL) AS failed,
		EXISTS (SELECT 1 FROM labels l WHERE l.run_id = t.run_id AND l.session_index = t.session_index
			AND l.turn_index = t.turn_index AND l.detector = 'toolcall-schema' AND l.corrupted = 1) AS schema_broken
		FROM turns t JOIN runs r ON r.id = t.run_id
		WHERE t.experiment_id = ? AND `+inAnalysis("r")+`
		ORDER BY t.arm_id, r.block, t.session_index, t.turn_index`, experimentID)
	return out, readErr(err, "turns of experiment %d", experimentID)
}
