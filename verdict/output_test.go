package verdict

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/internal/outfile"
)

// TestWriteFilesRefusesBeforeWritingAnything: when the guard refuses one of a verdict's
// files (here a chart's name is the database), none of them is written.
func TestWriteFilesRefusesBeforeWritingAnything(t *testing.T) {
	v := buildExample(t, "quickstart")
	dir := t.TempDir()
	db := filepath.Join(dir, "v-rounds.svg")
	os.WriteFile(db, []byte("database"), 0o644)
	path := filepath.Join(dir, "v.md")
	err := v.WriteFiles(path, outfile.Guard{Database: db})
	var re *outfile.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("WriteFiles = %v; want a refusal", err)
	}
	if b, _ := os.ReadFile(db); string(b) != "database" {
		t.Errorf("the database holds %q", b)
	}
	for _, f := range Files(path)[:2] {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was written", f)
		}
	}
}
