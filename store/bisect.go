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
	"github.com/mattn/go-sqlite3"
)

// A bisection is recorded in bisections, and each of its steps in bisection_steps with
// the experiment that ran it. Its status words are an experiment's (running, done,
// interrupted, failed; abandoned when shown), and it is run by one arbiter at a time
// under a lease kept in its own row, with the same heartbeat and expiry as an
// experiment's (LeaseHeartbeat, LeaseExpiry).

// Bisection is a bisection as `arbiter bisect` records it.
type Bisection struct {
	Name, SpecPath, Spec string
	// Changes is the JSON of the changes, in search order.
	Changes string
	// ErrorBudget, Effect, Looks, MaxSteps, StepAlpha, LaunchICC and Sessions are the
	// search's design: StepAlpha = ErrorBudget / MaxSteps, Looks launches a side at
	// most per step, Sessions per launch.
	ErrorBudget, Effect float64
	Looks, MaxSteps     int
	StepAlpha           float64
	LaunchICC           float64
	Sessions            int
	Version, Host       string
	Created             time.Time
}

// BisectionRow is a bisection as stored.
type BisectionRow struct {
	ID          int64            `db:"id" json:"id"`
	Name        string           `db:"name" json:"name"`
	SpecPath    string           `db:"spec_path" json:"spec_path"`
	Spec        string           `db:"spec" json:"-"`
	Status      ExperimentStatus `db:"status" json:"status"`
	Changes     string           `db:"changes" json:"-"`
	ErrorBudget float64          `db:"error_budget" json:"error_budget"`
	Effect      float64          `db:"effect" json:"effect"`
	Looks       int              `db:"looks" json:"looks"`
	MaxSteps    int              `db:"max_steps" json:"max_steps"`
	StepAlpha   float64          `db:"step_alpha" json:"step_alpha"`
	// LaunchICC is NULL for a bisection whose steps decided on sessions.
	LaunchICC   sql.NullFloat64 `db:"launch_icc" json:"-"`
	Sessions    int             `db:"sessions" json:"sessions"`
	Conclusion  sql.NullString  `db:"conclusion" json:"-"`
	Version     string          `db:"arbiter_version" json:"arbiter_version"`
	Host        string          `db:"host" json:"host"`
	CreatedAt   string          `db:"created_at" json:"created_at"`
	FinishedAt  sql.NullString  `db:"finished_at" json:"-"`
	Error       sql.NullString  `db:"error" json:"-"`
	Owner       sql.NullString  `db:"owner" json:"-"`
	OwnerHost   sql.NullString  `db:"owner_host" json:"-"`
	OwnerPID    sql.NullInt64   `db:"owner_pid" json:"-"`
	OwnerPIDNS  sql.NullString  `db:"owner_pid_namespace" json:"-"`
	HeartbeatAt sql.NullString  `db:"heartbeat_at" json:"-"`
	// Abandoned is true for a bisection recorded as running whose lease is not live:
	// its arbiter was killed, and `arbiter bisect --resume` may take it over.
	Abandoned bool `db:"-" json:"-"`
}

// State is the bisection's status as users see it: abandoned, or as recorded.
func (b BisectionRow) State() ExperimentStatus {
	if b.Abandoned {
		return ExperimentAbandoned
	}
	return b.Status
}

// Lease is the bisection's lease, nil when nobody holds it.
func (b BisectionRow) Lease() *LeaseRow {
	if !b.Owner.Valid {
		return nil
	}
	return &LeaseRow{Owner: b.Owner.String, Host: b.OwnerHost.String, PID: int(b.OwnerPID.Int64),
		PIDNamespace: b.OwnerPIDNS.String, AcquiredAt: b.HeartbeatAt.String, HeartbeatAt: b.HeartbeatAt.String}
}

func (b BisectionRow) withLease(now time.Time) BisectionRow {
	l := b.Lease()
	b.Abandoned = b.Status == ExperimentRunning && (l == nil || !l.Live(now))
	return b
}

