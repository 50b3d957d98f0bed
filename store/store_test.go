package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "arbiter.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// seedExperiment records an experiment with one arm and one launch of it, done.
func seedExperiment(t *testing.T, s *Store) (exp, arm, run int64) {
	t.Helper()
	ctx := context.Background()
	exp, err := s.CreateExperiment(ctx, Experiment{Name: "e", SpecPath: "spec.yaml", Spec: "version: 1", Seed: 42,
		Unit: "session", Alpha: 0.05, Baseline: "control", Version: "test", Host: "h", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	arm, err = s.AddArm(ctx, Arm{ExperimentID: exp, Name: "control", Pins: "{}", Command: "[]", Env: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	run, err = s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: "done", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return exp, arm, run
}

func TestMigrationsSetUserVersionAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := s.DB().Get(&v, "PRAGMA user_version"); err != nil {
		t.Fatal(err)
	}
	if v != SchemaVersion || v < 1 {
		t.Fatalf("user_version = %d, want %d", v, SchemaVersion)
	}
	var mode string
	if err := s.DB().Get(&mode, "PRAGMA journal_mode"); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	var page int
	if err := s.DB().Get(&page, "PRAGMA page_size"); err != nil || page != PageSize {
		t.Errorf("page_size = %d (%v), want %d", page, err, PageSize)
	}
	s.Close()
	// Reopening must not re-run migrations (which would fail on existing tables).
	s2, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s2.Close()
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open on a newer schema: err = %v", err)
	}
}

func TestWriterWritesTurnsLabelsAndSessionsConcurrently(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{MaxBatch: 7})
	var wg sync.WaitGroup
	const sessions, turns = 20, 5
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < turns; j++ {
				w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i, Index: j, Round: j / 2,
					Started: time.Now(), StatusCode: 200, FinishReason: "stop", Content: "hi", Request: "{}",
					Response: "{}", Raw: "data: [DONE]", Corrupted: i%4 == 0 && j == 3,
					Labels: []Label{{Detector: "dsml-leak", Corrupted: i%4 == 0 && j == 3, Reason: "x"}}})
			}
			w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: i, Status: "ok", Turns: turns, Corrupted: i%4 == 0})
		}(i)
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	s.DB().Get(&n, "SELECT count(*) FROM turns")
	if n != sessions*turns {
		t.Errorf("turns = %d, want %d", n, sessions*turns)
	}
	s.DB().Get(&n, "SELECT count(*) FROM labels WHERE corrupted = 1")
	if n != sessions/4 {
		t.Errorf("corrupted labels = %d, want %d", n, sessions/4)
	}
	outs, err := Sessions(context.Background(), s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := TurnMetrics(context.Background(), s.DB(), exp)
	if err != nil {
		t.Fatal(err)
	}
	corruptedTurns := map[int]int{}
	for _, m := range metrics {
		if m.Corrupted {
			corruptedTurns[m.Session]++
		}
	}
	corrupted := 0
	for _, o := range outs {
		want := 0
		if o.Corrupted {
			corrupted++
			want = 1
		}
		if corruptedTurns[o.Index] != want {
			t.Errorf("session %d: corrupted turns = %d, want %d", o.Index, corruptedTurns[o.Index], want)
		}
	}
	if len(outs) != sessions || corrupted != sessions/4 {
		t.Errorf("sessions = %d (corrupted %d), want %d (%d)", len(outs), corrupted, sessions, sessions/4)
	}
}

