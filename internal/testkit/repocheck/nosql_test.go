package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sqlText is a string that holds SQL: a statement's keywords, in capitals as arbiter writes
// them, in the order SQL puts them (prose that names INSERT or FROM scratch is not SQL).
var sqlText = regexp.MustCompile(`\b(SELECT\b[\s\S]*\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX|VIEW|TRIGGER)|DROP\s+(TABLE|INDEX)|ALTER\s+TABLE|REPLACE\s+INTO)\b`)

// sqlInStrings lists the string literals of the non-test Go files under dir that hold SQL.
func sqlInStrings(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		found = append(found, literalsMatching(t, path, sqlText)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestNoSQLInCommands: the commands write no SQL of their own, not even a query they
// suggest; the statements live in store, beside the schema they read (docs/ARCHITECTURE.md).
func TestNoSQLInCommands(t *testing.T) {
	root := repoRoot(t)
	for _, hit := range sqlInStrings(t, filepath.Join(root, "cmd")) {
		rel, _ := filepath.Rel(root, hit)
		if rel == "" || strings.HasPrefix(rel, "..") {
			rel = hit
		}
		t.Errorf("SQL in a command (move it into store, behind a function): %s", rel)
	}
}

// The check sees SQL in every form a command could write it, and not in the words that
// only name a statement.
func TestSQLCheckSeesSQL(t *testing.T) {
	dir := t.TempDir()
	src := "package main\n\nconst a = `SELECT node\n\tFROM runs`\n\nvar b = \"INSERT INTO arms VALUES (1)\"\n\nvar c = \"update arms set x = 1\"\n\n" +
		"var d = \"refuses INSERT, UPDATE, DELETE and the image FROM scratch\"\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main_test.go"), []byte("package main\n\nvar e = \"SELECT 1 FROM x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hits := sqlInStrings(t, dir)
	if len(hits) != 2 || !strings.Contains(hits[0], "SELECT node") || !strings.Contains(hits[1], "INSERT INTO") {
		t.Errorf("found %q; want the SELECT and the INSERT, and neither the prose nor the test's", hits)
	}
}
