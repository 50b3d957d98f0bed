package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
)

// buildArbiter builds the arbiter binary beside the test's refserve (so that it runs that
// refserve) and returns its path: these tests run arbiter as real processes, several at
// once, killed as a user's would be.
func buildArbiter(t *testing.T) string {
	t.Helper()
	buildRefserve(t)
	return testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
}

// gatedSpec is a small experiment whose engines start only once the gate file exists,
// so that a test decides when the experiment may proceed: until then it is recorded,
// owned and waiting for its first engine.
const gatedSpec = `version: 1
name: gated
engine:
  preset: refserve
  command: [sh, -c, 'while [ ! -e "$ARBITER_GATE" ]; do sleep 0.05; done; exec refserve "$@"', refserve-gated]
  args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4]
  env: {ARBITER_GATE: "%s"}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 6, seed: 5, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
timeouts: {startup: 120s, request: 60s, stall: 30s}
`

type gatedExperiment struct {
	dir, spec, db, gate string
	bin                 string
}

func newGatedExperiment(t *testing.T) gatedExperiment {
	dir := t.TempDir()
	g := gatedExperiment{dir: dir, spec: filepath.Join(dir, "spec.yaml"), db: filepath.Join(dir, "results.db"),
		gate: filepath.Join(dir, "gate"), bin: buildArbiter(t)}
	if err := os.WriteFile(g.spec, fmt.Appendf(nil, gatedSpec, g.gate), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g gatedExperiment) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(g.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// command is arbiter as a process on the experiment's database.
func (g gatedExperiment) command(args ...string) *exec.Cmd {
	c := exec.Command(g.bin, append(args, "--db", g.db)...)
	c.Dir = g.dir
	// The engine's wrapper finds refserve on PATH.
	c.Env = append(os.Environ(), "PATH="+filepath.Dir(g.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return c
}

// startRun starts `arbiter run` and returns once it is launching its first arm (so the
// experiment is recorded and its lease taken); the rest of its stderr is kept.
func (g gatedExperiment) startRun(t *testing.T) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	c := g.command("run", g.spec, "--log-level", "info")
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	})
	log := &strings.Builder{}
	launching := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "msg=launching") {
				once.Do(func() { close(launching) })
			}
		}
		once.Do(func() { close(launching) })
	}()
	<-launching
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "msg=launching") {
		c.Wait()
		t.Fatalf("arbiter run ended before launching an arm:\n%s", log.String())
	}
	return c, log
}

type processResult struct {
	code           int
	stdout, stderr string
}

// runAtOnce starts every command, then waits for all of them.
func runAtOnce(t *testing.T, cmds ...*exec.Cmd) []processResult {
	t.Helper()
	outs := make([]*strings.Builder, len(cmds))
	errs := make([]*strings.Builder, len(cmds))
	for i, c := range cmds {
		outs[i], errs[i] = &strings.Builder{}, &strings.Builder{}
		c.Stdout, c.Stderr = outs[i], errs[i]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]processResult, len(cmds))
	for i, c := range cmds {
		c.Wait()
		res[i] = processResult{code: c.ProcessState.ExitCode(), stdout: outs[i].String(), stderr: errs[i].String()}
	}
	return res
}

// liveCounts checks that every arm has exactly one live (not superseded) launch, done,
// and returns its sessions, ok sessions and turns.
func liveCounts(t *testing.T, db string) map[string][3]int {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var rows []struct {
		Arm      string `db:"name"`
		Runs     int    `db:"runs"`
		Done     int    `db:"done"`
		Sessions int    `db:"sessions"`
		OK       int    `db:"ok"`
		Turns    int    `db:"turns"`
	}
	err = ro.Select(&rows, `SELECT a.name, count(*) AS runs, sum(r.status = 'done') AS done,
		sum((SELECT count(*) FROM sessions s WHERE s.run_id = r.id)) AS sessions,
		sum((SELECT count(*) FROM sessions s WHERE s.run_id = r.id AND s.status = 'ok')) AS ok,
		sum((SELECT count(*) FROM turns x WHERE x.run_id = r.id)) AS turns
		FROM runs r JOIN arms a ON a.id = r.arm_id WHERE r.superseded_by IS NULL GROUP BY a.name ORDER BY a.name`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][3]int{}
	for _, r := range rows {
		if r.Runs != 1 || r.Done != 1 {
			t.Errorf("arm %s has %d live launches (%d done); want exactly one, done", r.Arm, r.Runs, r.Done)
		}
		out[r.Arm] = [3]int{r.Sessions, r.OK, r.Turns}
	}
	return out
}

