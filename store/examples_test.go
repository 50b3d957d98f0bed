package store

import (
	"context"
	"slices"
	"testing"
)

// TestTablesAreTheSchemas: Tables names every table the migrations make, and only those.
func TestTablesAreTheSchemas(t *testing.T) {
	s := newStore(t, Options{})
	var got []string
	if err := s.DB().Select(&got, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(Tables)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Tables, sorted, are %v; the schema has %v", want, got)
	}
}

// TestExampleQueriesRun: every statement arbiter shows users runs, read-only, on a
// database of this schema with an experiment in it.
func TestExampleQueriesRun(t *testing.T) {
	path, _ := queryDB(t)
	texts := []string{FirstQuery, PlacementQuery(1)}
	for _, q := range ExampleQueries {
		texts = append(texts, q.SQL)
	}
	for _, text := range texts {
		var w countingWriter
		if err := QueryTo(context.Background(), path, text, QueryLimits{}, &w); err != nil || w.statements == 0 {
			t.Errorf("%s: %v (%d statements)", text, err, w.statements)
		}
	}
}
