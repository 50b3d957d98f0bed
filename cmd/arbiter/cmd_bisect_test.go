package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The bisection example on real refserve processes, through the CLI as a user runs it:
// the release of examples/bisect differs from the good configuration in 8 settings and
// corrupts only through BF16_INDEX_K=1 together with --enable-hierarchical-cache. The
// bisection is interrupted twice: Ctrl-C during step 2, then, resumed, killed (SIGKILL)
// during step 4. Each `arbiter bisect --resume` keeps the steps judged, resumes the
// interrupted step's own experiment, and the last names exactly the pair, confirmed by
// a final A/B of good + the pair against good, in at most 12 steps; the report is
// written, listed, rebuilt and gated.
func TestBisectCLINamesThePairOnRefserve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bisection of real refserve processes")
	}
	// Long and mostly waiting on engines: it runs beside the package's other slow tests.
	t.Parallel()
	arbiter := buildArbiter(t)
	env := append(os.Environ(), "PATH="+filepath.Dir(arbiter)+string(os.PathListSeparator)+os.Getenv("PATH"))
	src, err := os.ReadFile("../../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Tokens at a tenth of the example's pace: refserve's counts do not depend on it (its
	// fault model draws against the sessions it serves, never the clock: the pair corrupts
	// 44 of 240 sessions at 1 ms, 0.5 ms, 0.1 ms and none), and the tokens' timers are
	// most of a launch's CPU. The search's budget is looser than the example's (0.3 for
	// 0.05, an effect of 15 points for 10): this test is about the CLI's steps, interrupts
	// and report, and the pair's 18% against none is still named (the plan gives 0.998 at
	// 15 points) in 72 launches where the example's search takes more. refserve's
	// launches do not differ (its fault model draws per session), so the search allows
	// for launches that differ up to ICC 0.05 rather than the default 0.1, which would
	// hold every clean step two looks longer.
	paced := string(src)
	for _, r := range [][2]string{{"--inter-token-delay, 1ms", "--inter-token-delay, 100us"}, {"error_budget: 0.05 ", "error_budget: 0.3 "}, {"effect: 0.10 ", "effect: 0.15 "},
		{"  looks: 10 ", "  launch_icc: 0.05\n  looks: 10 "}} {
		before := paced
		if paced = strings.Replace(paced, r[0], r[1], 1); paced == before {
			t.Fatalf("the example no longer says %q", r[0])
		}
	}
	dir := t.TempDir()
	spec, db, report := filepath.Join(dir, "tuesday-release.yaml"), filepath.Join(dir, "results.db"), filepath.Join(dir, "report.md")
	if err := os.WriteFile(spec, []byte(paced), 0o644); err != nil {
		t.Fatal(err)
	}
	// interrupt runs arbiter with args until the experiment of step has recorded n
	// sessions, then sends it sig; it returns the exit code and stderr.
	interrupt := func(sig syscall.Signal, step, n int, args ...string) (int, string) {
		cmd := exec.Command(arbiter, args...)
		var stderr bytes.Buffer
		cmd.Dir, cmd.Env, cmd.Stderr = dir, env, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		name := fmt.Sprintf("tuesday-release-b1-s%02d", step)
		eventually(t, name+" under way", func() bool {
			ro, err := store.OpenReadOnly(db)
			if err != nil {
				return false
			}
			defer ro.Close()
			var got int
			return ro.Get(&got, `SELECT count(*) FROM sessions s JOIN experiments e ON e.id = s.experiment_id WHERE e.name = ?`, name) == nil && got >= n
		})
		cmd.Process.Signal(sig)
		cmd.Wait()
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	// stepExperiment is the experiment of a step's name, 0 for none yet; linked, the
	// experiment the step is linked to.
	stepExperiment := func(step int, linked bool) int64 {
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		var id int64
		q := `SELECT coalesce(max(id), 0) FROM experiments WHERE name = printf('tuesday-release-b1-s%02d', ?)`
		if linked {
			q = `SELECT coalesce(experiment_id, 0) FROM bisection_steps WHERE bisection_id = 1 AND step = ?`
		}
		ro.Get(&id, q, step)
		return id
	}

	if code, stderr := interrupt(syscall.SIGINT, 2, 10, "bisect", spec, "--db", db); code != exitInterrupted {
		t.Fatalf("arbiter bisect exited %d after Ctrl-C, want %d:\n%s", code, exitInterrupted, stderr)
	}
	second := stepExperiment(2, false)
	_, stderr := interrupt(syscall.SIGKILL, 4, 30, "bisect", "--resume", "1", "--db", db)
	if !strings.Contains(stderr, "step 1 (reproduce, recorded before the resume): corrupts") || strings.Contains(stderr, "step 2 (search, recorded before the resume)") {
		t.Errorf("the first resume did not continue at step 2 from the recorded step:\n%s", stderr)
	}
	fourth := stepExperiment(4, false)
	if second == 0 || fourth == 0 {
		t.Fatalf("steps 2 and 4 recorded experiments %d and %d", second, fourth)
	}

	resumed := exec.Command(arbiter, "bisect", "--resume", "1", "--db", db, "-o", report)
	var outb, errb bytes.Buffer
	resumed.Dir, resumed.Env, resumed.Stdout, resumed.Stderr = dir, env, &outb, &errb
	resumed.Run()
	code, stdout, stderr := resumed.ProcessState.ExitCode(), outb.String(), errb.String()
	if code != 0 {
		t.Fatalf("arbiter bisect --resume exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"bisection 1 (tuesday-release): done", "The culprit is `BF16_INDEX_K: 0 → 1` and `--enable-hierarchical-cache: absent → set`,", "together: changes 2 and 6", "report: " + report} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout does not say %q:\n%s", want, stdout)
		}
	}
	// Each step's launches are shown as a run's are: the engine starting, then sessions.
	if !strings.Contains(stderr, "engine ready after") || !strings.Contains(stderr, "/40 sessions, ") {
		t.Errorf("the steps' launches were not shown:\n%s", stderr)
	}
	for step := 1; step <= 4; step++ {
		if kept := strings.Contains(stderr, fmt.Sprintf("step %d (", step)) && strings.Contains(stderr, "recorded before the resume") &&
			!strings.Contains(stderr, fmt.Sprintf("step %d of at most", step)); kept != (step < 4) {
			t.Errorf("step %d kept = %v, want %v:\n%s", step, kept, step < 4, stderr)
		}
	}

	code, out, _ := runCLI(t, "bisect", "--verdict", "--db", db, "--json")
	var sum struct {
		Conclusion string `json:"conclusion"`
		Culprit    []int  `json:"culprit"`
		Confirmed  int    `json:"confirmed_by"`
		Steps      []struct {
			Role    string `json:"role"`
			Applied []int  `json:"applied"`
			Outcome string `json:"outcome"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil {
		t.Fatalf("--verdict --json exited %d: %v\n%s", code, err, out)
	}
	if sum.Conclusion != "culprit" || !slices.Equal(sum.Culprit, []int{2, 6}) || len(sum.Steps) > 12 || sum.Confirmed < 1 || sum.Confirmed > len(sum.Steps) {
		t.Fatalf("summary %+v; want changes 2 and 6 named and confirmed within 12 steps", sum)
	}
	if c := sum.Steps[sum.Confirmed-1]; c.Role != "confirm" || !slices.Equal(c.Applied, []int{2, 6}) || c.Outcome != "corrupts" {
		t.Fatalf("confirmation %+v", c)
	}
	t.Logf("culprit changes 2 and 6 named in %d steps, confirmed by step %d", len(sum.Steps), sum.Confirmed)

	// Every step is one experiment, none run twice; the interrupted steps went on in
	// their own experiments, and the launches the kill cut were run again.
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	var exps, superseded int
	ro.Get(&exps, `SELECT count(*) FROM experiments`)
	ro.Get(&superseded, `SELECT count(*) FROM runs WHERE experiment_id = ? AND superseded_by IS NOT NULL`, fourth)
	ro.Close()
	if exps != len(sum.Steps) {
		t.Errorf("%d experiments for %d steps: a step ran twice", exps, len(sum.Steps))
	}
	if stepExperiment(2, true) != second || stepExperiment(4, true) != fourth {
		t.Errorf("steps 2 and 4 ran experiments %d and %d, the interrupted ones were %d and %d", stepExperiment(2, true), stepExperiment(4, true), second, fourth)
	}
	if superseded == 0 {
		t.Errorf("step 4's launches cut by the kill were not run again")
	}

	// The report written, and the one rebuilt from the database alone.
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	code, rebuilt, _ := runCLI(t, "bisect", "--verdict", "1", "--db", db)
	if code != 0 {
		t.Fatalf("bisect --verdict exited %d", code)
	}
	for _, text := range []string{string(md), rebuilt} {
		for _, want := range []string{"# Bisection 1: tuesday-release", "## Search tree", "=> 6 (--enable-hierarchical-cache) belongs to the culprit",
			"=> 2 (BF16_INDEX_K) belongs to the culprit", fmt.Sprintf("Confirmed by step %d", sum.Confirmed),
			"## The culprit and its confirming test", "## What remains uncertain"} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	}

	if code, out, _ := runCLI(t, "bisect", "--list", "--db", db); code != 0 || !strings.Contains(out, "tuesday-release  done") || !strings.Contains(out, "culprit") {
		t.Errorf("--list exited %d:\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "bisect", "--list", "-q", "--db", db); code != 0 || out != "1\n" {
		t.Errorf("--list -q exited %d: %q; want the id", code, out)
	}
	if code, out, _ := runCLI(t, "bisect", "--list", "--format", "csv", "--db", db); code != 0 || !strings.HasPrefix(out, "id,name,status,created_at,steps,conclusion,culprit\n1,tuesday-release,done,") {
		t.Errorf("--list --format csv exited %d:\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, "bisect", "--verdict", "1", "--db", db, "--fail-on", "culprit"); code != exitGateFailed || !strings.Contains(errOut, "gate culprit failed: changes 2, 6 corrupt against good (confirmed by step") {
		t.Errorf("--fail-on culprit exited %d: %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "bisect", "--verdict", "1", "--db", db, "--fail-on", "uncertain"); code != 0 {
		t.Errorf("--fail-on uncertain exited %d on a named culprit", code)
	}
	if code, _, errOut := runCLI(t, "bisect", "--resume", "1", "--db", db); code != exitUsage || !strings.Contains(errOut, "bisection 1 is done") {
		t.Errorf("resuming a done bisection exited %d: %s", code, errOut)
	}
	// The culprit's bundle: the confirming step's experiment, the culprit against good.
	culprit := filepath.Join(dir, "culprit")
	if code, out, errOut := runCLI(t, "repro", "--bisection", "1", "--db", db, "-o", culprit); code != 0 || !strings.Contains(out, "failing requests in "+culprit) {
		t.Errorf("repro --bisection exited %d:\n%s\n%s", code, out, errOut)
	} else if readme, err := os.ReadFile(filepath.Join(culprit, "README.md")); err != nil || !strings.Contains(string(readme), "responses corrupted with") || !strings.Contains(string(readme), "dsml-leak") {
		t.Errorf("the culprit's README (%v):\n%s", err, readme)
	}
	// Each step is an experiment that arbiter verdict judges on its own.
	if code, out, _ := runCLI(t, "verdict", "tuesday-release-b1-s01", "--db", db); code != 0 || !strings.Contains(out, "changes=with-1.2.3.4.5.6.7.8") {
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
		!strings.Contains(out, "200 simulated bisections") || !strings.Contains(out, "each one launch a side of 40 sessions") ||
		!strings.Contains(out, "launch ICC 0.1: assumed") || !strings.Contains(out, "a step can call a subset clean from look 10") {
		t.Errorf("--plan exited %d:\n%s\n%s", code, out, errOut)
	}
	// Launches allowed to differ up to 0.3 leave no step able to call a subset clean:
	// the plan says so, and what would help.
	wide := filepath.Join(dir, "wide.yaml")
	os.WriteFile(wide, []byte(strings.Replace(singleCulpritSpec, "search: {effect: 0.10}", "search: {effect: 0.10, launch_icc: 0.3}", 1)), 0o644)
	if code, out, _ := runCLI(t, "bisect", "--plan", wide, "--simulations", "20"); code != 0 || !strings.Contains(out, "launch ICC 0.3: search.launch_icc") ||
		!strings.Contains(out, "warning: no step can call a subset clean within 10 looks of 40 sessions") {
		t.Errorf("--plan at ICC 0.3 exited %d:\n%s", code, out)
	}
	// A noise floor is looked up in the database; one that holds none is not found.
	if code, _, errOut := runCLI(t, "bisect", "--plan", good, "--noise-floor", "good-aa", "--db", filepath.Join(dir, "none.db")); code != exitNotFound || !strings.Contains(errOut, "noise floor good-aa") {
		t.Errorf("--noise-floor without a database exited %d: %s", code, errOut)
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
