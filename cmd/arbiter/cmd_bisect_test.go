package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// singleCulpritSpec is the field's own deploy: HiCache was already on in both
// configurations, and the release changed BF16_INDEX_K among seven harmless settings.
// refserve's tokens come every 0.5 ms: its counts do not depend on the pace (the fault
// model draws against the sessions it serves), and a round still outlasts the start of
// the 40 clients by far.
const singleCulpritSpec = `version: 1
name: index-k-release
engine:
  preset: refserve
  args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --inter-token-delay, 500us]
good:
  env: {BF16_INDEX_K: "0"}
  args: [--page-size, "1"]
bad:
  env: {SGLANG_HEALTH_CHECK_TIMEOUT: "30", BF16_INDEX_K: "1"}
  args: [--page-size, "16", --chunked-prefill-size, "4096", --max-running-requests, "128", --hicache-ratio, "3",
         --mem-fraction-static, "0.85", --enable-metrics]
workload: {kind: toolcall-agent, sessions: 40, rounds: 4, concurrency: 40, seed: 7, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
search: {effect: 0.10}
runtime: {kind: process, nodes: [{name: local, slots: 2}]}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`

// One culprit among 8 changes, through the CLI on real refserve processes. The arbiter
// running the bisection is killed (SIGKILL) in the middle of its third step, and
// `arbiter bisect --resume` continues from the steps it recorded: the culprit is named
// in at most ceil(log2 8) + 2 = 5 steps, its report written, listed, rebuilt and gated.
func TestBisectCLISingleCulpritOnRefserve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bisection of real refserve processes")
	}
	// Long and mostly waiting on engines: it runs beside the package's other slow tests.
	t.Parallel()
	arbiter := buildArbiter(t)
	env := append(os.Environ(), "PATH="+filepath.Dir(arbiter)+string(os.PathListSeparator)+os.Getenv("PATH"))
	dir := t.TempDir()
	spec := filepath.Join(dir, "bisect.yaml")
	if err := os.WriteFile(spec, []byte(singleCulpritSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	report := filepath.Join(dir, "report.md")

	killed := exec.Command(arbiter, "bisect", spec, "--db", db)
	killed.Dir, killed.Env = dir, env
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if killed.ProcessState == nil {
			killed.Process.Kill()
			killed.Wait()
		}
	})
	// Killed once step 3's experiment has recorded sessions: part way through a step.
	eventually(t, "step 3 under way", func() bool {
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			return false
		}
		defer ro.Close()
		var n int
		return ro.Get(&n, `SELECT count(*) FROM sessions s JOIN experiments e ON e.id = s.experiment_id
			WHERE e.name = 'index-k-release-b1-s03'`) == nil && n >= 10
	})
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()

	resumed := exec.Command(arbiter, "bisect", "--resume", "1", "--db", db, "-o", report)
	var outb, errb bytes.Buffer
	resumed.Dir, resumed.Env, resumed.Stdout, resumed.Stderr = dir, env, &outb, &errb
	resumed.Run()
	code, stdout, stderr := resumed.ProcessState.ExitCode(), outb.String(), errb.String()
	if code != 0 {
		t.Fatalf("arbiter bisect --resume exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"bisection 1 (index-k-release): done", "The culprit is `BF16_INDEX_K: 0 → 1` (change 2).", "report: " + report} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout does not say %q:\n%s", want, stdout)
		}
	}
	// Each step's launches are shown as a run's are: the engine starting, then sessions.
	if !strings.Contains(stderr, "engine ready after") || !strings.Contains(stderr, "/40 sessions, ") {
		t.Errorf("the steps' launches were not shown:\n%s", stderr)
	}
	if !strings.Contains(stderr, "step 1 (reproduce, recorded before the resume): corrupts") || !strings.Contains(stderr, "step 3 of at most 9 (search)") ||
		strings.Contains(stderr, "experiment index-k-release-b1-s01") {
		t.Errorf("the resume did not continue at step 3 from the recorded steps:\n%s", stderr)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	var exps, superseded int
	ro.Get(&exps, `SELECT count(*) FROM experiments`)
	ro.Get(&superseded, `SELECT count(*) FROM runs r JOIN experiments e ON e.id = r.experiment_id
		WHERE e.name = 'index-k-release-b1-s03' AND r.superseded_by IS NOT NULL`)
	ro.Close()
	if superseded == 0 {
		t.Errorf("step 3's launch cut by the kill was not run again")
	}

	code, out, _ := runCLI(t, "bisect", "--verdict", "--db", db, "--json")
	var sum struct {
		Conclusion string  `json:"conclusion"`
		Culprit    []int   `json:"culprit"`
		Confirmed  int     `json:"confirmed_by"`
		StepAlpha  float64 `json:"step_alpha"`
		Steps      []struct {
			Role    string `json:"role"`
			Outcome string `json:"outcome"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil {
		t.Fatalf("--verdict --json exited %d: %v\n%s", code, err, out)
	}
	if sum.Conclusion != "culprit" || len(sum.Culprit) != 1 || sum.Culprit[0] != 2 || len(sum.Steps) > 5 || sum.Confirmed != len(sum.Steps) {
		t.Fatalf("summary %+v", sum)
	}
	if exps != len(sum.Steps) {
		t.Errorf("%d experiments for %d steps: a step ran twice", exps, len(sum.Steps))
	}
	t.Logf("single culprit among 8 named in %d steps", len(sum.Steps))
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Bisection 1: index-k-release", "## Search tree", "## The culprit and its confirming test", "## What remains uncertain"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}

	if code, out, _ := runCLI(t, "bisect", "--list", "--db", db); code != 0 || !strings.Contains(out, "index-k-release  done") || !strings.Contains(out, "culprit") {
		t.Errorf("--list exited %d:\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "bisect", "--list", "-q", "--db", db); code != 0 || out != "1\n" {
		t.Errorf("--list -q exited %d: %q; want the id", code, out)
	}
	if code, out, _ := runCLI(t, "bisect", "--list", "--format", "csv", "--db", db); code != 0 || !strings.HasPrefix(out, "id,name,status,created_at,steps,conclusion,culprit\n1,index-k-release,done,") {
		t.Errorf("--list --format csv exited %d:\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, "bisect", "--verdict", "1", "--db", db, "--fail-on", "culprit"); code != exitGateFailed || !strings.Contains(errOut, "gate culprit failed: changes 2 corrupt against good") {
		t.Errorf("--fail-on culprit exited %d: %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "bisect", "--verdict", "1", "--db", db, "--fail-on", "uncertain"); code != 0 {
		t.Errorf("--fail-on uncertain exited %d on a named culprit", code)
	}
	if code, _, errOut := runCLI(t, "bisect", "--resume", "1", "--db", db); code != exitUsage || !strings.Contains(errOut, "bisection 1 is done") {
		t.Errorf("resuming a done bisection exited %d: %s", code, errOut)
	}
	// Each step is an experiment that arbiter verdict judges on its own.
	// The culprit's bundle: the confirming step's experiment, the culprit alone against good.
	culprit := filepath.Join(dir, "culprit")
	if code, out, errOut := runCLI(t, "repro", "--bisection", "1", "--db", db, "-o", culprit); code != 0 || !strings.Contains(out, "failing requests in "+culprit) {
		t.Errorf("repro --bisection exited %d:\n%s\n%s", code, out, errOut)
	} else if readme, err := os.ReadFile(filepath.Join(culprit, "README.md")); err != nil || !strings.Contains(string(readme), "responses corrupted with") || !strings.Contains(string(readme), "dsml-leak") {
		t.Errorf("the culprit's README (%v):\n%s", err, readme)
	}
	if code, out, _ := runCLI(t, "verdict", "index-k-release-b1-s01", "--db", db); code != 0 || !strings.Contains(out, "changes=with-1.2.3.4.5.6.7.8") {
		t.Errorf("verdict of step 1 exited %d:\n%s", code, out)
	}
}

func TestBisectCLIRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "bisect.yaml")
	os.WriteFile(spec, []byte(strings.Replace(singleCulpritSpec, "search: {effect: 0.10}", "search: {effect: 1.5}", 1)), 0o644)
	code, _, errOut := runCLI(t, "bisect", spec, "--db", filepath.Join(dir, "r.db"))
	if code != exitUsage || !strings.Contains(errOut, "bisect.yaml:15:18: search.effect: effect is a rate difference") {
		t.Errorf("invalid spec exited %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "r.db")); err == nil {
		t.Error("an invalid spec created the database")
	}
	for _, args := range [][]string{{"bisect"}, {"bisect", "--list", "--verdict"}, {"bisect", spec, "--fail-on", "regression"}, {"bisect", "--resume", "3", spec}} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v exited %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := runCLI(t, "bisect", "--verdict", "--db", filepath.Join(dir, "none.db")); code == 0 {
		t.Errorf("--verdict without a database exited 0: %s", errOut)
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(singleCulpritSpec), 0o644)
	code, out, errOut := runCLI(t, "bisect", "--plan", good, "--simulations", "200")
	if code != 0 || !strings.Contains(out, "8 changes from good to bad") || !strings.Contains(out, "at most 9 steps (a culprit of one change takes at most 5, of two 9)") ||
		!strings.Contains(out, "200 simulated bisections") || !strings.Contains(out, "each one launch a side of 40 sessions") {
		t.Errorf("--plan exited %d:\n%s\n%s", code, out, errOut)
	}
	// Three launches a side cannot show a subset corrupting at a step's share of the
	// budget: the spec is refused where it says so, with the looks it needs.
	few := filepath.Join(dir, "few.yaml")
	os.WriteFile(few, []byte(strings.Replace(singleCulpritSpec, "search: {effect: 0.10}", "search: {effect: 0.10, looks: 3}", 1)), 0o644)
	if code, _, errOut := runCLI(t, "bisect", "--plan", few); code != exitUsage || !strings.Contains(errOut, "few.yaml:15:") ||
		!strings.Contains(errOut, "search.looks: 3 launches a side cannot show a subset corrupting") || !strings.Contains(errOut, "needs at least 6 looks") {
		t.Errorf("--plan of 3 looks exited %d: %s", code, errOut)
	}
}

// eventually polls cond until it holds, for state another process writes: it can only
// be read, not waited on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(3 * time.Minute)
	defer limit.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-limit.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
