package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // BF16_INDEX_K
		want string // in stderr
	}{
		{args: []string{"--no-such-flag"}, want: "no-such-flag"},
		{args: []string{"--tool-call-parser", "deepseekv9"}, want: "--tool-call-parser"},
		{args: []string{"--backend", "tpu"}, want: "--backend"},
		{args: []string{"--disaggregation-mode", "both"}, want: "--disaggregation-mode"},
		{args: []string{"--port", "70000"}, want: "--port"},
		{args: []string{"--max-running-requests", "-1"}, want: "--max-running-requests"},
		{args: []string{"--inter-token-delay", "fast"}, want: "inter-token-delay"},
		{args: []string{"--hicache-ratio", "0"}, want: "--hicache-ratio"},
		{args: []string{"serve"}, want: "unexpected argument"},
		{args: nil, env: "maybe", want: "BF16_INDEX_K"},
		{args: []string{"--disaggregation-transfer-backend", "rdma"}, want: "--disaggregation-transfer-backend"},
		{args: []string{"--disaggregation-bootstrap-port", "0"}, want: "--disaggregation-bootstrap-port"},
		{args: []string{"--prefill-delay-per-token", "-1us"}, want: "--prefill-delay-per-token"},
		{args: []string{"--decode-batch-cost", "-0.5"}, want: "--decode-batch-cost"},
		{args: []string{"--chunked-prefill-size", "0"}, want: "--chunked-prefill-size"},
		{args: []string{"--max-total-tokens", "0"}, want: "--max-total-tokens"},
		{args: []string{"--context-length", "1"}, want: "--context-length"},
		{args: []string{"--launch-fault-cv", "-0.5"}, want: "--launch-fault-cv -0.5"},
		{args: []string{"--launch-fault-cv", "NaN"}, want: "--launch-fault-cv NaN"},
		{args: []string{"--launch-fault-cv", "+Inf"}, want: "--launch-fault-cv +Inf"},
		{args: []string{"--launch-fault-cv", "2.5"}, want: "--launch-fault-cv 2.5"},
		{args: []string{"--launch-speed-cv", "-1"}, want: "--launch-speed-cv -1"},
		{args: []string{"--launch-speed-cv", "Inf"}, want: "--launch-speed-cv +Inf"},
		{args: []string{"--launch-speed-cv", "3"}, want: "--launch-speed-cv 3"},
		{args: []string{"--launch-seed", "-1"}, want: "launch-seed"},
		{args: []string{"--launch-seed", "9007199254740992"}, want: "--launch-seed 9007199254740992"},
		{args: []string{"--launch-fault-cv", "0.5", "--backend", "cuda"}, want: "--launch-fault-cv 0.5 with --backend cuda"},
	} {
		t.Setenv("BF16_INDEX_K", tc.env)
		var stderr bytes.Buffer
		code := run(context.Background(), tc.args, io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("refserve %v (BF16_INDEX_K=%q): exit %d, stderr %q; want 2 naming %s", tc.args, tc.env, code, stderr.String(), tc.want)
		}
	}
}

