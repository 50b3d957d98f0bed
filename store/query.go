package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
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

// Query runs text, one or more SQL statements, against the results database at path
// through a read-only connection (see OpenReadOnly) and returns every statement's
// result in order. SQLite itself splits the text: each statement is prepared and the
// rest of the text (SQLite's tail) is prepared next, so empty statements and trailing
// comments end the loop. Every statement is prepared, and so authorized, before the
// first runs: a query with one refused statement runs none.
func Query(ctx context.Context, path, text string) ([]ResultSet, error) {
	db, err := OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer conn.Close()
	var out []ResultSet
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("query: unexpected driver connection %T", dc)
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
		for _, s := range stmts {
			rs, err := runStatement(ctx, s)
			if err != nil {
				return err
			}
			out = append(out, rs)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

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

// runStatement runs one prepared statement and reads all its rows.
func runStatement(ctx context.Context, s preparedStatement) (ResultSet, error) {
	rs := ResultSet{Statement: s.text}
	q, ok := s.stmt.(driver.StmtQueryContext)
	if !ok {
		return rs, fmt.Errorf("query: driver statement %T cannot query", s.stmt)
	}
	rows, err := q.QueryContext(ctx, nil)
	if err != nil {
		return rs, fmt.Errorf("query: %s: %w", s.text, err)
	}
	defer rows.Close()
	rs.Columns = rows.Columns()
	for {
		vals := make([]driver.Value, len(rs.Columns))
		if err := rows.Next(vals); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return rs, fmt.Errorf("query: %s: %w", s.text, err)
		}
		row := make([]any, len(vals))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			row[i] = v
		}
		rs.Rows = append(rs.Rows, row)
	}
	return rs, nil
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
