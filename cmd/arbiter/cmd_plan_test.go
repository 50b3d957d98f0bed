package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/plan"
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

// The sequential example: `arbiter plan` says both what the fixed design at the spec's
// own power needs and what the sequential design uses on average.
func TestPlanSimulatesTheSequentialExample(t *testing.T) {
	code, stdout, stderr := runCLI(t, "plan", "../../examples/sequential.yaml", "--simulate", "--json",
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
	t.Logf("null (both arms at %.2f): type I error %.4f simulated, %.4f exact, over %d experiments",
		s.Null.Rate, s.Null.RejectRate, s.Null.ExactRejectRate, s.Null.Reps)
	t.Logf("0%% vs 15%%: power %.4f, %.1f sessions on average of at most %d; fixed design at power %.2f: %d sessions",
		s.Power, s.ExpectedSessions, s.MaxSessions, p.TargetPower, s.FixedSessions)
	if s.Null.Reps != 10000 || s.Null.ExactRejectRate > p.Alpha || s.Null.RejectRate > p.Alpha {
		t.Errorf("type I error %.4f (exact %.4f) exceeds alpha %g", s.Null.RejectRate, s.Null.ExactRejectRate, p.Alpha)
	}
	if s.FixedSessions != 2*p.SessionsNeeded || p.SessionsNeeded < 45 || p.SessionsNeeded > 60 {
		t.Errorf("fixed design at power 0.8: %d sessions (%d per arm), want about 52 per arm", s.FixedSessions, p.SessionsNeeded)
	}
	if s.SavedFraction == nil || *s.SavedFraction >= 0 || s.ExpectedSessions <= float64(s.FixedSessions) {
		t.Errorf("four looks of 60 per arm must cost more than the fixed design at power 0.8: %+v", s)
	}
	_, text, _ := runCLI(t, "plan", "../../examples/sequential.yaml", "--db", filepath.Join(t.TempDir(), "none.db"))
	for _, want := range []string{"fixed design at the plan's power 0.80: 52 sessions per arm (104 in all)", "sessions on average, at most 480", "more on average"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan output lacks %q:\n%s", want, text)
		}
	}
}