func TestFlagsAsSGLangSpellsThem(t *testing.T) {
	args := []string{"--host", "127.0.0.1", "--port", "0", "--served-model-name", "dsv4", "--model-path", "/models/x",
		"--enable-hierarchical-cache", "--hicache-ratio", "2", "--disable-overlap-schedule", "--max-running-requests", "32",
		"--tool-call-parser", "deepseekv32", "--random-seed", "5", "--inter-token-delay", "1ms", "--backend", "sim",
		"--disaggregation-mode", "decode", "--tp", "8", "--enable-metrics", "--page-size", "64", "--hicache-io-backend", "direct",
		"--hicache-mem-layout", "page_first", "--disaggregation-transfer-backend", "nixl", "--trust-remote-code",
		"--disaggregation-bootstrap-port", "9001", "--chunked-prefill-size", "4096", "--disable-radix-cache",
		"--max-total-tokens", "500000", "--context-length", "131072", "--prefill-delay-per-token", "3us", "--decode-batch-cost", "0.1"}
	env := map[string]string{"BF16_INDEX_K": "1", "SGLANG_NIXL_ABORT_HANDLER": "1", "SGLANG_HEALTH_CHECK_TIMEOUT": "2.5"}
	c, err := parseConfig(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.EnableHierarchicalCache || !c.DisableOverlapSchedule || !c.BF16IndexK || c.MaxRunningRequests != 32 || c.Seed != 5 ||
		c.InterTokenDelay != time.Millisecond || c.TPSize != 8 || c.ToolCallParser != "deepseekv32" || c.DisaggregationMode != "decode" ||
		c.DisaggregationTransferBackend != "nixl" || c.DisaggregationBootstrapPort != 9001 || c.ChunkedPrefillSize != 4096 ||
		!c.DisableRadixCache || c.MaxTotalTokens != 500000 || c.ContextLength != 131072 || c.PrefillDelayPerToken != 3*time.Microsecond ||
		c.DecodeBatchCost != 0.1 || !c.NixlAbortHandler || c.HealthCheckTimeout != 2500*time.Millisecond {
		t.Errorf("parsed %+v", c)
	}
	if c.massAbortArmed() || c.nixlAbortArmed() {
		t.Errorf("overlap off and the NIXL handler on, yet a fault is armed: mass abort %v, nixl %v", c.massAbortArmed(), c.nixlAbortArmed())
	}
	bc := c.backendConfig()
	if !bc.BF16IndexK || !bc.HiCache || bc.Seed != 5 || bc.MaxRunning != 32 {
		t.Errorf("backend config %+v", bc)
	}
}

func TestEnvPinErrors(t *testing.T) {
	for k, v := range map[string]string{"SGLANG_NIXL_ABORT_HANDLER": "yes", "SGLANG_HEALTH_CHECK_TIMEOUT": "-3", "ARBITER_INDEX_K_GATE": "2"} {
		_, err := parseConfig(nil, func(name string) string { return map[string]string{k: v}[name] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err = %v; want one naming %s", k, v, err, k)
		}
	}
}

// TestFaultsArmedByTheRealSwitches: each fault is armed by the flags and env pins that
// switch it on the real engine, and by nothing else.
func TestFaultsArmedByTheRealSwitches(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		env             map[string]string
		massAbort, nixl bool
	}{
		{args: nil},
		{args: []string{"--tp", "8"}, massAbort: true},
		{args: []string{"--tp-size", "2"}, massAbort: true},
		{args: []string{"--tp", "8", "--disable-overlap-schedule"}},
		{args: []string{"--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"}, nixl: true},
		{args: []string{"--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"}, nixl: true},
		{args: []string{"--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"}, env: map[string]string{"SGLANG_NIXL_ABORT_HANDLER": "1"}},
		{args: []string{"--disaggregation-mode", "prefill"}},          // mooncake handles ABORT
		{args: []string{"--disaggregation-transfer-backend", "nixl"}}, // not disaggregated
	} {
		c, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.massAbortArmed() != tc.massAbort || c.nixlAbortArmed() != tc.nixl {
			t.Errorf("%v %v: mass abort armed %v, nixl %v; want %v, %v", tc.args, tc.env, c.massAbortArmed(), c.nixlAbortArmed(), tc.massAbort, tc.nixl)
		}
	}
}

func TestHelpNamesTheFaults(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("refserve -h: exit %d", code)
	}
	for _, want := range []string{"--disaggregation-transfer-backend", "SGLANG_NIXL_ABORT_HANDLER=1", "--disable-overlap-schedule",
		"-prefill-delay-per-token", "-decode-batch-cost", "BF16_INDEX_K=1", "SGLANG_HEALTH_CHECK_TIMEOUT",
		"-launch-fault-cv", "-launch-speed-cv", "-launch-seed"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("refserve -h does not mention %s", want)
		}
	}
}

func TestUnknownBackendSaysWhy(t *testing.T) {
	_, err := newBackend("quantum", BackendConfig{})
	if err == nil || !strings.Contains(err.Error(), `"quantum" is not built into this binary`) {
		t.Errorf("err = %v", err)
	}
}

// TestBinary starts the refserve binary on a free port, reads the address from its log,
// checks /health, and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	p := startProcess(t, []string{"BF16_INDEX_K=1"}, "--enable-hierarchical-cache")
	if code := getStatus(t, p.url+"/health"); code != http.StatusOK {
		t.Fatalf("/health: HTTP %d", code)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.exited; err != nil {
		t.Errorf("refserve exited with %v after SIGTERM; want 0", err)
	}
}

// refserveBinary builds refserve once per test binary run (testbin keeps it).
func refserveBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the refserve binary; skipped with -short")
	}
	return testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
}

// process is a refserve process started by a test.
type process struct {
	url    string
	cmd    *exec.Cmd
	exited chan error // gets Wait's result
}

// startProcess runs the refserve binary with args (and --port 0) and env added to this
// process's environment, and returns once it logged its address and the ready line. The
// process is killed when the test ends.
func startProcess(t testing.TB, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(refserveBinary(t), append([]string{"--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, exited: make(chan error, 1)}
	urlRe := regexp.MustCompile(`url=(http://\S+)`)
	lines := bufio.NewScanner(stderr)
	ready := false
	for (!ready || p.url == "") && lines.Scan() {
		line := lines.Text()
		if m := urlRe.FindStringSubmatch(line); m != nil {
			p.url = m[1]
		}
		ready = ready || strings.Contains(line, readyLine)
	}
	go func() {
		for lines.Scan() { // keep draining so the process never blocks on stderr
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a no-op once it has exited
	})
	if !ready || p.url == "" {
		t.Fatalf("refserve %v did not log its address and the ready line (url %q, ready %v)", args, p.url, ready)
	}
	return p
}

// eventually polls cond until it holds: another process's state can only be read, not
// waited on.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	failsafe := time.NewTimer(20 * time.Second)
	defer failsafe.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-failsafe.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
