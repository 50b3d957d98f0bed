-- Schema version 14: what each launch's engine reported about its pins once it was
-- ready, before any traffic. status is verified (the engine reported the pinned value),
-- not_in_effect (it reported another: the run was refused) or unverified (nothing
-- reports it, or the report could not be read; why says which). common marks a setting
-- of the engine's configuration that every arm shares, attested because a rule names it.
CREATE TABLE pin_checks (
    run_id   INTEGER NOT NULL REFERENCES runs(id),
    pin      TEXT NOT NULL,
    want     TEXT NOT NULL,
    got      TEXT,
    source   TEXT NOT NULL,
    evidence TEXT,
    status   TEXT NOT NULL CHECK (status IN ('verified', 'not_in_effect', 'unverified')),
    why      TEXT,
    common   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, pin)
);
