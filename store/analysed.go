package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Which sessions an analysis counts is decided here and nowhere else: the orchestrator's
// sequential looks, a resumed experiment's kept launches and the verdict all ask the same
// question, so that a session cannot count in one and not in another.
//
// A session is analysed only when it finished: every round ran and every response was
// labelled, clean or corrupted. A session that was lost (an error, a timeout, an engine
// that crashed or wedged under it) is not analysed, whatever its responses showed before
// it was lost. Counting a session that was corrupted and then lost, while a lost session
// that stayed clean is not counted, would keep exactly the corrupted ones after a crash and
// turn the crash into a corruption finding. Such sessions are counted on their own
// (CorruptedThenLost) and reported beside the analysis.

// The same goes for launches. A launch enters the analysis when it ended on its own (done,
// or by its engine's fault) and no resume ran it again. A launch cut short (the user's
// interrupt, its node lost, or still starting or running when its arbiter went away) is
// left out whole, the sessions it finished included: those are the ones that finish
// first, which need not be a fair sample of its sessions (a fault that ends a session's
// round early makes a faulty session finish sooner). A resume runs it again.

// InAnalysis reports whether a launch in status, superseded or not by a later launch of
// a resume, enters the analysis.
func InAnalysis(status RunStatus, superseded bool) bool { return !superseded && !status.CutShort() }

// inAnalysis is InAnalysis as a condition on the runs table under alias.
func inAnalysis(alias string) string {
	quoted := make([]string, len(cutShortStatuses))
	for i, s := range cutShortStatuses {
		quoted[i] = "'" + string(s) + "'"
	}
	return alias + ".superseded_by IS NULL AND " + alias + ".status NOT IN (" + strings.Join(quoted, ", ") + ")"
}

// Analysed reports whether a session with this status enters the analysis: only a
// session that finished (SessionOK) does, in a launch that enters it (InAnalysis).
func Analysed(status SessionStatus) bool { return status == SessionOK }

// Analysed reports whether the session enters the analysis (see the package-level
// Analysed).
func (s SessionOutcome) Analysed() bool { return Analysed(s.Status) }

// analysedSQL is Analysed as a condition on the sessions table.
const analysedSQL = "status = '" + string(SessionOK) + "'"

// SessionCounts are the sessions of one launch (or one arm) as every analysis counts them.
type SessionCounts struct {
	// Recorded is every session with a row: analysed or lost.
	Recorded int `db:"recorded"`
	// Analysed are the sessions that finished; Corrupted are the corrupted ones among them.
	Analysed  int `db:"analysed"`
	Corrupted int `db:"corrupted"`
	// Lost are recorded sessions that did not finish; CorruptedThenLost are those among
	// them that had a corrupted response before they were lost.
	Lost              int `db:"lost"`
	CorruptedThenLost int `db:"corrupted_then_lost"`
}

// Add returns the sum of two tallies.
func (c SessionCounts) Add(o SessionCounts) SessionCounts {
	return SessionCounts{Recorded: c.Recorded + o.Recorded, Analysed: c.Analysed + o.Analysed,
		Corrupted: c.Corrupted + o.Corrupted, Lost: c.Lost + o.Lost, CorruptedThenLost: c.CorruptedThenLost + o.CorruptedThenLost}
}

// Count adds one session to the tally, by the rule of Analysed.
func (c *SessionCounts) Count(status SessionStatus, corrupted bool) {
	c.Recorded++
	switch {
	case Analysed(status):
		c.Analysed++
		if corrupted {
			c.Corrupted++
		}
	default:
		c.Lost++
		if corrupted {
			c.CorruptedThenLost++
		}
	}
}

// tallySQL is the columns of a SessionCounts over the sessions table under alias.
func tallySQL(alias string) string {
	ok := alias + "." + analysedSQL
	return `count(*) AS recorded,
		coalesce(sum(` + ok + `), 0) AS analysed,
		coalesce(sum(` + ok + ` AND ` + alias + `.corrupted = 1), 0) AS corrupted,
		coalesce(sum(NOT (` + ok + `)), 0) AS lost,
		coalesce(sum(NOT (` + ok + `) AND ` + alias + `.corrupted = 1), 0) AS corrupted_then_lost`
}

// RunSessionCounts tallies the sessions of one launch.
func RunSessionCounts(ctx context.Context, db *sqlx.DB, runID int64) (SessionCounts, error) {
	var c SessionCounts
	err := db.GetContext(ctx, &c, `SELECT `+tallySQL("s")+` FROM sessions s WHERE s.run_id = ?`, runID)
	if err != nil {
		return c, fmt.Errorf("sessions of run %d: %w", runID, err)
	}
	return c, nil
}

// ArmSessionCounts tallies the sessions of every arm of an experiment, by arm id, over the
// launches in the analysis (InAnalysis).
func ArmSessionCounts(ctx context.Context, db *sqlx.DB, experimentID int64) (map[int64]SessionCounts, error) {
	out, err := armSessionCounts(ctx, db, experimentID, inAnalysis("r"))
	if err != nil {
		return nil, readErr(err, "sessions of experiment %d", experimentID)
	}
	return out, nil
}

// CutShortSessionCounts tallies, by arm id, the sessions of an experiment's launches cut
// short and not run again: left out of the analysis, but a corrupted response among them
// was still seen. Analysed counts the sessions they finished.
func CutShortSessionCounts(ctx context.Context, db *sqlx.DB, experimentID int64) (map[int64]SessionCounts, error) {
	out, err := armSessionCounts(ctx, db, experimentID, "r.superseded_by IS NULL AND NOT ("+inAnalysis("r")+")")
	if err != nil {
		return nil, fmt.Errorf("sessions of launches cut short in experiment %d: %w", experimentID, err)
	}
	return out, nil
}

// armSessionCounts tallies by arm id the sessions of an experiment's launches r that meet
// the condition launches.
func armSessionCounts(ctx context.Context, db *sqlx.DB, experimentID int64, launches string) (map[int64]SessionCounts, error) {
	var rows []struct {
		ArmID int64 `db:"arm_id"`
		SessionCounts
	}
	err := db.SelectContext(ctx, &rows, `SELECT s.arm_id, `+tallySQL("s")+`
		FROM sessions s JOIN runs r ON r.id = s.run_id
		WHERE s.experiment_id = ? AND `+launches+` GROUP BY s.arm_id`, experimentID)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]SessionCounts, len(rows))
	for _, r := range rows {
		out[r.ArmID] = r.SessionCounts
	}
	return out, nil
}
