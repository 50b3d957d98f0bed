-- Schema version 17 (gpu_telemetry, gpu_samples): the GPUs each launch ran on, read
-- through NVML while its workload ran, so that a verdict can show a launch that ran hot
-- or had its clocks held down.
--
-- gpu_telemetry has one row per launch: status 'sampled' (devices names the GPUs read,
-- as NVML numbers them, and interval_ms how often) or 'unavailable' with reason (no
-- NVIDIA driver on this host, the launch's GPUs on another node, NVML failing).
CREATE TABLE gpu_telemetry (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    run_id        INTEGER NOT NULL REFERENCES runs(id) PRIMARY KEY,
    arm_id        INTEGER NOT NULL REFERENCES arms(id),
    status        TEXT    NOT NULL CHECK (status IN ('sampled', 'unavailable')),
    reason        TEXT,
    devices       TEXT    NOT NULL DEFAULT '',
    interval_ms   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX gpu_telemetry_experiment ON gpu_telemetry (experiment_id);

-- gpu_samples has one row per GPU per sample. elapsed_ms is the sample's time since the
-- workload started; gpu is NVML's index of the device. A reading the device does not
-- give (a GPU without a power sensor) is NULL. throttle_mask is NVML's clocks event
-- reasons bitmask as read: 1 idle, 2 applications clocks setting, 4 sw_power_cap,
-- 8 hw_slowdown, 16 sync_boost, 32 sw_thermal_slowdown, 64 hw_thermal_slowdown,
-- 128 hw_power_brake, 256 display clock setting.
CREATE TABLE gpu_samples (
    experiment_id  INTEGER NOT NULL REFERENCES experiments(id),
    run_id         INTEGER NOT NULL REFERENCES runs(id),
    arm_id         INTEGER NOT NULL REFERENCES arms(id),
    elapsed_ms     REAL    NOT NULL,
    gpu            INTEGER NOT NULL,
    uuid           TEXT    NOT NULL DEFAULT '',
    name           TEXT    NOT NULL DEFAULT '',
    sm_clock_mhz   INTEGER,
    mem_clock_mhz  INTEGER,
    power_w        REAL,
    temp_c         INTEGER,
    throttle_mask  INTEGER,
    mem_used_bytes INTEGER,
    util_pct       INTEGER,
    PRIMARY KEY (run_id, elapsed_ms, gpu)
);
CREATE INDEX gpu_samples_experiment ON gpu_samples (experiment_id, arm_id);
