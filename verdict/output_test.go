package verdict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// TestCompleteKnowsACutVerdict: a verdict written whole is complete; empty, cut at any
// byte, or another experiment's, it is not.
func TestCompleteKnowsACutVerdict(t *testing.T) {
	v := buildExample(t, "quickstart")
	var buf bytes.Buffer
	if err := v.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	md := buf.Bytes()
	id := v.Experiment.ID
	if !Complete(md, id) {
		t.Fatalf("the whole verdict is not complete:\n%s", md)
	}
	if Complete(md, id+1) {
		t.Error("complete as another experiment's verdict")
	}
	for _, n := range []int{0, 1, 4096, len(md) / 2, len(md) - 1} {
		if n < len(md) && Complete(md[:n], id) {
			t.Errorf("cut at %d of %d bytes: complete", n, len(md))
		}
	}
	// A verdict of a database the user named tells its commands to read that one, where
	// experiment ids start from 1 again; it is as complete as any.
	v.DB = "runs/it's here.db"
	buf.Reset()
	if err := v.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("re-judge with `arbiter verdict %d --db 'runs/it'\\''s here.db'`.\n", id)
	if !bytes.HasSuffix(buf.Bytes(), []byte(want)) || !Complete(buf.Bytes(), id) {
		t.Errorf("footer of a named database, complete %v:\n%s", Complete(buf.Bytes(), id), buf.Bytes()[max(0, buf.Len()-300):])
	}
}

// TestSummaryCarriesNoMarkdown: the JSON summary is read by programs and terminals, so
// its sentences carry no bold marks, code spans or folded sections of the markdown.
func TestSummaryCarriesNoMarkdown(t *testing.T) {
	var vs []*Verdict
	for _, name := range []string{"quickstart", "quickstart4", "aa", "factorial", "sequential", "crash", "nodes"} {
		vs = append(vs, buildExample(t, name))
	}
	for _, name := range []string{"deadlock", "abort-wedge", "throughput"} {
		vs = append(vs, buildOutcomes(t, name))
	}
	for _, v := range vs {
		js, err := json.Marshal(v.Summary())
		if err != nil {
			t.Fatal(err)
		}
		for _, mark := range []string{"**", "`", "<details>", "\\n|"} {
			if bytes.Contains(js, []byte(mark)) {
				t.Errorf("%s: the JSON summary carries %q:\n%s", v.Experiment.Name, mark, js)
			}
		}
	}
}
