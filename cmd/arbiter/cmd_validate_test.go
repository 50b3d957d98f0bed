package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runArbiter(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidateExample(t *testing.T) {
	code, out, errs := runArbiter(t, "validate", "../../examples/quickstart.yaml")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	for _, want := range []string{"name       bf16-index-k-decisive", "control    BF16_INDEX_K=0", "treatment  BF16_INDEX_K=1",
		"toolcall-agent: 60 sessions x 4 rounds, concurrency 60, seed 42", "baseline control"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if errs != "" {
		t.Errorf("stderr not empty: %q", errs)
	}
}

func TestValidateJSON(t *testing.T) {
	code, out, errs := runArbiter(t, "--json", "validate", "../../examples/factorial.yaml")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	var sum specSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if sum.Name != "bf16-index-k-x-hicache" || len(sum.Arms) != 4 || sum.Arms[3].Name != "bf16_index_k=1,hicache=on" ||
		sum.Arms[3].Levels["hicache"] != "on" || sum.Workload.Concurrency != 60 {
		t.Errorf("summary %+v", sum)
	}
}

func TestValidateRedactsSecrets(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	src := `version: 1
name: t
engine: {preset: refserve}
arms:
  a: {env: {K: "0", UPSTREAM_API_KEY: "sk-live-123456"}}
  b: {env: {K: "1", UPSTREAM_API_KEY: "sk-live-123456"}}
workload: {sessions: 2, rounds: 1}
`
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"validate", spec}, {"--json", "validate", spec}} {
		code, out, errs := runArbiter(t, args...)
		if code != exitOK || strings.Contains(out, "sk-live-123456") || !strings.Contains(out, "[redacted]") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
	}
}

func TestValidateInvalidSpec(t *testing.T) {
	path := "../../testdata/specs/invalid-multiple.yaml"
	code, out, errs := runArbiter(t, "validate", path)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if out != "" {
		t.Errorf("stdout carries results only; got %q", out)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	want := []string{
		path + `:10:20: engine.env.TRUE_FLAG: value must be a string (write "true")`,
		path + `:14:22: workload.sessions: value must be at least 1, not 0`,
	}
	if len(lines) != 5 || lines[0] != want[0] || lines[1] != want[1] || !strings.Contains(lines[4], "invalid spec (4 problems)") {
		t.Errorf("stderr:\n%s", errs)
	}
}

func TestValidateUsage(t *testing.T) {
	if code, _, _ := runArbiter(t, "validate", filepath.Join(t.TempDir(), "absent.yaml")); code != exitUsage {
		t.Errorf("missing file: exit %d", code)
	}
	if code, _, _ := runArbiter(t, "validate"); code != exitUsage {
		t.Errorf("no argument: exit %d", code)
	}
}

func TestValidateRedactsShortSecretsAndCredentialFlags(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "spec.yaml")
	src := `version: 1
name: t
engine: {preset: refserve, args: [--api-key, sk1, --hf-token=hf9]}
arms:
  a: {env: {K: "0", API_TOKEN: "k9x"}, args: [--password, pw1]}
  b: {env: {K: "1", API_TOKEN: "k9x"}, args: [--password, pw1]}
workload: {sessions: 2, rounds: 1}
`
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"validate", spec}, {"--json", "validate", spec}} {
		code, out, errs := runArbiter(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, errs)
		}
		for _, leak := range []string{"k9x", "sk1", "hf9", "pw1"} {
			if strings.Contains(out, leak) {
				t.Errorf("%v: stdout holds %s:\n%s", args, leak, out)
			}
		}
		if !strings.Contains(out, "API_TOKEN=[redacted]") && !strings.Contains(out, `"API_TOKEN": "[redacted]"`) {
			t.Errorf("%v: API_TOKEN not shown as redacted:\n%s", args, out)
		}
	}
}
