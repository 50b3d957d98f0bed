package orchestrator

import (
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/workload"
)

// TestPlannedSessionsAgree: what the spec counts as a launch's sessions (the verdict's
// planned sessions, block k's offset) is what the workload reports, for every example.
func TestPlannedSessionsAgree(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("examples: %v (%d)", err, len(files))
	}
	for _, f := range files {
		spec, err := arms.Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		trace, err := LoadTrace(spec)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cfg := kindConfig(spec, trace)
		if got := workload.Planned(cfg); got != spec.Workload.Sessions {
			t.Errorf("%s: the workload reports %d sessions per launch, the spec counts %d", f, got, spec.Workload.Sessions)
		}
		if cfg.Kind != spec.Workload.Kind || cfg.StallTimeout != spec.Timeouts.Stall {
			t.Errorf("%s: config %+v", f, cfg)
		}
	}
}
