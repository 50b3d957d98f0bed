package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

func TestValidateExample(t *testing.T) {
	code, out, errs := runCLI(t, "validate", "../../examples/quickstart.yaml")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	for _, want := range []string{"name       bf16-index-k-decisive", "control    BF16_INDEX_K=0", "treatment  BF16_INDEX_K=1",
		"toolcall-agent: 60 sessions x 4 rounds, concurrency 60, seed 42", "baseline control",
		"responses  streamed, at most 8 MiB each"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if errs != "" {
		t.Errorf("stderr not empty: %q", errs)
	}
	if strings.Contains(out, "model ") {
		t.Errorf("a spec without engine.model shows a model:\n%s", out)
	}
	// A spec whose engine keeps a model names it, where it comes from and how it is served.
	code, out, errs = runCLI(t, "validate", "../../examples/ollama-kv-cache.yaml")
	if want := "model      toolcall from ../../examples/models/toolcall.gguf, heads padded to 128, context 4096\n"; code != exitOK || !strings.Contains(out, want) {
		t.Errorf("exit %d; stdout lacks %q:\n%s%s", code, want, out, errs)
	}
}

func TestValidateJSON(t *testing.T) {
	code, out, errs := runCLI(t, "--json", "validate", "../../examples/factorial.yaml")
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
		code, out, errs := runCLI(t, args...)
		if code != exitOK || strings.Contains(out, "sk-live-123456") || !strings.Contains(out, "[redacted]") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, out, errs)
		}
	}
}

func TestValidateInvalidSpec(t *testing.T) {
	path := "../../testdata/specs/invalid-multiple.yaml"
	code, out, errs := runCLI(t, "validate", path)
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
	if code, _, _ := runCLI(t, "validate", filepath.Join(t.TempDir(), "absent.yaml")); code != exitUsage {
		t.Errorf("missing file: exit %d", code)
	}
	if code, _, _ := runCLI(t, "validate"); code != exitUsage {
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
		code, out, errs := runCLI(t, args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, errs)
		}
		for _, leak := range []string{"k9x", "sk1", "hf9", "pw1"} {
			if strings.Contains(out, leak) {
				t.Errorf("%v: stdout holds %s:\n%s", args, leak, out)
			}
		}
		if !strings.Contains(out, "API_TOKEN=[redacted]") && !strings.Contains(out, `"API_TOKEN":"[redacted]"`) {
			t.Errorf("%v: API_TOKEN not shown as redacted:\n%s", args, out)
		}
	}
}

// TestValidateRefusesHostileSpecsQuickly runs `arbiter validate` as a real process on
// each hostile spec of the field report (each once took gigabytes, minutes, or hung) and
// checks that it exits 2 with a file:line:col error, having used little memory and CPU.
func TestValidateRefusesHostileSpecsQuickly(t *testing.T) {
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/arbiter")
	rusage := testbin.Build(t, "github.com/arbiterlab/arbiter/internal/testkit/testbin/rusage")
	dir := t.TempDir()
	head := "version: 1\nname: x\nengine: {preset: refserve}\nworkload: {sessions: 2, rounds: 1}\n"
	var arms100k, levels100k strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&arms100k, "  a%d:\n", i)
		fmt.Fprintf(&levels100k, "%d, ", i)
	}
	specs := map[string]string{
		"deep-40k.yaml":       head + "arms: " + strings.Repeat("[", 40_000) + strings.Repeat("]", 40_000) + "\n",
		"deep-100k.yaml":      head + "arms: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "\n",
		"dashes-40k.yaml":     head + "arms:\n" + strings.Repeat("- ", 40_000) + "a\n",
		"arms-100k.yaml":      head + "arms:\n" + arms100k.String(),
		"levels-100k.yaml":    head + "factors:\n  f: {env: K, levels: [" + levels100k.String() + "]}\n",
		"comment-50MB.yaml":   head + "arms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\n#" + strings.Repeat("x", 50<<20) + "\n",
		"two-billion.yaml":    "version: 1\nname: x\nengine: {preset: refserve}\narms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\nworkload: {sessions: 2000000000, rounds: 2000000000}\n",
		"concurrency-2g.yaml": "version: 1\nname: x\nengine: {preset: refserve}\narms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\nworkload: {sessions: 10, rounds: 1, concurrency: 2000000000, max_tokens: 2000000000}\n",
	}
	paths := []string{"/dev/zero"}
	for name, text := range specs {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	fifo := filepath.Join(dir, "spec.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	paths = append(paths, fifo)
	slices.Sort(paths)
	for _, p := range paths {
		res := runMeasured(t, time.Minute, rusage, bin, "validate", p)
		t.Logf("%-20s exit %d, wall %6.1f ms, cpu %5.1f ms, peak RSS %5.1f MB: %s", filepath.Base(p), res.Exit,
			res.WallMS, res.UserMS+res.SystemMS, float64(res.MaxRSSKB)/1024, firstLine(res.Stderr))
		if res.Exit != exitUsage {
			t.Errorf("%s: exit %d, want %d\n%s", p, res.Exit, exitUsage, res.Stderr)
		}
		if !regexp.MustCompile(`^`+regexp.QuoteMeta(p)+`:\d+:\d+: `).MatchString(res.Stderr) || res.Stdout != "" {
			t.Errorf("%s: not a file:line:col error:\n%s", p, res.Stderr)
		}
		// Memory is the hard limit here. Time is logged above, and its target (a
		// refusal well under 100 ms) lives in arms' BenchmarkRefuseHostileSpec: on a
		// shared machine even CPU time moves with load, so the test only guards against
		// the gross failure these specs once caused (seconds to minutes, or a hang).
		if res.MaxRSSKB > 100<<10 {
			t.Errorf("%s: peak RSS %d KB, want under 100 MB", p, res.MaxRSSKB)
		}
		if cpu := res.UserMS + res.SystemMS; cpu > 2000 {
			t.Errorf("%s: took %.1f ms of CPU; a refusal takes a few tens", p, cpu)
		}
	}

	// run refuses the same spec before it opens the database: nothing is left running.
	db := filepath.Join(dir, "r.db")
	out, err := exec.Command(bin, "run", filepath.Join(dir, "two-billion.yaml"), "--db", db).CombinedOutput()
	if code := exitCodeOf(err); code != exitUsage || !strings.Contains(string(out), "workload.sessions: value 2000000000 is more than 100000") {
		t.Errorf("run: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run of an invalid spec created the database: %v", err)
	}
}

// measured is what a command run under internal/testkit/testbin/rusage did and cost.
type measured struct {
	Exit           int     `json:"exit"`
	UserMS         float64 `json:"user_ms"`
	SystemMS       float64 `json:"system_ms"`
	MaxRSSKB       int64   `json:"max_rss_kb"`
	WallMS         float64 `json:"-"`
	Stdout, Stderr string  `json:"-"`
}

// runMeasured runs a command under the rusage helper, which reports the command's own
// peak memory (a test process's would count in its children's). limit guards against a
// hang; it is not a measure.
func runMeasured(t *testing.T, limit time.Duration, rusage string, args ...string) measured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, rusage, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	errText := strings.TrimRight(stderr.String(), "\n")
	cut := strings.LastIndexByte(errText, '\n')
	var m measured
	if err != nil || json.Unmarshal([]byte(errText[cut+1:]), &m) != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	m.WallMS = float64(wall.Microseconds()) / 1000
	m.Stdout, m.Stderr = stdout.String(), strings.TrimRight(errText[:max(cut, 0)], "\n")
	return m
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 140 {
		line = line[:140] + "…"
	}
	return line
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
