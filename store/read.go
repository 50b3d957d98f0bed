package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/inert"
)

// maxReadError bounds the message of an error from reading a record.
const maxReadError = 512

// readError is an error from reading a record, with what was being read ("arms of
// experiment 3"). Its message is one line of at most maxReadError bytes without escape
// sequences: a scan error quotes the value it could not convert, and the value of a
// damaged record may be anything, megabytes of it or terminal escapes.
type readError struct {
	what string
	err  error
}

func (e *readError) Error() string { return inert.Text(e.what+": "+e.err.Error(), maxReadError) }
func (e *readError) Unwrap() error { return e.err }

// readErr is err, when there is one, as a readError of what.
func readErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &readError{what: fmt.Sprintf(format, args...), err: err}
}

// ExperimentRow is an experiment as stored.
type ExperimentRow struct {
	ID           int64            `db:"id"`
	Name         string           `db:"name"`
	SpecPath     string           `db:"spec_path"`
	Spec         string           `db:"spec"`
	Status       ExperimentStatus `db:"status"`
	Seed         int64            `db:"seed"`
	Unit         string           `db:"unit"`
	Alpha        float64          `db:"alpha"`
	Baseline     string           `db:"baseline"`
	Version      string           `db:"arbiter_version"`
	Host         string           `db:"host"`
	CreatedAt    string           `db:"created_at"`
	FinishedAt   sql.NullString   `db:"finished_at"`
	Error        sql.NullString   `db:"error"`
	Design       string           `db:"design"`
	StoppedEarly sql.NullString   `db:"stopped_early"`
	// Lease is the lease of the arbiter running the experiment, nil when none holds one.
	Lease *LeaseRow `db:"-"`
	// Abandoned is true for an experiment recorded as running whose lease was not live
	// when it was read: the arbiter running it was killed or lost its machine, and
	// `arbiter resume` may take it over. State says ExperimentAbandoned for it.
	Abandoned bool `db:"-"`
}

// State is the experiment's status as users see it: ExperimentAbandoned for an abandoned
// experiment, its recorded status otherwise.
func (e ExperimentRow) State() ExperimentStatus {
	if e.Abandoned {
		return ExperimentAbandoned
	}
	return e.Status
}

// abandoned reports whether an experiment in status, holding lease (nil for none), is
// abandoned at now.
func abandoned(status ExperimentStatus, lease *LeaseRow, now time.Time) bool {
	return status == ExperimentRunning && (lease == nil || !lease.Live(now))
}

// withLease fills in e's lease and whether it is abandoned.
func withLease(ctx context.Context, db *sqlx.DB, e ExperimentRow) (ExperimentRow, error) {
	l, err := leaseOf(ctx, db, e.ID)
	if err != nil {
		return e, err
	}
	e.Lease = l
	e.Abandoned = abandoned(e.Status, l, time.Now())
	return e, nil
}

// ParsedDesign decodes the experiment's design; an experiment recorded before designs
// were stored gets one block and no looks.
func (e ExperimentRow) ParsedDesign() Design {
	var d Design
	if json.Unmarshal([]byte(e.Design), &d) != nil || d.Blocks == 0 {
		d.Blocks = 1
	}
	return d
}

// experimentNamed is the newest experiment named name. It wraps ErrNotFound when there is
// none.
func experimentNamed(ctx context.Context, db *sqlx.DB, name string) (ExperimentRow, error) {
	var e ExperimentRow
	err := db.GetContext(ctx, &e, `SELECT * FROM experiments WHERE name = ? ORDER BY id DESC LIMIT 1`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return e, fmt.Errorf("experiment %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return e, fmt.Errorf("experiment %q: %w", name, err)
	}
	return withLease(ctx, db, e)
}

// FindExperiment resolves what a user typed: an id, or a name (the newest experiment of
// that name); empty means the newest experiment. It wraps ErrNotFound when nothing
// matches.
func FindExperiment(ctx context.Context, db *sqlx.DB, ref string) (ExperimentRow, error) {
	if ref == "" {
		return LatestExperiment(ctx, db)
	}
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		return ExperimentByID(ctx, db, id)
	}
	return experimentNamed(ctx, db, ref)
}

