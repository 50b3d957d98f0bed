package orchestrator

import (
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// A block takes as many waves as its arms fill its slots; validate and a run count them
// alike.
func TestWaves(t *testing.T) {
	for _, c := range []struct{ arms, slots, want int }{{2, 2, 1}, {3, 2, 2}, {8, 3, 3}, {1, 4, 1}, {4, 0, 0}} {
		if got := Waves(c.arms, c.slots); got != c.want {
			t.Errorf("%d arms on %d slots: %d waves, want %d", c.arms, c.slots, got, c.want)
		}
	}
}

// A node that lists "all" GPUs is counted on this machine only for the process runtime on
// it; any other node's GPUs are unknown before a run.
func TestNodeGPUs(t *testing.T) {
	local := arms.Node{Name: "local", GPUs: "all"}
	remote := arms.Node{Name: "far", Host: "ssh://ops@far", GPUs: "all"}
	process := &arms.Spec{Runtime: arms.Runtime{Kind: arms.RuntimeProcess}}
	docker := &arms.Spec{Runtime: arms.Runtime{Kind: arms.RuntimeDocker}}
	if got := NodeGPUs(process, local); got != LocalGPUs() {
		t.Errorf("a local process node counts %d GPUs, this machine has %d", got, LocalGPUs())
	}
	if NodeGPUs(process, remote) != 0 || NodeGPUs(docker, local) != 0 {
		t.Error("a remote node, or a docker node, was counted on this machine")
	}
}
