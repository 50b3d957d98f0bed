package orchestrator

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// engineOwnReadiness is the peer of BenchmarkLaunchOverhead: how long refserve takes to
// answer /health after it is started, polled every millisecond, with nothing of
// arbiter's around it but the runtime's start.
func engineOwnReadiness(b *testing.B, bin string) time.Duration {
	b.Helper()
	start := time.Now()
	inst, err := runtime.Process{}.Start(context.Background(), runtime.Launch{Name: "peer", Command: []string{bin},
		LogPath: filepath.Join(b.TempDir(), "peer.log")})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Stop(context.Background())
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(inst.Endpoint() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case <-inst.Done():
			b.Fatalf("refserve exited before it was ready: %s", inst.Exit())
		case <-time.After(time.Millisecond):
		}
	}
}

// runWindows reads every run's launch-to-ready and launch-to-end times.
func runWindows(b *testing.B, db string, exp int64) (ready, whole []time.Duration) {
	b.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		b.Fatal(err)
	}
	defer ro.Close()
	runs, err := store.Runs(context.Background(), ro, exp)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range runs {
		s, _ := time.Parse(time.RFC3339Nano, r.StartedAt)
		rd, _ := time.Parse(time.RFC3339Nano, r.ReadyAt.String)
		e, _ := time.Parse(time.RFC3339Nano, r.EndedAt.String)
		ready, whole = append(ready, rd.Sub(s)), append(whole, e.Sub(s))
	}
	return ready, whole
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(max(len(ds), 1))
}

// BenchmarkLaunchOverhead measures arbiter's own cost per arm between launching an
// engine and calling it ready (the run row, the runtime's start, the health polls, the
// readiness generation), against refserve's own readiness measured beside it. Target:
// under 500 ms per arm, and under 50 ms for the readiness probing itself on refserve,
// which answers at once.
func BenchmarkLaunchOverhead(b *testing.B) {
	bin := testbin.Build(b, "github.com/arbiterlab/arbiter/cmd/refserve")
	var own, arbiter time.Duration
	for b.Loop() {
		own += engineOwnReadiness(b, bin)
		spec := benchSpec(b, bin, 1, 2, "    - {name: local, slots: 2}\n", false)
		db := filepath.Join(b.TempDir(), "a.db")
		res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		ready, _ := runWindows(b, db, res.ExperimentID)
		arbiter += mean(ready)
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((own/n).Microseconds())/1000, "engine-ready-ms")
	b.ReportMetric(float64((arbiter/n).Microseconds())/1000, "arbiter-ready-ms")
	b.ReportMetric(float64(((arbiter-own)/n).Microseconds())/1000, "overhead-ms/arm")
	b.ReportMetric(50, "target-ms")
}

// BenchmarkFactorialOnEightSlots runs an eight-arm factorial (2^3) on eight slots and
// compares its wall time with the slowest arm run alone (the same factorial on one slot,
// where each arm has the machine to itself). Target: within 1.5x.
func BenchmarkFactorialOnEightSlots(b *testing.B) {
	bin := testbin.Build(b, "github.com/arbiterlab/arbiter/cmd/refserve")
	var wall, alone time.Duration
	for b.Loop() {
		solo := benchSpec(b, bin, 20, 2, "    - {name: local, slots: 1}\n", true)
		db := filepath.Join(b.TempDir(), "solo.db")
		res, err := Run(context.Background(), Options{Spec: solo, DBPath: db, Logger: quietLogger(), GPULockDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		_, whole := runWindows(b, db, res.ExperimentID)
		slowest := time.Duration(0)
		for _, d := range whole {
			slowest = max(slowest, d)
		}
		alone += slowest

		eight := benchSpec(b, bin, 20, 2, "    - {name: local, slots: 8}\n", true)
		res, err = Run(context.Background(), Options{Spec: eight, DBPath: filepath.Join(b.TempDir(), "eight.db"),
			Logger: quietLogger(), GPULockDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		wall += res.Elapsed
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((wall / n).Milliseconds()), "wall-ms")
	b.ReportMetric(float64((alone / n).Milliseconds()), "slowest-arm-alone-ms")
	b.ReportMetric(float64(wall)/float64(alone), "wall/slowest-arm")
}

// benchSpec is a refserve spec: two arms, or with factorial the 2^3 factorial of the
// examples (bf16 index-K x HiCache x the restore gate), on the given nodes.
func benchSpec(b *testing.B, bin string, sessions, rounds int, nodes string, factorial bool) *arms.Spec {
	b.Helper()
	design := "arms:\n  control: {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}\n"
	if factorial {
		design = `factors:
  bf16_index_k: {env: BF16_INDEX_K, levels: ["0", "1"]}
  hicache:
    off: {}
    on: {args: [--enable-hierarchical-cache]}
  gate: {env: ARBITER_INDEX_K_GATE, levels: ["0", "1"]}
`
	}
	src := fmt.Sprintf(`version: 1
name: bench
engine: {preset: refserve, command: [%q], args: [--tool-call-parser, deepseekv4]}
%sworkload: {kind: toolcall-agent, sessions: %d, rounds: %d, seed: 42, temperature: 0}
detectors: [dsml-leak]
timeouts: {startup: 60s, request: 60s, stall: 30s}
runtime:
  nodes:
%s`, bin, design, sessions, rounds, nodes)
	s, err := arms.Parse("bench.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return s
}
