package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// queryWithin runs Query and fails the test if it does not return within d: the bug it
// guards against spun at 100% CPU forever.
func queryWithin(t *testing.T, d time.Duration, path, text string) ([]ResultSet, error) {
	t.Helper()
	type result struct {
		rs  []ResultSet
		err error
	}
	done := make(chan result, 1)
	go func() {
		rs, err := Query(context.Background(), path, text)
		done <- result{rs, err}
	}()
	select {
	case r := <-done:
		return r.rs, r.err
	case <-time.After(d):
		t.Fatalf("query %q did not return within %s", text, d)
		return nil, nil
	}
}

// fileState is every file of dir (not its folders) with a hash of its bytes.
func fileState(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

func queryDB(t *testing.T) (path, dir string) {
	t.Helper()
	s := newStore(t, Options{})
	seedExperiment(t, s)
	// A checkpointed, closed file: what changes under a query is then visible in bytes.
	if _, err := s.DB().Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return s.Path(), filepath.Dir(s.Path())
}

func TestQueryEndsOnEmptyTrailingStatements(t *testing.T) {
	path, _ := queryDB(t)
	for _, q := range []string{"SELECT 1; -- note", "SELECT 1;;", "SELECT 1; /* x */", "SELECT 1;\n\n  ;\n-- a\n/* b */ ;",
		"-- lead\nSELECT 1", "  SELECT 1  "} {
		rs, err := queryWithin(t, 10*time.Second, path, q)
		if err != nil || len(rs) != 1 || len(rs[0].Rows) != 1 || rs[0].Rows[0][0] != int64(1) {
			t.Errorf("query %q = %+v, %v; want the one row of SELECT 1", q, rs, err)
		}
	}
	for _, q := range []string{"", ";", ";;", "-- only a comment", "/* x */", " ; -- x"} {
		if _, err := queryWithin(t, 10*time.Second, path, q); !errors.Is(err, ErrNoStatement) {
			t.Errorf("query %q: %v, want ErrNoStatement", q, err)
		}
	}
}

func TestQueryReturnsEveryStatementsRows(t *testing.T) {
	path, _ := queryDB(t)
	rs, err := queryWithin(t, 10*time.Second, path,
		"SELECT count(*) AS n FROM experiments; SELECT name FROM arms; -- end\nSELECT 'a;b' AS semi, 2 AS two")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d result sets, want 3: %+v", len(rs), rs)
	}
	if rs[0].Statement != "SELECT count(*) AS n FROM experiments;" || !slices.Equal(rs[0].Columns, []string{"n"}) || rs[0].Rows[0][0] != int64(1) {
		t.Errorf("first: %+v", rs[0])
	}
	if rs[1].Rows[0][0] != "control" {
		t.Errorf("second: %+v", rs[1])
	}
	// SQLite, not a naive split on ';', delimits statements.
	if rs[2].Statement != "-- end\nSELECT 'a;b' AS semi, 2 AS two" || rs[2].Rows[0][0] != "a;b" || rs[2].Rows[0][1] != int64(2) {
		t.Errorf("third: %+v", rs[2])
	}
}

func TestQueryRefusesEverythingThatWritesAndChangesNoFile(t *testing.T) {
	path, dir := queryDB(t)
	before := fileState(t, dir)
	other := filepath.Join(t.TempDir(), "other")
	refused := map[string]string{
		"SELECT 1; ATTACH '" + other + "-attached.db' AS x": "ATTACH opens",
		"SELECT 1; VACUUM INTO '" + other + "-vacuumed.db'": "not read-only",
		"VACUUM":                                    "not read-only",
		"DELETE FROM turns":                         "writes rows",
		"SELECT 1; DELETE FROM turns":               "writes rows",
		"UPDATE experiments SET name = 'x'":         "writes rows",
		"INSERT INTO arms SELECT * FROM arms":       "writes rows",
		"WITH x AS (SELECT 1) DELETE FROM turns":    "writes rows",
		"DROP TABLE turns":                          "",
		"CREATE TABLE x (a)":                        "schema",
		"CREATE TEMP TABLE x (a)":                   "schema",
		"ALTER TABLE arms ADD COLUMN x":             "",
		"CREATE INDEX i ON arms (name)":             "",
		"REINDEX":                                   "",
		"ANALYZE":                                   "",
		"DETACH main":                               "DETACH",
		"BEGIN; SELECT 1; COMMIT":                   "transactions",
		"SAVEPOINT a":                               "transactions",
		"PRAGMA user_version = 9":                   "sets a value",
		"PRAGMA journal_mode = DELETE":              "sets a value",
		"PRAGMA query_only = 0":                     "sets a value",
		"PRAGMA wal_checkpoint":                     "may change",
		"PRAGMA optimize":                           "may change",
		"PRAGMA incremental_vacuum":                 "may change",
		"SELECT load_extension('/tmp/x.so')":        "load_extension",
		"SELECT 1; SELECT load_extension('x', 'y')": "load_extension",
	}
	for q, why := range refused {
		rs, err := queryWithin(t, 10*time.Second, path, q)
		var qr *QueryRefusedError
		if !errors.As(err, &qr) || !errors.Is(err, ErrQueryRefused) {
			t.Errorf("query %q = %+v, %v; want a QueryRefusedError", q, rs, err)
			continue
		}
		if !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(qr.Why, why) {
			t.Errorf("query %q refused as %q (why %q), want it to say %q and nothing was changed", q, err, qr.Why, why)
		}
	}
	if after := fileState(t, dir); !unchanged(before, after) {
		t.Errorf("files changed under refused queries: before %d files, after %d", len(before), len(after))
	}
	if left, _ := filepath.Glob(other + "*"); len(left) != 0 {
		t.Errorf("refused queries created %q", left)
	}
}

