package store

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// FailingTurn is the first corrupted turn of one corrupted session, with what a
// reproducer needs: the request sent, the answer as assembled and as received, why the
// detectors flagged it, and the baseline's answer to the same turn.
type FailingTurn struct {
	Arm      string `db:"arm"`
	Block    int    `db:"block"`
	Session  int    `db:"session_index"`
	Turn     int    `db:"turn_index"`
	Round    int    `db:"round"`
	Request  string `db:"request"`
	Response string `db:"response"`
	Raw      string `db:"raw"`
	Tools    string `db:"tools"`
	// Reasons are the flagging detectors' reasons, "detector: reason" joined by "; ".
	Reasons string `db:"reasons"`
	// BaselineContent and BaselineToolCalls are the baseline arm's content and tool calls
	// (JSON) at the same session and turn; empty when it has none.
	BaselineContent   string `db:"baseline_content"`
	BaselineToolCalls string `db:"baseline_tool_calls"`
}

// FailingTurns lists the first corrupted turn of every corrupted session of the
// experiment's arms other than baseline (launches superseded on resume left out),
// shortest request first. A launch cut short counts here, though the analysis leaves it
// out (InAnalysis): a corrupted response is worth reproducing wherever it was seen.
func FailingTurns(ctx context.Context, db *sqlx.DB, experimentID int64, baseline string) ([]FailingTurn, error) {
	var rows []struct {
		FailingTurn
		Tools             sql.NullString `db:"tools"`
		Reasons           sql.NullString `db:"reasons"`
		BaselineContent   sql.NullString `db:"baseline_content"`
		BaselineToolCalls sql.NullString `db:"baseline_tool_calls"`
	}
	err := db.SelectContext(ctx, &rows, `SELECT a.name AS arm, s.block, s.session_index, t.turn_index, t.round, t.request,
			t.response, t.raw, t.tools,
			(SELECT group_concat(l.detector || ': ' || l.reason, '; ') FROM labels l WHERE l.run_id = t.run_id
				AND l.session_index = t.session_index AND l.turn_index = t.turn_index AND l.corrupted = 1) AS reasons,
			(SELECT b.content FROM turns b JOIN arms ba ON ba.id = b.arm_id JOIN runs br ON br.id = b.run_id
				WHERE b.experiment_id = t.experiment_id AND ba.name = ? AND br.superseded_by IS NULL
				AND b.session_index = t.session_index AND b.turn_index = t.turn_index LIMIT 1) AS baseline_content,
			(SELECT b.tool_calls FROM turns b JOIN arms ba ON ba.id = b.arm_id JOIN runs br ON br.id = b.run_id
				WHERE b.experiment_id = t.experiment_id AND ba.name = ? AND br.superseded_by IS NULL
				AND b.session_index = t.session_index AND b.turn_index = t.turn_index LIMIT 1) AS baseline_tool_calls
		FROM sessions s JOIN arms a ON a.id = s.arm_id JOIN runs r ON r.id = s.run_id
		JOIN turns t ON t.run_id = s.run_id AND t.session_index = s.session_index AND t.turn_index = s.first_corrupted_turn
		WHERE s.experiment_id = ? AND s.corrupted = 1 AND r.superseded_by IS NULL AND a.name <> ?
		ORDER BY length(t.request), a.position, s.session_index`, baseline, baseline, experimentID, baseline)
	if err != nil {
		return nil, readErr(err, "failing turns of experiment %d", experimentID)
	}
	out := make([]FailingTurn, len(rows))
	for i, r := range rows {
		out[i] = r.FailingTurn
		out[i].Tools, out[i].Reasons, out[i].BaselineContent = r.Tools.String, r.Reasons.String, r.BaselineContent.String
		out[i].BaselineToolCalls = r.BaselineToolCalls.String
	}
	return out, nil
}

// RoundOpenings lists, for one arm's launch of one block, every session's request that
// opened round (its first turn in that round), by session: the load a failing request
// met, which a replay sends beside it.
func RoundOpenings(ctx context.Context, db *sqlx.DB, experimentID int64, arm string, block, round int) ([]string, error) {
	var out []string
	err := db.SelectContext(ctx, &out, `SELECT t.request FROM turns t JOIN runs r ON r.id = t.run_id JOIN arms a ON a.id = t.arm_id
		WHERE t.experiment_id = ? AND a.name = ? AND r.block = ? AND r.superseded_by IS NULL AND t.round = ?
			AND t.turn_index = (SELECT min(t2.turn_index) FROM turns t2 WHERE t2.run_id = t.run_id
				AND t2.session_index = t.session_index AND t2.round = t.round)
		ORDER BY t.session_index`, experimentID, arm, block, round)
	if err != nil {
		return nil, readErr(err, "round openings of experiment %d", experimentID)
	}
	return out, nil
}
