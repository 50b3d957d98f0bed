package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"

	"github.com/jmoiron/sqlx"
)

// GPUTelemetryStatus says whether a launch's GPUs were read (gpu_telemetry.status).
type GPUTelemetryStatus string

// The statuses of a launch's GPU telemetry.
const (
	// GPUSampled: the launch's GPUs were read through NVML while its workload ran.
	GPUSampled GPUTelemetryStatus = "sampled"
	// GPUUnavailable: they could not be read; the row's reason says why.
	GPUUnavailable GPUTelemetryStatus = "unavailable"
)

// GPUTelemetry is one row of gpu_telemetry: whether a launch's GPUs were read, which,
// and how often, or why not.
type GPUTelemetry struct {
	ExperimentID int64              `db:"experiment_id"`
	RunID        int64              `db:"run_id"`
	ArmID        int64              `db:"arm_id"`
	Status       GPUTelemetryStatus `db:"status"`
	// Reason says why the GPUs could not be read; empty when they were.
	Reason string `db:"reason"`
	// Devices are the GPUs read, as NVML numbers them ("0,1"); empty when none were.
	Devices string `db:"devices"`
	// IntervalMS is the time between two samples.
	IntervalMS int64 `db:"interval_ms"`
}

// GPUSample is one GPU's state at one sample, as NVML reported it. A reading the device
// does not give (a board without a power sensor) is not Valid.
type GPUSample struct {
	ElapsedMS    float64         `db:"elapsed_ms"` // since the workload started
	GPU          int             `db:"gpu"`        // NVML's index of the device
	UUID         string          `db:"uuid"`
	Name         string          `db:"name"`
	SMClockMHz   sql.NullInt64   `db:"sm_clock_mhz"`
	MemClockMHz  sql.NullInt64   `db:"mem_clock_mhz"`
	PowerW       sql.NullFloat64 `db:"power_w"`
	TempC        sql.NullInt64   `db:"temp_c"`
	ThrottleMask sql.NullInt64   `db:"throttle_mask"` // see ThrottleReasons
	MemUsedBytes sql.NullInt64   `db:"mem_used_bytes"`
	UtilPct      sql.NullInt64   `db:"util_pct"`
}

// GPUSampleRow is a stored sample with the launch it belongs to.
type GPUSampleRow struct {
	ArmID int64 `db:"arm_id"`
	RunID int64 `db:"run_id"`
	Block int   `db:"block"`
	GPUSample
}

// ThrottleReason names one bit of NVML's clocks event (throttle) reasons mask, as
// gpu_samples.throttle_mask stores it.
type ThrottleReason struct {
	Bit  int64
	Name string
}

// ThrottleIdle is the reason of a GPU that had nothing to run: its clocks are low because
// it is idle, not because anything held them down.
const ThrottleIdle = "idle"

// ThrottleReasons are the bits of the mask, lowest first, named as NVML's header does
// (nvmlClocksEventReason*), in arbiter's words.
var ThrottleReasons = []ThrottleReason{
	{1, ThrottleIdle},
	{2, "applications_clocks"},
	{4, "sw_power_cap"},
	{8, "hw_slowdown"},
	{16, "sync_boost"},
	{32, "sw_thermal_slowdown"},
	{64, "hw_thermal_slowdown"},
	{128, "hw_power_brake"},
	{256, "display_clocks"},
}

// ThrottleReasonNames names the bits set in mask, lowest first; a bit NVML added after
// ThrottleReasons was written reads as "bit N".
func ThrottleReasonNames(mask int64) []string {
	var out []string
	for m := uint64(mask); m != 0; m &= m - 1 {
		bit := bits.TrailingZeros64(m)
		name := fmt.Sprintf("bit %d", bit)
		for _, r := range ThrottleReasons {
			if r.Bit == 1<<bit {
				name = r.Name
			}
		}
		out = append(out, name)
	}
	return out
}