// A key written again (no run does: a resume starts runs of its own) keeps its last
// row, whether the first was written by an earlier writer or earlier in the same batch,
// and the rows after a replaced one in its batch are written too.
func TestWriterReplaysWithoutDuplicates(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	pass := func(w *Writer, p int) {
		for j := 0; j < 3; j++ {
			w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: 0, Index: j, Started: time.Now(),
				Content: fmt.Sprint("pass", p), Request: "{}", Response: "{}",
				Labels: []Label{{Detector: "d", Corrupted: p%2 == 1, Reason: fmt.Sprint("pass", p)}}})
		}
		w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: 0, Status: "ok", Turns: 3 + p})
	}
	w := s.NewWriter(WriterOptions{})
	pass(w, 0)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Passes 1 and 2 go in one batch, and a new session follows them.
	w = s.NewWriter(WriterOptions{Interval: time.Hour})
	pass(w, 1)
	pass(w, 2)
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: 1, Index: 0, Started: time.Now(),
		Content: "after", Request: "{}", Response: "{}", Labels: []Label{{Detector: "d"}}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Turns    int `db:"turns"`
		Labels   int `db:"labels"`
		Sessions int `db:"sessions"`
		Stale    int `db:"stale"`
		After    int `db:"after"`
	}
	err := s.DB().Get(&got, `SELECT (SELECT count(*) FROM turns) AS turns, (SELECT count(*) FROM labels) AS labels,
		(SELECT count(*) FROM sessions) AS sessions,
		(SELECT count(*) FROM turns WHERE session_index = 0 AND content != 'pass2')
		 + (SELECT count(*) FROM labels WHERE session_index = 0 AND (reason != 'pass2' OR corrupted))
		 + (SELECT count(*) FROM sessions WHERE turns != 5) AS stale,
		(SELECT count(*) FROM turns t JOIN labels l USING (run_id, session_index, turn_index)
		 WHERE t.session_index = 1 AND t.content = 'after') AS after`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Turns != 4 || got.Labels != 4 || got.Sessions != 1 || got.Stale != 0 || got.After != 1 {
		t.Errorf("after replays: %+v, want 4 turns, 4 labels, 1 session, 0 stale rows and the turn after them", got)
	}
}

