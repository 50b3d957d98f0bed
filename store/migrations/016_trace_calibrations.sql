-- Schema version 16 (trace_calibrations):
-- what a length trace's probes (mooncake, burstgpt) measured of each launch's engine
-- before the trace started. The short and long probes are prose of short_bytes and
-- long_bytes bytes, for which the engine reported short_tokens and long_tokens prompt
-- tokens; bytes_per_token and template_tokens are what the prompts were written with.
-- note says why the probes could not measure (the prompts then used four bytes a token).
CREATE TABLE trace_calibrations (
    experiment_id   INTEGER NOT NULL REFERENCES experiments(id),
    run_id          INTEGER NOT NULL REFERENCES runs(id) PRIMARY KEY,
    arm_id          INTEGER NOT NULL REFERENCES arms(id),
    short_bytes     INTEGER NOT NULL,
    short_tokens    INTEGER NOT NULL,
    long_bytes      INTEGER NOT NULL,
    long_tokens     INTEGER NOT NULL,
    bytes_per_token REAL NOT NULL,
    template_tokens INTEGER NOT NULL,
    note            TEXT
);
CREATE INDEX trace_calibrations_experiment ON trace_calibrations (experiment_id);
