package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jmoiron/sqlx"
)

// An experiment is run by one arbiter process at a time. That process holds the
// experiment's lease (table leases) and renews its heartbeat every LeaseHeartbeat; a
// second `arbiter run` or `arbiter resume` of the same experiment is refused while the
// lease is live, so that no arm ever runs twice at once.
const (
	// LeaseHeartbeat is how often the owner renews its lease.
	LeaseHeartbeat = 5 * time.Second
	// LeaseExpiry is how long a lease stays live without a heartbeat: six missed
	// heartbeats, long enough for a busy database (writers wait up to 10 s for a lock)
	// and short enough that a killed arbiter's experiment can be resumed half a minute
	// later. A lease taken on this host by a process that no longer exists is stale at
	// once.
	LeaseExpiry = 30 * time.Second
)

var (
	// ErrLeaseHeld is wrapped by the *LeaseHeldError returned when another arbiter holds
	// a live lease on the experiment or bisection.
	ErrLeaseHeld = errors.New("experiment is being run by another arbiter")
	// ErrLeaseLost reports that this arbiter no longer holds the lease it took: another
	// one took the experiment over after this one missed its heartbeats for LeaseExpiry.
	ErrLeaseLost = errors.New("lease lost: another arbiter took the experiment over")
)

// Owner identifies the arbiter process that runs an experiment.
type Owner struct {
	// ID is random and unique per process and experiment run.
	ID string
	// Host is the host name, PID the process id on it.
	Host string
	PID  int
	// PIDNamespace tells PID namespaces (containers) on one host apart, so that a pid is
	// only ever looked up where it means the same process; empty where unknown.
	PIDNamespace string
}

// ThisProcess is an owner for the calling process with a fresh random id.
func ThisProcess() Owner {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return Owner{ID: hex.EncodeToString(b[:]), Host: host, PID: os.Getpid(), PIDNamespace: pidNamespace()}
}

// LeaseRow is an experiment's lease as stored.
type LeaseRow struct {
	ExperimentID int64  `db:"experiment_id" json:"-"`
	Owner        string `db:"owner" json:"owner"`
	Host         string `db:"host" json:"host"`
	PID          int    `db:"pid" json:"pid"`
	PIDNamespace string `db:"pid_namespace" json:"-"`
	AcquiredAt   string `db:"acquired_at" json:"acquired_at"`
	HeartbeatAt  string `db:"heartbeat_at" json:"heartbeat_at"`
}

// Heartbeat is the time of the lease's last heartbeat (zero if unreadable).
func (l LeaseRow) Heartbeat() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, l.HeartbeatAt)
	return t
}

// Live reports whether the lease's owner still holds it at now: its last heartbeat is
// younger than LeaseExpiry and, when it was taken on this host (and PID namespace), its
// process still exists.
func (l LeaseRow) Live(now time.Time) bool {
	hb := l.Heartbeat()
	if hb.IsZero() || now.Sub(hb) >= LeaseExpiry {
		return false
	}
	me := thisMachine()
	if l.Host == me.Host && l.PIDNamespace == me.PIDNamespace && l.PIDNamespace != "" {
		return processExists(l.PID)
	}
	return true
}

// Describe says who holds the lease, since when and how recent its heartbeat is.
func (l LeaseRow) Describe(now time.Time) string {
	return fmt.Sprintf("arbiter pid %d on host %s (owner %s), since %s, last heartbeat %s ago",
		l.PID, l.Host, l.Owner, l.AcquiredAt, now.Sub(l.Heartbeat()).Round(100*time.Millisecond))
}

// LeaseHeldError reports an experiment or a bisection whose lease another arbiter
// holds.
type LeaseHeldError struct {
	Of    string // "experiment" or "bisection"
	ID    int64
	Lease LeaseRow
	At    time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%s %d is being run by %s; wait until it ends or stop that arbiter (a lease without a heartbeat for %s counts as abandoned and can be resumed)",
		e.Of, e.ID, e.Lease.Describe(e.At), LeaseExpiry)
}

// Unwrap makes errors.Is(err, ErrLeaseHeld) hold.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// Lease is a lease this process holds on one experiment. Renew it at least every
// LeaseHeartbeat; Finish or Release it at the end.
type Lease struct {
	s            *Store
	experimentID int64
	owner        Owner
}

