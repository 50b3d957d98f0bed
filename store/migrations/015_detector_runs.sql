-- Schema version 15: how each detector fared in each launch. judged counts the responses
-- it labelled; failed those it could not judge (an error, a crash, past timeouts.detector);
-- skipped those it was not asked about, once it had run past its time in that launch (a
-- detector that hangs is not waited on again). error is the first failure's words.
CREATE TABLE detector_runs (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    run_id        INTEGER NOT NULL REFERENCES runs(id),
    detector      TEXT NOT NULL,
    judged        INTEGER NOT NULL DEFAULT 0,
    failed        INTEGER NOT NULL DEFAULT 0,
    skipped       INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    PRIMARY KEY (run_id, detector)
);
CREATE INDEX detector_runs_experiment ON detector_runs (experiment_id);