func TestQueryAllowsReadOnlyPragmasAndFunctions(t *testing.T) {
	path, _ := queryDB(t)
	for _, q := range []string{"PRAGMA table_info(turns)", "SELECT * FROM pragma_table_info('arms')", "PRAGMA user_version",
		"PRAGMA integrity_check", "PRAGMA index_list(turns)", "SELECT json_extract('{\"a\":1}', '$.a'), upper('x'), datetime(0, 'unixepoch')",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5) SELECT sum(x) FROM c",
		"EXPLAIN QUERY PLAN SELECT * FROM turns WHERE experiment_id = 1"} {
		rs, err := queryWithin(t, 10*time.Second, path, q)
		if err != nil || len(rs) != 1 || len(rs[0].Rows) == 0 {
			t.Errorf("query %q = %+v, %v; want rows", q, rs, err)
		}
	}
	if _, err := queryWithin(t, 10*time.Second, path, "SELECT ?"); err == nil || !strings.Contains(err.Error(), "parameters") {
		t.Errorf("a parameter: %v", err)
	}
	if _, err := queryWithin(t, 10*time.Second, path, "SELECT * FROM no_such_table"); err == nil || errors.Is(err, ErrQueryRefused) {
		t.Errorf("unknown table: %v, want SQLite's own error", err)
	}
}

// unchanged reports whether a folder holds the same files with the same bytes, but for
// the -wal and -shm files SQLite makes beside a database that a reader opens: those may
// appear, the WAL empty (no frame was written).
func unchanged(before, after map[string][32]byte) bool {
	empty := sha256.Sum256(nil)
	for k, v := range after {
		w, ok := before[k]
		switch {
		case ok && bytes.Equal(v[:], w[:]):
		case !ok && strings.HasSuffix(k, ".db-shm"):
		case !ok && strings.HasSuffix(k, ".db-wal") && v == empty:
		default:
			return false
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			return false
		}
	}
	return true
}

// FuzzQuery runs arbitrary text as a query: it must return, and whatever it returns, no
// file of the database's folder (or any other the text names) may change.
func FuzzQuery(f *testing.F) {
	for _, seed := range []string{"SELECT 1; -- note", "SELECT 1;;", "SELECT 1; /* x */", "SELECT 1; ATTACH 'x.db' AS x",
		"SELECT 1; VACUUM INTO 'v.db'", "PRAGMA user_version = 1", "';", "/*", "--", "SELECT '", "SELECT 1; SELECT 2; DELETE FROM arms",
		"CREATE TRIGGER t AFTER INSERT ON arms BEGIN SELECT 1; END; SELECT 2", "\x00", "SELECT x'00'"} {
		f.Add(seed)
	}
	s, err := Open(filepath.Join(f.TempDir(), "fuzz.db"), Options{})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	exp, _ := s.CreateExperiment(ctx, Experiment{Name: "e", Created: time.Now()})
	s.AddArm(ctx, Arm{ExperimentID: exp, Name: "control", Pins: "{}", Command: "[]", Env: "{}"})
	s.DB().Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	s.Close()
	path, dir := s.Path(), filepath.Dir(s.Path())
	wd, _ := os.Getwd()
	f.Fuzz(func(t *testing.T, text string) {
		before := fileState(t, dir)
		beforeWD := fileState(t, wd)
		rs, err := queryWithin(t, 20*time.Second, path, text)
		if err == nil && len(rs) == 0 {
			t.Fatalf("query %q: no error and no result", text)
		}
		if after := fileState(t, dir); !unchanged(before, after) {
			t.Fatalf("query %q changed the database folder", text)
		}
		if after := fileState(t, wd); !unchanged(beforeWD, after) {
			t.Fatalf("query %q changed the working folder", text)
		}
	})
}

// countingWriter counts the rows a query hands on.
type countingWriter struct{ statements, rows int }

func (c *countingWriter) Statement(string, []string) error { c.statements++; return nil }
func (c *countingWriter) Row([]any) error                  { c.rows++; return nil }

