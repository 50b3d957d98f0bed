package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/plan"
	"github.com/arbiterlab/arbiter/verdict"
)

func TestPlanGivesExactPowerAndSessionsNeeded(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "plan.yaml")
	os.WriteFile(spec, []byte(`version: 1
name: plan-check
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 60, rounds: 4, seed: 1}
analysis: {baseline: control, plan: {p0: 0, p1: 0.12, power: 0.8, turn_seconds: 2}}
`), 0o644)
	code, stdout, stderr := runCLI(t, "plan", spec, "--json", "--db", filepath.Join(t.TempDir(), "none.db"))
	if code != 0 {
		t.Fatalf("plan exited %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	// Reference value (exact Fisher power): 60 sessions per arm have 74% power for 0% vs 12%.
	if math.Abs(p.Power-0.74) > 0.005 {
		t.Errorf("power = %.4f, want 0.74", p.Power)
	}
	if p.SessionsNeeded <= 60 || p.SessionsNeeded > 80 {
		t.Errorf("sessions needed for 80%% = %d, want a little over 60", p.SessionsNeeded)
	}
	// One wave of 60 sessions, 8 turns of 2 s, two arms.
	if p.WallTimeSeconds == nil || math.Abs(*p.WallTimeSeconds-2*8*2) > 1e-9 {
		t.Errorf("wall time = %v, want 32 s", p.WallTimeSeconds)
	}
	if code, _, stderr := runCLI(t, "plan", spec, "--simulate"); code != exitUsage || !strings.Contains(stderr, "sequential") {
		t.Errorf("--simulate on a fixed design: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "plan", spec, "--reps", "0"); code != exitUsage || !strings.Contains(stderr, "--reps") {
		t.Errorf("--reps 0: exit %d, %q", code, stderr)
	}
}

// The rates a verdict saw plan a spec that declares none: --p0 and --p1 replace
// analysis.plan's, so that the plan a verdict points at is one command. They are rates,
// and two different ones.
func TestPlanTakesTheRatesFromTheCommandLine(t *testing.T) {
	db := filepath.Join(t.TempDir(), "none.db")
	code, _, stderr := runCLI(t, "plan", "../../examples/factorial.yaml", "--db", db)
	if code != exitUsage || !strings.Contains(stderr, "arbiter plan --p0 0 --p1 0.12") {
		t.Errorf("no rates: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "plan", "../../examples/factorial.yaml", "--p0", "0", "--p1", "0.12", "--json", "--db", db)
	if code != 0 {
		t.Fatalf("plan exited %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.P0 != 0 || p.P1 != 0.12 || p.LaunchesPerArm != 5 || len(p.PowerByLaunches) == 0 {
		t.Errorf("plan %+v; want 0 against 0.12 for the example's 5 launches per arm", p)
	}
	// --p1 replaces the spec's own p1 and keeps its p0.
	code, stdout, _ = runCLI(t, "plan", "../../examples/sequential.yaml", "--p1", "0.3", "--json", "--db", db)
	if err := json.Unmarshal([]byte(stdout), &p); code != 0 || err != nil || p.P0 != 0 || p.P1 != 0.3 {
		t.Errorf("--p1 over the spec's plan: exit %d, %+v", code, p)
	}
	for _, bad := range [][]string{{"--p1", "1.5"}, {"--p0", "-0.1", "--p1", "0.2"}, {"--p0", "0.1", "--p1", "0.1"}} {
		if code, _, stderr := runCLI(t, append([]string{"plan", "../../examples/factorial.yaml", "--db", db}, bad...)...); code != exitUsage || !strings.Contains(stderr, "--p") {
			t.Errorf("%v: exit %d, %q", bad, code, stderr)
		}
	}
}

// The sequential example: `arbiter plan` says both what the fixed design at the spec's
// own power needs and what the sequential design uses on average.
func TestPlanSimulatesTheSequentialExample(t *testing.T) {
	t.Parallel()
	// 3,000 experiments a scenario (of the default 10,000) hold the null's rate well
	// inside its bound.
	code, stdout, stderr := runCLI(t, "plan", "../../examples/sequential.yaml", "--simulate", "--reps", "3000", "--json",
		"--db", filepath.Join(t.TempDir(), "none.db"))
	if code != 0 {
		t.Fatalf("plan exited %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	s := p.Sequential
	if s == nil || s.Null == nil || s.Alt == nil {
		t.Fatalf("no simulation in %s", stdout)
	}
	t.Logf("null (both arms at %.2f): claims %.4f over %d experiments; 0%% vs 15%%: power %.4f, %.1f launches per arm on average",
		s.Null.Rate, s.Null.RejectRate, s.Null.Reps, s.Alt.RejectRate, s.Alt.MeanLaunches)
	if s.Null.Reps != 3000 || s.Null.RejectRate > s.Share+0.005 || s.EarliestStop == 0 || s.Alt.RejectRate < 0.5 {
		t.Errorf("sequential example: %+v, null %+v, alternative %+v", s, s.Null, s.Alt)
	}
}

// The plan leads with launches: the power table with and without a floor, then the
// launches that reach the plan's power. A floor the spec names but the database does
// not hold yet is planned without, and said so.
func TestPlanLeadsWithLaunches(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "plan.yaml")
	os.WriteFile(spec, []byte(`version: 1
name: plan-launches
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 60, rounds: 4, seed: 1}
analysis: {baseline: control, noise_floor: fp8-aa, plan: {p0: 0.05, p1: 0.15, power: 0.8, launch_icc: 0.1}}
launches: 4
`), 0o644)
	code, stdout, stderr := runCLI(t, "plan", spec, "--db", filepath.Join(t.TempDir(), "none.db"))
	if code != 0 {
		t.Fatalf("plan exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "analysis.noise_floor: noise floor fp8-aa") || !strings.Contains(stderr, "planned without it") {
		t.Errorf("missing floor not said: %q", stderr)
	}
	lines := strings.Split(stdout, "\n")
	if len(lines) < 3 || !strings.Contains(lines[2], "power by launches per arm") {
		t.Errorf("the plan does not lead with launches:\n%s", stdout)
	}
	for _, want := range []string{"*       4  0.1", "randomization at 0.03", "Welch at 0.03", "      32  0.9", "launches per arm for power 0.80: 1"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
}

// throughputSmall is examples/throughput.yaml made small: two phases of 6 requests, two
// launches per arm, both arms of a block at once.
const throughputSmall = `version: 1
name: throughput-small
engine: {preset: refserve}
factors:
  hicache:
    off: {}
    on:  {args: [--enable-hierarchical-cache]}
workload: {kind: throughput, seed: 42, concurrency: [1, 4], requests: 6, max_tokens: 16}
analysis: {baseline: hicache=off, alpha: 0.05, throughput_margin: 5%}
blocks: 2
runtime: {kind: process, nodes: [{name: local, slots: 2}]}
timeouts: {startup: 60s, request: 60s, stall: 20s}
`

// A throughput spec's plan is of its speed claim: it reads how much the launches of its
// newest recorded run differed, phase by phase (the spread the verdict's claims show),
// or takes it from --cv; with neither it says where one comes from.
func TestPlanOfAThroughputSpecReadsItsLaunchesSpread(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "throughput.yaml")
	if err := os.WriteFile(spec, []byte(throughputSmall), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "results.db")
	empty := filepath.Join(dir, "none.db")
	if code, _, stderr := runCLI(t, "plan", spec, "--db", empty); code != exitUsage || !strings.Contains(stderr, "--cv 0.03") {
		t.Errorf("nothing recorded: exit %d, %q", code, stderr)
	}
	if code, stdout, stderr := runCLI(t, "run", spec, "--db", db); code != 0 {
		t.Fatalf("run exited %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, "verdict", "1", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("verdict exited %d: %s", code, stderr)
	}
	var v struct {
		Claims struct {
			Claims []struct {
				Outcome, Group string
				Spread         *float64 `json:"launch_spread"`
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatal(err)
	}
	spread := map[string]float64{}
	for _, c := range v.Claims.Claims {
		if c.Outcome == verdict.OutcomeNonInferiority && c.Spread != nil {
			spread[c.Group] = *c.Spread
		}
	}
	code, stdout, stderr = runCLI(t, "plan", spec, "--db", db, "--json")
	if code != 0 {
		t.Fatalf("plan exited %d: %s", code, stderr)
	}
	var p plan.SpeedPlan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Phases) != 2 || p.LaunchesPerArm != 2 || p.Margin != 0.05 {
		t.Fatalf("plan %+v; want the two phases of 2 launches per arm under the 5%% margin", p)
	}
	for _, ph := range p.Phases {
		want, ok := spread[ph.Phase]
		if !ok || math.Abs(ph.CV-want) > 1e-12*want || ph.Basis != "experiment 1, 4 launches" || !(ph.CVUpper > ph.CV) || len(ph.Power) == 0 {
			t.Errorf("%s: %+v; the verdict's launch spread %g (%v)", ph.Phase, ph, want, ok)
		}
	}
	code, stdout, _ = runCLI(t, "plan", spec, "--db", db)
	if code != 0 || !strings.Contains(stdout, "launches per arm") || !strings.Contains(stdout, "experiment 1, 4 launches") {
		t.Errorf("plan's text (exit %d):\n%s", code, stdout)
	}
	// --from names the experiment to read; one that is not there is said.
	code, stdout, _ = runCLI(t, "plan", spec, "--db", db, "--from", "1", "--json")
	var from plan.SpeedPlan
	if err := json.Unmarshal([]byte(stdout), &from); code != 0 || err != nil || len(from.Phases) != 2 || from.Phases[0].CV != p.Phases[0].CV {
		t.Errorf("--from 1: exit %d, %+v", code, from)
	}
	if code, _, stderr := runCLI(t, "plan", spec, "--db", db, "--from", "7"); code != exitNotFound || !strings.Contains(stderr, "--from 7") {
		t.Errorf("--from 7: exit %d, %q", code, stderr)
	}
	// --cv replaces what was recorded; it and --ratio are for speed claims only.
	code, stdout, _ = runCLI(t, "plan", spec, "--db", empty, "--cv", "0.02", "--ratio", "0.99", "--json")
	if err := json.Unmarshal([]byte(stdout), &p); code != 0 || err != nil || p.Phases[0].CV != 0.02 || p.Ratio != 0.99 {
		t.Errorf("--cv 0.02 --ratio 0.99: exit %d, %+v", code, p)
	}
	for _, bad := range [][]string{{spec, "--cv", "1.5"}, {spec, "--ratio", "-1"}, {"../../examples/quickstart.yaml", "--cv", "0.03"}, {spec, "--p0", "0", "--p1", "0.1"}, {spec, "--cv", "0.03", "--simulate"}} {
		if code, _, stderr := runCLI(t, append([]string{"plan", "--db", empty}, bad...)...); code != exitUsage || !strings.Contains(stderr, "--") {
			t.Errorf("%v: exit %d, %q", bad, code, stderr)
		}
	}
}

// A throughput A/A lends its launches' spread as a noise floor: plan reads it for one
// launch per arm, and the verdict of one launch per arm tests its claims against it.
func TestAThroughputFloorPlansAndJudgesOneLaunchPerArm(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	aa := strings.NewReplacer("name: throughput-small", "name: throughput-small-aa",
		"factors:\n  hicache:\n    off: {}\n    on:  {args: [--enable-hierarchical-cache]}", "arms:\n  a1: {}\n  a2: {}",
		"baseline: hicache=off,", "baseline: a1, aa: true,", "blocks: 2", "blocks: 3").Replace(throughputSmall)
	one := strings.NewReplacer("name: throughput-small", "name: throughput-small-one",
		"throughput_margin: 5%", "throughput_margin: 5%, noise_floor: throughput-small-aa", "blocks: 2", "blocks: 1").Replace(throughputSmall)
	aaPath, onePath := filepath.Join(dir, "aa.yaml"), filepath.Join(dir, "one.yaml")
	for path, body := range map[string]string{aaPath: aa, onePath: one} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(dir, "results.db")
	if code, stdout, stderr := runCLI(t, "run", aaPath, "--db", db); code != 0 || !strings.Contains(stdout, "A/A check passed") {
		t.Fatalf("the floor's run exited %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, "plan", onePath, "--db", db, "--json")
	var p plan.SpeedPlan
	if err := json.Unmarshal([]byte(stdout), &p); code != 0 || err != nil {
		t.Fatalf("plan exited %d (%v): %s", code, err, stderr)
	}
	if p.NoiseFloor == "" || len(p.Phases) != 2 {
		t.Fatalf("plan %+v; want both phases against the floor", p)
	}
	for _, ph := range p.Phases {
		if !strings.HasPrefix(ph.Basis, "noise floor 1") || !(ph.FloorBound > 0) || ph.Power[0].Test != plan.TestFloorZ || !(ph.Power[0].Level > 0) {
			t.Errorf("%s: %+v; want one launch per arm tested against floor 1", ph.Phase, ph)
		}
	}
	if code, stdout, stderr := runCLI(t, "run", onePath, "--db", db); code != 0 {
		t.Fatalf("the one-launch run exited %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "verdict", "2", "--db", db, "--json")
	var v struct {
		Claims struct {
			Claims []struct {
				Outcome, Group, Test string
				Testable             bool
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &v); code != 0 || err != nil {
		t.Fatalf("verdict exited %d (%v): %s", code, err, stderr)
	}
	tested := 0
	for _, c := range v.Claims.Claims {
		if c.Outcome == verdict.OutcomeNonInferiority {
			if !c.Testable || c.Test != "z test against noise floor #1" {
				t.Errorf("%s: %+v; want it tested against floor 1", c.Group, c)
			}
			tested++
		}
	}
	if tested != 2 {
		t.Errorf("%d throughput claims; want one a phase", tested)
	}
	// Every load was tested against the floor, so the undecided gate passes: it asks of
	// the speed claims, not of corruption, which one launch per arm cannot test.
	if code, _, stderr := runCLI(t, "verdict", "2", "--db", db, "-o", filepath.Join(dir, "v.md"), "--fail-on", "undecided"); code != 0 || strings.Contains(stderr, "corrupted") {
		t.Errorf("--fail-on undecided exited %d: %s", code, stderr)
	}
}