// SetGPUTelemetry records whether a launch's GPUs were read; recording it again (the
// sampler learned that every read failed, a resumed run) replaces it.
func (s *Store) SetGPUTelemetry(ctx context.Context, t GPUTelemetry) error {
	if t.Status != GPUSampled && t.Status != GPUUnavailable {
		return fmt.Errorf("GPU telemetry of run %d: status %q is neither %s nor %s", t.RunID, t.Status, GPUSampled, GPUUnavailable)
	}
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO gpu_telemetry
		(experiment_id, run_id, arm_id, status, reason, devices, interval_ms) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.ExperimentID, t.RunID, t.ArmID, t.Status, s.nullText(t.Reason), t.Devices, t.IntervalMS)
	if err != nil {
		return fmt.Errorf("GPU telemetry of run %d: %w", t.RunID, err)
	}
	return nil
}

// AddGPUSamples records one sample of a launch's GPUs, in one transaction. Recording a
// GPU's sample at the same time again replaces it.
func (s *Store) AddGPUSamples(ctx context.Context, experimentID, runID, armID int64, samples []GPUSample) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("GPU samples of run %d: %w", runID, err)
	}
	defer tx.Rollback()
	st, err := tx.PreparexContext(ctx, `INSERT OR REPLACE INTO gpu_samples
		(experiment_id, run_id, arm_id, elapsed_ms, gpu, uuid, name, sm_clock_mhz, mem_clock_mhz, power_w, temp_c,
		throttle_mask, mem_used_bytes, util_pct) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("GPU samples of run %d: %w", runID, err)
	}
	defer st.Close()
	for _, g := range samples {
		if _, err := st.ExecContext(ctx, experimentID, runID, armID, g.ElapsedMS, g.GPU, g.UUID, g.Name, g.SMClockMHz,
			g.MemClockMHz, g.PowerW, g.TempC, g.ThrottleMask, g.MemUsedBytes, g.UtilPct); err != nil {
			return fmt.Errorf("GPU %d sample of run %d: %w", g.GPU, runID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("GPU samples of run %d: %w", runID, err)
	}
	return nil
}

// GPUTelemetries reads whether each launch of an experiment had its GPUs read
// (those in the analysis, InAnalysis), in run order.
func GPUTelemetries(ctx context.Context, db *sqlx.DB, experimentID int64) ([]GPUTelemetry, error) {
	var out []GPUTelemetry
	err := db.SelectContext(ctx, &out, `SELECT g.experiment_id, g.run_id, g.arm_id, g.status, coalesce(g.reason, '') AS reason,
		g.devices, g.interval_ms
		FROM gpu_telemetry g JOIN runs r ON r.id = g.run_id
		WHERE g.experiment_id = ? AND `+inAnalysis("r")+` ORDER BY g.run_id`, experimentID)
	if err != nil {
		return nil, fmt.Errorf("GPU telemetry of experiment %d: %w", experimentID, err)
	}
	return out, nil
}

// GPUSamples reads the GPU samples of an experiment's launches in the analysis
// (InAnalysis), in run, time and device order.
func GPUSamples(ctx context.Context, db *sqlx.DB, experimentID int64) ([]GPUSampleRow, error) {
	var out []GPUSampleRow
	err := db.SelectContext(ctx, &out, `SELECT g.arm_id, g.run_id, r.block, g.elapsed_ms, g.gpu, g.uuid, g.name,
		g.sm_clock_mhz, g.mem_clock_mhz, g.power_w, g.temp_c, g.throttle_mask, g.mem_used_bytes, g.util_pct
		FROM gpu_samples g JOIN runs r ON r.id = g.run_id
		WHERE g.experiment_id = ? AND `+inAnalysis("r")+` ORDER BY g.run_id, g.elapsed_ms, g.gpu`, experimentID)
	if err != nil {
		return nil, fmt.Errorf("GPU samples of experiment %d: %w", experimentID, err)
	}
	return out, nil
}