// BisectionStep is one step of a bisection.
type BisectionStep struct {
	BisectionID int64 `db:"bisection_id" json:"-"`
	Step        int   `db:"step" json:"step"`
	// Role is reproduce, search, confirm or revert; Applied the JSON array of the
	// changes applied.
	Role           StepRole       `db:"role" json:"role"`
	Applied        string         `db:"applied" json:"-"`
	ExperimentName string         `db:"experiment_name" json:"experiment_name"`
	ExperimentID   sql.NullInt64  `db:"experiment_id" json:"-"`
	Outcome        sql.NullString `db:"outcome" json:"-"`
}

// Experiment is the experiment the step ran: the one it is linked to or, for a step
// that an older arbiter recorded by name only, the newest of its name. It wraps
// ErrNotFound when the step has run none yet.
func (s BisectionStep) Experiment(ctx context.Context, db *sqlx.DB) (ExperimentRow, error) {
	if s.ExperimentID.Valid {
		return ExperimentByID(ctx, db, s.ExperimentID.Int64)
	}
	return experimentNamed(ctx, db, s.ExperimentName)
}

// ErrStepTaken reports a step another arbiter recorded first.
var ErrStepTaken = errors.New("the step was recorded by another arbiter")

// BisectionLease is the lease this process holds on one bisection.
type BisectionLease struct {
	s     *Store
	id    int64
	owner Owner
}

// BisectionID is the bisection the lease is on.
func (l *BisectionLease) BisectionID() int64 { return l.id }

