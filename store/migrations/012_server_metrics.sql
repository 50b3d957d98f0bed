-- Schema version 12: the engine's own metrics, scraped from its /metrics (Prometheus text)
-- while a run's workload ran, so that the verdict can show the conditions each arm
-- actually carried. One row per series per scrape: elapsed_ms is the scrape's time since
-- the workload started; name is the engine's metric name (sglang:num_running_reqs,
-- vllm:num_requests_running, refserve:cohort_sessions; a histogram as NAME_sum and
-- NAME_count); labels its label set in the text format's form ({model_name="x"}), '' for
-- none.
CREATE TABLE server_metrics (
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    run_id        INTEGER NOT NULL REFERENCES runs(id),
    arm_id        INTEGER NOT NULL REFERENCES arms(id),
    elapsed_ms    REAL    NOT NULL,
    name          TEXT    NOT NULL,
    labels        TEXT    NOT NULL DEFAULT '',
    value         REAL    NOT NULL,
    PRIMARY KEY (run_id, elapsed_ms, name, labels)
);
CREATE INDEX server_metrics_experiment ON server_metrics (experiment_id, arm_id);
