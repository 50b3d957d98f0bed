-- Schema version 7: an experiment has at most one owner, the arbiter process running it.
-- The owner holds a lease (its random id, host, process id and PID namespace) and renews
-- heartbeat_at while it runs; `run` and `resume` take the lease atomically and refuse an
-- experiment whose lease is live. A lease whose heartbeat is older than the expiry
-- (store.LeaseExpiry), or whose process is gone from this host, is stale: the experiment
-- is shown as abandoned and `resume` may take it over. The owner deletes its row when it
-- ends.
CREATE TABLE leases (
    experiment_id INTEGER PRIMARY KEY REFERENCES experiments(id),
    owner         TEXT    NOT NULL,             -- random id of the owning process
    host          TEXT    NOT NULL,             -- its host name
    pid           INTEGER NOT NULL,             -- its process id on that host
    pid_namespace TEXT    NOT NULL DEFAULT '',  -- its PID namespace (Linux), so pids compare only within one
    acquired_at   TEXT    NOT NULL,
    heartbeat_at  TEXT    NOT NULL
);

-- The file says it is arbiter's ('ARBT'), so that a foreign SQLite file is never taken
-- for a results database.
PRAGMA application_id = 1095909972;
