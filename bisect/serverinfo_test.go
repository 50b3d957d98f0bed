package bisect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
)

// launchServerInfo starts refserve with args and env through the process runtime, as
// an arm is launched, and returns its /get_server_info once it answers.
func launchServerInfo(t *testing.T, name string, command []string, env map[string]string) map[string]any {
	t.Helper()
	var envList []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	ctx := context.Background()
	inst, err := runtime.Process{Grace: time.Second}.Start(ctx, runtime.Launch{Name: name, Command: command, Env: envList,
		LogPath: filepath.Join(t.TempDir(), name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop(ctx)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		resp, err := http.Get(inst.Endpoint() + "/get_server_info")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var info map[string]any
				if err := json.Unmarshal(body, &info); err != nil {
					t.Fatal(err)
				}
				return info
			}
		}
		select {
		case <-tick.C:
		case <-inst.Done():
			t.Fatalf("%s exited: %s", name, inst.Exit())
		case <-deadline.C:
			t.Fatalf("%s never answered /get_server_info", name)
		}
	}
}

// Pins derived from the get_server_info of two real refserve deployments reproduce them:
// the good level of a step launches a refserve whose server info is good's, and the level
// with every change applied one whose server info is bad's (but for the port).
func TestServerInfoPinsReproduceRealDeployments(t *testing.T) {
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	good := launchServerInfo(t, "good", []string{bin, "--tool-call-parser", "deepseekv4", "--page-size", "1"},
		map[string]string{"BF16_INDEX_K": "0"})
	bad := launchServerInfo(t, "bad", []string{bin, "--tool-call-parser", "deepseekv4", "--page-size", "16", "--chunked-prefill-size", "4096",
		"--max-running-requests", "128", "--enable-hierarchical-cache", "--mem-fraction-static", "0.85", "--enable-metrics"},
		map[string]string{"BF16_INDEX_K": "1", "SGLANG_HEALTH_CHECK_TIMEOUT": "30"})
	dir := t.TempDir()
	for name, info := range map[string]map[string]any{"good.json": good, "bad.json": bad} {
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := fmt.Sprintf(`version: 1
name: deploys
engine: {preset: refserve, command: [%q], args: [--tool-call-parser, deepseekv4]}
good: {server_info: good.json}
bad: {server_info: bad.json}
workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}
search: {effect: 0.1}
`, bin)
	spec, err := arms.ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, c := range spec.Changes {
		labels = append(labels, c.Label())
	}
	want := []string{"BF16_INDEX_K: 0 → 1", "SGLANG_HEALTH_CHECK_TIMEOUT: unset → 30", "--chunked-prefill-size: 8192 → 4096",
		"--enable-hierarchical-cache: absent → set", "--enable-metrics: absent → set", "--max-running-requests: 0 → 128",
		"--mem-fraction-static: 0.9 → 0.85", "--page-size: 1 → 16"}
	if !slices.Equal(labels, want) {
		t.Fatalf("changes\n%q\nwant\n%q", labels, want)
	}
	all := make([]int, len(spec.Changes))
	for i := range all {
		all[i] = i
	}
	step, err := spec.StepSpec(arms.StepOptions{Name: "deploys-b1-s01", Applied: all, Alpha: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	armList, err := step.Expand()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]any{good, bad} {
		got := launchServerInfo(t, strings.ReplaceAll(armList[i].Name, "=", "-"), armList[i].Command, armList[i].Env)
		for _, k := range []string{"port"} {
			delete(got, k)
			delete(want, k)
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Errorf("arm %s serves\n%s\nthe deployment served\n%s", armList[i].Name, gb, wb)
		}
	}
}
