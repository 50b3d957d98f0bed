package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3"
)

// Turn is one row of turns with its labels.
type Turn struct {
	ExperimentID, RunID, ArmID int64
	Session, Index, Round      int
	Started                    time.Time
	StatusCode                 int
	FinishReason               string
	TTFT, Latency              time.Duration
	// DecodeTime is from the first to the last delta (0: not measured); Deltas the
	// events that carried one.
	DecodeTime        time.Duration
	Deltas            int
	PromptTokens      int
	CompletionTokens  int
	Content           string
	ToolCalls         string // JSON array; empty when none
	Corrupted         bool   // whether any of Labels says so (the divergence pass relies on it)
	Error             string
	Request, Response string // JSON
	Tools             string // JSON array; empty when unknown
	Raw               string
	// TokenTimes are the arrival times of the events that carried generated text,
	// from Started; stored compactly (EncodeTokenTimes).
	TokenTimes []time.Duration
	Labels     []Label
}

// size is what a queued turn holds in memory, roughly: its texts.
func (t *Turn) size() int64 {
	return int64(len(t.Raw) + len(t.Request) + len(t.Response) + len(t.Content) + len(t.ToolCalls) + len(t.Tools) + 8*len(t.TokenTimes) + 512)
}

// Label is one detector's judgement of one turn.
type Label struct {
	Detector  string
	Corrupted bool
	Reason    string
}

// Session is one row of sessions, written when the session ends.
type Session struct {
	ExperimentID, RunID, ArmID int64
	Index, Block               int
	Status                     SessionStatus
	Turns                      int
	Corrupted                  bool // whether any of its turns is; FirstCorruptedTurn is the first that is
	FirstCorruptedTurn         *int
	Error                      string
}

// WriterOptions tune batching. The zero value is valid.
type WriterOptions struct {
	// MaxBatch is the most rows written in one transaction (default 256).
	MaxBatch int
	// Interval is the longest a row waits before it is written (default 200ms), which bounds
	// what a killed orchestrator can lose.
	Interval time.Duration
	// MaxQueueBytes bounds the texts of the turns queued and not yet written (default
	// 64 MiB): a sender blocks beyond it, so that a slow disk slows the workload instead
	// of holding every response in memory. A turn larger than the bound still passes, alone.
	MaxQueueBytes int64
}

// Writer is the store's one writer goroutine: rows sent to it are written in batched
// transactions. Its methods are safe for concurrent use.
type Writer struct {
	s     *Store
	items chan any
	done  chan struct{}
	opts  WriterOptions

	// sendMu is held for reading while a row is handed over and for writing by Close, so
	// that no send races the channel's close.
	sendMu sync.RWMutex
	closed bool

	errMu sync.Mutex
	err   error // first write error; later rows are still attempted

	// queued counts the bytes of turns handed over and not yet written; room is
	// signalled when it falls.
	queueMu sync.Mutex
	room    *sync.Cond
	queued  int64

	// The statements are prepared once on the store's one connection: preparing per
	// row was a fifth of a run's CPU.
	turnStmt, labelStmt, sessionStmt keyedInsert
	prepErr                          error
}