// ExperimentID is the experiment the lease is on.
func (l *Lease) ExperimentID() int64 { return l.experimentID }

// Owner is the process that holds it.
func (l *Lease) Owner() Owner { return l.owner }

// StartExperiment records a new experiment in state running and takes its lease for
// owner, in one transaction: no other arbiter can resume it before its owner lets go.
// The lease starts at e.Created (now when zero).
func (s *Store) StartExperiment(ctx context.Context, e Experiment, owner Owner) (int64, *Lease, error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("create experiment: %w", err)
	}
	defer tx.Rollback()
	id, err := s.insertExperiment(ctx, tx, e)
	if err != nil {
		return 0, nil, err
	}
	at := e.Created
	if at.IsZero() {
		at = time.Now()
	}
	now := Timestamp(at)
	if _, err := tx.ExecContext(ctx, `INSERT INTO leases (experiment_id, owner, host, pid, pid_namespace, acquired_at, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, id, owner.ID, owner.Host, owner.PID, owner.PIDNamespace, now, now); err != nil {
		return 0, nil, fmt.Errorf("lease experiment %d: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, fmt.Errorf("create experiment: %w", err)
	}
	return id, &Lease{s: s, experimentID: id, owner: owner}, nil
}

// AcquireLease takes the lease on experiment id for owner at now: when nobody holds it,
// or its holder's lease is stale (see LeaseRow.Live). Taking it is a compare-and-swap on
// the row as read, so of several arbiters racing for one experiment, across processes,
// exactly one wins. A live lease gives a *LeaseHeldError.
func (s *Store) AcquireLease(ctx context.Context, id int64, owner Owner, now time.Time) (*Lease, error) {
	stamp := Timestamp(now)
	// A race lost means the row changed under us: look again (a few times at most, since
	// every retry follows someone else's success).
	for range 5 {
		cur, err := leaseOf(ctx, s.db, id)
		if err != nil {
			return nil, err
		}
		var res sql.Result
		switch {
		case cur == nil:
			res, err = s.db.ExecContext(ctx, `INSERT OR IGNORE INTO leases
				(experiment_id, owner, host, pid, pid_namespace, acquired_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				id, owner.ID, owner.Host, owner.PID, owner.PIDNamespace, stamp, stamp)
		case cur.Live(now):
			return nil, &LeaseHeldError{Of: "experiment", ID: id, Lease: *cur, At: now}
		default:
			res, err = s.db.ExecContext(ctx, `UPDATE leases SET owner = ?, host = ?, pid = ?, pid_namespace = ?,
				acquired_at = ?, heartbeat_at = ? WHERE experiment_id = ? AND owner = ? AND heartbeat_at = ?`,
				owner.ID, owner.Host, owner.PID, owner.PIDNamespace, stamp, stamp, id, cur.Owner, cur.HeartbeatAt)
		}
		won, err := swapped(res, err, fmt.Sprintf("lease experiment %d", id))
		if err != nil {
			return nil, err
		}
		if won {
			return &Lease{s: s, experimentID: id, owner: owner}, nil
		}
	}
	return nil, fmt.Errorf("lease experiment %d: %w", id, errLeaseRace)
}

// A lease is taken by a compare-and-swap on its row as read, and renewed by an update
// that names its owner: the two rules of every lease, an experiment's or a bisection's.

// errLeaseRace is a lease that changed hands under every one of a few tries.
var errLeaseRace = errors.New("the lease kept changing hands; try again")

// swapped reports whether a compare-and-swap update changed its one row: false when
// another arbiter changed the row first.
func swapped(res sql.Result, err error, what string) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return n == 1, nil
}

// heartbeat runs a lease's renewal, an update that names its owner; no row changed means
// another arbiter has taken the lease over (ErrLeaseLost).
func heartbeat(ctx context.Context, db *sqlx.DB, what, query string, args ...any) error {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("renew lease on %s: %w", what, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("renew lease on %s: %w", what, err)
	} else if n == 0 {
		return fmt.Errorf("%s: %w", what, ErrLeaseLost)
	}
	return nil
}

// Renew records a heartbeat at now. ErrLeaseLost means another arbiter has taken the
// experiment over: the caller must stop running it.
func (l *Lease) Renew(ctx context.Context, now time.Time) error {
	return heartbeat(ctx, l.s.db, fmt.Sprintf("experiment %d", l.experimentID),
		`UPDATE leases SET heartbeat_at = ? WHERE experiment_id = ? AND owner = ?`, Timestamp(now), l.experimentID, l.owner.ID)
}