func lsJSON(t *testing.T, g gatedExperiment) []store.ExperimentSummary {
	t.Helper()
	out, err := g.command("ls", "--json").Output()
	if err != nil {
		t.Fatalf("arbiter ls: %v", err)
	}
	var exps []store.ExperimentSummary
	if err := json.Unmarshal(out, &exps); err != nil {
		t.Fatalf("arbiter ls --json: %v\n%s", err, out)
	}
	return exps
}

// TestResumeWhileTheRunGoesOnIsRefused is the double count of the field: `arbiter resume`
// of an experiment whose `arbiter run` is still going, twice at once, used to run every
// arm again beside it. Both resumes are refused, saying who runs it, and the experiment
// ends with one launch per arm.
func TestResumeWhileTheRunGoesOnIsRefused(t *testing.T) {
	t.Parallel()
	g := newGatedExperiment(t)
	run, runLog := g.startRun(t)

	exps := lsJSON(t, g)
	if len(exps) != 1 || exps[0].Status != store.ExperimentRunning || exps[0].Lease == nil || exps[0].Lease.PID != run.Process.Pid {
		t.Fatalf("ls during the run: %+v; want experiment 1 running, its lease held by pid %d", exps, run.Process.Pid)
	}
	res := runAtOnce(t, g.command("resume", "1", "--spec", g.spec), g.command("resume", "1", "--spec", g.spec))
	want := fmt.Sprintf("experiment 1 is being run by arbiter pid %d", run.Process.Pid)
	for i, r := range res {
		if r.code != exitError || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "last heartbeat") {
			t.Errorf("resume %d during the run: exit %d\nstderr: %s\nwant exit %d and %q", i, r.code, r.stderr, exitError, want)
		}
	}

	g.open(t)
	if err := run.Wait(); err != nil {
		t.Fatalf("arbiter run: %v\n%s", err, runLog.String())
	}
	counts := liveCounts(t, g.db)
	for _, arm := range []string{"control", "treatment"} {
		if c := counts[arm]; c[0] != 6 || c[1] != 6 || c[2] < 6*2*2 {
			t.Errorf("arm %s: %d sessions, %d ok, %d turns; want 6, 6 and at least 24", arm, c[0], c[1], c[2])
		}
	}
	if counts["control"][2] != counts["treatment"][2] {
		// The workload is seeded: both arms get the same turns unless one ran twice.
		t.Errorf("live turns differ between arms: %v", counts)
	}
	if exps := lsJSON(t, g); exps[0].Status != store.ExperimentDone || exps[0].Lease != nil {
		t.Errorf("ls after the run: %+v; want done with no lease", exps[0])
	}
}

