package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
)

// commands walks the command tree, every command and subcommand but the root.
func commands(c *cobra.Command, visit func(*cobra.Command)) {
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		visit(sub)
		commands(sub, visit)
	}
}

// TestOneMeaningForOutputAndDBOnlyWhereUsed: -o is --output (the file a report goes to)
// wherever it exists, and only commands that use the database take --db.
func TestOneMeaningForOutputAndDBOnlyWhereUsed(t *testing.T) {
	root := newRoot(&globals{})
	usesDB := map[string]bool{"run": true, "resume": true, "verdict": true, "show": true, "ls": true, "query": true,
		"gc": true, "migrate": true, "bisect": true, "plan": true, "repro": true}
	commands(root, func(c *cobra.Command) {
		if f := c.Flags().ShorthandLookup("o"); f != nil && f.Name != "output" {
			t.Errorf("%s: -o is --%s; want --output", c.CommandPath(), f.Name)
		}
		if f := c.Flags().Lookup("output"); f != nil && f.Shorthand != "o" {
			t.Errorf("%s: --output has no -o", c.CommandPath())
		}
		if c.Parent() != root {
			return // stats' subcommands share its answer
		}
		if has := c.Flags().Lookup("db") != nil; has != usesDB[c.Name()] {
			t.Errorf("%s: --db offered %v; it uses a database: %v", c.CommandPath(), has, usesDB[c.Name()])
		}
	})
	for _, name := range []string{"run", "resume", "verdict", "bisect"} {
		c, _, err := root.Find([]string{name})
		if err != nil || c.Flags().Lookup("output") == nil {
			t.Errorf("%s has no -o/--output", name)
		}
	}
	if code, _, stderr := runCLI(t, "validate", "../../examples/quickstart.yaml", "--db", "x.db"); code != exitUsage || !strings.Contains(stderr, "unknown flag: --db") {
		t.Errorf("validate --db: exit %d, %q; want a usage error", code, stderr)
	}
}

// TestNotFoundIsOneExitCode: whatever the command, an experiment, bisection or database
// that is not there exits 4.
func TestNotFoundIsOneExitCode(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	missing := filepath.Join(dir, "missing.db")
	for _, args := range [][]string{
		{"verdict", "99", "--db", db}, {"show", "99", "--db", db}, {"show", "no-such", "--db", db}, {"verdict", "--db", db},
		{"resume", "99", "--db", db}, {"bisect", "--verdict", "99", "--db", db},
		{"ls", "--db", missing}, {"show", "--db", missing}, {"query", "SELECT 1", "--db", missing}, {"resume", "1", "--db", missing},
	} {
		if code, _, stderr := runCLI(t, args...); code != exitNotFound {
			t.Errorf("arbiter %s: exit %d (%s); want %d", strings.Join(args, " "), code, strings.TrimSpace(stderr), exitNotFound)
		}
	}
}

