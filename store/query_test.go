package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
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