// TestAbandonedExperimentIsTakenOverByOneResume kills arbiter outright mid-experiment:
// the experiment shows as abandoned at once (its process is gone), and of two resumes
// started together exactly one takes it over.
func TestAbandonedExperimentIsTakenOverByOneResume(t *testing.T) {
	t.Parallel()
	g := newGatedExperiment(t)
	run, _ := g.startRun(t)
	if err := run.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	run.Wait()

	exps := lsJSON(t, g)
	if len(exps) != 1 || exps[0].Status != store.ExperimentAbandoned {
		t.Fatalf("ls after kill -9: %+v; want the experiment abandoned", exps)
	}
	code, stdout, _ := runCLI(t, "ls", "--db", g.db)
	if code != 0 || !strings.Contains(stdout, "abandoned") {
		t.Errorf("ls: exit %d\n%s", code, stdout)
	}

	g.open(t)
	res := runAtOnce(t, g.command("resume", "1", "--spec", g.spec), g.command("resume", "1", "--spec", g.spec))
	won := 0
	for i, r := range res {
		switch {
		case r.code == exitOK:
			won++
		case r.code == exitError && strings.Contains(r.stderr, "is being run by arbiter pid"):
		case r.code == exitUsage && strings.Contains(r.stderr, "nothing to resume"):
			// It started after the other had finished.
		default:
			t.Errorf("resume %d: exit %d\nstdout: %s\nstderr: %s", i, r.code, r.stdout, r.stderr)
		}
	}
	if won != 1 {
		t.Fatalf("%d resumes ran the experiment; want exactly one", won)
	}
	counts := liveCounts(t, g.db)
	for _, arm := range []string{"control", "treatment"} {
		if c := counts[arm]; c[0] != 6 || c[1] != 6 {
			t.Errorf("arm %s: %d live sessions, %d ok; want 6 and 6", arm, c[0], c[1])
		}
	}
	if counts["control"][2] != counts["treatment"][2] {
		t.Errorf("live turns differ between arms: %v", counts)
	}
	if exps := lsJSON(t, g); exps[0].Status != store.ExperimentDone || exps[0].Sessions != 12 {
		t.Errorf("ls after the resume: %+v; want done with 12 sessions", exps[0])
	}
}

// TestResumeWritesAMissingVerdict: arbiter killed while it wrote the verdict leaves the
// experiment done and no verdict; resume writes it instead of refusing.
func TestResumeWritesAMissingVerdict(t *testing.T) {
	t.Parallel()
	g := newGatedExperiment(t)
	g.open(t)
	var out, errb strings.Builder
	c := g.command("run", g.spec)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		t.Fatalf("arbiter run: %v\n%s", err, errb.String())
	}
	// Where the killed arbiter would have left it: status done, no verdict.
	written, _ := filepath.Glob(filepath.Join(g.dir, "verdicts", "gated-*-1.md"))
	if len(written) != 1 {
		t.Fatalf("verdicts written: %v, want one gated-DB-1.md", written)
	}
	verdictPath := written[0]
	if err := os.Remove(verdictPath); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "resume", "1", "--db", g.db)
	if code != exitOK || !strings.Contains(stdout, "its verdict was missing: written now") || !strings.Contains(stdout, "verdict: "+verdictPath) {
		t.Fatalf("resume of a done experiment without its verdict: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	b, err := os.ReadFile(verdictPath)
	if err != nil || !strings.Contains(string(b), "# Verdict: gated (experiment 1)") {
		t.Fatalf("verdict written: %v\n%s", err, b)
	}
	code, _, stderr = runCLI(t, "resume", "1", "--db", g.db)
	if code != exitUsage || !strings.Contains(stderr, "nothing to resume") || !strings.Contains(stderr, verdictPath) {
		t.Errorf("resume with the verdict there: exit %d, %s", code, stderr)
	}
}

// TestQueryEndsAndWritesNothing runs the hostile queries of the field through the real
// binary, under a deadline: they spun at 100% CPU, or created files while saying nothing
// was changed.
func TestQueryEndsAndWritesNothing(t *testing.T) {
	bin := buildArbiter(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.CreateExperiment(context.Background(), store.Experiment{Name: "q", Spec: "x"})
	s.Close()
	query := func(sql string, args ...string) processResult {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, bin, append([]string{"query", sql, "--db", db}, args...)...)
		var out, errb strings.Builder
		c.Stdout, c.Stderr = &out, &errb
		c.Run()
		if ctx.Err() != nil {
			t.Fatalf("query %q did not end within 30s", sql)
		}
		return processResult{c.ProcessState.ExitCode(), out.String(), errb.String()}
	}
	for _, q := range []string{"SELECT 1 AS one; -- note", "SELECT 1 AS one;;", "SELECT 1 AS one; /* x */"} {
		if r := query(q, "--format", "csv"); r.code != 0 || r.stdout != "one\n1\n" {
			t.Errorf("query %q: exit %d, %q, %s", q, r.code, r.stdout, r.stderr)
		}
	}
	r := query("SELECT 1 AS a; SELECT 2 AS b", "--format", "csv")
	if r.code != 0 || r.stdout != "a\n1\n\nb\n2\n" {
		t.Errorf("two statements: exit %d, %q", r.code, r.stdout)
	}
	r = query("SELECT 1 AS a; SELECT 2 AS b", "--json")
	if r.code != 0 || r.stdout != "[{\"a\":1}]\n[{\"b\":2}]\n" {
		t.Errorf("two statements as json: exit %d, %q", r.code, r.stdout)
	}
	for _, q := range []string{"SELECT 1; ATTACH '" + filepath.Join(dir, "x.db") + "' AS x",
		"SELECT 1; VACUUM INTO '" + filepath.Join(dir, "v.db") + "'"} {
		r := query(q)
		if r.code != exitUsage || !strings.Contains(r.stderr, "nothing was changed") || r.stdout != "" {
			t.Errorf("query %q: exit %d\nstdout: %s\nstderr: %s", q, r.code, r.stdout, r.stderr)
		}
	}
	for _, f := range []string{"x.db", "v.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("a refused query created %s", f)
		}
	}
	if r := query("/* nothing */ ;"); r.code != exitUsage || !strings.Contains(r.stderr, "no SQL statement") {
		t.Errorf("a query of comments only: exit %d, %s", r.code, r.stderr)
	}
}

