package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/dockertest"
	"github.com/arbiterlab/arbiter/internal/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// startServer runs refserve as a deployment would be running before arbiter is asked
// to compare it: started by someone else, with its own settings, at a base URL.
func startServer(t *testing.T, bin string, env ...string) string {
	t.Helper()
	inst, err := runtime.Process{Grace: 5 * time.Second}.Start(context.Background(), runtime.Launch{Name: "deployment",
		Command: []string{bin, "--enable-hierarchical-cache", "--tool-call-parser", "deepseekv4"}, Env: env,
		LogPath: filepath.Join(t.TempDir(), "engine.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	dockertest.WaitHealthy(t, inst)
	return inst.Endpoint()
}

func externalSpec(t *testing.T, controlURL, controlK, treatmentURL string) *arms.Spec {
	t.Helper()
	src := fmt.Sprintf(`version: 1
name: external
engine: {preset: refserve}
runtime: {kind: external}
arms:
  control:   {env: {BF16_INDEX_K: %q}, args: [--deploy-note, a], base_url: %q}
  treatment: {env: {BF16_INDEX_K: "1"}, args: [--deploy-note, b], base_url: %q}
workload: {kind: toolcall-agent, sessions: 8, rounds: 2, concurrency: 8, seed: 3, temperature: 0}
detectors: [dsml-leak]
timeouts: {startup: 30s, request: 30s, stall: 20s}
`, controlK, controlURL, treatmentURL)
	s, err := arms.Parse("external.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Arms that already run are driven where they are, never launched or stopped; their
// reported settings are compared with their pins, the pins no engine reports are named
// in the verdict, and an arm whose engine runs otherwise than pinned is refused before
// anything is recorded.
func TestExternalArms(t *testing.T) {
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	control := startServer(t, bin, "BF16_INDEX_K=0")
	treatment := startServer(t, bin, "BF16_INDEX_K=1")

	db := filepath.Join(t.TempDir(), "ext.db")
	res, err := Run(context.Background(), Options{Spec: externalSpec(t, control, "0", treatment+"/"), DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunDone || r.Sessions != 8 {
			t.Errorf("run %+v: want done with 8 sessions", r)
		}
	}
	// arbiter did not stop them: both still answer.
	for _, u := range []string{control, treatment} {
		resp, err := http.Get(u + "/health")
		if err != nil {
			t.Fatalf("%s no longer answers after the experiment: %v", u, err)
		}
		resp.Body.Close()
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var instances []string
	if err := ro.Select(&instances, `SELECT instance FROM runs ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	for _, in := range instances {
		if in != "external "+control && in != "external "+treatment {
			t.Errorf("run instance %q, want the base URL it ran at", in)
		}
	}
	v, err := verdict.Build(context.Background(), ro, strconv.FormatInt(res.ExperimentID, 10))
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := v.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"arbiter launched none of them",
		"**Pins that could not be verified** (the engine did not report them): control: --deploy-note (the engine does not report it); treatment: --deploy-note (the engine does not report it)",
		"Pins not verified:"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("verdict lacks %q:\n%s", want, md.String())
		}
	}

	// Declared BF16_INDEX_K=1 for control, but the engine there reads 0: refused.
	db2 := filepath.Join(t.TempDir(), "refused.db")
	_, err = Run(context.Background(), Options{Spec: externalSpec(t, control, "1", treatment), DBPath: db2, Logger: quietLogger(), GPULockDir: t.TempDir()})
	if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), `BF16_INDEX_K is "0", pinned "1"`) {
		t.Errorf("err = %v, want a preflight refusal naming the setting", err)
	}
	if _, serr := os.Stat(db2); !os.IsNotExist(serr) {
		t.Errorf("a refused experiment left a database (%v)", serr)
	}
}

func TestComparePins(t *testing.T) {
	info := []byte(`{"env": {"BF16_INDEX_K": "1"}, "enable_hierarchical_cache": true, "disable_overlap_schedule": false,
		"hicache_ratio": 2, "tool_call_parser": "deepseekv4"}`)
	c := ComparePins(info, arms.Pins{Env: map[string]string{"BF16_INDEX_K": "1", "OTHER": "x"},
		Args: []string{"--enable-hierarchical-cache", "--hicache-ratio", "2", "--tool-call-parser=deepseekv4", "--tp-size", "8"}})
	if got := fmt.Sprint(c.Verified); got != "[BF16_INDEX_K=1 --enable-hierarchical-cache --hicache-ratio 2 --tool-call-parser deepseekv4]" {
		t.Errorf("verified %s", got)
	}
	if got := fmt.Sprint(c.Unverified); got != "[OTHER (the engine does not report it) --tp-size (the engine does not report it)]" || len(c.Mismatched) > 0 {
		t.Errorf("unverified %s, mismatched %v", got, c.Mismatched)
	}
	c = ComparePins(info, arms.Pins{Env: map[string]string{"BF16_INDEX_K": "0"}, Args: []string{"--disable-overlap-schedule", "--hicache-ratio", "4"}})
	if got := fmt.Sprint(c.Mismatched); got != `[BF16_INDEX_K is "1", pinned "0" --disable-overlap-schedule is off, pinned on --hicache-ratio is 2, pinned 4]` {
		t.Errorf("mismatched %s", got)
	}
	if c := ComparePins([]byte("null"), arms.Pins{Args: []string{"--x"}}); len(c.Unverified) != 1 {
		t.Errorf("null server info: %+v", c)
	}
}

func FuzzComparePins(f *testing.F) {
	f.Add([]byte(`{"env": {"BF16_INDEX_K": "1"}, "enable_hierarchical_cache": true, "page_size": 16}`), "BF16_INDEX_K", "1", "--page-size 16 --enable-hierarchical-cache")
	f.Add([]byte(`[]`), "A", "", "-x")
	f.Add([]byte(`{"env": null, "x": [1, {"a": null}]}`), "env", "v", "--x --y=3 z")
	f.Fuzz(func(t *testing.T, info []byte, key, value, args string) {
		pins := arms.Pins{Env: map[string]string{key: value}, Args: strings.Fields(args)}
		c := ComparePins(info, pins)
		// Every pin gets exactly one outcome.
		if n := len(c.Verified) + len(c.Mismatched) + len(c.Unverified); n != 1+len(pinFlags(pins.Args)) {
			t.Errorf("%d outcomes for %d pins: %+v", n, 1+len(pinFlags(pins.Args)), c)
		}
	})
}
