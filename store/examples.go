package store

import "fmt"

// Tables are the results database's tables as users query them, in the order the manual
// describes them; a test holds the list to the schema the migrations make.
var Tables = []string{"experiments", "arms", "runs", "pin_checks", "sessions", "turns", "labels",
	"detector_runs", "divergences", "phases", "server_metrics", "gpu_telemetry", "gpu_samples", "trace_calibrations", "leases",
	"engine_processes", "bisections", "bisection_steps", "database_info"}

// ExampleQuery is a read-only statement that shows what the results database answers, for
// arbiter query's help and its hints; a test runs each against a database of this schema.
type ExampleQuery struct {
	// SQL is the statement (or statements), as one line.
	SQL string
	// Flags are the query flags it is shown with; empty for none.
	Flags string
}

// ExampleQueries are the examples of arbiter query's help: sessions and corruption by
// arm, two statements at once, and every raw body past the default limits.
var ExampleQueries = []ExampleQuery{
	{SQL: "SELECT a.name, sum(s.corrupted) AS corrupted, count(*) AS sessions FROM sessions s JOIN arms a ON a.id = s.arm_id GROUP BY a.name"},
	{SQL: "SELECT count(*) FROM turns; SELECT count(*) FROM sessions", Flags: "--format csv"},
	{SQL: "SELECT raw FROM turns", Flags: "--format json --max-rows 0 --max-bytes 4GiB --timeout 10m"},
}

// FirstQuery is the statement a query with no statement in it is pointed at.
const FirstQuery = "SELECT * FROM experiments"

// PlacementQuery is the statement that lists where each launch of an experiment ran: its
// node, slot, GPUs, instance, wave and workload window.
func PlacementQuery(experimentID int64) string {
	return fmt.Sprintf("SELECT node, slot, gpus, instance, wave, workload_started_at, workload_ended_at FROM runs WHERE experiment_id = %d", experimentID)
}