// TestRunRefusesAnotherProgramsDatabase: --db pointing at a user's own SQLite file must
// not get arbiter's tables added beside the user's.
func TestRunRefusesAnotherProgramsDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "mine.db")
	mine, err := sqlx.Open("sqlite3", db)
	if err != nil {
		t.Fatal(err)
	}
	mine.MustExec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)`)
	mine.Close()
	before, _ := os.ReadFile(db)
	code, _, stderr := runCLI(t, "run", "../../examples/quickstart.yaml", "--db", db)
	if code != exitUsage || !strings.Contains(stderr, "not an arbiter database") || !strings.Contains(stderr, "customers") {
		t.Fatalf("run --db on a user's database: exit %d, %s", code, stderr)
	}
	if after, _ := os.ReadFile(db); string(before) != string(after) {
		t.Error("the user's database changed")
	}
	for _, cmd := range [][]string{{"ls"}, {"query", "SELECT 1"}, {"migrate"}} {
		code, _, stderr := runCLI(t, append(cmd, "--db", db)...)
		if code == 0 || !strings.Contains(stderr, "not an arbiter database") {
			t.Errorf("%s on a user's database: exit %d, %s", cmd[0], code, stderr)
		}
	}
}

// TestLsOnAnOlderSchemaSaysHowToUpgrade: a database of an older arbiter is refused by
// readers with the way out, instead of "no such column"; migrate upgrades it.
func TestLsOnAnOlderSchemaSaysHowToUpgrade(t *testing.T) {
	db := filepath.Join(t.TempDir(), "old.db")
	old, err := sqlx.Open("sqlite3", db)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"001_init.sql", "002_design.sql"} {
		b, err := os.ReadFile(filepath.Join("../../store/migrations", m))
		if err != nil {
			t.Fatal(err)
		}
		old.MustExec(string(b))
	}
	old.MustExec(`PRAGMA user_version = 2`)
	old.MustExec(`INSERT INTO experiments (name, spec_path, spec, status, seed, unit, alpha, baseline, arbiter_version, host, created_at)
		VALUES ('before', 's.yaml', 'version: 1', 'done', 1, 'session', 0.05, 'control', 'v0', 'h', '2026-01-01T00:00:00Z')`)
	old.Close()

	code, _, stderr := runCLI(t, "ls", "--db", db)
	if code != exitError || !strings.Contains(stderr, "arbiter migrate --db "+db) || strings.Contains(stderr, "no such column") {
		t.Fatalf("ls on a version 2 database: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "migrate", "--db", db)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("upgraded from schema version 2 to %d", store.SchemaVersion)) {
		t.Fatalf("migrate: exit %d, %s %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "ls", "--db", db)
	if code != 0 || !strings.Contains(stdout, "before") {
		t.Fatalf("ls after migrate: exit %d, %s %s", code, stdout, stderr)
	}
}