// queryToWithin runs QueryTo and fails the test if it does not return within d.
func queryToWithin(t *testing.T, d time.Duration, path, text string, lim QueryLimits, w RowWriter) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- QueryTo(context.Background(), path, text, lim, w) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("query %q did not return within %s", text, d)
		return nil
	}
}

func wantLimit(t *testing.T, q string, err error, limit QueryLimit, words string) {
	t.Helper()
	var le *QueryLimitError
	if !errors.As(err, &le) || le.Limit != limit || !errors.Is(err, ErrQueryLimit) || !strings.Contains(err.Error(), words) {
		t.Errorf("query %q: %v, want the %s limit saying %q", q, err, limit, words)
	}
}

// A recursive CTE without end, whether it makes no row (count) or rows without end, is
// interrupted at the time limit, with a message that says so.
func TestQueryTimeLimitInterruptsARecursiveCTE(t *testing.T) {
	path, _ := queryDB(t)
	for _, q := range []string{
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION SELECT x + 1 FROM c) SELECT max(x) FROM c",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
	} {
		err := queryToWithin(t, 20*time.Second, path, q, QueryLimits{Timeout: 300 * time.Millisecond, MaxRows: -1, MaxBytes: -1}, &countingWriter{})
		wantLimit(t, q, err, LimitTime, "it ran for 300ms")
	}
	// Cancelling the caller's context (Ctrl-C) is the caller's error, not a limit.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := QueryTo(ctx, path, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", QueryLimits{}, &countingWriter{})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrQueryLimit) {
		t.Errorf("a cancelled query: %v, want the context's own error", err)
	}
}

// One value past the size limit is refused by SQLite itself before it is made, so that
// zeroblob(1e9) never allocates its gigabyte; so are rows that hold more than the limit
// together.
func TestQuerySizeLimitRefusesHugeValues(t *testing.T) {
	path, _ := queryDB(t)
	for _, q := range []string{"SELECT zeroblob(1e9)", "SELECT length(zeroblob(1e9))", "SELECT randomblob(300000000)"} {
		_, err := queryWithin(t, 20*time.Second, path, q)
		wantLimit(t, q, err, LimitBytes, "a value longer than 256 MiB")
	}
	q := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) SELECT zeroblob(100000) FROM c"
	w := &countingWriter{}
	err := queryToWithin(t, 20*time.Second, path, q, QueryLimits{MaxBytes: 1 << 20}, w)
	wantLimit(t, q, err, LimitBytes, "more than 1 MiB of text and blobs")
	if w.rows != 10 {
		t.Errorf("%d rows handed on before the size limit, want the 10 within it", w.rows)
	}
	if err := queryToWithin(t, 20*time.Second, path, "SELECT zeroblob(1e9)", QueryLimits{MaxBytes: 1 << 10}, w); !strings.Contains(fmt.Sprint(err), "longer than 1 KiB") {
		t.Errorf("zeroblob under a 1 KiB limit: %v", err)
	}
}

// The row limit counts the rows of all the statements, and stops past it.
func TestQueryRowLimit(t *testing.T) {
	path, _ := queryDB(t)
	q := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100001) SELECT x FROM c"
	_, err := queryWithin(t, 20*time.Second, path, q)
	wantLimit(t, q, err, LimitRows, "more than 100000 rows")

	w := &countingWriter{}
	q = "SELECT 1 UNION ALL SELECT 2; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 8) SELECT x FROM c"
	if err := queryToWithin(t, 20*time.Second, path, q, QueryLimits{MaxRows: 10}, w); err != nil || w.rows != 10 {
		t.Errorf("10 rows under a limit of 10: %v, %d rows", err, w.rows)
	}
	w = &countingWriter{}
	q = "SELECT 1 UNION ALL SELECT 2; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 9) SELECT x FROM c"
	err = queryToWithin(t, 20*time.Second, path, q, QueryLimits{MaxRows: 10}, w)
	wantLimit(t, q, err, LimitRows, "more than 10 rows")
	if w.rows != 10 || w.statements != 2 {
		t.Errorf("%d rows of %d statements handed on, want 10 of 2", w.rows, w.statements)
	}
}

// Query runs text, one or more SQL statements, against the results database at path
// under the default QueryLimits and returns every statement's rows in order (see
// QueryTo).
func Query(ctx context.Context, path, text string) ([]ResultSet, error) {
	var c resultCollector
	if err := QueryTo(ctx, path, text, QueryLimits{}, &c); err != nil {
		return nil, err
	}
	return c.sets, nil
}

type resultCollector struct{ sets []ResultSet }

func (c *resultCollector) Statement(text string, columns []string) error {
	c.sets = append(c.sets, ResultSet{Statement: text, Columns: columns})
	return nil
}

func (c *resultCollector) Row(values []any) error {
	rs := &c.sets[len(c.sets)-1]
	rs.Rows = append(rs.Rows, values)
	return nil
}
