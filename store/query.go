package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/bytesize"
	"io"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// ResultSet is what one statement of a query returned.
type ResultSet struct {
	// Statement is the statement's text as SQLite delimited it.
	Statement string
	Columns   []string
	// Rows hold int64, float64, string (text and blobs), time.Time or nil.
	Rows [][]any
}

var (
	// ErrNoStatement reports a query with nothing to run (empty, only comments or
	// semicolons).
	ErrNoStatement = errors.New("no SQL statement")
	// ErrQueryRefused is wrapped by every *QueryRefusedError.
	ErrQueryRefused = errors.New("query refused")
)

// QueryRefusedError reports a statement the read-only policy refused. It is returned
// before any statement of the query has run: nothing was changed.
type QueryRefusedError struct {
	Statement string
	Why       string
}

func (e *QueryRefusedError) Error() string {
	return fmt.Sprintf("query refused: arbiter query is read-only, and %q was refused (%s); nothing was changed", e.Statement, e.Why)
}

// Unwrap makes errors.Is(err, ErrQueryRefused) hold.
func (e *QueryRefusedError) Unwrap() error { return ErrQueryRefused }

// maxStatements bounds one query's statements, so that a pathological text cannot make
// the reader prepare without end.
const maxStatements = 1000

// The limits of a query whose QueryLimits leave them zero.
const (
	DefaultQueryTimeout  = 30 * time.Second
	DefaultQueryMaxRows  = 100_000
	DefaultQueryMaxBytes = 256 << 20
)

// QueryLimits bound one query, so that no text (a recursive CTE without end,
// zeroblob(1e9), a cross join of the turns) can run, hold or print without end. The zero
// value is the defaults; a negative field is no limit.
type QueryLimits struct {
	// Timeout bounds the whole query, its statements and the handing on of their rows
	// (default DefaultQueryTimeout, 30s): SQLite is interrupted when it passes.
	Timeout time.Duration
	// MaxRows bounds the rows of all the query's statements together (default
	// DefaultQueryMaxRows, 100000).
	MaxRows int64
	// MaxBytes bounds every value SQLite makes or reads (SQLite's SQLITE_LIMIT_LENGTH,
	// so that zeroblob(1e9) fails before it allocates) and the text and blob bytes of
	// all the query's rows together (default DefaultQueryMaxBytes, 256 MiB).
	MaxBytes int64
}

func (l QueryLimits) withDefaults() QueryLimits {
	if l.Timeout == 0 {
		l.Timeout = DefaultQueryTimeout
	}
	if l.MaxRows == 0 {
		l.MaxRows = DefaultQueryMaxRows
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultQueryMaxBytes
	}
	return l
}

// QueryLimit names one of QueryLimits, in QueryLimitError.
type QueryLimit string

// The limits a query can reach.
const (
	LimitTime  QueryLimit = "time"
	LimitRows  QueryLimit = "row"
	LimitBytes QueryLimit = "size"
)

// ErrQueryLimit is wrapped by every *QueryLimitError.
var ErrQueryLimit = errors.New("query limit reached")

// QueryLimitError reports a query stopped at one of its QueryLimits. The rows read
// before it were handed on already; no more were.
type QueryLimitError struct {
	Limit     QueryLimit
	Statement string
	// What says what passed the limit: "it ran for 30s", "more than 100000 rows".
	What string
}

func (e *QueryLimitError) Error() string {
	return fmt.Sprintf("query stopped at its %s limit: %s, in %q", e.Limit, e.What, firstStatement(e.Statement))
}

// Unwrap makes errors.Is(err, ErrQueryLimit) hold.
func (e *QueryLimitError) Unwrap() error { return ErrQueryLimit }

// RowWriter receives a query's rows as they are read, statement by statement, so that
// none are held longer than the writer holds them.
type RowWriter interface {
	// Statement begins the rows of the next statement.
	Statement(text string, columns []string) error
	// Row is one row of the current statement: int64, float64, string (text and
	// blobs), time.Time or nil, the writer's to keep.
	Row(values []any) error
}