// The rows are inserted by key. Every launch is a run of its own (a resume starts new
// runs and supersedes the old), so a key is not written twice; should one be, the last
// row replaces the stored one, and a turn written again loses the labels it had, so
// that its flag and its labels still agree. Each statement inserts one row, and INSERT
// OR REPLACE runs only when a plain INSERT finds the key taken. A statement that may write
// several rows or entries and then fail a constraint (INSERT OR REPLACE into an indexed
// table, an INSERT of several rows) makes SQLite copy, before it writes them, the pages
// it changes into a statement journal, and with pages of PageSize bytes that journal
// outgrows memory: a temporary file, written page by page. That copy was about three
// pages for every turn, more than the turn itself; a plain single-row INSERT checks its
// constraints before it writes anything and needs none.
const (
	insertTurn = `INSERT INTO turns
		(experiment_id, run_id, arm_id, session_index, turn_index, round, started_at, status_code,
		 finish_reason, ttft_ms, latency_ms, prompt_tokens, completion_tokens, content, tool_calls,
		 corrupted, error, request, response, tools, raw, decode_ms, deltas, token_times)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
		        CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?)`
	insertLabel = `INSERT INTO labels
		(experiment_id, run_id, session_index, turn_index, detector, corrupted, reason)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
	insertSession = `INSERT INTO sessions
		(experiment_id, run_id, arm_id, session_index, block, status, turns, corrupted, first_corrupted_turn, error)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// bodyBytes hands a body to the driver as the bytes of the string, not a copy: the
// driver copies a string argument into a new byte slice before SQLite copies it again,
// and for a run's bodies (the growing requests, the raw streams) that first copy was a
// twelfth of the run's CPU, most of it clearing and faulting in fresh memory. Bytes are
// bound as a blob, so the statement casts them back to the text the column holds, byte
// for byte; nothing writes to them, as nothing may write to a string. An empty body
// stays the empty text (the driver would bind no bytes as NULL).
func bodyBytes(s string) any {
	if s == "" {
		return ""
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// nullBodyBytes is bodyBytes for a column that holds NULL when the body is empty, as
// nullText does.
func (s *Store) nullBodyBytes(v string) any {
	if v == "" {
		return nil
	}
	return bodyBytes(s.redact(v))
}

// keyedInsert is an insert and its INSERT OR REPLACE twin, prepared.
type keyedInsert struct{ insert, replace *sqlx.Stmt }

func prepareKeyed(db *sqlx.DB, insert string) (keyedInsert, error) {
	var k keyedInsert
	var err error
	if k.insert, err = db.Preparex(insert); err != nil {
		return k, err
	}
	k.replace, err = db.Preparex(strings.Replace(insert, "INSERT INTO", "INSERT OR REPLACE INTO", 1))
	return k, err
}

func (k keyedInsert) close() {
	for _, st := range []*sqlx.Stmt{k.insert, k.replace} {
		if st != nil {
			st.Close()
		}
	}
}

// txKeyed is a keyedInsert within one transaction; its replace is bound to the
// transaction only when a key is found taken.
type txKeyed struct {
	tx              *sqlx.Tx
	k               keyedInsert
	insert, replace *sqlx.Stmt
}

func (k keyedInsert) in(tx *sqlx.Tx) *txKeyed {
	return &txKeyed{tx: tx, k: k, insert: tx.Stmtx(k.insert)}
}

// exec inserts one row, replacing the row of the same key if there is one, and says
// whether it did.
func (t *txKeyed) exec(args ...any) (replaced bool, err error) {
	_, err = t.insert.Exec(args...)
	if !keyTaken(err) {
		return false, err
	}
	if t.replace == nil {
		t.replace = t.tx.Stmtx(t.k.replace)
	}
	_, err = t.replace.Exec(args...)
	return err == nil, err
}

// keyTaken reports whether err is an insert's primary key or unique constraint failing:
// the statement stopped before it wrote anything, and the transaction goes on.
func keyTaken(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique)
}

// NewWriter starts the writer goroutine. Close it to flush.
func (s *Store) NewWriter(opts WriterOptions) *Writer {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Interval <= 0 {
		opts.Interval = 200 * time.Millisecond
	}
	if opts.MaxQueueBytes <= 0 {
		opts.MaxQueueBytes = 64 << 20
	}
	w := &Writer{s: s, items: make(chan any, 4*opts.MaxBatch), done: make(chan struct{}), opts: opts}
	w.room = sync.NewCond(&w.queueMu)
	w.turnStmt, w.prepErr = prepareKeyed(s.db, insertTurn)
	if w.prepErr == nil {
		w.labelStmt, w.prepErr = prepareKeyed(s.db, insertLabel)
	}
	if w.prepErr == nil {
		w.sessionStmt, w.prepErr = prepareKeyed(s.db, insertSession)
	}
	if w.prepErr != nil {
		w.prepErr = fmt.Errorf("store writer: prepare: %w", w.prepErr)
	}
	go w.loop()
	return w
}

// Turn queues a turn and its labels. It blocks while the turns queued before it hold
// MaxQueueBytes.
func (w *Writer) Turn(t Turn) {
	n := t.size()
	w.queueMu.Lock()
	for w.queued > 0 && w.queued+n > w.opts.MaxQueueBytes {
		w.room.Wait()
	}
	w.queued += n
	w.queueMu.Unlock()
	w.send(t)
}

// written gives back the bytes of written turns.
func (w *Writer) written(n int64) {
	if n == 0 {
		return
	}
	w.queueMu.Lock()
	w.queued -= n
	w.queueMu.Unlock()
	w.room.Broadcast()
}

// Session queues a finished session.
func (w *Writer) Session(s Session) { w.send(s) }

func (w *Writer) send(v any) {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.closed {
		w.setErr(fmt.Errorf("store writer: row after Close"))
		if t, ok := v.(Turn); ok {
			w.written(t.size())
		}
		return
	}
	w.items <- v
}

// Flush waits until every row queued before the call is written.
func (w *Writer) Flush() error {
	ack := make(chan struct{})
	w.sendMu.RLock()
	if w.closed {
		w.sendMu.RUnlock()
		return w.Err()
	}
	w.items <- flushRequest{ack}
	w.sendMu.RUnlock()
	<-ack
	return w.Err()
}

type flushRequest struct{ ack chan struct{} }

// Close writes what is queued, stops the goroutine and returns the first write error.
func (w *Writer) Close() error {
	w.sendMu.Lock()
	if w.closed {
		w.sendMu.Unlock()
		return w.Err()
	}
	w.closed = true
	close(w.items)
	w.sendMu.Unlock()
	<-w.done
	for _, k := range []keyedInsert{w.turnStmt, w.labelStmt, w.sessionStmt} {
		k.close()
	}
	return w.Err()
}

// Err is the first write error so far.
func (w *Writer) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *Writer) setErr(err error) {
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
}

func (w *Writer) loop() {
	defer close(w.done)
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	var batch []any
	flush := func() {
		if len(batch) > 0 {
			if err := w.write(batch); err != nil {
				w.setErr(err)
			}
			var n int64
			for i, v := range batch {
				if t, ok := v.(Turn); ok {
					n += t.size()
				}
				batch[i] = nil // the texts go now, not when the slot is reused
			}
			w.written(n)
			batch = batch[:0]
		}
	}
	for {
		select {
		case v, ok := <-w.items:
			if !ok {
				flush()
				return
			}
			if f, isFlush := v.(flushRequest); isFlush {
				flush()
				close(f.ack)
				continue
			}
			batch = append(batch, v)
			if len(batch) >= w.opts.MaxBatch {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

func (w *Writer) write(batch []any) error {
	s := w.s
	if w.prepErr != nil {
		return w.prepErr
	}
	tx, err := s.db.BeginTxx(context.Background(), nil)
	if err != nil {
		return fmt.Errorf("store writer: %w", err)
	}
	defer tx.Rollback()
	turns, labels, sessions := w.turnStmt.in(tx), w.labelStmt.in(tx), w.sessionStmt.in(tx)
	for _, v := range batch {
		switch r := v.(type) {
		case Turn:
			var again bool
			again, err = turns.exec(
				r.ExperimentID, r.RunID, r.ArmID, r.Session, r.Index, r.Round, Timestamp(r.Started), r.StatusCode,
				r.FinishReason, ms(r.TTFT), ms(r.Latency), r.PromptTokens, r.CompletionTokens, s.redact(r.Content),
				s.nullText(r.ToolCalls), r.Corrupted, s.nullText(r.Error), bodyBytes(s.redact(r.Request)), bodyBytes(s.redact(r.Response)),
				s.nullBodyBytes(r.Tools), bodyBytes(s.redact(r.Raw)), decodeMS(r.DecodeTime), r.Deltas, EncodeTokenTimes(r.TokenTimes))
			if err != nil {
				return fmt.Errorf("store writer: turn %d/%d of run %d: %w", r.Session, r.Index, r.RunID, err)
			}
			if again {
				if _, err = tx.Exec(`DELETE FROM labels WHERE run_id = ? AND session_index = ? AND turn_index = ?`,
					r.RunID, r.Session, r.Index); err != nil {
					return fmt.Errorf("store writer: labels of turn %d/%d of run %d: %w", r.Session, r.Index, r.RunID, err)
				}
			}
			// In the turn's order: a detector named twice keeps its last label.
			for _, l := range r.Labels {
				if _, err = labels.exec(r.ExperimentID, r.RunID, r.Session, r.Index, l.Detector, l.Corrupted, s.redact(l.Reason)); err != nil {
					return fmt.Errorf("store writer: label %s of turn %d/%d: %w", l.Detector, r.Session, r.Index, err)
				}
			}
		case Session:
			_, err = sessions.exec(r.ExperimentID, r.RunID, r.ArmID, r.Index, r.Block, r.Status, r.Turns, r.Corrupted,
				r.FirstCorruptedTurn, s.nullText(r.Error))
			if err != nil {
				return fmt.Errorf("store writer: session %d of run %d: %w", r.Index, r.RunID, err)
			}
		default:
			return fmt.Errorf("store writer: unexpected row %T", v)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store writer: commit: %w", err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// decodeMS is a decode time for the store: NULL when it was not measured.
func decodeMS(d time.Duration) sql.NullFloat64 {
	return sql.NullFloat64{Float64: ms(d), Valid: d > 0}
}
