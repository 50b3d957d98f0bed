package store

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
)

func TestGPUTelemetryRoundTripAndLeaveSupersededRunsOut(t *testing.T) {
	s := newStore(t, Options{Redact: func(x string) string { return strings.ReplaceAll(x, "hunter2", "[redacted]") }})
	exp, arm, run := seedExperiment(t, s)
	ctx := context.Background()
	if err := s.SetGPUTelemetry(ctx, GPUTelemetry{ExperimentID: exp, RunID: run, ArmID: arm, Status: GPUUnavailable,
		Reason: "libnvidia-ml.so.1 not found (hunter2)"}); err != nil {
		t.Fatal(err)
	}
	// Recorded again, it replaces the first.
	if err := s.SetGPUTelemetry(ctx, GPUTelemetry{ExperimentID: exp, RunID: run, ArmID: arm, Status: GPUSampled,
		Devices: "2,3", IntervalMS: 1000}); err != nil {
		t.Fatal(err)
	}
	hot := GPUSample{ElapsedMS: 1000, GPU: 3, UUID: "GPU-8f1c", Name: "NVIDIA H100 80GB HBM3",
		SMClockMHz: sql.NullInt64{Int64: 1755, Valid: true}, MemClockMHz: sql.NullInt64{Int64: 2619, Valid: true},
		PowerW: sql.NullFloat64{Float64: 612.5, Valid: true}, TempC: sql.NullInt64{Int64: 87, Valid: true},
		ThrottleMask: sql.NullInt64{Int64: 64 | 4, Valid: true}, MemUsedBytes: sql.NullInt64{Int64: 71 << 30, Valid: true},
		UtilPct: sql.NullInt64{Int64: 100, Valid: true}}
	bare := GPUSample{ElapsedMS: 1000, GPU: 2, UUID: "GPU-11aa", Name: "NVIDIA H100 80GB HBM3"} // nothing readable
	if err := s.AddGPUSamples(ctx, exp, run, arm, []GPUSample{hot, bare}); err != nil {
		t.Fatal(err)
	}
	tel, err := GPUTelemetries(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(tel) != 1 || tel[0].Status != GPUSampled || tel[0].Devices != "2,3" || tel[0].IntervalMS != 1000 || tel[0].Reason != "" {
		t.Errorf("telemetry %+v", tel)
	}
	rows, err := GPUSamples(ctx, s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d samples, want 2: %+v", len(rows), rows)
	}
	if r := rows[0]; r.GPU != 2 || r.SMClockMHz.Valid || r.PowerW.Valid || r.ThrottleMask.Valid || r.RunID != run || r.ArmID != arm {
		t.Errorf("the bare sample read back as %+v", r)
	}
	if r := rows[1]; r.GPUSample != hot || r.RunID != run {
		t.Errorf("the hot sample read back as %+v, want %+v", r.GPUSample, hot)
	}

	if _, err := s.DB().Exec(`INSERT INTO runs (id, experiment_id, arm_id, block, runtime, status, started_at) VALUES (99, ?, ?, 0, 'process', 'done', '2026')`, exp, arm); err != nil {
		t.Fatal(err)
	}
	if err := s.SetGPUTelemetry(ctx, GPUTelemetry{ExperimentID: exp, RunID: 99, ArmID: arm, Status: GPUUnavailable,
		Reason: "libnvidia-ml.so.1 not found: hunter2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Supersede(ctx, run, 99); err != nil {
		t.Fatal(err)
	}
	if rows, _ := GPUSamples(ctx, s.DB(), exp); len(rows) != 0 {
		t.Errorf("a superseded run's samples were read: %+v", rows)
	}
	tel, _ = GPUTelemetries(ctx, s.DB(), exp)
	if len(tel) != 1 || tel[0].RunID != 99 || tel[0].Reason != "libnvidia-ml.so.1 not found: [redacted]" {
		t.Errorf("after the supersede, telemetry %+v (the reason redacted, the superseded run left out)", tel)
	}
}

func TestSetGPUTelemetryRefusesAnUnknownStatus(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	err := s.SetGPUTelemetry(context.Background(), GPUTelemetry{ExperimentID: exp, RunID: run, ArmID: arm, Status: "hot"})
	if err == nil || !strings.Contains(err.Error(), `status "hot"`) {
		t.Errorf("err = %v, want the status named", err)
	}
}

func TestThrottleReasonNames(t *testing.T) {
	for _, c := range []struct {
		mask int64
		want []string
	}{
		{0, nil},
		{1, []string{"idle"}},
		{4 | 64, []string{"sw_power_cap", "hw_thermal_slowdown"}},
		{8 | 16 | 32 | 128, []string{"hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_power_brake"}},
		{1 << 12, []string{"bit 12"}},
	} {
		if got := ThrottleReasonNames(c.mask); !slices.Equal(got, c.want) {
			t.Errorf("ThrottleReasonNames(%#x) = %q, want %q", c.mask, got, c.want)
		}
	}
}