// A turn written again keeps only the labels it is written with: a label of the first
// write that the second lacks would otherwise outlive it and contradict the turn's flag,
// which the divergence pass leaves as it is when it changes no label.
func TestATurnWrittenAgainLosesItsOldLabels(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	exp, arm, run := seedExperiment(t, s)
	turn := func(labels ...Label) Turn {
		bad := false
		for _, l := range labels {
			bad = bad || l.Corrupted
		}
		return Turn{ExperimentID: exp, RunID: run, ArmID: arm, Started: time.Now(), Request: "{}", Response: "{}",
			Corrupted: bad, Labels: labels}
	}
	for _, batch := range [][]Turn{
		{turn(Label{Detector: "dsml-leak", Corrupted: true, Reason: "leak"}), turn(Label{Detector: "repetition"})},
		{turn(Label{Detector: "dsml-leak", Corrupted: true, Reason: "leak"})},
		{turn(Label{Detector: "repetition"})},
	} {
		w := s.NewWriter(WriterOptions{})
		for _, t := range batch {
			w.Turn(t)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteDivergence(ctx, exp, nil, nil); err != nil {
		t.Fatal(err)
	}
	var labels []string
	if err := s.DB().Select(&labels, `SELECT detector || ':' || corrupted FROM labels ORDER BY detector`); err != nil {
		t.Fatal(err)
	}
	var flag bool
	if err := s.DB().Get(&flag, `SELECT corrupted FROM turns`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(labels, []string{"repetition:0"}) || flag {
		t.Errorf("turn written three times: labels %v, corrupted %v; want only the last write's clean label", labels, flag)
	}
}

// The writer hands the bodies to SQLite as bytes; they are stored as the text they
// were, byte for byte (bytes that are not UTF-8 included), an empty body as the empty
// text and empty tools as NULL, as a text argument stores them.
func TestWriterStoresBodiesAsText(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	bodies := []Turn{
		{Request: `{"messages":[{"role":"user","content":"é ✓"}]}`, Response: `{"id":"x"}`, Tools: `[{"type":"function"}]`,
			Raw: "data: {\"a\":1}\n\n\xff\xfe\x00tail"},
		{Request: "", Response: "", Tools: "", Raw: ""},
	}
	w := s.NewWriter(WriterOptions{})
	for i, b := range bodies {
		b.ExperimentID, b.RunID, b.ArmID, b.Session, b.Started = exp, run, arm, i, time.Now()
		w.Turn(b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i, want := range bodies {
		var got struct {
			Types                         string
			Request, Response, Tools, Raw []byte
		}
		err := s.DB().QueryRow(`SELECT typeof(request)||' '||typeof(response)||' '||typeof(tools)||' '||typeof(raw),
			CAST(request AS BLOB), CAST(response AS BLOB), CAST(tools AS BLOB), CAST(raw AS BLOB)
			FROM turns WHERE session_index = ?`, i).Scan(&got.Types, &got.Request, &got.Response, &got.Tools, &got.Raw)
		if err != nil {
			t.Fatal(err)
		}
		wantTypes := "text text text text"
		if want.Tools == "" {
			wantTypes = "text text null text"
		}
		if got.Types != wantTypes {
			t.Errorf("turn %d: stored as %q, want %q", i, got.Types, wantTypes)
		}
		for _, c := range []struct {
			name      string
			got, want string
		}{{"request", string(got.Request), want.Request}, {"response", string(got.Response), want.Response},
			{"tools", string(got.Tools), want.Tools}, {"raw", string(got.Raw), want.Raw}} {
			if c.got != c.want {
				t.Errorf("turn %d: %s stored as %q, want %q", i, c.name, c.got, c.want)
			}
		}
	}
}

// The writer writes a turn's bytes to the file about once, into the WAL, before the
// checkpoint: no statement journal copies the pages a row changes into a temporary
// file first. Measured in the bytes this process hands to write calls (Linux only).
func TestWriterWritesARowOnce(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io:", err)
	}
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	const turns = 240
	raw := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"tok \"}}]}\n\n", 400) // 16 KiB
	before := procIO(t, "wchar")
	w := s.NewWriter(WriterOptions{MaxBatch: 60})
	for i := range turns {
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i / 4, Index: i % 4, Started: time.Now(),
			Content: "answer", Request: `{"messages":[]}`, Response: "{}", Raw: fmt.Sprint(i, raw),
			Labels: []Label{{Detector: "a"}, {Detector: "b"}, {Detector: "c"}, {Detector: "d"}}})
		if i%4 == 3 {
			w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: i / 4, Status: "ok", Turns: 4})
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ratio := float64(procIO(t, "wchar")-before) / float64(turns*len(raw))
	t.Logf("bytes written / bytes of raw bodies = %.2f", ratio)
	// Each body takes one overflow page and part of a leaf; the WAL frames, the pages
	// of the labels and sessions and the partly filled pages make up the rest.
	if ratio > 2 {
		t.Errorf("the writer wrote %.2f bytes for each byte of the bodies, want at most 2", ratio)
	}
}

// StartCheckpoint copies what the WAL holds into the database file while the store
// goes on reading; it never makes a file where there is none.
func TestStartCheckpointCopiesTheWALIntoTheFile(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	const turns = 200 // about 250 pages: under SQLite's automatic checkpoint of 1,000
	raw := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"tok \"}}]}\n\n", 400)
	w := s.NewWriter(WriterOptions{})
	for i := range turns {
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i / 4, Index: i % 4, Started: time.Now(),
			StatusCode: 200, Content: "answer", Request: "{}", Response: "{}", Raw: fmt.Sprint(i, raw)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := s.DB().Get(&pages, "PRAGMA page_count"); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		t.Helper()
		fi, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if got := size(); got >= pages*PageSize {
		t.Fatalf("before the checkpoint the file holds %d bytes of %d pages: nothing left in the WAL to test with", got, pages)
	}
	wait := s.StartCheckpoint()
	out, err := s.OutputTurns(context.Background(), exp)
	if err != nil || len(out) != turns {
		t.Errorf("read beside the checkpoint: %d turns (%v), want %d", len(out), err, turns)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != pages*PageSize {
		t.Errorf("after the checkpoint the file holds %d bytes, want its %d pages of %d", got, pages, PageSize)
	}

	missing := filepath.Join(t.TempDir(), "gone.db")
	if err := checkpoint(missing); err == nil {
		t.Error("a checkpoint of a file that is not there succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a checkpoint of a missing file left %s behind (%v)", missing, err)
	}
}

// The store reads the pages of its file through a memory map: reading every stored turn
// back, as the divergence pass does, makes no read call for the pages in the file.
func TestStoreReadsThroughAMap(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io:", err)
	}
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	const turns = 400
	w := s.NewWriter(WriterOptions{})
	for i := range turns {
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i / 4, Index: i % 4, Started: time.Now(),
			StatusCode: 200, FinishReason: "stop", Content: fmt.Sprint("answer ", i), Request: strings.Repeat("r", 6000),
			Response: "{}", Raw: strings.Repeat("x", 6000)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The WAL's pages are read with read calls; copied into the file, they are mapped.
	// Opened again, the store holds none of them in its cache.
	if _, err := s.DB().Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	again, err := Open(s.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	before := procIO(t, "syscr")
	out, err := again.OutputTurns(context.Background(), exp)
	if err != nil || len(out) != turns {
		t.Fatalf("%d turns read back (%v), want %d", len(out), err, turns)
	}
	// A read call a page would be over 400: each turn fills most of a page.
	if n := procIO(t, "syscr") - before; n > 20 {
		t.Errorf("reading %d turns back made %d read calls, want the pages read through the map", turns, n)
	}
	// So do the readers: the verdict, query, show.
	ro, err := OpenReadOnly(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	before = procIO(t, "syscr")
	var n int
	if err := ro.Get(&n, "SELECT sum(length(raw)) FROM turns"); err != nil || n != turns*6000 {
		t.Fatalf("read-only: %d bytes of raw bodies (%v), want %d", n, err, turns*6000)
	}
	if n := procIO(t, "syscr") - before; n > 20 {
		t.Errorf("reading %d turns back read-only made %d read calls, want the pages read through the map", turns, n)
	}
}

// procIO is a field of /proc/self/io: wchar, the bytes this process has passed to write
// calls; syscr, the read calls it has made.
func procIO(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+": "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/io", field)
	return 0
}

func TestFlushMakesRowsVisibleToReaders(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{Interval: time.Hour})
	defer w.Close()
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Started: time.Now(), Request: "{}", Response: "{}"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var n int
	if err := ro.Get(&n, "SELECT count(*) FROM turns"); err != nil || n != 1 {
		t.Fatalf("reader sees %d turns (err %v), want 1", n, err)
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	s := newStore(t, Options{})
	seedExperiment(t, s)
	ro, err := OpenReadOnly(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Exec("DELETE FROM experiments"); err == nil {
		t.Fatal("DELETE through a read-only connection succeeded")
	}
	var n int
	s.DB().Get(&n, "SELECT count(*) FROM experiments")
	if n != 1 {
		t.Fatalf("experiments = %d after refused DELETE, want 1", n)
	}
}

func TestOpenReadOnlyOnMissingOrForeignFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenReadOnly(filepath.Join(dir, "missing.db")); err == nil {
		t.Error("OpenReadOnly on a missing file succeeded")
	}
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o644)
	if _, err := OpenReadOnly(empty); err == nil || !strings.Contains(err.Error(), "not an arbiter database") {
		t.Errorf("OpenReadOnly on an empty file: %v", err)
	}
}

func TestRedactionReachesNoByteOfTheFile(t *testing.T) {
	const secret = "hf_SuperSecretToken123"
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	s, err := Open(path, Options{Redact: func(v string) string { return strings.ReplaceAll(v, secret, "[redacted]") }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp, err := s.CreateExperiment(ctx, Experiment{Name: "e", SpecPath: "x", Spec: "token: " + secret, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	arm, _ := s.AddArm(ctx, Arm{ExperimentID: exp, Name: "a", Pins: "{}", Command: `["serve","--token",` + `"` + secret + `"]`, Env: "{}"})
	run, _ := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Status: "starting", Started: time.Now()})
	s.UpdateRun(ctx, Run{ID: run, Status: "crashed", Error: "exit: " + secret, LogTail: secret, ServerInfo: `{"t":"` + secret + `"}`})
	w := s.NewWriter(WriterOptions{})
	w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Started: time.Now(), Content: secret, Request: secret,
		Response: secret, Raw: secret, Error: secret, Labels: []Label{{Detector: "d", Reason: secret}}})
	w.Close()
	s.FinishExperiment(ctx, exp, "failed", secret, time.Now())
	s.Close()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s contains the secret", e.Name())
		}
	}
}

func TestFindExperimentByIDAndName(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	first, _ := s.CreateExperiment(ctx, Experiment{Name: "same", Created: time.Now()})
	second, _ := s.CreateExperiment(ctx, Experiment{Name: "same", Created: time.Now()})
	e, err := FindExperiment(ctx, s.DB(), fmt.Sprint(first))
	if err != nil || e.ID != first {
		t.Fatalf("by id: %v %v", e.ID, err)
	}
	e, err = FindExperiment(ctx, s.DB(), "same")
	if err != nil || e.ID != second {
		t.Fatalf("by name: got %d (%v), want newest %d", e.ID, err, second)
	}
	if _, err := FindExperiment(ctx, s.DB(), "nope"); err == nil {
		t.Fatal("unknown name found")
	}
}

// benchTurnParts are a tool-calling agent's request of 3 KiB, the tools it offers, and the
// four labels of the built-in response detectors, for the store's benchmarks.
func benchTurnParts() (request, tools string, labels []Label) {
	request = `{"model":"bench","messages":[` + strings.Repeat(`{"role":"user","content":"What is the weather in Paris today, and in Berlin?"},`, 40) + `{"role":"user","content":"go"}]}`
	tools = `[` + strings.Repeat(`{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},`, 10) + `{}]`
	labels = []Label{{Detector: "dsml-leak"}, {Detector: "toolcall-schema"}, {Detector: "repetition"}, {Detector: "finish-anomaly"}}
	return request, tools, labels
}

// BenchmarkWriterTurns writes turns the size of a tool-calling agent's at 64 streamed
// chunks (the whole-path benchmark's: a raw stream of about 12 KiB, a request of 3 KiB,
// the tools offered, four labels), each run on a fresh file.
func BenchmarkWriterTurns(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "a.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	exp, _ := s.CreateExperiment(ctx, Experiment{Name: "b", Created: time.Now()})
	arm, _ := s.AddArm(ctx, Arm{ExperimentID: exp, Name: "a", Pins: "{}", Command: "[]", Env: "{}"})
	run, _ := s.StartRun(ctx, Run{ExperimentID: exp, ArmID: arm, Status: "ready", Started: time.Now()})
	var raw strings.Builder
	for i := range 64 {
		fmt.Fprintf(&raw, "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1733000000,\"model\":\"bench\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", i)
	}
	request, tools, labels := benchTurnParts()
	w := s.NewWriter(WriterOptions{})
	b.SetBytes(int64(raw.Len() + len(request) + len(tools)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Turn(Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i / 4, Index: i % 4, Started: time.Now(),
			Content: "answer", Request: request, Response: `{"choices":[]}`, Tools: tools, Raw: raw.String(), Labels: labels})
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// A database written with SQLite's default pages keeps them: its rows read back and
// new rows go in beside them.
func TestOpenKeepsAnOlderFilesPageSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sqlx.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	old.MustExec("PRAGMA page_size = 4096")
	old.MustExec("PRAGMA journal_mode = WAL")
	old.Close()
	ctx := context.Background()
	for i := range 2 {
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var page int
		if err := s.DB().Get(&page, "PRAGMA page_size"); err != nil || page != 4096 {
			t.Fatalf("open %d: page_size = %d (%v), want the file's 4096", i, page, err)
		}
		if _, err := s.CreateExperiment(ctx, Experiment{Name: fmt.Sprint("e", i), Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.DB().Get(&n, "SELECT count(*) FROM experiments"); err != nil || n != i+1 {
			t.Fatalf("open %d: %d experiments (%v)", i, n, err)
		}
		s.Close()
	}
}

func TestOpenMigratesAVersionOneDatabaseKeepingItsRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sqlx.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := migrationFiles.ReadFile("migrations/001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	old.MustExec(string(v1))
	old.MustExec("PRAGMA user_version = 1")
	old.MustExec(`INSERT INTO experiments (name, spec_path, spec, status, seed, unit, alpha, baseline, arbiter_version, host, created_at)
		VALUES ('old', 's.yaml', 'version: 1', 'done', 1, 'session', 0.05, 'control', 'v0', 'h', '2026-01-01T00:00:00Z')`)
	old.Close()

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := FindExperiment(context.Background(), s.DB(), "old")
	if err != nil {
		t.Fatal(err)
	}
	if e.Design != "{}" || e.ParsedDesign().Blocks != 1 || e.StoppedEarly.Valid {
		t.Errorf("migrated row: design %q, stopped %v", e.Design, e.StoppedEarly)
	}
}

func TestDatabaseIDIsAUUIDUniquePerFileAndStable(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	ids := map[string]bool{}
	uuidShape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for i := range 20 {
		path := filepath.Join(dir, fmt.Sprintf("db%d.db", i))
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		id, err := DatabaseID(ctx, s.DB())
		if err != nil {
			t.Fatal(err)
		}
		if !uuidShape.MatchString(id) {
			t.Fatalf("database id %q is not a version-4 UUID", id)
		}
		if ids[id] {
			t.Fatalf("database id %q made twice", id)
		}
		ids[id] = true
		s.Close()
		// Reopening keeps the id the file was created with.
		s, err = Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		again, err := DatabaseID(ctx, s.DB())
		s.Close()
		if err != nil || again != id {
			t.Fatalf("reopened database id %q, %v; want %q", again, err, id)
		}
		if ShortID(id) != id[:8] {
			t.Fatalf("ShortID(%q) = %q", id, ShortID(id))
		}
	}
}

func TestOpenRefusesAnotherProgramsDatabaseAndLeavesItAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.db")
	user, err := sqlx.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	user.MustExec(`CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)`)
	user.MustExec(`INSERT INTO invoices (total) VALUES (12.5)`)
	user.Close()
	before, _ := os.ReadFile(path)

	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNotArbiterDatabase) || !strings.Contains(err.Error(), "invoices") {
		t.Fatalf("Open of a user's own database: %v; want ErrNotArbiterDatabase naming its tables", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused file changed")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "mine.db-*")); len(left) != 0 {
		t.Errorf("the refused file got companions %q (WAL switched on?)", left)
	}
	if _, err := OpenReadOnly(path); !errors.Is(err, ErrNotArbiterDatabase) {
		t.Errorf("OpenReadOnly of a user's own database: %v", err)
	}
	if _, _, err := Migrate(path); !errors.Is(err, ErrNotArbiterDatabase) {
		t.Errorf("Migrate of a user's own database: %v", err)
	}

	// Another program that marks its files with an application id, and one that uses
	// user_version for its own schema.
	for _, pragma := range []string{"PRAGMA application_id = 1234", "PRAGMA user_version = 3"} {
		p := filepath.Join(dir, fmt.Sprintf("other%d.db", len(pragma)))
		db, err := sqlx.Open("sqlite3", p)
		if err != nil {
			t.Fatal(err)
		}
		db.MustExec(pragma)
		db.Close()
		if _, err := Open(p, Options{}); !errors.Is(err, ErrNotArbiterDatabase) {
			t.Errorf("Open after %q: %v; want ErrNotArbiterDatabase", pragma, err)
		}
	}
}

func TestReadersRefuseAnOlderSchemaUntilMigrated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sqlx.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"001_init.sql", "002_design.sql", "003_resume.sql"} {
		b, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatal(err)
		}
		old.MustExec(string(b))
	}
	old.MustExec("PRAGMA user_version = 3")
	old.MustExec(`INSERT INTO experiments (name, spec_path, spec, status, seed, unit, alpha, baseline, arbiter_version, host, created_at)
		VALUES ('old', 's.yaml', 'version: 1', 'done', 1, 'session', 0.05, 'control', 'v0', 'h', '2026-01-01T00:00:00Z')`)
	old.Close()

	_, err = OpenReadOnly(path)
	if !errors.Is(err, ErrOldSchema) || !strings.Contains(err.Error(), "arbiter migrate --db "+path) ||
		!strings.Contains(err.Error(), "schema version 3") {
		t.Fatalf("OpenReadOnly of a version 3 file: %v; want ErrOldSchema naming arbiter migrate", err)
	}
	from, to, err := Migrate(path)
	if err != nil || from != 3 || to != SchemaVersion {
		t.Fatalf("Migrate: %d -> %d, %v", from, to, err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	list, err := ListExperiments(context.Background(), ro)
	if err != nil || len(list) != 1 || list[0].Name != "old" || list[0].Status != ExperimentDone {
		t.Fatalf("ls after migrating: %+v, %v", list, err)
	}
	if from, to, err := Migrate(path); err != nil || from != to {
		t.Errorf("second Migrate: %d -> %d, %v; want nothing to do", from, to, err)
	}
	if _, _, err := Migrate(filepath.Join(t.TempDir(), "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Migrate of a missing file: %v; want it refused, not created", err)
	}
}

func TestRecordedPace(t *testing.T) {
	s := newStore(t, Options{})
	exp, arm, run := seedExperiment(t, s)
	w := s.NewWriter(WriterOptions{})
	for i, ms := range []int{30, 10, 20, 5000} {
		turn := Turn{ExperimentID: exp, RunID: run, ArmID: arm, Session: i / 2, Index: i % 2, Started: time.Now(),
			Latency: time.Duration(ms) * time.Millisecond}
		if ms == 5000 {
			turn.Error = "stalled" // a failed turn says nothing of the pace
		}
		w.Turn(turn)
	}
	w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: 0, Status: SessionOK, Turns: 2})
	w.Session(Session{ExperimentID: exp, RunID: run, ArmID: arm, Index: 1, Status: SessionTimeout, Turns: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := RecordedPace(context.Background(), s.DB(), exp)
	if err != nil || p.TurnsPerSession != 2 || p.MedianTurn != 20*time.Millisecond {
		t.Fatalf("pace = %+v, %v; want 2 turns per completed session and a 20ms median turn", p, err)
	}
}