// sqliteLimitLength is SQLITE_LIMIT_LENGTH (https://www.sqlite.org/c3ref/c_limit_attached.html).
const sqliteLimitLength = 0

// QueryTo runs text, one or more SQL statements, against the results database at path
// through a read-only connection (see OpenReadOnly) and hands each statement's rows to
// w as they are read, under lim. SQLite itself splits the text: each statement is
// prepared and the rest of the text (SQLite's tail) is prepared next, so empty
// statements and trailing comments end the loop. Every statement is prepared, and so
// authorized, before the first runs: a query with one refused statement runs none.
// A query that reaches a limit ends with a *QueryLimitError.
func QueryTo(ctx context.Context, path, text string, lim QueryLimits, w RowWriter) error {
	lim = lim.withDefaults()
	if lim.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, lim.Timeout, errQueryTimeout)
		defer cancel()
	}
	db, err := OpenReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("query: unexpected driver connection %T", dc)
		}
		if lim.MaxBytes > 0 {
			// SQLite lowers a limit past its own hard one (1e9 bytes) to that.
			prev := c.SetLimit(sqliteLimitLength, int(min(lim.MaxBytes, math.MaxInt32)))
			defer c.SetLimit(sqliteLimitLength, prev)
		}
		// The connection's authorizer again, now noting why it denied, for the message.
		var denied string
		c.RegisterAuthorizer(func(action int, arg1, arg2, _ string) int {
			ok, why := authorizeRead(action, arg1, arg2)
			if !ok && denied == "" {
				denied = why
			}
			return authResult(ok)
		})
		stmts, err := prepareAll(ctx, dc, text, &denied)
		defer func() {
			for _, s := range stmts {
				s.stmt.Close()
			}
		}()
		if err != nil {
			return err
		}
		q := queryRun{lim: lim, w: w}
		for _, s := range stmts {
			if err := q.statement(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// errQueryTimeout is the cause of a query's context that ran out of time, told apart
// from a cancel (Ctrl-C), which stays the caller's own error.
var errQueryTimeout = errors.New("query time limit")

type preparedStatement struct {
	text string
	stmt driver.Stmt
}

// prepareAll prepares every statement of text, following SQLite's tail.
func prepareAll(ctx context.Context, dc any, text string, denied *string) ([]preparedStatement, error) {
	prep, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("query: driver connection %T cannot prepare", dc)
	}
	var stmts []preparedStatement
	rest := strings.TrimSpace(text)
	for rest != "" {
		if len(stmts) >= maxStatements {
			return stmts, fmt.Errorf("query: more than %d statements", maxStatements)
		}
		*denied = ""
		st, err := prep.PrepareContext(ctx, rest)
		if err != nil {
			if *denied != "" {
				return stmts, &QueryRefusedError{Statement: firstStatement(rest), Why: *denied}
			}
			return stmts, fmt.Errorf("query: %w", err)
		}
		tail, empty, err := statementTail(st)
		if err != nil {
			st.Close()
			return stmts, err
		}
		if len(tail) >= len(rest) {
			// SQLite consumed nothing: never loop on the same text.
			st.Close()
			return stmts, fmt.Errorf("query: SQLite made no progress on %q", firstStatement(rest))
		}
		stmtText := strings.TrimSpace(rest[:len(strings.TrimRightFunc(rest, unicode.IsSpace))-len(tail)])
		rest = tail
		if empty {
			// ";" or a comment alone: nothing to run.
			st.Close()
			continue
		}
		stmts = append(stmts, preparedStatement{text: stmtText, stmt: st})
		if ro, ok := st.(interface{ Readonly() bool }); !ok || !ro.Readonly() {
			return stmts, &QueryRefusedError{Statement: stmtText, Why: "it is not read-only: it would write this file or another"}
		}
		if st.NumInput() > 0 {
			return stmts, fmt.Errorf("query: %q has parameters; arbiter query takes none (write the values into the SQL)", stmtText)
		}
	}
	if len(stmts) == 0 {
		return nil, ErrNoStatement
	}
	return stmts, nil
}

// statementTail reads what the driver keeps of a prepare: the text after the statement
// (SQLite's tail, trimmed) and whether a statement was there at all. go-sqlite3 keeps
// both unexported and offers no statement-by-statement API of its own (its own loop
// over the tail runs statements it should not, and never ends on a trailing comment),
// so they are read by reflection; a driver that lacks them fails loudly here, and a
// test pins the driver version that has them.
func statementTail(st driver.Stmt) (tail string, empty bool, err error) {
	v := reflect.ValueOf(st)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		t, s := v.Elem().FieldByName("t"), v.Elem().FieldByName("s")
		if t.IsValid() && t.Kind() == reflect.String && s.IsValid() && s.Kind() == reflect.Pointer {
			return t.String(), s.IsNil(), nil
		}
	}
	return "", false, fmt.Errorf("query: the SQLite driver's statement %T does not expose its tail; arbiter query cannot split statements with it", st)
}

