package store

import (
	"context"
	"fmt"
	"math"

	"github.com/jmoiron/sqlx"
)

// MetricSample is one series' value in one scrape of an engine's /metrics.
type MetricSample struct {
	Name   string
	Labels string // the label set in the text format's form, {a="b",c="d"}; "" for none
	Value  float64
}

// AddServerMetrics records one scrape of a run's engine, taken elapsed milliseconds
// after its workload started, in one transaction. Values that are not finite (a NaN
// gauge before anything was measured) are left out. Recording a scrape again replaces it.
func (s *Store) AddServerMetrics(ctx context.Context, experimentID, runID, armID int64, elapsedMS float64, samples []MetricSample) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("server metrics of run %d: %w", runID, err)
	}
	defer tx.Rollback()
	st, err := tx.PreparexContext(ctx, `INSERT OR REPLACE INTO server_metrics
		(experiment_id, run_id, arm_id, elapsed_ms, name, labels, value) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("server metrics of run %d: %w", runID, err)
	}
	defer st.Close()
	for _, m := range samples {
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			continue
		}
		if _, err := st.ExecContext(ctx, experimentID, runID, armID, elapsedMS, m.Name, m.Labels, m.Value); err != nil {
			return fmt.Errorf("server metric %s of run %d: %w", m.Name, runID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("server metrics of run %d: %w", runID, err)
	}
	return nil
}

// ServerMetricRow is one stored sample with the run it belongs to.
type ServerMetricRow struct {
	ArmID     int64   `db:"arm_id"`
	RunID     int64   `db:"run_id"`
	Block     int     `db:"block"`
	ElapsedMS float64 `db:"elapsed_ms"`
	Name      string  `db:"name"`
	Labels    string  `db:"labels"`
	Value     float64 `db:"value"`
}

// ServerMetrics reads the scraped metrics of an experiment's launches in the analysis
// (InAnalysis), in run and time order.
func ServerMetrics(ctx context.Context, db *sqlx.DB, experimentID int64) ([]ServerMetricRow, error) {
	var out []ServerMetricRow
	err := db.SelectContext(ctx, &out, `SELECT m.arm_id, m.run_id, r.block, m.elapsed_ms, m.name, m.labels, m.value
		FROM server_metrics m JOIN runs r ON r.id = m.run_id
		WHERE m.experiment_id = ? AND `+inAnalysis("r")+` ORDER BY m.arm_id, m.run_id, m.elapsed_ms, m.name, m.labels`, experimentID)
	if err != nil {
		return nil, readErr(err, "server metrics of experiment %d", experimentID)
	}
	return out, nil
}
