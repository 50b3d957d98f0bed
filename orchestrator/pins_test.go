package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// serverInfoEngine is an engine that already runs and answers /get_server_info with
// answer; its /health answers 200.
func serverInfoEngine(t *testing.T, answer http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/get_server_info", answer)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func serveJSON(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}
}

// externalPinsSpec is an A/B of two external SGLang arms that pin BF16_INDEX_K (which
// SGLang does not report) and args.
func externalPinsSpec(t *testing.T, controlURL, treatmentURL, args string) *arms.Spec {
	t.Helper()
	src := fmt.Sprintf(`version: 1
name: pins
engine: {preset: sglang}
runtime: {kind: external}
arms:
  control:   {env: {BF16_INDEX_K: "0"}, args: %s, base_url: %q}
  treatment: {env: {BF16_INDEX_K: "1"}, args: %s, base_url: %q}
workload: {kind: toolcall-agent, sessions: 4, rounds: 2, concurrency: 4, seed: 3, temperature: 0}
detectors: [dsml-leak]
`, args, controlURL, args, treatmentURL)
	s, err := arms.Parse("pins.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Server info that cannot be read whole, or is not a JSON object, refuses its arm
// before anything is recorded, naming the arm, the URL and what was wrong. Such pins
// were once only "unverified", and the experiment went ahead on a caveat.
func TestExternalServerInfoRefused(t *testing.T) {
	t.Parallel()
	good := serverInfoEngine(t, serveJSON(`{"enable_hierarchical_cache": true, "version": "0.5.4"}`))
	pad := strings.Repeat("x", 1468006-len(`{"enable_hierarchical_cache": true, "pad": ""}`))
	padded := `{"enable_hierarchical_cache": true, "pad": "` + pad + `"}`
	for _, tc := range []struct {
		name   string
		answer http.HandlerFunc
		want   string
	}{
		{"padded past 1 MiB", serveJSON(padded), "server info is 1.4 MiB (1468006 bytes), over the 1 MiB limit"},
		{"padded past 1 MiB, no length given", func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(padded); i += 64 << 10 {
				fmt.Fprint(w, padded[i:min(i+64<<10, len(padded))])
				w.(http.Flusher).Flush()
			}
		}, "server info is 1.4 MiB (1468006 bytes), over the 1 MiB limit"},
		{"endless", func(w http.ResponseWriter, r *http.Request) {
			chunk := strings.Repeat(" ", 64<<10)
			for r.Context().Err() == nil {
				if _, err := fmt.Fprint(w, chunk); err != nil {
					return
				}
			}
		}, "server info is more than 9.0 MiB"},
		{"garbled", serveJSON(`{"enable_hierarchical_cache": true, <html>`), "server info is not JSON at byte 37: invalid character '<'"},
		{"trailing garbage", serveJSON(`{"enable_hierarchical_cache": true} and more`), "server info is not JSON at byte 37"},
		{"missing", http.NotFound, "HTTP 404"},
		{"a list", serveJSON(`[{"enable_hierarchical_cache": true}]`), "server info is not a JSON object but a list"},
		{"null", serveJSON(`null`), "server info is not a JSON object but null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostile := serverInfoEngine(t, tc.answer)
			spec := externalPinsSpec(t, hostile, good, "[--enable-hierarchical-cache]")
			pf, err := RunPreflight(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			err = pf.Err()
			if !errors.Is(err, ErrPreflight) {
				t.Fatalf("preflight passed (unverified: %q), want the arm refused", pf.Unverified)
			}
			for _, want := range []string{"control: pins: ", "GET " + hostile + "/get_server_info: ", tc.want, "arbiter does not judge an arm whose pins it cannot check"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "treatment: pins") {
				t.Errorf("the arm whose server info is sound was refused too:\n%v", err)
			}

			// At its run, an arm whose engine has begun to answer so is refused too.
			armList, _ := spec.Expand()
			_, err = CheckPins(context.Background(), spec, armList[0])
			if !errors.Is(err, ErrPinsUncheckable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("at the run: %v", err)
			}
		})
	}
}

// Pins that server info readable as a JSON object reports otherwise refuse their arm:
// --chunked-prefill-size -1 against 8192, a bare flag against "false" or 0.
func TestExternalPinMismatchesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, info, args, want string
	}{
		{"a value that starts with -", `{"chunked_prefill_size": 8192}`, `[--chunked-prefill-size, "-1"]`, "--chunked-prefill-size is 8192, pinned -1"},
		{"a bare flag reported as the string false", `{"enable_hierarchical_cache": "false"}`, `[--enable-hierarchical-cache]`, "--enable-hierarchical-cache is false, pinned on"},
		{"a bare flag reported as 0", `{"enable_hierarchical_cache": 0}`, `[--enable-hierarchical-cache]`, "--enable-hierarchical-cache is 0, pinned on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			control := serverInfoEngine(t, serveJSON(tc.info))
			treatment := serverInfoEngine(t, serveJSON(tc.info))
			pf, err := RunPreflight(context.Background(), externalPinsSpec(t, control, treatment, tc.args))
			if err != nil {
				t.Fatal(err)
			}
			err = pf.Err()
			if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "control: pins: the engine at "+control+" does not run as pinned: "+tc.want) {
				t.Errorf("preflight: %v, want arm control refused: %s", err, tc.want)
			}
		})
	}
}

// A run refused for its server info leaves nothing behind, as any failed preflight.
func TestExternalRunRefusedForPaddedServerInfo(t *testing.T) {
	t.Parallel()
	padded := `{"enable_hierarchical_cache": true, "pad": "` + strings.Repeat("x", 2<<20) + `"}`
	control := serverInfoEngine(t, serveJSON(padded))
	treatment := serverInfoEngine(t, serveJSON(`{"enable_hierarchical_cache": true}`))
	db := filepath.Join(t.TempDir(), "refused.db")
	_, err := Run(context.Background(), Options{Spec: externalPinsSpec(t, control, treatment, "[--enable-hierarchical-cache]"), DBPath: db,
		Logger: quietLogger(), GPULockDir: t.TempDir()})
	if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "server info is 2.0 MiB") {
		t.Fatalf("err = %v, want a preflight refusal for the padded server info", err)
	}
	if _, serr := os.Stat(db); !os.IsNotExist(serr) {
		t.Errorf("a refused experiment left a database (%v)", serr)
	}
}

// TestPinErrorsNameTheAddressWithoutSecrets: the address a pin check names goes through
// arms.RedactURL, which keeps where it looked and hides what may be a credential.
func TestPinErrorsNameTheAddressWithoutSecrets(t *testing.T) {
	t.Parallel()
	got := arms.RedactURL("http://ops:hunter2@10.0.0.5:30000/get_server_info?token=abc#x")
	if strings.Contains(got, "hunter2") || strings.Contains(got, "abc") || !strings.Contains(got, "10.0.0.5:30000/get_server_info") {
		t.Errorf("arms.RedactURL = %s", got)
	}
}
