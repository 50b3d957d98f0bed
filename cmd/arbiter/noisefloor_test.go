package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// noiseFloorSpec is a small experiment on refserve at a load where bf16 index-K corrupts
// about a third of the sessions; NAME, ARMS, LAUNCHES and ROUNDS are filled in.
const noiseFloorSpec = `version: 1
name: NAME
engine:
  preset: refserve
  args: [--enable-hierarchical-cache, --tool-call-parser, deepseekv4, --enable-metrics]
launches: LAUNCHES
runtime: {kind: process, nodes: [{name: local, slots: 2}]}
arms:
ARMS
workload: {kind: toolcall-agent, sessions: 40, rounds: ROUNDS, concurrency: 40, seed: 42, temperature: 0}
detectors: [dsml-leak, toolcall-schema]
analysis: {unit: session, alpha: 0.05, baseline: ANALYSIS}
timeouts: {startup: 60s, request: 60s, stall: 30s}
`

func writeFloorSpec(t *testing.T, dir, name, arms, analysis string, launches, rounds int) string {
	t.Helper()
	r := strings.NewReplacer("NAME", name, "ARMS", arms, "ANALYSIS", analysis,
		"LAUNCHES", strconv.Itoa(launches), "ROUNDS", strconv.Itoa(rounds))
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(r.Replace(noiseFloorSpec)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// An A/A noise floor lets one launch per arm decide; a floor from another workload is
// refused before anything runs; without a floor the regression gate passes what it could
// not test and the undecided gate does not.
func TestNoiseFloorDecidesWithOneLaunchPerArm(t *testing.T) {
	t.Parallel()
	buildRefserve(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	const same = "  a1: {env: {BF16_INDEX_K: \"1\"}}\n  a2: {env: {BF16_INDEX_K: \"1\"}}"
	const ab = "  control: {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}"
	floor := writeFloorSpec(t, dir, "floor", same, "a1, aa: true", 3, 8)
	oneLaunch := writeFloorSpec(t, dir, "one", ab, "control", 1, 8)
	otherWorkload := writeFloorSpec(t, dir, "other", ab, "control", 1, 4)

	if code, out, errs := runCLI(t, "run", floor, "--db", db); code != exitOK {
		t.Fatalf("floor: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := runCLI(t, "run", oneLaunch, "--db", db, "--noise-floor", "floor", "--fail-on", "regression")
	if flat := strings.Join(strings.Fields(out), " "); code != exitGateFailed ||
		!strings.Contains(flat, "Weighed against the launch spread A/A experiment 1 (floor) measured") || !strings.Contains(flat, "significantly higher") {
		t.Fatalf("one launch per arm against the floor: exit %d, want %d (a claimed regression)\n%s\n%s", code, exitGateFailed, out, errs)
	}
	if code, md, _ := runCLI(t, "verdict", "2", "--db", db); code != exitOK || !strings.Contains(strings.Join(strings.Fields(md), " "), "Claims rest on the noise floor of A/A experiment 1 (floor)") {
		t.Errorf("re-judged, the verdict does not name its floor (exit %d):\n%s", code, md)
	}
	if code, _, _ := runCLI(t, "verdict", "2", "--db", db, "--fail-on", "undecided"); code != exitOK {
		t.Errorf("--fail-on undecided on a decided run: exit %d", code)
	}

	code, _, errs = runCLI(t, "run", otherWorkload, "--db", db, "--noise-floor", "floor")
	if code != exitUsage || !strings.Contains(errs, "noise floor floor refused") || !strings.Contains(errs, "ran another workload") {
		t.Errorf("a floor of another workload: exit %d, want %d and the reason\n%s", code, exitUsage, errs)
	}
	if code, ls, _ := runCLI(t, "ls", "--db", db, "-q"); code != exitOK || strings.Count(ls, "\n") != 2 {
		t.Errorf("the refused run recorded an experiment: %q", ls)
	}
	if code, _, _ := runCLI(t, "verdict", "2", "--db", db, "--noise-floor", "nosuch"); code != exitNotFound {
		t.Errorf("verdict --noise-floor nosuch: exit %d, want %d", code, exitNotFound)
	}

	// Without a floor, one launch per arm decides nothing: no gate fails, undecided says so.
	code, _, errs = runCLI(t, "run", oneLaunch, "--db", db, "--fail-on", "regression")
	if code != exitOK || !strings.Contains(strings.Join(strings.Fields(errs), " "), "gate regression passed, but the launches could not decide") {
		t.Errorf("one launch per arm, no floor, --fail-on regression: exit %d\n%s", code, errs)
	}
	if code, _, errs := runCLI(t, "verdict", "3", "--db", db, "--fail-on", "regression,undecided"); code != exitUndecided || !strings.Contains(errs, "gate undecided undecided") {
		t.Errorf("--fail-on regression,undecided without a floor: exit %d, want %d\n%s", code, exitUndecided, errs)
	}
}
