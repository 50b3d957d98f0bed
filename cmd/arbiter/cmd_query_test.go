package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// queryTestDB is a results database with one experiment and nothing else.
func queryTestDB(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "q.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateExperiment(context.Background(), store.Experiment{Name: "q", Spec: "x"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return db
}

const twoStatements = "SELECT 1 AS n, 'a,b' AS s UNION ALL SELECT 2, NULL; SELECT name FROM experiments WHERE 0"

// A query within its limits prints every statement's rows in each format.
func TestQueryFormats(t *testing.T) {
	db := queryTestDB(t)
	for format, want := range map[string]string{
		"table": "n  s\n1  a,b\n2  NULL\n\nname\n(no rows)\n",
		"csv":   "n,s\n1,\"a,b\"\n2,NULL\n\nname\n",
		"json":  "[{\"n\":1,\"s\":\"a,b\"},{\"n\":2,\"s\":null}]\n[]\n",
	} {
		code, stdout, stderr := runCLI(t, "query", twoStatements, "--db", db, "--format", format)
		if code != 0 || stdout != want {
			t.Errorf("--format %s: exit %d, stdout %q, want %q (stderr %s)", format, code, stdout, want, stderr)
		}
	}
	// 0 is no limit.
	code, stdout, stderr := runCLI(t, "query", twoStatements, "--db", db, "--format", "csv", "--timeout", "0", "--max-rows", "0", "--max-bytes", "0")
	if code != 0 || !strings.HasPrefix(stdout, "n,s\n1,") {
		t.Errorf("with no limits: exit %d, %q (stderr %s)", code, stdout, stderr)
	}
}

// A query past a limit exits 1 saying which limit it reached and which flag raises it,
// after the rows read before it.
func TestQueryLimits(t *testing.T) {
	db := queryTestDB(t)
	endless := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
	code, _, stderr := runCLI(t, "query", endless, "--db", db, "--timeout", "300ms")
	if code != exitError || !strings.Contains(stderr, "query stopped at its time limit: it ran for 300ms") || !strings.Contains(stderr, "--timeout") {
		t.Errorf("an endless recursive CTE: exit %d, %s", code, stderr)
	}

	code, stdout, stderr := runCLI(t, "query", "SELECT zeroblob(1e9)", "--db", db)
	if code != exitError || !strings.Contains(stderr, "size limit: a value longer than 256 MiB") || !strings.Contains(stderr, "--max-bytes") {
		t.Errorf("SELECT zeroblob(1e9): exit %d, %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("SELECT zeroblob(1e9) printed %q", stdout)
	}
	if code, _, stderr := runCLI(t, "query", "SELECT zeroblob(2000)", "--db", db, "--max-bytes", "1KiB"); code != exitError || !strings.Contains(stderr, "longer than 1 KiB") {
		t.Errorf("a 2000-byte value under --max-bytes 1KiB: exit %d, %s", code, stderr)
	}

	ten := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) SELECT x FROM c"
	code, stdout, stderr = runCLI(t, "query", ten, "--db", db, "--format", "csv", "--max-rows", "5")
	if code != exitError || !strings.Contains(stderr, "row limit: more than 5 rows") || !strings.Contains(stderr, "--max-rows") {
		t.Errorf("10 rows under --max-rows 5: exit %d, %s", code, stderr)
	}
	if stdout != "x\n1\n2\n3\n4\n5\n" {
		t.Errorf("10 rows under --max-rows 5 printed %q, want the first 5", stdout)
	}
	code, stdout, _ = runCLI(t, "query", ten, "--db", db, "--format", "json", "--max-rows", "5")
	if code != exitError || stdout != `[{"x":1},{"x":2},{"x":3},{"x":4},{"x":5}` {
		t.Errorf("json under --max-rows 5: exit %d, %q, want the first 5 and an array left open", code, stdout)
	}
	code, stdout, _ = runCLI(t, "query", ten, "--db", db, "--max-rows", "5")
	if code != exitError || !strings.HasPrefix(stdout, "x\n1\n") || !strings.HasSuffix(stdout, "\n5\n") {
		t.Errorf("table under --max-rows 5: exit %d, %q, want the first 5", code, stdout)
	}

	for _, bad := range [][]string{{"--max-bytes", "lots"}, {"--max-bytes", "-1"}, {"--max-rows", "-1"}, {"--timeout", "-1s"}} {
		if code, _, stderr := runCLI(t, append([]string{"query", "SELECT 1", "--db", db}, bad...)...); code != exitUsage {
			t.Errorf("%v: exit %d, %s", bad, code, stderr)
		}
	}
}