// StartBisection records a new bisection in state running, leased to owner.
func (s *Store) StartBisection(ctx context.Context, b Bisection, owner Owner) (int64, *BisectionLease, error) {
	at := b.Created
	if at.IsZero() {
		at = time.Now()
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO bisections
		(name, spec_path, spec, status, changes, error_budget, effect, looks, max_steps, step_alpha, launch_icc, sessions,
		 arbiter_version, host, created_at, owner, owner_host, owner_pid, owner_pid_namespace, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		b.Name, s.redact(b.SpecPath), s.redact(b.Spec), ExperimentRunning, s.redact(b.Changes), b.ErrorBudget, b.Effect,
		b.Looks, b.MaxSteps, b.StepAlpha, b.LaunchICC, b.Sessions, b.Version, s.redact(b.Host), Timestamp(at),
		owner.ID, owner.Host, owner.PID, owner.PIDNamespace, Timestamp(at))
	if err != nil {
		return 0, nil, fmt.Errorf("create bisection: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, nil, err
	}
	return id, &BisectionLease{s: s, id: id, owner: owner}, nil
}

// AcquireBisection takes the lease on bisection id for owner at now, when nobody holds
// it or its holder's lease is stale: a compare-and-swap on the row as read, so that of
// several arbiters racing, one wins. A live lease gives a *LeaseHeldError.
func (s *Store) AcquireBisection(ctx context.Context, id int64, owner Owner, now time.Time) (*BisectionLease, error) {
	stamp := Timestamp(now)
	for range 5 {
		b, err := bisectionRow(ctx, s.db, id)
		if err != nil {
			return nil, err
		}
		if l := b.Lease(); l != nil && l.Live(now) {
			return nil, &LeaseHeldError{Of: "bisection", ID: id, Lease: *l, At: now}
		}
		res, err := s.db.ExecContext(ctx, `UPDATE bisections SET owner = ?, owner_host = ?, owner_pid = ?, owner_pid_namespace = ?,
			heartbeat_at = ? WHERE id = ? AND owner IS ? AND heartbeat_at IS ?`,
			owner.ID, owner.Host, owner.PID, owner.PIDNamespace, stamp, id, b.Owner, b.HeartbeatAt)
		won, err := swapped(res, err, fmt.Sprintf("lease bisection %d", id))
		if err != nil {
			return nil, err
		}
		if won {
			return &BisectionLease{s: s, id: id, owner: owner}, nil
		}
	}
	return nil, fmt.Errorf("lease bisection %d: %w", id, errLeaseRace)
}

// Renew records a heartbeat at now; ErrLeaseLost means another arbiter took the
// bisection over.
func (l *BisectionLease) Renew(ctx context.Context, now time.Time) error {
	return heartbeat(ctx, l.s.db, fmt.Sprintf("bisection %d", l.id),
		`UPDATE bisections SET heartbeat_at = ? WHERE id = ? AND owner = ?`, Timestamp(now), l.id, l.owner.ID)
}

// Reopen marks the bisection running again, for a resume.
func (l *BisectionLease) Reopen(ctx context.Context) error {
	_, err := l.s.db.ExecContext(ctx, `UPDATE bisections SET status = ?, finished_at = NULL, error = NULL
		WHERE id = ? AND owner = ?`, ExperimentRunning, l.id, l.owner.ID)
	if err != nil {
		return fmt.Errorf("reopen bisection %d: %w", l.id, err)
	}
	return nil
}

// Finish records the bisection's end (its status, the conclusion's JSON when the search
// ended, an error text) and lets go of the lease, only while this owner holds it.
func (l *BisectionLease) Finish(ctx context.Context, status ExperimentStatus, conclusion, errText string, at time.Time) error {
	s := l.s
	res, err := s.db.ExecContext(ctx, `UPDATE bisections SET status = ?, conclusion = coalesce(?, conclusion), finished_at = ?,
		error = ?, owner = NULL, owner_host = NULL, owner_pid = NULL, owner_pid_namespace = NULL, heartbeat_at = NULL
		WHERE id = ? AND owner = ?`,
		status, s.nullText(conclusion), Timestamp(at), s.nullText(errText), l.id, l.owner.ID)
	if err != nil {
		return fmt.Errorf("finish bisection %d: %w", l.id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("finish bisection %d: %w", l.id, err)
	} else if n == 0 {
		return fmt.Errorf("bisection %d: %w", l.id, ErrLeaseLost)
	}
	return nil
}

// AddBisectionStep records a step before its experiment runs, so that a resumed
// bisection finds the experiment by name. A step already recorded gives ErrStepTaken.
func (s *Store) AddBisectionStep(ctx context.Context, st BisectionStep) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO bisection_steps (bisection_id, step, role, applied, experiment_name)
		VALUES (?, ?, ?, ?, ?)`, st.BisectionID, st.Step, st.Role, st.Applied, st.ExperimentName)
	if err != nil {
		if isConstraint(err) {
			return fmt.Errorf("bisection %d step %d: %w", st.BisectionID, st.Step, ErrStepTaken)
		}
		return fmt.Errorf("bisection %d step %d: %w", st.BisectionID, st.Step, err)
	}
	return nil
}

// SetBisectionStep links a step to its experiment and records its outcome (empty: not
// judged yet).
func (s *Store) SetBisectionStep(ctx context.Context, bisectionID int64, step int, experimentID int64, outcome string) error {
	var o sql.NullString
	if outcome != "" {
		o = sql.NullString{String: outcome, Valid: true}
	}
	_, err := s.db.ExecContext(ctx, `UPDATE bisection_steps SET experiment_id = ?, outcome = ? WHERE bisection_id = ? AND step = ?`,
		experimentID, o, bisectionID, step)
	if err != nil {
		return fmt.Errorf("bisection %d step %d: %w", bisectionID, step, err)
	}
	return nil
}

// isConstraint reports whether err is SQLite refusing a row that breaks a key.
func isConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}

func bisectionRow(ctx context.Context, q sqlx.QueryerContext, id int64) (BisectionRow, error) {
	var b BisectionRow
	err := sqlx.GetContext(ctx, q, &b, `SELECT * FROM bisections WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("bisection %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("bisection %d: %w", id, err)
	}
	return b, nil
}

// FindBisection resolves what a user typed: a bisection's id, or its name (the newest of
// that name); empty means the newest bisection. It wraps ErrNotFound when none matches.
func FindBisection(ctx context.Context, db *sqlx.DB, ref string) (BisectionRow, error) {
	var b BisectionRow
	var err error
	switch id, convErr := strconv.ParseInt(ref, 10, 64); {
	case ref == "":
		err = db.GetContext(ctx, &b, `SELECT * FROM bisections ORDER BY id DESC LIMIT 1`)
	case convErr == nil:
		return BisectionByID(ctx, db, id)
	default:
		err = db.GetContext(ctx, &b, `SELECT * FROM bisections WHERE name = ? ORDER BY id DESC LIMIT 1`, ref)
	}
	if errors.Is(err, sql.ErrNoRows) {
		if ref == "" {
			return b, fmt.Errorf("no bisections: %w", ErrNotFound)
		}
		return b, fmt.Errorf("bisection %q: %w", ref, ErrNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("bisection %q: %w", ref, err)
	}
	return b.withLease(time.Now()), nil
}

// BisectionByID is bisection id. It wraps ErrNotFound when there is none.
func BisectionByID(ctx context.Context, db *sqlx.DB, id int64) (BisectionRow, error) {
	b, err := bisectionRow(ctx, db, id)
	if err != nil {
		return b, err
	}
	return b.withLease(time.Now()), nil
}

// ListBisections lists every bisection, newest first.
func ListBisections(ctx context.Context, db *sqlx.DB) ([]BisectionRow, error) {
	var out []BisectionRow
	if err := db.SelectContext(ctx, &out, `SELECT * FROM bisections ORDER BY id DESC`); err != nil {
		return nil, fmt.Errorf("bisections: %w", err)
	}
	now := time.Now()
	for i := range out {
		out[i] = out[i].withLease(now)
	}
	return out, nil
}

// BisectionSteps lists a bisection's steps in order.
func BisectionSteps(ctx context.Context, db *sqlx.DB, id int64) ([]BisectionStep, error) {
	var out []BisectionStep
	if err := db.SelectContext(ctx, &out, `SELECT * FROM bisection_steps WHERE bisection_id = ? ORDER BY step`, id); err != nil {
		return nil, fmt.Errorf("steps of bisection %d: %w", id, err)
	}
	return out, nil
}

// ParsedConclusion decodes what the bisection's search concluded; nil while it has no
// conclusion (still running, or stopped before its search ended).
func (b BisectionRow) ParsedConclusion() (*BisectionConclusion, error) {
	if !b.Conclusion.Valid {
		return nil, nil
	}
	var c BisectionConclusion
	if err := json.Unmarshal([]byte(b.Conclusion.String), &c); err != nil {
		return nil, fmt.Errorf("bisection %d: stored conclusion: %w", b.ID, err)
	}
	return &c, nil
}

// BisectionConclusion is what a bisection's search found, as bisections.conclusion keeps
// it (JSON). Changes are 0-based indexes into the bisection's changes.
type BisectionConclusion struct {
	// Status is culprit, not-reproduced or uncertain.
	Status ConclusionStatus `json:"status"`
	// Culprit is the confirmed culprit's changes, ascending; ConfirmedBy the step whose
	// confirmation A/B corrupted.
	Culprit     []int `json:"culprit,omitempty"`
	ConfirmedBy int   `json:"confirmed_by,omitempty"`
	// Known are the changes shown to belong to the culprit when the search could not
	// finish, Candidates those among which its next member lies.
	Known      []int `json:"known,omitempty"`
	Candidates []int `json:"candidates,omitempty"`
	// StoppedAt is the step that ended an uncertain search (0 when the budget did).
	StoppedAt int `json:"stopped_at,omitempty"`
	// Reason says in a sentence or two why the search ended as it did.
	Reason string `json:"reason"`
	// Revert is the revert check's outcome (every change but the culprit's against
	// good), RevertStep its step; empty when it did not run.
	Revert     string `json:"revert,omitempty"`
	RevertStep int    `json:"revert_step,omitempty"`
	// Steps is the number of steps taken.
	Steps int `json:"steps"`
}

// BisectionChange is one change of a bisection as stored: its kind (env or flag), its
// name and what it does, credentials hidden.
type BisectionChange struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Label string `json:"label"`
	Good  string `json:"good"`
	Bad   string `json:"bad"`
}
