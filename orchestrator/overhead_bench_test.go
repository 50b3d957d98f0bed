package orchestrator

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

// BenchmarkArmOverhead measures what readiness costs an arm on a real refserve process:
// from the launch to the engine proven ready (health, then one real generation), as the
// runs table records it (ready_at − started_at), mean over the launches of a 2-arm,
// 2-block experiment of one short session each.
func BenchmarkArmOverhead(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "refserve")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/arbiterlab/arbiter/cmd/refserve").CombinedOutput(); err != nil {
		b.Fatalf("build refserve: %v\n%s", err, out)
	}
	src := fmt.Sprintf(`version: 1
name: overhead
engine: {preset: refserve, command: [%q]}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
blocks: 2
workload: {kind: toolcall-agent, sessions: 1, rounds: 1, concurrency: 1, seed: 1}
detectors: [dsml-leak]
timeouts: {startup: 30s, request: 30s, stall: 20s}
`, bin)
	spec, err := arms.Parse("overhead.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	var launches int
	for b.Loop() {
		db := filepath.Join(b.TempDir(), "o.db")
		res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			b.Fatal(err)
		}
		var rows []struct {
			Started string `db:"started_at"`
			Ready   string `db:"ready_at"`
		}
		if err := ro.Select(&rows, `SELECT started_at, ready_at FROM runs WHERE experiment_id = ?`, res.ExperimentID); err != nil {
			b.Fatal(err)
		}
		ro.Close()
		for _, r := range rows {
			s, err1 := time.Parse(time.RFC3339Nano, r.Started)
			e, err2 := time.Parse(time.RFC3339Nano, r.Ready)
			if err1 != nil || err2 != nil {
				b.Fatalf("run times %q %q", r.Started, r.Ready)
			}
			total += e.Sub(s)
			launches++
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(launches), "ms-to-ready/arm")
	b.ReportMetric(50, "target-ms")
}
