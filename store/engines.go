package store

import (
	"context"
	"fmt"
	"time"
)

// EngineProcess records the process group an engine of the process runtime runs in and
// the arbiter process that started it, each as pid, start time and boot, so that a later
// arbiter can end an engine its own arbiter could not and never mistake a recycled pid
// for it.
type EngineProcess struct {
	RunID        int64  `db:"run_id"`
	ExperimentID int64  `db:"experiment_id"`
	Host         string `db:"host"`
	BootID       string `db:"boot_id"`
	PGID         int    `db:"pgid"`
	LeaderStart  uint64 `db:"leader_start"`
	ArbiterPID   int    `db:"arbiter_pid"`
	ArbiterStart uint64 `db:"arbiter_start"`
}

// RecordEngineProcess records the process group of run p.RunID's engine as running.
func (s *Store) RecordEngineProcess(ctx context.Context, p EngineProcess) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO engine_processes
		(run_id, experiment_id, host, boot_id, pgid, leader_start, arbiter_pid, arbiter_start, ended_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)`,
		p.RunID, p.ExperimentID, s.redact(p.Host), p.BootID, p.PGID, p.LeaderStart, p.ArbiterPID, p.ArbiterStart)
	if err != nil {
		return fmt.Errorf("record engine process of run %d: %w", p.RunID, err)
	}
	return nil
}

// EngineProcessEnded records that nothing of run runID's engine runs any more.
func (s *Store) EngineProcessEnded(ctx context.Context, runID int64, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE engine_processes SET ended_at = ? WHERE run_id = ? AND ended_at IS NULL`,
		Timestamp(at), runID)
	if err != nil {
		return fmt.Errorf("engine process of run %d ended: %w", runID, err)
	}
	return nil
}

// OpenEngineProcesses lists the engine process groups of boot bootID not yet known to
// have ended, oldest first; those of one experiment when experimentID is not 0.
func (s *Store) OpenEngineProcesses(ctx context.Context, bootID string, experimentID int64) ([]EngineProcess, error) {
	var out []EngineProcess
	err := s.db.SelectContext(ctx, &out, `SELECT run_id, experiment_id, host, boot_id, pgid, leader_start, arbiter_pid,
		arbiter_start FROM engine_processes WHERE ended_at IS NULL AND boot_id = ? AND (? = 0 OR experiment_id = ?)
		ORDER BY run_id`, bootID, experimentID, experimentID)
	if err != nil {
		return nil, fmt.Errorf("engine processes: %w", err)
	}
	return out, nil
}
