package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"
	"golang.org/x/sync/errgroup"
)

// Phase is one row of phases: what a workload measured over one of its phases.
type Phase struct {
	ExperimentID, RunID, ArmID int64
	Name, Kind                 string
	Position                   int
	Concurrency                int
	Rate                       float64
	FirstSession, Sessions     int
	Started, Ended             time.Time
	Requests, Completed        int
	Tokens                     int
	// TokensPerSecond is the engine's over the phase; NaN when it has no duration.
	TokensPerSecond float64
	Abort           string
	Aborted         int
	Finished        int
	AbortedAt       time.Time
	// Recovered is nil outside cascades; Recovery is meaningful when it is true.
	Recovered *bool
	Recovery  time.Duration
	Canaries  int
	Note      string
}

// AddPhase records a phase; recording one again (a resumed run) replaces it.
func (s *Store) AddPhase(ctx context.Context, p Phase) error {
	tps := sql.NullFloat64{Float64: p.TokensPerSecond, Valid: !math.IsNaN(p.TokensPerSecond) && !math.IsInf(p.TokensPerSecond, 0)}
	var recovered sql.NullBool
	var recovery sql.NullFloat64
	if p.Recovered != nil {
		recovered = sql.NullBool{Bool: *p.Recovered, Valid: true}
		if *p.Recovered {
			recovery = sql.NullFloat64{Float64: ms(p.Recovery), Valid: true}
		}
	}
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO phases
		(experiment_id, run_id, arm_id, name, kind, position, concurrency, rate, first_session, sessions,
		 started_at, ended_at, requests, completed, tokens, tokens_per_second, abort, aborted, finished,
		 aborted_at, recovered, recovery_ms, canaries, note)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ExperimentID, p.RunID, p.ArmID, p.Name, p.Kind, p.Position, p.Concurrency, p.Rate, p.FirstSession, p.Sessions,
		nullTime(p.Started), nullTime(p.Ended), p.Requests, p.Completed, p.Tokens, tps, s.nullText(p.Abort), p.Aborted,
		p.Finished, nullTime(p.AbortedAt), recovered, recovery, p.Canaries, s.nullText(p.Note))
	if err != nil {
		return fmt.Errorf("phase %s of run %d: %w", p.Name, p.RunID, err)
	}
	return nil
}

// PhaseRow is a phase as stored.
type PhaseRow struct {
	ArmID           int64           `db:"arm_id"`
	RunID           int64           `db:"run_id"`
	Block           int             `db:"block"`
	Name            string          `db:"name"`
	Kind            string          `db:"kind"`
	Position        int             `db:"position"`
	Concurrency     int             `db:"concurrency"`
	Rate            float64         `db:"rate"`
	FirstSession    int             `db:"first_session"`
	Sessions        int             `db:"sessions"`
	Requests        int             `db:"requests"`
	Completed       int             `db:"completed"`
	Tokens          int             `db:"tokens"`
	TokensPerSecond sql.NullFloat64 `db:"tokens_per_second"`
	Abort           sql.NullString  `db:"abort"`
	Aborted         int             `db:"aborted"`
	Finished        int             `db:"finished"`
	Recovered       sql.NullBool    `db:"recovered"`
	RecoveryMS      sql.NullFloat64 `db:"recovery_ms"`
	Canaries        int             `db:"canaries"`
	Note            sql.NullString  `db:"note"`
	StartedAt       sql.NullString  `db:"started_at"`
	EndedAt         sql.NullString  `db:"ended_at"`
	AbortedAt       sql.NullString  `db:"aborted_at"`
}

// Phases lists an experiment's phases over the launches in the analysis (InAnalysis),
// by arm, run and position.
func Phases(ctx context.Context, db *sqlx.DB, experimentID int64) ([]PhaseRow, error) {
	var out []PhaseRow
	err := db.SelectContext(ctx, &out, `SELECT p.arm_id, p.run_id, r.block, p.name, p.kind, p.position, p.concurrency,
			p.rate, p.first_session, p.sessions, p.requests, p.completed, p.tokens, p.tokens_per_second, p.abort,
			p.aborted, p.finished, p.recovered, p.recovery_ms, p.canaries, p.note, p.started_at, p.ended_at, p.aborted_at
		FROM phases p JOIN runs r ON r.id = p.run_id
		WHERE p.experiment_id = ? AND `+inAnalysis("r")+` ORDER BY p.arm_id, r.id, p.position`, experimentID)
	if err != nil {
		return nil, readErr(err, "phases of experiment %d", experimentID)
	}
	return out, nil
}

// TurnMetric is one turn's timing and outcome with the session it belongs to: what the
// verdict takes from the turns (per-session latency and throughput, the turn timings,
// corruption by round and the corrupted turns of each session), read in one pass.
type TurnMetric struct {
	ArmID            int64   `db:"arm_id"`
	RunID            int64   `db:"run_id"`
	Block            int     `db:"block"`
	Session          int     `db:"session_index"`
	Turn             int     `db:"turn_index"`
	Round            int     `db:"round"`
	Corrupted        bool    `db:"corrupted"`
	TTFT             float64 `db:"ttft_ms"`
	Latency          float64 `db:"latency_ms"`
	PromptTokens     int     `db:"prompt_tokens"`
	CompletionTokens int     `db:"completion_tokens"`
	StatusCode       int     `db:"status_code"`
	Failed           bool    `db:"failed"`
	FinishReason     string  `db:"finish_reason"`
	// DecodeMS is from the first to the last delta; NULL when fewer than two events
	// carried one.
	DecodeMS sql.NullFloat64 `db:"decode_ms"`
	// TokenTimes is the turn's per-token arrival blob (DecodeTokenTimes); nil when not
	// recorded.
	TokenTimes []byte `db:"token_times"`
}

// TurnMetrics lists every turn's timing with its run and session, over the launches
// in the analysis (InAnalysis), by arm, run, session and turn. Each arm is read on a connection
// of its own, as many at once as there are cores: the token times sit after a streamed
// turn's bodies, so the read follows every row's chain of overflow pages, which was
// most of the verdict of a run of long replies.
func TurnMetrics(ctx context.Context, db *sqlx.DB, experimentID int64) ([]TurnMetric, error) {
	var arms []int64
	if err := db.SelectContext(ctx, &arms, `SELECT id FROM arms WHERE experiment_id = ? ORDER BY id`, experimentID); err != nil {
		return nil, readErr(err, "turn timings of experiment %d", experimentID)
	}
	parts := make([][]TurnMetric, len(arms))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, arm := range arms {
		g.Go(func() error {
			return db.SelectContext(ctx, &parts[i], `SELECT t.arm_id, t.run_id, r.block, t.session_index, t.turn_index, t.round, t.corrupted, t.ttft_ms,
					t.latency_ms, t.prompt_tokens, t.completion_tokens, t.status_code, (t.error IS NOT NULL) AS failed, t.finish_reason,
					t.decode_ms, t.token_times
				FROM turns t JOIN runs r ON r.id = t.run_id
				WHERE t.experiment_id = ? AND t.arm_id = ? AND `+inAnalysis("r")+`
				ORDER BY t.run_id, t.session_index, t.turn_index`, experimentID, arm)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, readErr(err, "turn timings of experiment %d", experimentID)
	}
	return slices.Concat(parts...), nil
}
