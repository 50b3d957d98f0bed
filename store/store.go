// Package store keeps everything an experiment produces in one SQLite file: experiments,
// arms, runs, sessions, turns with their raw responses, and detector labels. Migrations are
// embedded SQL tracked by PRAGMA user_version; the database runs in WAL mode with one
// batched writer; readers open it read-only. Every text that reaches the file passes
// through the store's redactor first.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // the database/sql driver "sqlite3"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Options configure a writable store. The zero value is valid.
type Options struct {
	// Redact rewrites every text before it is written (secret values → "[redacted]").
	// Nil writes texts unchanged.
	Redact func(string) string
}

// Store is a writable results database.
type Store struct {
	db     *sqlx.DB
	path   string
	redact func(string) string
	// openedAt is the schema version the file had before Open migrated it.
	openedAt int
}

// PageSize is the page size of a database Open creates. Most of a results file is
// response bodies, a stream of 512 tokens being about 100 KB: at SQLite's default of
// 4 KiB every stored body is a chain of overflow pages, each a WAL frame written and
// later checkpointed on its own, which made the store the slowest part of a run.
const PageSize = 16384

// Detach is ctx for a long read or a pass of many statements: ctx's error if it has
// ended, else a context that cannot be cancelled. Under one that can, go-sqlite3 runs
// every statement, and reads every row, in a goroutine of its own with a channel, which
// was a third of a large verdict's time and a fifth of the divergence pass's. The caller
// checks ctx again where stopping matters (before a commit); a read of a whole
// experiment takes under a second.
func Detach(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

// MmapSize is how much of the file the store reads through a memory map; beyond it,
// pages are read with read calls as before.
const MmapSize = 1 << 30

// Open opens (creating if needed) the database at path, applies pending migrations and
// switches it to WAL. A SQLite file of another program (tables of its own, or another
// application id) is refused with ErrNotArbiterDatabase and left as it was.
func Open(path string, opts Options) (*Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	dsn := "file:" + escapePath(path) + "?_busy_timeout=10000&_foreign_keys=on&_synchronous=NORMAL"
	db, err := sqlx.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection: SQLite serialises writers anyway, and a single connection keeps
	// PRAGMA state and avoids SQLITE_BUSY between our own goroutines.
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The file is identified before anything is written to it: not even the switch to
	// WAL may touch another program's database.
	if _, err := identify(context.Background(), db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A new file gets pages of PageSize bytes; a file that has pages keeps its size
	// (SQLite ignores the pragma then). Must come before the switch to WAL, the file's
	// first write.
	if _, err := db.Exec(fmt.Sprintf("PRAGMA page_size = %d", PageSize)); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if _, err := db.Exec("PRAGMA journal_mode = WAL"); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Pages are read through a map of the file, not copied in by a read call each: the
	// divergence pass at a run's end reads every stored turn, and that took half the
	// time. Writes still go through write calls and the WAL. A read error of a mapped
	// page (the disk failing under it) ends the process instead of failing a query;
	// what was committed stays in the file. A setting of the connection, which is the
	// store's only one and kept open.
	if _, err := db.Exec(fmt.Sprintf("PRAGMA mmap_size = %d", MmapSize)); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	openedAt, err := migrate(db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	redact := opts.Redact
	if redact == nil {
		redact = func(s string) string { return s }
	}
	return &Store{db: db, path: path, redact: redact, openedAt: openedAt}, nil
}

// Migrate upgrades an existing results database to this build's schema and returns the
// versions before and after. Unlike Open it never creates a file.
func Migrate(path string) (from, to int, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("migrate %s: %w", path, err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	return s.openedAt, SchemaVersion, nil
}

func escapePath(p string) string {
	return (&url.URL{Path: p}).EscapedPath()
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = func() int {
	ms, err := migrations()
	if err != nil {
		panic(err)
	}
	return ms[len(ms)-1].version
}()

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var ms []migration
	// Versions increase but may skip a number: numbers are handed out per change, and a
	// change that has not landed yet leaves its number free.
	for _, n := range names {
		base := path.Base(n)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || v < 1 || len(ms) > 0 && v <= ms[len(ms)-1].version {
			return nil, fmt.Errorf("migration %s: want a version above the previous one as its prefix", base)
		}
		b, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	return ms, nil
}

// migrate applies the migrations the file lacks and returns the version it had.
func migrate(db *sqlx.DB) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	var current int
	if err := db.Get(&current, "PRAGMA user_version"); err != nil {
		return 0, err
	}
	if current > SchemaVersion {
		return current, fmt.Errorf("schema version %d is newer than this arbiter's %d", current, SchemaVersion)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		tx, err := db.Beginx()
		if err != nil {
			return current, err
		}
		if _, err := tx.Exec(m.sql); err != nil {
			tx.Rollback()
			return current, fmt.Errorf("%s: %w", m.name, err)
		}
		// PRAGMA does not take parameters; the version is our own integer.
		if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
			tx.Rollback()
			return current, fmt.Errorf("%s: %w", m.name, err)
		}
		if err := tx.Commit(); err != nil {
			return current, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return current, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// DB gives direct access for reads in tests and tools; writes go through the methods.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close flushes and closes the database.
func (s *Store) Close() error { return s.db.Close() }

// StartCheckpoint copies the pages committed to the WAL so far into the database file,
// in the background on a connection of its own, and returns a function that waits for
// it. Closing the store copies whatever the WAL still holds (up to SQLite's automatic
// checkpoint, 1,000 pages) and syncs it: 45-50 ms at the end of each run of the
// whole-path benchmark. Begun as a run's arms end, that copy runs beside the divergence
// pass, which reads on the store's own connection, on one core. The checkpoint is
// passive: it copies what no reader still needs, and it never waits for the store's
// statements nor they for it. Should it fail, closing the store copies the pages as
// before; the error only says why it did not help.
func (s *Store) StartCheckpoint() (wait func() error) {
	done := make(chan error, 1)
	go func() {
		done <- checkpoint(s.path)
	}()
	return sync.OnceValue(func() error { return <-done })
}

func checkpoint(path string) error {
	// mode=rw: the file is the store's own and already there; never create another.
	db, err := sql.Open("sqlite3", "file:"+escapePath(path)+"?mode=rw&_busy_timeout=10000&_synchronous=NORMAL")
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.Exec("PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return nil
}

// Timestamp formats t the way the store keeps times.
func Timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nullTime(t time.Time) sql.NullString {
	if t.IsZero() {
		return sql.NullString{}
	}
	return sql.NullString{String: Timestamp(t), Valid: true}
}

func (s *Store) nullText(v string) sql.NullString {
	if v == "" {
		return sql.NullString{}
	}
	return sql.NullString{String: s.redact(v), Valid: true}
}

// Experiment is one row of experiments as the orchestrator creates it.
type Experiment struct {
	Name, SpecPath, Spec string
	Seed                 int64
	Unit                 string
	Alpha                float64
	Baseline             string
	Version, Host        string
	Created              time.Time
	// Design is the JSON of the experiment's design (see Design); empty stores "{}".
	Design string
}

// Design is what the verdict needs to know about how the experiment was laid out.
type Design struct {
	Blocks      int            `json:"blocks"`
	Looks       int            `json:"looks,omitempty"`
	Margin      float64        `json:"margin,omitempty"`
	AA          bool           `json:"aa,omitempty"`
	Factors     []DesignFactor `json:"factors,omitempty"`
	Sessions    int            `json:"sessions"` // per arm and block
	Rounds      int            `json:"rounds"`
	Concurrency int            `json:"concurrency"`
	// MaxLoss is the largest share of an arm's sessions that may be lost before its
	// corruption decision becomes inconclusive; nil (experiments recorded before it was
	// stored) means DefaultMaxLoss.
	MaxLoss *float64 `json:"max_loss,omitempty"`
	// Kind is the workload's kind ("" for the tool-call agent), Workload the workload in
	// one sentence when its kind has phases, and ThroughputMargin the share of throughput
	// an arm may lose and still be non-inferior (0: none declared).
	Kind             string  `json:"kind,omitempty"`
	Workload         string  `json:"workload,omitempty"`
	ThroughputMargin float64 `json:"throughput_margin,omitempty"`
	// MinEffect is the smallest change of latency or tok/s the verdict calls better or
	// worse; nil (experiments recorded before it was stored) means DefaultMinEffect.
	MinEffect *float64 `json:"min_effect,omitempty"`
	// Plan is the spec's analysis.plan (the rates to tell apart and the power wanted),
	// against which a sequential verdict measures the sessions it saved; nil when the
	// spec plans nothing.
	Plan *DesignPlan `json:"plan,omitempty"`
	// Runtime is the spec's runtime kind ("" for process).
	Runtime string `json:"runtime,omitempty"`
	// PinsUnverified lists the pins of arms that already ran (runtime kind external)
	// that the engines' /get_server_info could not confirm, each "arm: pin (why)"; the
	// verdict says so.
	PinsUnverified []string `json:"pins_unverified,omitempty"`
	// DivergenceFloor is the arm that repeats the baseline to measure the A/A floor of
	// divergence (analysis.divergence_floor); empty when none.
	DivergenceFloor string `json:"divergence_floor,omitempty"`
	// NoiseFloor is the A/A experiment whose launches' spread the verdict weighs the arms
	// against (analysis.noise_floor or run --noise-floor, resolved to its id when the
	// experiment started); 0 when none.
	NoiseFloor int64 `json:"noise_floor,omitempty"`
}

// DesignPlan is what an experiment was planned to detect.
type DesignPlan struct {
	P0    float64 `json:"p0"`
	P1    float64 `json:"p1"`
	Power float64 `json:"power"`
}

// DefaultMaxLoss is analysis.max_loss when a spec does not set it (arms.DefaultMaxLoss
// is the same number, for specs).
const DefaultMaxLoss = 0.10

// DefaultMinEffect is the smallest change called better or worse for experiments recorded
// without one (arms.DefaultMinEffect is the same number, for specs).
const DefaultMinEffect = 0.02

// EffectFloor is the design's MinEffect, or DefaultMinEffect when none was recorded.
func (d Design) EffectFloor() float64 {
	if d.MinEffect == nil {
		return DefaultMinEffect
	}
	return *d.MinEffect
}

// LossLimit is the design's MaxLoss, or DefaultMaxLoss when none was recorded.
func (d Design) LossLimit() float64 {
	if d.MaxLoss == nil {
		return DefaultMaxLoss
	}
	return *d.MaxLoss
}

// DesignFactor is one factor with its levels in spec order; the first level is the
// reference level of the factorial model.
type DesignFactor struct {
	Name   string   `json:"name"`
	Levels []string `json:"levels"`
}

// CreateExperiment records a new experiment in state running and returns its id. It takes
// no lease: the orchestrator uses StartExperiment; this is for tools and tests that
// write an experiment's rows themselves.
func (s *Store) CreateExperiment(ctx context.Context, e Experiment) (int64, error) {
	return s.insertExperiment(ctx, s.db, e)
}

func (s *Store) insertExperiment(ctx context.Context, x sqlx.ExecerContext, e Experiment) (int64, error) {
	design := e.Design
	if design == "" {
		design = "{}"
	}
	res, err := x.ExecContext(ctx, `INSERT INTO experiments
		(name, spec_path, spec, status, seed, unit, alpha, baseline, arbiter_version, host, created_at, design)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Name, s.redact(e.SpecPath), s.redact(e.Spec), ExperimentRunning, e.Seed, e.Unit, e.Alpha, e.Baseline,
		e.Version, s.redact(e.Host), Timestamp(e.Created), s.redact(design))
	if err != nil {
		return 0, fmt.Errorf("create experiment: %w", err)
	}
	return res.LastInsertId()
}

// FinishExperiment sets an experiment's final status (done, interrupted, failed) without
// regard to its lease; the orchestrator finishes through its Lease instead.
func (s *Store) FinishExperiment(ctx context.Context, id int64, status ExperimentStatus, errText string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE experiments SET status = ?, finished_at = ?, error = ? WHERE id = ?`,
		status, Timestamp(at), s.nullText(errText), id)
	if err != nil {
		return fmt.Errorf("finish experiment %d: %w", id, err)
	}
	return nil
}

// StopEarly records why scheduling stopped before the planned blocks ran out.
func (s *Store) StopEarly(ctx context.Context, id int64, why string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE experiments SET stopped_early = ? WHERE id = ?`, s.redact(why), id)
	if err != nil {
		return fmt.Errorf("experiment %d: %w", id, err)
	}
	return nil
}

// Arm is one row of arms. Pins, Levels, Command and Env are JSON texts.
type Arm struct {
	ExperimentID int64
	Name         string
	Position     int
	Pins         string
	Levels       string // empty for explicit arms
	Command      string
	Env          string
}

// AddArm records an arm and returns its id.
func (s *Store) AddArm(ctx context.Context, a Arm) (int64, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO arms (experiment_id, name, position, pins, levels, command, env)
		VALUES (?, ?, ?, ?, ?, ?, ?)`,
		a.ExperimentID, a.Name, a.Position, s.redact(a.Pins), s.nullText(a.Levels), s.redact(a.Command), s.redact(a.Env))
	if err != nil {
		return 0, fmt.Errorf("add arm %s: %w", a.Name, err)
	}
	return res.LastInsertId()
}

// LaunchName names launch block of arm as every report does: "treatment/b2".
func LaunchName(arm string, block int) string { return arm + "/b" + strconv.Itoa(block) }

// Run is one launch of one arm. The orchestrator creates it when the launch starts and
// updates it as the launch progresses.
type Run struct {
	ID                  int64
	ExperimentID, ArmID int64
	Block               int
	Runtime, Node, GPUs string
	// Slot numbers the run's slot within its node; Wave is its wave within the block.
	Slot, Wave int
	// Instance is what the runtime started: "container 3f2a9c1b0d4e", "pid 4242".
	Instance          string
	Endpoint, LogPath string
	Status            RunStatus
	Started, Ready    time.Time
	// WorkloadStarted and WorkloadEnded bound the workload; zero when it never ran.
	WorkloadStarted, WorkloadEnded time.Time
	Ended                          time.Time
	ExitCode                       *int
	Error, LogTail                 string
	ServerInfo                     string
}

// StartRun records a launch and returns its id.
func (s *Store) StartRun(ctx context.Context, r Run) (int64, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO runs
		(experiment_id, arm_id, block, runtime, node, gpus, slot, wave, endpoint, log_path, status, started_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ExperimentID, r.ArmID, r.Block, r.Runtime, r.Node, r.GPUs, r.Slot, r.Wave, r.Endpoint, s.redact(r.LogPath), r.Status, Timestamp(r.Started))
	if err != nil {
		return 0, fmt.Errorf("start run: %w", err)
	}
	return res.LastInsertId()
}

// UpdateRun writes a run's progress: node and GPUs when given (a scheduler's placement;
// empty keeps those StartRun recorded), endpoint, status, times, exit, error, log tail and
// server info. Zero fields are written as NULL or empty.
func (s *Store) UpdateRun(ctx context.Context, r Run) error {
	var exit sql.NullInt64
	if r.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*r.ExitCode), Valid: true}
	}
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET node = coalesce(nullif(?, ''), node), gpus = coalesce(nullif(?, ''), gpus), endpoint = ?, log_path = ?, status = ?, ready_at = ?, ended_at = ?,
		exit_code = ?, error = ?, log_tail = ?, server_info = ?, instance = ?, workload_started_at = ?,
		workload_ended_at = ? WHERE id = ?`,
		r.Node, r.GPUs, r.Endpoint, s.redact(r.LogPath), r.Status, nullTime(r.Ready), nullTime(r.Ended), exit,
		s.nullText(r.Error), s.nullText(r.LogTail), s.nullText(r.ServerInfo), r.Instance,
		nullTime(r.WorkloadStarted), nullTime(r.WorkloadEnded), r.ID)
	if err != nil {
		return fmt.Errorf("update run %d: %w", r.ID, err)
	}
	return nil
}

// Supersede records that run newID re-ran the launch of run oldID, which the analysis
// then leaves out.
func (s *Store) Supersede(ctx context.Context, oldID, newID int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE runs SET superseded_by = ? WHERE id = ?`, newID, oldID)
	if err != nil {
		return fmt.Errorf("supersede run %d: %w", oldID, err)
	}
	return nil
}

// ReopenExperiment marks a stopped experiment as running again, for a resume.
func (s *Store) ReopenExperiment(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE experiments SET status = ?, finished_at = NULL, error = NULL WHERE id = ?`,
		ExperimentRunning, id)
	if err != nil {
		return fmt.Errorf("reopen experiment %d: %w", id, err)
	}
	return nil
}

// ErrNotFound is returned when an experiment named on the command line does not exist.
var ErrNotFound = errors.New("not found")
