package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// The fixtures under arms/testdata/engines are what SGLang's /server_info and vLLM's
// /metrics and /version return, derived from their sources (README.md there names the
// files and commits): SGLang main at python/sglang/srt/server_args.py and
// entrypoints/http_server.py, vLLM main at vllm/v1/metrics/loggers.py and
// vllm/entrypoints/openai/api_server.py.

// fixtureEngine serves the fixture files at their paths, and 404 elsewhere.
func fixtureEngine(t *testing.T, files map[string]string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	for path, file := range files {
		body, err := os.ReadFile("../arms/testdata/engines/" + file)
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func fixtureSpec(t *testing.T, preset, url, args string) *arms.Spec {
	other := strings.Replace(url, "127.0.0.1", "localhost", 1) // another base_url, the same server
	t.Helper()
	src := fmt.Sprintf(`version: 1
name: fixture
engine: {preset: %s}
runtime: {kind: external}
arms:
  only:  {args: %s, base_url: %q}
  other: {args: %s, base_url: %q}
workload: {kind: toolcall-agent, sessions: 4, rounds: 2, concurrency: 4, seed: 3, temperature: 0}
analysis: {aa: true}
`, preset, args, url, args, other)
	s, err := arms.Parse("fixture.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SGLang reports every resolved setting at /server_info (and, on releases before it,
// at /get_server_info): pins are confirmed there, and a setting another one overrode
// (a page size an attention backend forced) is reported as it runs.
func TestSGLangServerInfoFixture(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/server_info", "/get_server_info"} {
		t.Run(path, func(t *testing.T) {
			url := fixtureEngine(t, map[string]string{path: "sglang/server_info.json"})
			spec := fixtureSpec(t, "sglang", url, "[--tp, '8', --page-size, '64', --enable-hierarchical-cache, --chunked-prefill-size, '8192', --max-running-requests, '48']")
			a, _ := spec.Expand()
			pc, err := CheckPins(context.Background(), spec, a[0])
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(pc.Verified, "; "); got != "--tp 8; --page-size 64; --enable-hierarchical-cache; --chunked-prefill-size 8192" {
				t.Errorf("verified: %s", got)
			}
			if len(pc.Mismatched) != 1 || !strings.HasPrefix(pc.Mismatched[0], "--max-running-requests is ") {
				t.Errorf("mismatched: %q, want --max-running-requests as SGLang resolved it", pc.Mismatched)
			}
			spec = fixtureSpec(t, "sglang", url, "[--page-size, '16', --disable-overlap-schedule, --chunked-prefill-size, '-1']")
			a, _ = spec.Expand()
			pc, err = CheckPins(context.Background(), spec, a[0])
			if err != nil {
				t.Fatal(err)
			}
			want := "--page-size is 64, pinned 16; --disable-overlap-schedule is false, pinned on; --chunked-prefill-size is 8192, pinned -1"
			if got := strings.Join(pc.Mismatched, "; "); got != want {
				t.Errorf("mismatched:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// vLLM reports its cache configuration as the labels of vllm:cache_config_info; the
// rest of its configuration it does not report, and such pins are unverified.
func TestVLLMMetricsFixture(t *testing.T) {
	t.Parallel()
	url := fixtureEngine(t, map[string]string{"/metrics": "vllm/metrics.txt", "/version": "vllm/version.json"})
	spec := fixtureSpec(t, "vllm", url, "[--kv-cache-dtype, fp8, --block-size, '16', --enable-prefix-caching, --max-num-seqs, '64']")
	a, _ := spec.Expand()
	pc, err := CheckPins(context.Background(), spec, a[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pc.Verified, "; "); got != "--kv-cache-dtype fp8; --block-size 16; --enable-prefix-caching" {
		t.Errorf("verified: %s", got)
	}
	if len(pc.Unverified) != 1 || !strings.HasPrefix(pc.Unverified[0], "--max-num-seqs (nothing the vllm preset reads reports it") {
		t.Errorf("unverified: %q", pc.Unverified)
	}
	spec = fixtureSpec(t, "vllm", url, "[--kv-cache-dtype, fp8_e5m2, --block-size, '32']")
	a, _ = spec.Expand()
	pc, err = CheckPins(context.Background(), spec, a[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pc.Mismatched, "; "); got != "--kv-cache-dtype is fp8, pinned fp8_e5m2; --block-size is 16, pinned 32" {
		t.Errorf("mismatched: %s", got)
	}
	// The preflight refuses the arm, and says so as ErrPinsNotHeld (exit code 5).
	pf, err := RunPreflight(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Err(); !errors.Is(err, ErrPinsNotHeld) || !strings.Contains(err.Error(), "--kv-cache-dtype is fp8, pinned fp8_e5m2") {
		t.Errorf("preflight: %v", err)
	}
}
