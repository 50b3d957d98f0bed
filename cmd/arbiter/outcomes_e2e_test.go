package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// deadlockSpec is examples/deadlock.yaml made small: one cascade of 20 sessions, a stall
// timeout of 2s, four launches per arm.
const deadlockSpec = `version: 1
name: deadlock-small
engine:
  preset: refserve
  args: [--tp, "8", --tool-call-parser, deepseekv4]
arms:
  overlap-on:  {}
  overlap-off: {args: [--disable-overlap-schedule]}
workload: {kind: abort-cascade, seed: 42, sessions: 20, cascades: 1, throughput_at: [2], throughput_requests: 4, max_tokens: 16}
analysis: {baseline: overlap-on}
blocks: 4
timeouts: {startup: 60s, request: 60s, stall: 2s}
`

// TestAbortCascadeWedgeThroughTheCLI: the overlap-on arm is recorded wedged in every
// launch within the stall timeout and 10 s of its abort, the off arm never; the headline
// says so with the exact p on launches, and --fail-on wedge exits 3.
func TestAbortCascadeWedgeThroughTheCLI(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "deadlock.yaml")
	if err := os.WriteFile(spec, []byte(deadlockSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "--fail-on", "wedge")
	if code != exitGateFailed {
		t.Fatalf("arbiter run --fail-on wedge exited %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitGateFailed, stdout, stderr)
	}
	headline := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{"overlap-on in 4 of 4 launches, against overlap-off in 0 of 4 (randomization test on launches: p = 0.029)",
		"Decision: overlap-off wedges significantly less often than overlap-on."} {
		if !strings.Contains(headline, want) {
			t.Errorf("the headline lacks %q:\n%s", want, stdout)
		}
	}

	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var runs []struct {
		Arm    string `db:"name"`
		Status string `db:"status"`
	}
	if err := ro.Select(&runs, `SELECT a.name, r.status FROM runs r JOIN arms a ON a.id = r.arm_id ORDER BY r.id`); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 8 {
		t.Fatalf("%d runs, want 8", len(runs))
	}
	for _, r := range runs {
		if want := map[string]string{"overlap-on": "wedged", "overlap-off": "done"}[r.Arm]; r.Status != want {
			t.Errorf("a launch of %s ended %s, want %s", r.Arm, r.Status, want)
		}
	}
	var cascades []struct {
		Arm       string  `db:"name"`
		Recovered bool    `db:"recovered"`
		AbortedAt string  `db:"aborted_at"`
		EndedAt   string  `db:"ended_at"`
		RunEnded  string  `db:"run_ended"`
		Recovery  float64 `db:"recovery"`
	}
	if err := ro.Select(&cascades, `SELECT a.name, p.recovered, p.aborted_at, p.ended_at, r.ended_at AS run_ended,
			coalesce(p.recovery_ms, 0) AS recovery
		FROM phases p JOIN arms a ON a.id = p.arm_id JOIN runs r ON r.id = p.run_id WHERE p.kind = 'cascade'`); err != nil {
		t.Fatal(err)
	}
	if len(cascades) != 8 {
		t.Fatalf("%d cascades recorded, want 8", len(cascades))
	}
	for _, c := range cascades {
		abort, _ := time.Parse(time.RFC3339Nano, c.AbortedAt)
		end, _ := time.Parse(time.RFC3339Nano, c.RunEnded)
		switch c.Arm {
		case "overlap-on":
			// Recorded wedged (the run's end) within the stall timeout and 10 s of the abort.
			if c.Recovered || end.Sub(abort) < 2*time.Second || end.Sub(abort) > 12*time.Second {
				t.Errorf("overlap-on: recovered %v, run ended %v after the abort", c.Recovered, end.Sub(abort))
			}
		default:
			if !c.Recovered || c.Recovery <= 0 || c.Recovery > 2000 {
				t.Errorf("overlap-off: recovered %v in %v ms", c.Recovered, c.Recovery)
			}
		}
	}
}

// TestTraceExampleReplaysIdenticallyInEachArm runs examples/trace.yaml as a user does and
// compares the request bodies the arms received, byte for byte.
func TestTraceExampleReplaysIdenticallyInEachArm(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	db := filepath.Join(t.TempDir(), "results.db")
	code, stdout, stderr := runCLI(t, "run", filepath.Join("..", "..", "examples", "trace.yaml"), "--db", db)
	if code != 0 {
		t.Fatalf("arbiter run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var pairs []struct {
		Session int    `db:"session_index"`
		Turn    int    `db:"turn_index"`
		A       string `db:"a"`
		B       string `db:"b"`
	}
	if err := ro.Select(&pairs, `SELECT c.session_index, c.turn_index, c.request AS a, coalesce(t.request, '') AS b
		FROM turns c JOIN arms ca ON ca.id = c.arm_id AND ca.name = 'control'
		LEFT JOIN turns t ON t.session_index = c.session_index AND t.turn_index = c.turn_index
			AND t.arm_id = (SELECT id FROM arms WHERE name = 'treatment')`); err != nil {
		t.Fatal(err)
	}
	var treatment int
	ro.Get(&treatment, `SELECT count(*) FROM turns t JOIN arms a ON a.id = t.arm_id WHERE a.name = 'treatment'`)
	// 12 conversations; each asks at its assistant messages, and at its end when it ends
	// with another message (examples/traces/support.jsonl: 48 requests).
	if len(pairs) != 48 || treatment != 48 {
		t.Fatalf("%d control requests and %d treatment requests, want 48 each", len(pairs), treatment)
	}
	for _, p := range pairs {
		if p.A != p.B || !strings.Contains(p.A, `"messages"`) {
			t.Errorf("request %d/%d differs between the arms:\ncontrol:   %.200s\ntreatment: %.200s", p.Session, p.Turn, p.A, p.B)
		}
	}
}