// Release lets go of the lease, if this owner still holds it.
func (l *Lease) Release(ctx context.Context) error {
	if _, err := l.s.db.ExecContext(ctx, `DELETE FROM leases WHERE experiment_id = ? AND owner = ?`,
		l.experimentID, l.owner.ID); err != nil {
		return fmt.Errorf("release lease on experiment %d: %w", l.experimentID, err)
	}
	return nil
}

// Finish records the experiment's final status and releases the lease, in one
// transaction and only while this owner holds it: an arbiter that lost its experiment to
// another never overwrites what the new owner records (ErrLeaseLost).
func (l *Lease) Finish(ctx context.Context, status ExperimentStatus, errText string, at time.Time) error {
	s := l.s
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("finish experiment %d: %w", l.experimentID, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE experiment_id = ? AND owner = ?`, l.experimentID, l.owner.ID)
	if err != nil {
		return fmt.Errorf("finish experiment %d: %w", l.experimentID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("finish experiment %d: %w", l.experimentID, err)
	} else if n == 0 {
		return fmt.Errorf("experiment %d: %w", l.experimentID, ErrLeaseLost)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE experiments SET status = ?, finished_at = ?, error = ? WHERE id = ?`,
		status, Timestamp(at), s.nullText(errText), l.experimentID); err != nil {
		return fmt.Errorf("finish experiment %d: %w", l.experimentID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("finish experiment %d: %w", l.experimentID, err)
	}
	return nil
}

// leaseOf reads experiment id's lease; nil when nobody holds one.
func leaseOf(ctx context.Context, q sqlx.QueryerContext, id int64) (*LeaseRow, error) {
	var l LeaseRow
	err := sqlx.GetContext(ctx, q, &l, `SELECT * FROM leases WHERE experiment_id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, readErr(err, "lease of experiment %d", id)
	}
	return &l, nil
}

// Leases lists every lease in the database by experiment, for `arbiter gc` to tell live
// experiments from abandoned ones.
func Leases(ctx context.Context, db *sqlx.DB) (map[int64]LeaseRow, error) {
	var rows []LeaseRow
	if err := db.SelectContext(ctx, &rows, `SELECT * FROM leases`); err != nil {
		return nil, fmt.Errorf("leases: %w", err)
	}
	out := make(map[int64]LeaseRow, len(rows))
	for _, r := range rows {
		out[r.ExperimentID] = r
	}
	return out, nil
}

// thisMachine is the host and PID namespace of this process, for LeaseRow.Live.
var thisMachine = func() func() Owner {
	host, _ := os.Hostname()
	me := Owner{Host: host, PIDNamespace: pidNamespace()}
	return func() Owner { return me }
}()

// KeepRenewed renews a lease (a *Lease or a *BisectionLease) every `every`
// (LeaseHeartbeat when 0) until stop is closed. When another arbiter has taken the lease
// over (ErrLeaseLost) it calls lost and returns; another failure (a busy database) goes
// to failed and is retried at the next beat.
func KeepRenewed(lease interface {
	Renew(ctx context.Context, now time.Time) error
}, every time.Duration, stop <-chan struct{}, lost, failed func(error)) {
	if every <= 0 {
		every = LeaseHeartbeat
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			err := lease.Renew(context.Background(), time.Now())
			switch {
			case errors.Is(err, ErrLeaseLost):
				lost(err)
				return
			case err != nil:
				failed(err)
			}
		}
	}
}

// Held is the error that says another arbiter runs experiment e now (its lease is live),
// or nil.
func (e ExperimentRow) Held(now time.Time) error {
	if e.Status == ExperimentRunning && e.Lease != nil && !e.Abandoned {
		return &LeaseHeldError{Of: "experiment", ID: e.ID, Lease: *e.Lease, At: now}
	}
	return nil
}

// Held is the error that says another arbiter runs bisection b now (its lease is live),
// or nil.
func (b BisectionRow) Held(now time.Time) error {
	if b.Status == ExperimentRunning && !b.Abandoned {
		return &LeaseHeldError{Of: "bisection", ID: b.ID, Lease: *b.Lease(), At: now}
	}
	return nil
}
