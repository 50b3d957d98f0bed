package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/dockertest"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
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
	t.Parallel()
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
	v, err := verdict.Build(context.Background(), ro, res.ExperimentID)
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
	t.Parallel()
	g := arms.PresetFor("refserve").Grammar
	info := []byte(`{"env": {"BF16_INDEX_K": "1"}, "enable_hierarchical_cache": true, "disable_overlap_schedule": false,
		"hicache_ratio": 2, "tool_call_parser": "deepseekv4", "mem_fraction_static": 0.9, "cuda_graph_bs": [1, 2, 4]}`)
	c, err := comparePins(g, info, arms.Pins{Env: map[string]string{"BF16_INDEX_K": "1", "OTHER": "x"},
		Args: []string{"--enable-hierarchical-cache", "--hicache-ratio", "2", "--tool-call-parser=deepseekv4", "--tp-size", "8",
			"--mem-fraction-static", "0.90", "--cuda-graph-bs", "1", "2", "4"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Verified); got != "[BF16_INDEX_K=1 --enable-hierarchical-cache --hicache-ratio 2 --tool-call-parser deepseekv4 --mem-fraction-static 0.90 --cuda-graph-bs 1 2 4]" {
		t.Errorf("verified %s", got)
	}
	if got := fmt.Sprint(c.Unverified); got != "[OTHER (the engine does not report it) --tp-size (the engine does not report it)]" || len(c.Mismatched) > 0 {
		t.Errorf("unverified %s, mismatched %v", got, c.Mismatched)
	}
	c, _ = comparePins(g, info, arms.Pins{Env: map[string]string{"BF16_INDEX_K": "0"}, Args: []string{"--disable-overlap-schedule", "--hicache-ratio", "4"}})
	if got := fmt.Sprint(c.Mismatched); got != `[BF16_INDEX_K is "1", pinned "0" --disable-overlap-schedule is false, pinned on --hicache-ratio is 2, pinned 4]` {
		t.Errorf("mismatched %s", got)
	}
	for _, bad := range []string{"null", "[]", `"x"`, "{", `{"a": 1} {}`, `{"env": "BF16_INDEX_K=1"}`} {
		if c, err := comparePins(g, []byte(bad), arms.Pins{Args: []string{"--x"}}); err == nil {
			t.Errorf("server info %s: %+v, want an error", bad, c)
		}
	}
}

// A value pinned with a leading - is compared as the value it is, and a bare flag is
// confirmed only by a report that says it is on. Both were once confirmed: -1 was read
// as a flag of its own, and any reported value but false and null counted as on.
func TestComparePinsHostileValues(t *testing.T) {
	t.Parallel()
	g := arms.PresetFor("sglang").Grammar
	for _, tc := range []struct {
		info string
		args []string
		want string
	}{
		{`{"chunked_prefill_size": 8192}`, []string{"--chunked-prefill-size", "-1"}, "--chunked-prefill-size is 8192, pinned -1"},
		{`{"chunked_prefill_size": "8192"}`, []string{"--chunked-prefill-size=-1"}, "--chunked-prefill-size is 8192, pinned -1"},
		{`{"enable_hierarchical_cache": "false"}`, []string{"--enable-hierarchical-cache"}, "--enable-hierarchical-cache is false, pinned on"},
		{`{"enable_hierarchical_cache": 0}`, []string{"--enable-hierarchical-cache"}, "--enable-hierarchical-cache is 0, pinned on"},
		{`{"enable_hierarchical_cache": "yes please"}`, []string{"--enable-hierarchical-cache"}, "--enable-hierarchical-cache is yes please, pinned on"},
		{`{"enable_hierarchical_cache": [true]}`, []string{"--enable-hierarchical-cache"}, "--enable-hierarchical-cache is [true], pinned on"},
		{`{"env": {"BF16_INDEX_K": 1}}`, nil, `BF16_INDEX_K is 1, not a string, pinned "1"`},
	} {
		pins := arms.Pins{Args: tc.args}
		if tc.args == nil {
			pins.Env = map[string]string{"BF16_INDEX_K": "1"}
		}
		c, err := comparePins(g, []byte(tc.info), pins)
		if err != nil || len(c.Verified) > 0 || fmt.Sprint(c.Mismatched) != "["+tc.want+"]" {
			t.Errorf("%s against %q: %+v, %v; want mismatched %s", tc.info, tc.args, c, err, tc.want)
		}
	}
	for _, on := range []string{"true", `"true"`, `"True"`, "1", `"1"`} {
		c, err := comparePins(g, []byte(`{"enable_hierarchical_cache": `+on+`}`), arms.Pins{Args: []string{"--enable-hierarchical-cache"}})
		if err != nil || len(c.Verified) != 1 {
			t.Errorf("reported %s: %+v, %v; want confirmed", on, c, err)
		}
	}
	c, err := comparePins(g, []byte(`{"chunked_prefill_size": -1}`), arms.Pins{Args: []string{"--chunked-prefill-size", "-1"}})
	if err != nil || fmt.Sprint(c.Verified) != "[--chunked-prefill-size -1]" {
		t.Errorf("-1 against -1: %+v, %v", c, err)
	}
}

func FuzzComparePins(f *testing.F) {
	f.Add([]byte(`{"env": {"BF16_INDEX_K": "1"}, "enable_hierarchical_cache": true, "page_size": 16}`), "BF16_INDEX_K", "1", "--page-size 16 --enable-hierarchical-cache")
	f.Add([]byte(`[]`), "A", "", "-x")
	f.Add([]byte(`{"env": null, "x": [1, {"a": null}]}`), "env", "v", "--x --y=3 z")
	f.Add([]byte(`{"chunked_prefill_size": 8192, "enable_metrics": "false"}`), "K", "v", "--chunked-prefill-size -1 --enable-metrics")
	g := arms.PresetFor("sglang").Grammar
	f.Fuzz(func(t *testing.T, info []byte, key, value, args string) {
		pins := arms.Pins{Env: map[string]string{key: value}, Args: strings.Fields(args)}
		c, err := comparePins(g, info, pins)
		if err != nil {
			if n := len(c.Verified) + len(c.Mismatched) + len(c.Unverified); n != 0 {
				t.Errorf("refused server info, and %d outcomes: %+v", n, c)
			}
			return
		}
		// Every pin gets exactly one outcome.
		flags, _ := g.Parse(pins.Args)
		if n := len(c.Verified) + len(c.Mismatched) + len(c.Unverified); n != 1+len(flags) {
			t.Errorf("%d outcomes for %d pins: %+v", n, 1+len(flags), c)
		}
	})
}

// comparePins compares a /get_server_info JSON of SGLang's form with pins, the pinned
// args read by the engine's grammar: a flag pin with the value reported under the
// flag's name (- read as _), an env pin with the engine's report of its environment
// under env (refserve reports the variables it reads; SGLang none). A pin the engine
// does not report is unverified, not mismatched. A bare flag is confirmed only by true
// (or "true", 1); a value by the same value, numbers compared as numbers and a list
// item by item. Server info that is not a JSON object, or whose env is not an object,
// is an error.
func comparePins(g arms.Grammar, info []byte, pins arms.Pins) (PinCheck, error) {
	m, err := readServerInfo(info, "env")
	if err != nil {
		return PinCheck{}, err
	}
	p := arms.Preset{Name: "server-info", FlagsInServerInfo: true, EnvInServerInfo: "env", Grammar: g}
	return newPinCheck(attest(p, g, pins, arms.Pins{}, observation{info: m})), nil
}
