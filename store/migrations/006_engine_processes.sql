-- Schema version 6: the process group each engine of the process runtime runs in, and the
-- arbiter that started it, so that `arbiter resume` and `arbiter gc` can end an engine
-- whose arbiter died without ending it, and never a stranger that got a recycled pid.
CREATE TABLE engine_processes (
    run_id        INTEGER PRIMARY KEY REFERENCES runs(id),
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    host          TEXT    NOT NULL,             -- hostname, for people
    boot_id       TEXT    NOT NULL,             -- /proc/sys/kernel/random/boot_id: the pids below mean nothing in another boot
    pgid          INTEGER NOT NULL,             -- the engine's process group (its leader is arbiter's supervisor)
    leader_start  INTEGER NOT NULL,             -- the leader's start time, clock ticks after boot (/proc/PID/stat field 22)
    arbiter_pid   INTEGER NOT NULL,             -- the arbiter that started the engine
    arbiter_start INTEGER NOT NULL,             -- its start time, as leader_start
    ended_at      TEXT                          -- set once the whole group is known to be gone
);
CREATE INDEX engine_processes_open ON engine_processes (boot_id) WHERE ended_at IS NULL;