// TestValidateJSONPrintsProblemsOnStdout: an invalid spec's problems come as JSON on
// stdout, with the exit code of an invalid spec.
func TestValidateJSONPrintsProblemsOnStdout(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(spec, []byte("version: 1\nname: x\nengine: {preset: nope}\narms:\n  a: {env: {K: 1}}\n  b: {env: {K: \"2\"}}\nworkload: {sessions: 2, rounds: 1}\n"), 0o644)
	code, out, _ := runCLI(t, "validate", spec, "--json")
	if code != exitUsage {
		t.Errorf("exit %d; want %d", code, exitUsage)
	}
	var got struct {
		Valid    bool          `json:"valid"`
		Problems []specProblem `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout is not one line of JSON (%v):\n%s", err, out)
	}
	want := map[string]specProblem{
		"engine.preset": {File: spec, Line: 3, Col: 18, Field: "engine.preset"},
		"arms.a.env.K":  {File: spec, Line: 5, Col: 16, Field: "arms.a.env.K"},
	}
	if got.Valid || len(got.Problems) != len(want) {
		t.Fatalf("valid %v, problems %+v; want the two of %v", got.Valid, got.Problems, want)
	}
	for _, p := range got.Problems {
		w := want[p.Field]
		if p.File != w.File || p.Line != w.Line || p.Col != w.Col || p.Message == "" {
			t.Errorf("problem %+v; want at %s:%d:%d", p, w.File, w.Line, w.Col)
		}
	}
	// A valid spec: its summary, also one line, marked valid.
	code, out, _ = runCLI(t, "validate", "../../examples/quickstart.yaml", "--json")
	if code != exitOK || !strings.HasPrefix(out, `{"spec":"../../examples/quickstart.yaml","valid":true,`) || strings.Count(out, "\n") != 1 {
		t.Errorf("valid spec: exit %d:\n%s", code, out)
	}
}

// TestJSONIsCompactEverywhere: every command's --json is one document per line.
func TestJSONIsCompactEverywhere(t *testing.T) {
	for _, args := range [][]string{{"stats", "compare", "0/60", "11/60"}, {"stats", "power", "--p0", "0", "--p1", "0.12", "--n", "60"},
		{"validate", "../../examples/quickstart.yaml"}, {"version"}} {
		code, out, stderr := runCLI(t, append(args, "--json")...)
		if code != exitOK || strings.Count(out, "\n") != 1 || !json.Valid([]byte(out)) {
			t.Errorf("arbiter %s --json: exit %d, not one line of JSON:\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
	}
}

// TestLsFormatsAndQuiet: ls prints a table, CSV, JSON, or the ids alone.
func TestLsFormatsAndQuiet(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"first", "second"} {
		id, err := s.CreateExperiment(ctx, store.Experiment{Name: name, SpecPath: "s.yaml", Spec: "version: 1", Created: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		s.FinishExperiment(ctx, id, store.ExperimentDone, "", time.Now())
	}
	s.Close()
	if code, out, _ := runCLI(t, "ls", "-q", "--db", db); code != exitOK || out != "2\n1\n" {
		t.Errorf("ls -q: exit %d, %q; want the ids, newest first", code, out)
	}
	code, out, _ := runCLI(t, "ls", "--format", "csv", "--db", db)
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != exitOK || err != nil || len(recs) != 3 || recs[0][0] != "id" || recs[1][1] != "second" || recs[2][2] != "done" {
		t.Errorf("ls --format csv: exit %d, %v:\n%s", code, err, out)
	}
	for _, args := range [][]string{{"ls", "--format", "json"}, {"ls", "--json"}} {
		code, out, _ := runCLI(t, append(args, "--db", db)...)
		var exps []store.ExperimentSummary
		if code != exitOK || json.Unmarshal([]byte(out), &exps) != nil || len(exps) != 2 || exps[0].Name != "second" {
			t.Errorf("%v: exit %d:\n%s", args, code, out)
		}
	}
	if code, out, _ := runCLI(t, "ls", "--db", db); code != exitOK || !strings.HasPrefix(out, "ID  NAME") || !strings.Contains(out, "second") {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}
	if code, _, _ := runCLI(t, "ls", "--format", "yaml", "--db", db); code != exitUsage {
		t.Errorf("ls --format yaml: exit %d; want %d", code, exitUsage)
	}
}

// TestVersionIsPrintedAndStored: a build given its version at link time (as make build
// does) prints it for version and --version and stores it with the experiments it runs,
// and show prints what its help promises: the status and version, each arm's pins,
// launches, sessions, corrupted, lost and decision, then the headline.
func TestVersionIsPrintedAndStored(t *testing.T) {
	t.Parallel()
	const v = "v9.8.7-test"
	arbiter := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter",
		"GOFLAGS=-buildvcs=false -ldflags=-X=github.com/arbiterlab/arbiter/internal/version.version="+v)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(arbiter, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), "arbiter "+v) {
			t.Errorf("arbiter %s: %q, %v", args[0], out, err)
		}
	}
	if code, out, _ := runCLI(t, "version"); code != exitOK || !strings.HasPrefix(out, "arbiter ") {
		t.Errorf("version in process: exit %d, %q", code, out)
	}

	dir := t.TempDir()
	spec, db := filepath.Join(dir, "spec.yaml"), filepath.Join(dir, "r.db")
	os.WriteFile(spec, []byte(`version: 1
name: versioned
engine: {preset: refserve, args: [--inter-token-delay, 1ms]}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 1, concurrency: 4, seed: 3, temperature: 0}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`), 0o644)
	// --log-level warn leaves the progress lines, without the log's info lines that
	// repeat them.
	cmd := exec.Command(arbiter, "run", spec, "--db", db, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "PATH="+buildRefserve(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "level=INFO") || !strings.Contains(string(out), "engine ready") {
		t.Errorf("run --log-level warn wrote:\n%s", out)
	}
	if code, _, stderr := runCLI(t, "run", spec, "--db", db, "--log-level", "loud"); code != exitUsage || !strings.Contains(stderr, "want debug, info, warn or error") {
		t.Errorf("--log-level loud: exit %d, %s", code, stderr)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var stored string
	if err := ro.Get(&stored, `SELECT arbiter_version FROM experiments WHERE id = 1`); err != nil || stored != v {
		t.Errorf("stored version %q (%v); want %s", stored, err, v)
	}
	out, err = exec.Command(arbiter, "show", "--db", db).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"experiment 1 (versioned): done, started ", " by arbiter " + v + "\n",
		"ARM        PINS            LAUNCHES  SESSIONS  CORRUPTED", "control    BF16_INDEX_K=0  1 done    4         0 (0.0%)",
		"baseline\n", "treatment  BF16_INDEX_K=1  1 done    4 ", "\n\ntreatment corrupted "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
}

// TestListsPrintTimesToTheSecond: ls prints when an experiment started to the second, in
// every format, though the database keeps it to the nanosecond.
func TestListsPrintTimesToTheSecond(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	started := time.Date(2026, 12, 6, 3, 20, 49, 123456789, time.UTC)
	if _, err := s.CreateExperiment(ctx, store.Experiment{Name: "timed", SpecPath: "s.yaml", Spec: "version: 1", Created: started}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "2026-12-06 03:20:49 UTC"},
		{[]string{"ls", "--format", "csv"}, ",2026-12-06T03:20:49Z,"},
		{[]string{"ls", "--json"}, `"created_at":"2026-12-06T03:20:49Z"`},
	} {
		code, out, stderr := runCLI(t, append(c.args, "--db", db)...)
		if code != exitOK || !strings.Contains(out, c.want) || strings.Contains(out, "49.123") {
			t.Errorf("%v: exit %d, want %q and no fraction of a second:\n%s%s", c.args, code, c.want, out, stderr)
		}
	}
}

// TestShowJSONGivesPinsAsData: show --json gives each arm's pins as {"env": ..., "args":
// ...}; an arm that pins nothing has an empty object and list, not words.
func TestShowJSONGivesPinsAsData(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := s.CreateExperiment(ctx, store.Experiment{Name: "pins", SpecPath: "s.yaml", Spec: "version: 1", Baseline: "control", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range []struct{ name, pins string }{
		{"control", `{"env":{},"args":[]}`},
		{"treatment", `{"env":{"BF16_INDEX_K":"1"},"args":["--enable-hierarchical-cache"]}`},
	} {
		if _, err := s.AddArm(ctx, store.Arm{ExperimentID: id, Name: a.name, Position: i, Pins: a.pins, Command: `["refserve"]`, Env: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	s.FinishExperiment(ctx, id, store.ExperimentDone, "", time.Now())
	s.Close()
	code, out, stderr := runCLI(t, "show", "--json", "--db", db)
	var sum struct {
		Arms []struct {
			Name string          `json:"name"`
			Pins json.RawMessage `json:"pins"`
		} `json:"arms"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &sum) != nil || len(sum.Arms) != 2 {
		t.Fatalf("show --json: exit %d:\n%s%s", code, out, stderr)
	}
	want := map[string]string{"control": `{"env":{},"args":[]}`, "treatment": `{"env":{"BF16_INDEX_K":"1"},"args":["--enable-hierarchical-cache"]}`}
	for _, a := range sum.Arms {
		if string(a.Pins) != want[a.Name] {
			t.Errorf("show --json: %s's pins are %s; want %s", a.Name, a.Pins, want[a.Name])
		}
	}
	if strings.Contains(out, "(none)") {
		t.Errorf("show --json says (none):\n%s", out)
	}
}
