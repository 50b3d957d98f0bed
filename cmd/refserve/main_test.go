package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
		"--hicache-mem-layout", "page_first", "--disaggregation-transfer-backend", "nixl", "--trust-remote-code"}
	c, err := parseConfig(args, func(k string) string { return map[string]string{"BF16_INDEX_K": "1"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.EnableHierarchicalCache || !c.DisableOverlapSchedule || !c.BF16IndexK || c.MaxRunningRequests != 32 || c.Seed != 5 ||
		c.InterTokenDelay != time.Millisecond || c.TPSize != 8 || c.ToolCallParser != "deepseekv32" || c.DisaggregationMode != "decode" {
		t.Errorf("parsed %+v", c)
	}
	bc := c.backendConfig()
	if !bc.BF16IndexK || !bc.HiCache || bc.Seed != 5 || bc.MaxRunning != 32 {
		t.Errorf("backend config %+v", bc)
	}
}

func TestUnknownBackendSaysWhy(t *testing.T) {
	_, err := newBackend("quantum", BackendConfig{})
	if err == nil || !strings.Contains(err.Error(), `"quantum" is not built into this binary`) {
		t.Errorf("err = %v", err)
	}
}

// TestBinary builds refserve, starts it on a free port, reads the address from its log,
// checks /health, and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "refserve")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--port", "0", "--enable-hierarchical-cache")
	cmd.Env = append(os.Environ(), "BF16_INDEX_K=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op once it has exited
	})
	urlRe := regexp.MustCompile(`url=(http://\S+)`)
	lines := bufio.NewScanner(stderr)
	var url string
	ready := false
	for (!ready || url == "") && lines.Scan() {
		line := lines.Text()
		if m := urlRe.FindStringSubmatch(line); m != nil {
			url = m[1]
		}
		ready = ready || strings.Contains(line, readyLine)
	}
	if !ready || url == "" {
		t.Fatalf("refserve did not log its address and the ready line (url %q, ready %v)", url, ready)
	}
	go func() {
		for lines.Scan() { // keep draining so the process never blocks on stderr
		}
		exited <- cmd.Wait()
	}()
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: HTTP %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("refserve exited with %v after SIGTERM; want 0", err)
	}
}