// queryRun is one query's statements run in turn, and what their rows used of its limits.
type queryRun struct {
	lim   QueryLimits
	w     RowWriter
	rows  int64
	bytes int64
}

// statement runs one prepared statement and hands its rows on as they are read.
func (q *queryRun) statement(ctx context.Context, s preparedStatement) error {
	st, ok := s.stmt.(driver.StmtQueryContext)
	if !ok {
		return fmt.Errorf("query: driver statement %T cannot query", s.stmt)
	}
	rows, err := st.QueryContext(ctx, nil)
	if err != nil {
		return q.failed(ctx, s.text, err)
	}
	defer rows.Close()
	cols := rows.Columns()
	if err := q.w.Statement(s.text, cols); err != nil {
		return err
	}
	for {
		vals := make([]driver.Value, len(cols))
		if err := rows.Next(vals); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return q.failed(ctx, s.text, err)
		}
		if q.lim.MaxRows > 0 && q.rows >= q.lim.MaxRows {
			return &QueryLimitError{Limit: LimitRows, Statement: s.text, What: fmt.Sprintf("more than %d rows", q.lim.MaxRows)}
		}
		q.rows++
		row := make([]any, len(vals))
		for i, v := range vals {
			switch x := v.(type) {
			case []byte:
				v = string(x)
				q.bytes += int64(len(x))
			case string:
				q.bytes += int64(len(x))
			}
			row[i] = v
		}
		if q.lim.MaxBytes > 0 && q.bytes > q.lim.MaxBytes {
			return &QueryLimitError{Limit: LimitBytes, Statement: s.text,
				What: fmt.Sprintf("its rows hold more than %s of text and blobs", bytesize.String(q.lim.MaxBytes))}
		}
		if err := q.w.Row(row); err != nil {
			return err
		}
	}
}

// failed is the error of a statement that SQLite ended: a limit it reached when it
// was one, else SQLite's own error.
func (q *queryRun) failed(ctx context.Context, stmt string, err error) error {
	if context.Cause(ctx) == errQueryTimeout {
		return &QueryLimitError{Limit: LimitTime, Statement: stmt, What: fmt.Sprintf("it ran for %s", q.lim.Timeout)}
	}
	if se, ok := errors.AsType[sqlite3.Error](err); ok && se.Code == sqlite3.ErrTooBig {
		return &QueryLimitError{Limit: LimitBytes, Statement: stmt,
			What: fmt.Sprintf("a value longer than %s (SQLite: %v)", bytesize.String(q.lim.MaxBytes), err)}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("query: %s: %w", stmt, err)
}

// firstStatement is the start of text, for messages about a statement SQLite could not
// delimit (it failed to prepare).
func firstStatement(text string) string {
	text = strings.TrimSpace(text)
	if i := strings.IndexByte(text, ';'); i >= 0 {
		text = text[:i]
	}
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return text
}