// ExperimentByID is experiment id. It wraps ErrNotFound when there is none.
func ExperimentByID(ctx context.Context, db *sqlx.DB, id int64) (ExperimentRow, error) {
	var e ExperimentRow
	err := db.GetContext(ctx, &e, `SELECT * FROM experiments WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return e, fmt.Errorf("experiment %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return e, readErr(err, "experiment %d", id)
	}
	return withLease(ctx, db, e)
}

// LatestExperiment is the newest experiment in the database.
func LatestExperiment(ctx context.Context, db *sqlx.DB) (ExperimentRow, error) {
	var e ExperimentRow
	err := db.GetContext(ctx, &e, `SELECT * FROM experiments ORDER BY id DESC LIMIT 1`)
	if errors.Is(err, sql.ErrNoRows) {
		return e, fmt.Errorf("no experiments: %w", ErrNotFound)
	}
	if err != nil {
		return e, err
	}
	return withLease(ctx, db, e)
}

// ExperimentSummary is one line of `arbiter ls`.
type ExperimentSummary struct {
	ID   int64  `db:"id" json:"id"`
	Name string `db:"name" json:"name"`
	// Status is the state as users see it: abandoned for a running experiment whose
	// lease is not live (see ExperimentRow.State).
	Status    ExperimentStatus `db:"status" json:"status"`
	CreatedAt string           `db:"created_at" json:"created_at"`
	Finished  sql.NullString   `db:"finished_at" json:"-"`
	Arms      int              `db:"arms" json:"arms"`
	// Sessions are the analysed sessions (Analysed), Corrupted the corrupted ones among
	// them, and Lost the recorded sessions that did not finish.
	Sessions  int `db:"sessions" json:"sessions"`
	Corrupted int `db:"corrupted" json:"corrupted_sessions"`
	Lost      int `db:"lost" json:"lost_sessions"`
	// Lease is the running arbiter's lease, nil when none holds one.
	Lease *LeaseRow `db:"-" json:"lease,omitempty"`
}

// RanOn reports whether any run recorded in the database was started by the named
// runtime (process, docker, external, slurm).
func RanOn(ctx context.Context, db *sqlx.DB, runtime string) (bool, error) {
	var ran bool
	err := db.GetContext(ctx, &ran, `SELECT EXISTS (SELECT 1 FROM runs WHERE runtime = ?)`, runtime)
	return ran, err
}

// ListExperiments lists every experiment, newest first, counting sessions as the verdict
// does.
func ListExperiments(ctx context.Context, db *sqlx.DB) ([]ExperimentSummary, error) {
	var out []ExperimentSummary
	err := db.SelectContext(ctx, &out, `SELECT e.id, e.name, e.status, e.created_at, e.finished_at,
		(SELECT count(*) FROM arms a WHERE a.experiment_id = e.id) AS arms,
		(SELECT coalesce(sum(s.`+analysedSQL+`), 0) FROM sessions s JOIN runs r ON r.id = s.run_id
			WHERE s.experiment_id = e.id AND `+inAnalysis("r")+`) AS sessions,
		(SELECT coalesce(sum(s.`+analysedSQL+` AND s.corrupted = 1), 0) FROM sessions s JOIN runs r ON r.id = s.run_id
			WHERE s.experiment_id = e.id AND `+inAnalysis("r")+`) AS corrupted,
		(SELECT coalesce(sum(NOT (s.`+analysedSQL+`)), 0) FROM sessions s JOIN runs r ON r.id = s.run_id
			WHERE s.experiment_id = e.id AND `+inAnalysis("r")+`) AS lost
		FROM experiments e ORDER BY e.id DESC`)
	if err != nil {
		return nil, err
	}
	leases, err := Leases(ctx, db)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for i := range out {
		if l, ok := leases[out[i].ID]; ok {
			out[i].Lease = &l
		}
		if abandoned(out[i].Status, out[i].Lease, now) {
			out[i].Status = ExperimentAbandoned
		}
	}
	return out, nil
}

// ArmRow is an arm as stored.
type ArmRow struct {
	ID           int64          `db:"id"`
	ExperimentID int64          `db:"experiment_id"`
	Name         string         `db:"name"`
	Position     int            `db:"position"`
	Pins         string         `db:"pins"`
	Levels       sql.NullString `db:"levels"`
	Command      string         `db:"command"`
	Env          string         `db:"env"`
}

// ArmPins are what an arm pins beyond the engine's shared configuration, as stored
// (redacted): its env variables and its args.
type ArmPins struct {
	Env  map[string]string `json:"env"`
	Args []string          `json:"args"`
}

// PinSet decodes the arm's stored pins; an arm that pins nothing has an empty map and an
// empty list, never nil, so that JSON shows {} and [].
func (a ArmRow) PinSet() (ArmPins, error) {
	var p ArmPins
	if err := json.Unmarshal([]byte(a.Pins), &p); err != nil {
		return ArmPins{}, fmt.Errorf("arm %s: stored pins: %w", a.Name, err)
	}
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	if p.Args == nil {
		p.Args = []string{}
	}
	return p, nil
}

// Arms lists an experiment's arms in spec order.
func Arms(ctx context.Context, db *sqlx.DB, experimentID int64) ([]ArmRow, error) {
	var out []ArmRow
	err := db.SelectContext(ctx, &out, `SELECT * FROM arms WHERE experiment_id = ? ORDER BY position`, experimentID)
	return out, readErr(err, "arms of experiment %d", experimentID)
}

// RunRow is a run as stored.
type RunRow struct {
	ID           int64          `db:"id"`
	ExperimentID int64          `db:"experiment_id"`
	ArmID        int64          `db:"arm_id"`
	Block        int            `db:"block"`
	Runtime      string         `db:"runtime"`
	Node         string         `db:"node"`
	GPUs         string         `db:"gpus"`
	Endpoint     string         `db:"endpoint"`
	LogPath      string         `db:"log_path"`
	Status       RunStatus      `db:"status"`
	StartedAt    string         `db:"started_at"`
	ReadyAt      sql.NullString `db:"ready_at"`
	EndedAt      sql.NullString `db:"ended_at"`
	ExitCode     sql.NullInt64  `db:"exit_code"`
	Error        sql.NullString `db:"error"`
	LogTail      sql.NullString `db:"log_tail"`
	ServerInfo   sql.NullString `db:"server_info"`
	// SupersededBy is the run that re-ran this launch on resume; the analysis leaves a
	// superseded run out.
	SupersededBy sql.NullInt64 `db:"superseded_by"`
	// Slot and Wave place the run: its slot within Node and its wave within the block.
	Slot int `db:"slot"`
	Wave int `db:"wave"`
	// Instance is what the runtime started ("container …", "pid …").
	Instance string `db:"instance"`
	// WorkloadStartedAt and WorkloadEndedAt bound the workload; NULL when it never ran.
	WorkloadStartedAt sql.NullString `db:"workload_started_at"`
	WorkloadEndedAt   sql.NullString `db:"workload_ended_at"`
}

// Runs lists an experiment's runs in launch order.
func Runs(ctx context.Context, db *sqlx.DB, experimentID int64) ([]RunRow, error) {
	var out []RunRow
	err := db.SelectContext(ctx, &out, `SELECT * FROM runs WHERE experiment_id = ? ORDER BY id`, experimentID)
	return out, readErr(err, "runs of experiment %d", experimentID)
}

// Pace is how fast a recorded experiment went, for planning the next one of its kind.
type Pace struct {
	// TurnsPerSession is the mean number of turns of a session that completed.
	TurnsPerSession float64
	// MedianTurn is the median latency of a turn that completed; 0 when none did.
	MedianTurn time.Duration
}

// RecordedPace reads an experiment's pace.
func RecordedPace(ctx context.Context, db *sqlx.DB, experimentID int64) (Pace, error) {
	var p Pace
	if err := db.GetContext(ctx, &p.TurnsPerSession, `SELECT coalesce(avg(turns), 0) FROM sessions
		WHERE experiment_id = ? AND status = ?`, experimentID, SessionOK); err != nil {
		return p, readErr(err, "pace of experiment %d", experimentID)
	}
	var lat []float64
	if err := db.SelectContext(ctx, &lat, `SELECT latency_ms FROM turns WHERE experiment_id = ? AND error IS NULL
		ORDER BY latency_ms`, experimentID); err != nil {
		return p, readErr(err, "pace of experiment %d", experimentID)
	}
	if len(lat) > 0 {
		p.MedianTurn = time.Duration(lat[len(lat)/2] * float64(time.Millisecond))
	}
	return p, nil
}

// SessionOutcome is one session's result as the analyses need it.
type SessionOutcome struct {
	ArmID              int64         `db:"arm_id"`
	RunID              int64         `db:"run_id"`
	Block              int           `db:"block"`
	Index              int           `db:"session_index"`
	Status             SessionStatus `db:"status"`
	Turns              int           `db:"turns"`
	Corrupted          bool          `db:"corrupted"`
	FirstCorruptedTurn sql.NullInt64 `db:"first_corrupted_turn"`
	Node               string        `db:"node"`
}

// Sessions lists every session of an experiment's launches in the analysis
// (InAnalysis). How many of a session's turns were corrupted comes from its turns
// (TurnMetrics), which the verdict reads once for every figure it takes from them.
func Sessions(ctx context.Context, db *sqlx.DB, experimentID int64) ([]SessionOutcome, error) {
	var out []SessionOutcome
	err := db.SelectContext(ctx, &out, `SELECT s.arm_id, s.run_id, s.block, s.session_index, s.status, s.turns,
		s.corrupted, s.first_corrupted_turn, r.node
		FROM sessions s JOIN runs r ON r.id = s.run_id
		WHERE s.experiment_id = ? AND `+inAnalysis("r")+` ORDER BY s.arm_id, s.block, s.session_index`, experimentID)
	return out, readErr(err, "sessions of experiment %d", experimentID)
}

// DetectorCount counts, per arm and detector, the corrupted turns and the sessions with at
// least one.
type DetectorCount struct {
	ArmID     int64  `db:"arm_id"`
	Detector  string `db:"detector"`
	Turns     int    `db:"turns"`
	Sessions  int    `db:"sessions"`
	Example   string `db:"example"`
	Evaluated int    `db:"evaluated"`
}

// DetectorCounts gives corruption by detector, with one example reason each. A label's
// arm is its launch's: labels are grouped through runs, not through the turns they
// label, whose rows carry the bodies and are costly to visit one by one.
func DetectorCounts(ctx context.Context, db *sqlx.DB, experimentID int64) ([]DetectorCount, error) {
	var out []DetectorCount
	err := db.SelectContext(ctx, &out, `SELECT r.arm_id, l.detector,
			sum(l.corrupted) AS turns,
			count(DISTINCT CASE WHEN l.corrupted = 1 THEN l.run_id || ':' || l.session_index END) AS sessions,
			coalesce(max(CASE WHEN l.corrupted = 1 THEN l.reason END), '') AS example,
			count(*) AS evaluated
		FROM labels l JOIN runs r ON r.id = l.run_id
		WHERE l.experiment_id = ? AND `+inAnalysis("r")+`
		GROUP BY r.arm_id, l.detector ORDER BY r.arm_id, l.detector`, experimentID)
	return out, readErr(err, "labels of experiment %d", experimentID)
}

// DatabaseID is the database's unique id (a random UUID made when the file was created).
// Names of files and containers that belong to one database carry it, so that databases
// sharing a folder or a Docker host never overwrite or remove each other's.
func DatabaseID(ctx context.Context, db *sqlx.DB) (string, error) {
	var id string
	if err := db.GetContext(ctx, &id, `SELECT value FROM database_info WHERE key = 'uuid'`); err != nil {
		return "", fmt.Errorf("database id: %w", err)
	}
	return id, nil
}

// ShortID is the first eight hex digits of a database id: enough to tell databases apart
// in a file or container name while staying readable.
func ShortID(uuid string) string {
	if len(uuid) > 8 {
		return uuid[:8]
	}
	return uuid
}
