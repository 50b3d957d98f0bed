package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// buildRefserve builds the reference engine once per test binary and returns the folder
// holding it (testbin's, on PATH for the whole test binary).
func buildRefserve(t *testing.T) string {
	t.Helper()
	return filepath.Dir(testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve"))
}

// TestMain puts the folder that testbin builds the commands into on PATH for the whole
// test binary, so that the tests which run refserve by name need not set PATH themselves
// and can run in parallel.
func TestMain(m *testing.M) {
	dir, err := testbin.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// e2eSpec is a small decisive experiment through real refserve processes. The engine is
// wrapped in a shell that prints the secret to its log, as a careless engine might, so the
// test can prove the log is redacted.
const e2eSpec = `version: 1
name: e2e-small
engine:
  preset: refserve
  command: [sh, -c, 'echo "engine auth token: $ARBITER_E2E_TOKEN" >&2; exec refserve "$@"', refserve-wrapper]
  args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --inter-token-delay, 1ms, --enable-metrics]
  secrets: [ARBITER_E2E_TOKEN]
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 24, rounds: 2, concurrency: 24, seed: 7, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
analysis: {unit: session, alpha: 0.05, baseline: control}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`

func TestEndToEndExperimentThroughRealProcesses(t *testing.T) {
	buildRefserve(t)
	const secret = "hf_e2eSecretValue_9f3k"
	t.Setenv("ARBITER_E2E_TOKEN", secret)
	dir := t.TempDir()
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte(e2eSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	verdictPath := filepath.Join(dir, "verdict.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", verdictPath)
	if code != 0 {
		t.Fatalf("arbiter run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "verdict: "+verdictPath) {
		t.Errorf("run did not say where the verdict is:\n%s", stdout)
	}

	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var counts []struct {
		Arm      string `db:"name"`
		Sessions int    `db:"sessions"`
		OK       int    `db:"ok"`
		Turns    int    `db:"turns"`
	}
	if err := ro.Select(&counts, `SELECT a.name, count(*) AS sessions, sum(s.status = 'ok') AS ok, sum(s.turns) AS turns
		FROM sessions s JOIN arms a ON a.id = s.arm_id GROUP BY a.name ORDER BY a.name`); err != nil {
		t.Fatal(err)
	}
	if len(counts) != 2 {
		t.Fatalf("arms with sessions = %d, want 2", len(counts))
	}
	for _, c := range counts {
		if c.Sessions != 24 || c.OK != 24 {
			t.Errorf("arm %s: %d sessions, %d ok; want 24 and 24", c.Arm, c.Sessions, c.OK)
		}
		// Two rounds, each at least a tool call and an answer.
		if c.Turns < 24*2*2 {
			t.Errorf("arm %s: %d turns, want at least %d", c.Arm, c.Turns, 24*2*2)
		}
	}
	var rawOK int
	ro.Get(&rawOK, `SELECT count(*) FROM turns WHERE raw LIKE 'data: %' AND response LIKE '%chat.completion%'`)
	if rawOK == 0 {
		t.Error("no turn kept its raw SSE body and assembled response")
	}
	var fp8Corrupted int
	ro.Get(&fp8Corrupted, `SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'control' AND s.corrupted = 1`)
	if fp8Corrupted != 0 {
		t.Errorf("control (fp8 index-K) has %d corrupted sessions, want 0", fp8Corrupted)
	}
	var infos int
	ro.Get(&infos, `SELECT count(*) FROM runs WHERE status = 'done' AND server_info LIKE '%BF16_INDEX_K%'`)
	if infos != 2 {
		t.Errorf("runs done with server info = %d, want 2", infos)
	}

	v, err := os.ReadFile(verdictPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Verdict: e2e-small", "| control |", "| treatment |", "Fisher", "<summary>Corruption by round</summary>", "<summary>Caveats"} {
		if !bytes.Contains(v, []byte(want)) {
			t.Errorf("verdict lacks %q", want)
		}
	}
	// The engines served --enable-metrics: each arm's running requests and throughput,
	// as scraped while its workload ran, are in the verdict's Conditions.
	var load []struct {
		Arm     string  `db:"name"`
		Scrapes int     `db:"scrapes"`
		Running float64 `db:"running"`
	}
	if err := ro.Select(&load, `SELECT a.name, count(*) AS scrapes, max(m.value) AS running FROM server_metrics m
		JOIN arms a ON a.id = m.arm_id WHERE m.name = 'sglang:num_running_reqs' GROUP BY a.name ORDER BY a.name`); err != nil {
		t.Fatal(err)
	}
	if len(load) != 2 {
		t.Errorf("server metrics of %d arms; want 2", len(load))
	}
	for _, l := range load {
		if l.Scrapes < 2 || l.Running < 1 {
			t.Errorf("arm %s: %d scrapes, at most %v running; want two or more, and requests seen running", l.Arm, l.Scrapes, l.Running)
		}
	}
	conditions := regexp.MustCompile(`(?m)^\| (control|treatment) \| [1-9]\d* \| \d+\.\d \| [1-9]\d*\.\d \| \d+\.\d \| [\d.]+% \| [\d.]+% \| [1-9]\d* tok/s \| (baseline|same as control|\*\*differ\*\*: [a-z ,]+) \|$`)
	if i := bytes.Index(v, []byte("<summary>Conditions</summary>")); i < 0 || len(conditions.FindAll(v[i:], -1)) != 2 {
		t.Errorf("the verdict's Conditions do not show both arms' running requests and throughput:\n%s", v)
	}

	// A second experiment, into the same database, against an engine that streams its
	// HF_TOKEN in 3-character pieces and then base64-, percent- and \u-encoded, and
	// prints the encoded forms to its log.
	const splitSecret = "hf_SplitSecret/7Qx+9Zk2mW"
	t.Setenv("HF_TOKEN", splitSecret)
	hostile := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	splitSpec := filepath.Join(dir, "split.yaml")
	if err := os.WriteFile(splitSpec, []byte(fmt.Sprintf(`version: 1
name: e2e-split-secret
engine:
  preset: custom
  command: [%q, --mode, split-secret, --chunk, "3"]
  secrets: [HF_TOKEN]
arms:
  a: {env: {K: "0"}}
  b: {env: {K: "1"}}
workload: {sessions: 4, rounds: 2, concurrency: 4, seed: 7}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`, hostile)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "run", splitSpec, "--db", db, "-o", filepath.Join(dir, "split-verdict.md"))
	if code != 0 {
		t.Fatalf("split-secret run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var raws []string
	if err := ro.Select(&raws, `SELECT t.raw FROM turns t JOIN experiments e ON e.id = t.experiment_id WHERE e.name = 'e2e-split-secret'`); err != nil {
		t.Fatal(err)
	}
	if len(raws) < 2*4*2 {
		t.Fatalf("%d split-secret turns recorded", len(raws))
	}
	for _, raw := range raws {
		// The stream still assembles, and what it assembles to holds no secret: no
		// value is recoverable from its fragments.
		c, err := workload.AssembleStream([]byte(raw))
		if err != nil || len(c.Choices) == 0 {
			t.Fatalf("stored raw no longer assembles: %v\n%s", err, raw)
		}
		if got := c.Choices[0].Message.Content; got != "Here is the token: [redacted] base64 [redacted] url [redacted] json [redacted]." {
			t.Errorf("stored raw assembles to %q", got)
		}
	}

	// The secrets must be nowhere, in no form: not in the database (WAL included), the
	// engine logs or the verdicts and their charts.
	forms := map[string]string{"plain": secret, "split plain": splitSecret}
	for name, form := range secretForms(splitSecret) {
		forms["split "+name] = form
	}
	for name, form := range secretForms(secret) {
		forms[name] = form
	}
	found, foundEncoded := false, false
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || p == spec || p == splitSpec {
			return err
		}
		b, _ := os.ReadFile(p)
		for name, form := range forms {
			if bytes.Contains(b, []byte(form)) {
				t.Errorf("%s contains the secret (%s: %s)", p, name, form)
			}
		}
		if strings.HasSuffix(p, ".log") && bytes.Contains(b, []byte("engine auth token: [redacted]")) {
			found = true
		}
		if strings.HasSuffix(p, ".log") && bytes.Contains(b, []byte("token b64=[redacted] url=[redacted] json=[redacted]")) {
			foundEncoded = true
		}
		return nil
	})
	if !found || !foundEncoded {
		t.Errorf("no engine log shows the redacted token lines (plain %v, encoded %v): the redaction test proved nothing", found, foundEncoded)
	}

	// ls, show and verdict read the same database.
	code, stdout, _ = runCLI(t, "ls", "--db", db, "--json")
	var exps []map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &exps) != nil || len(exps) != 2 {
		t.Errorf("ls --json: code %d, %q", code, stdout)
	}
	code, stdout, _ = runCLI(t, "verdict", "e2e-small", "--db", db)
	if code != 0 || !strings.Contains(stdout, "# Verdict: e2e-small") {
		t.Errorf("verdict by name: code %d\n%s", code, stdout)
	}
}

func TestQueryIsReadOnly(t *testing.T) {
	db := filepath.Join(t.TempDir(), "q.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	exp, _ := s.CreateExperiment(context.Background(), store.Experiment{Name: "q", Spec: "x"})
	s.DB().MustExec(`INSERT INTO arms (experiment_id, name, position, pins, command, env) VALUES (?, 'a', 0, '{}', '[]', '{}')`, exp)
	s.DB().MustExec(`INSERT INTO runs (experiment_id, arm_id, block, runtime, status, started_at) VALUES (?, 1, 0, 'process', 'done', 'now')`, exp)
	s.DB().MustExec(`INSERT INTO turns (experiment_id, run_id, arm_id, session_index, turn_index, round, started_at, status_code,
		finish_reason, ttft_ms, latency_ms, prompt_tokens, completion_tokens, content, corrupted, request, response, raw)
		VALUES (?, 1, 1, 0, 0, 0, 'now', 200, 'stop', 1, 2, 3, 4, 'hello', 0, '{}', '{}', '')`, exp)
	s.Close()

	for _, sql := range []string{"DELETE FROM turns", "  delete from turns", "/* sneaky */ DROP TABLE turns",
		"UPDATE turns SET content = 'x'", "SELECT 1; DELETE FROM turns", "WITH x AS (SELECT 1) DELETE FROM turns"} {
		code, stdout, stderr := runCLI(t, "query", sql, "--db", db)
		if code == 0 {
			t.Errorf("query %q succeeded: %s", sql, stdout)
		}
		if !strings.Contains(stderr, "read-only") {
			t.Errorf("query %q: message %q does not say the query is read-only", sql, stderr)
		}
	}
	code, stdout, stderr := runCLI(t, "query", "SELECT count(*) AS n, max(content) AS c FROM turns", "--db", db, "--format", "json")
	if code != 0 {
		t.Fatalf("SELECT failed: %s", stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 || rows[0]["n"] != float64(1) || rows[0]["c"] != "hello" {
		t.Fatalf("SELECT after refused writes = %s (err %v), want the one turn intact", stdout, err)
	}
	code, stdout, _ = runCLI(t, "query", "SELECT session_index, content FROM turns", "--db", db, "--format", "csv")
	if code != 0 || stdout != "session_index,content\n0,hello\n" {
		t.Errorf("csv = %q", stdout)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	if code, _, _ := runCLI(t, "query"); code != exitUsage {
		t.Errorf("query without SQL: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runCLI(t, "ls", "--no-such-flag"); code != exitUsage {
		t.Errorf("unknown flag: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runCLI(t, "no-such-command"); code != exitUsage {
		t.Errorf("unknown command: exit %d, want %d", code, exitUsage)
	}
}

func TestResumeRefusesWhatCannotBeResumed(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec, _ := os.ReadFile("../../examples/quickstart.yaml")
	done, _ := s.CreateExperiment(ctx, store.Experiment{Name: "finished", SpecPath: "../../examples/quickstart.yaml", Spec: string(spec)})
	s.FinishExperiment(ctx, done, store.ExperimentDone, "", time.Now())
	dbID, err := store.DatabaseID(ctx, s.DB())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Done, and its verdict is where resume looks for it.
	verdictPath := filepath.Join(filepath.Dir(db), "verdicts", fmt.Sprintf("finished-%s-%d.md", store.ShortID(dbID), done))
	os.MkdirAll(filepath.Dir(verdictPath), 0o755)
	os.WriteFile(verdictPath, []byte(fmt.Sprintf("# Verdict: finished\n\n---\nQuery the raw data with `arbiter query \"SELECT ... FROM turns WHERE experiment_id = %d\"`; re-judge with `arbiter verdict %d`.\n", done, done)), 0o644)
	if code, _, stderr := runCLI(t, "resume", "finished", "--db", db); code != exitUsage || !strings.Contains(stderr, "nothing to resume") {
		t.Errorf("resume of a done experiment: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "resume", "no-such", "--db", db); code != exitNotFound || !strings.Contains(stderr, "not found") {
		t.Errorf("resume of an unknown experiment: exit %d, %q", code, stderr)
	}
}

// crashSpec is a decisive A/B whose engine command records the treatment engine's pid, so
// that the test can kill that engine mid-run as an OOM killer or a segfault would.
const crashSpec = `version: 1
name: e2e-crash
engine:
  preset: refserve
  command: [sh, -c, 'if [ "$BF16_INDEX_K" = 1 ]; then echo $$ > %s; fi; exec refserve "$@"', refserve-wrapper]
  args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --inter-token-delay, 5ms]
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 24, rounds: 3, concurrency: %d, seed: 7, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
analysis: {unit: session, alpha: 0.05, baseline: control}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`

// An engine killed mid-run must not turn into a corruption finding: the headline says the
// arm crashed and that its corruption is inconclusive, nothing reads "significantly
// higher", and the regression gate fails (exit 3) unless inconclusive arms are allowed.
func TestEngineKilledMidRunMakesItsArmInconclusive(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "treatment.pid")
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(crashSpec, pidFile, 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	verdictPath := filepath.Join(dir, "verdict.md")

	done := runInBackground(t, "run", spec, "--db", db, "-o", verdictPath, "--fail-on", "regression")

	// Kill the treatment engine once some of its sessions have finished and the rest
	// are still running: the crash must come mid-run, not before or after.
	pid := waitForTreatment(t, db, pidFile, done, "SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'treatment' AND s.status = 'ok'", 3)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the treatment engine (pid %d): %v", pid, err)
	}
	res := <-done

	if res.code != exitUndecided {
		t.Fatalf("arbiter run --fail-on regression exited %d, want %d (the gate cannot pass an inconclusive arm: undecided)\nstdout:\n%s\nstderr:\n%s",
			res.code, exitUndecided, res.stdout, res.stderr)
	}
	if !strings.Contains(res.stderr, "gate regression undecided: treatment's corruption is inconclusive") {
		t.Errorf("the gate does not say why it failed:\n%s", res.stderr)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var status string
	ro.Get(&status, `SELECT r.status FROM runs r JOIN arms a ON a.id = r.arm_id WHERE a.name = 'treatment'`)
	var finished, lost int
	ro.Get(&finished, `SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'treatment' AND s.status = 'ok'`)
	ro.Get(&lost, `SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'treatment' AND s.status <> 'ok'`)
	if status != "crashed" || finished == 0 || finished == 24 {
		t.Fatalf("treatment run %s with %d of 24 sessions finished (%d recorded lost): the kill did not land mid-run", status, finished, lost)
	}

	md, err := os.ReadFile(verdictPath)
	if err != nil {
		t.Fatal(err)
	}
	head := strings.SplitN(string(md), "\n\n", 3)[1]
	if !strings.HasPrefix(head, "The engine of **treatment** crashed (block 0)") || !strings.Contains(head, "The corruption of treatment is inconclusive") {
		t.Errorf("headline does not say first that treatment crashed and is inconclusive:\n%s", head)
	}
	if strings.Contains(string(md), "significantly higher") || strings.Contains(res.stdout, "significantly higher") {
		t.Errorf("a killed engine reads as significantly higher:\n%s", md)
	}
	if !strings.Contains(res.stdout, "treatment crashed") {
		t.Errorf("the terminal headline does not say treatment crashed:\n%s", res.stdout)
	}

	// Re-judged, the same verdict gates the same way; --allow-inconclusive lets it pass.
	if code, _, stderr := runCLI(t, "verdict", "e2e-crash", "--db", db, "--fail-on", "regression"); code != exitUndecided {
		t.Errorf("verdict --fail-on regression exited %d, want %d: %s", code, exitUndecided, stderr)
	}
	if code, _, stderr := runCLI(t, "verdict", "e2e-crash", "--db", db, "--fail-on", "regression", "--allow-inconclusive"); code != exitOK {
		t.Errorf("verdict --fail-on regression --allow-inconclusive exited %d, want 0: %s", code, stderr)
	}
	code, stdout, _ := runCLI(t, "verdict", "e2e-crash", "--db", db, "--json")
	var summary struct {
		Arms []struct {
			Name       string `json:"name"`
			VsBaseline struct {
				Decision string `json:"decision"`
			} `json:"vs_baseline"`
			Launches map[string]int `json:"launches"`
		} `json:"arms"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &summary) != nil || len(summary.Arms) != 2 ||
		summary.Arms[1].VsBaseline.Decision != "inconclusive" || summary.Arms[1].Launches["crashed"] != 1 {
		t.Errorf("verdict --json: code %d, %s", code, stdout)
	}
}

// cliResult is what one arbiter command returned.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runInBackground runs the command as runCLI does, on a goroutine of its own; its result
// comes on the channel.
func runInBackground(t *testing.T, args ...string) <-chan cliResult {
	done := make(chan cliResult, 1)
	go func() {
		code, stdout, stderr := runCLI(t, args...)
		done <- cliResult{code, stdout, stderr}
	}()
	return done
}

// waitForTreatment waits until the treatment engine has written its pid and query (a
// count over the database) reaches at least n, and returns the pid. It fails the test if
// arbiter ends first.
func waitForTreatment(t *testing.T, dbPath, pidFile string, done <-chan cliResult, query string, n int) int {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case r := <-done:
			t.Fatalf("arbiter ended (exit %d) before the treatment engine could be killed mid-run\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		case <-deadline:
			t.Fatal("the treatment engine never reached the middle of its run")
		case <-tick.C:
		}
		b, err := os.ReadFile(pidFile)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		ro, err := store.OpenReadOnly(dbPath)
		if err != nil {
			continue
		}
		var got int
		err = ro.Get(&got, query)
		ro.Close()
		if err == nil && got >= n {
			return pid
		}
	}
}

// The field's case: every session in flight at once when the engine dies, so none
// finishes. Sessions corrupted before the crash used to be all that survived, and the
// verdict read "treatment corrupted 3 of 3 sessions (100.0%) … significantly higher"
// with exit 0. Now nothing is analysed, the arm is inconclusive, and the gate fails.
func TestEngineKilledWithEverySessionInFlight(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "treatment.pid")
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte(fmt.Sprintf(crashSpec, pidFile, 24)), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	done := runInBackground(t, "run", spec, "--db", db, "--fail-on", "regression")
	pid := waitForTreatment(t, db, pidFile, done, "SELECT count(*) FROM turns t JOIN arms a ON a.id = t.arm_id WHERE a.name = 'treatment'", 24)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the treatment engine (pid %d): %v", pid, err)
	}
	res := <-done
	if res.code != exitUndecided {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", res.code, exitUndecided, res.stdout, res.stderr)
	}
	for _, want := range []string{"The engine of treatment crashed (block 0)", "inconclusive"} {
		if !strings.Contains(strings.Join(strings.Fields(res.stdout), " "), want) {
			t.Errorf("headline lacks %q:\n%s", want, res.stdout)
		}
	}
	if strings.Contains(res.stdout, "significantly higher") {
		t.Errorf("a killed engine reads as significantly higher:\n%s", res.stdout)
	}
}

// secretForms are the ways the secret v can be written that a plain search misses:
// percent-encoded (as a URL carries it), \u-escaped (once, and inside a JSON string),
// base64 (the characters that depend on v alone, at each alignment) and hex.
func secretForms(v string) map[string]string {
	var pct, pctLower, esc strings.Builder
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&pct, "%%%02X", v[i])
		fmt.Fprintf(&pctLower, "%%%02x", v[i])
	}
	for _, r := range v {
		fmt.Fprintf(&esc, `\u%04x`, r)
	}
	forms := map[string]string{
		"percent": pct.String(), "percent lower": pctLower.String(), "json escaped": esc.String(),
		"json escaped in json": strings.ReplaceAll(esc.String(), `\`, `\\`),
		"hex":                  hex.EncodeToString([]byte(v)),
	}
	for off := range 3 {
		for alphabet, enc := range map[string]*base64.Encoding{"standard": base64.StdEncoding, "URL-safe": base64.URLEncoding} {
			e := enc.EncodeToString(append([]byte("xyz"[:off]), v...))
			forms[fmt.Sprintf("base64 (%s) at offset %d", alphabet, off)] = e[(8*off+5)/6 : 8*(off+len(v))/6]
		}
	}
	return forms
}

// TestQuickstartWithInterTokenDelayResumesWithoutSpec runs the quickstart with refserve's
// own --inter-token-delay as a real arbiter process, interrupts it once a launch has
// ended, and resumes it without --spec. The delay's name holds TOKEN, but a duration is
// not a credential: the stored spec and the server info keep "20ms", so resume can use
// the recorded spec.
func TestQuickstartWithInterTokenDelayResumesWithoutSpec(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	arbiter := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	quickstart, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(quickstart), "args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --enable-metrics]",
		"args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --enable-metrics, --inter-token-delay, 20ms]", 1)
	src = strings.Replace(src, "  sessions: 60\n", "  sessions: 12\n", 1)
	src = strings.Replace(src, "  concurrency: 60\n", "  concurrency: 12\n", 1)
	src = strings.Replace(src, "  rounds: 4\n", "  rounds: 2\n", 1)
	// One slot: the arms run one after the other, so the second is still running when
	// the first has ended (on two slots both end at once, and the interrupt may come
	// after the experiment is done).
	src = strings.Replace(src, "{name: local, slots: 2}", "{name: local, slots: 1}", 1)
	if !strings.Contains(src, "--inter-token-delay, 20ms") || !strings.Contains(src, "sessions: 12") || !strings.Contains(src, "slots: 1}") {
		t.Fatal("the quickstart changed; this test no longer edits it")
	}
	dir := t.TempDir()
	spec, db := filepath.Join(dir, "quickstart.yaml"), filepath.Join(dir, "r.db")
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}

	// Interrupt once the first launch has ended: the second is then cut short.
	cmd := exec.Command(arbiter, "run", spec, "--db", db, "--log-level", "info")
	log := &lineWatch{want: `msg="run ended"`, seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-log.seen:
		cmd.Process.Signal(os.Interrupt)
		err = <-exited
	case err = <-exited:
		t.Fatalf("run ended before it was interrupted (%v)\n%s", err, log.text())
	}
	if code := exitCodeOf(err); code != exitInterrupted {
		t.Fatalf("interrupted run exited %d\n%s", code, log.text())
	}
	// Its verdict, of what was recorded before the interrupt, is where a finished run's
	// would be: beside the database.
	got, _ := filepath.Glob(filepath.Join(dir, "verdicts", "bf16-index-k-decisive-*-1.md"))
	if len(got) != 1 {
		t.Fatalf("the interrupted run left verdicts %v beside its database\n%s", got, log.text())
	}
	// Its commands read this database, not the default one.
	if md, _ := os.ReadFile(got[0]); !strings.Contains(string(md), "re-judge with `arbiter verdict 1 --db "+db+"`") {
		t.Errorf("the verdict's footer does not name its database %s:\n%s", db, md[max(0, len(md)-400):])
	}

	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var stored string
	if err := ro.Get(&stored, `SELECT spec FROM experiments WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stored, "--inter-token-delay, 20ms") || strings.Contains(stored, "[redacted]") {
		t.Errorf("stored spec lost the delay:\n%s", stored)
	}
	var infos []string
	if err := ro.Select(&infos, `SELECT server_info FROM runs WHERE server_info IS NOT NULL AND server_info != ''`); err != nil {
		t.Fatal(err)
	}
	if len(infos) == 0 || !strings.Contains(infos[0], `"inter_token_delay":"20ms"`) {
		t.Errorf("server info lost the delay: %q", infos)
	}

	out, err := exec.Command(arbiter, "resume", "1", "--db", db).CombinedOutput()
	if code := exitCodeOf(err); code != exitOK || !strings.Contains(string(out), "experiment 1 (bf16-index-k-decisive): done") {
		t.Fatalf("resume without --spec exited %d:\n%s", code, out)
	}
	var status string
	ro.Get(&status, `SELECT status FROM experiments WHERE id = 1`)
	if status != "done" {
		t.Errorf("after resume the experiment is %q", status)
	}
}

// lineWatch collects a process's output and closes seen when a line holds want.
type lineWatch struct {
	want string
	seen chan struct{}
	mu   sync.Mutex
	buf  strings.Builder
	once sync.Once
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
