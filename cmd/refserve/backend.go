package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Step is one decode step of one running request, as a backend sees it.
type Step struct {
	// Session is the request's stable session key: a hash of the conversation's first
	// user message, so every turn of a session (and the same session in every arm)
	// carries the same key.
	Session uint64
	// Position is the token position this step decodes in the sequence (prompt tokens
	// plus tokens generated so far), i.e. the KV slot whose index-K the step reads.
	Position int
	// InFlight is the number of requests running in this decode iteration: the physical
	// batch, which depends on how fast the clients send their next requests.
	InFlight int
	// Load is the logical load: the sessions in the scheduler's cohort (cohort.go) when
	// the step's request arrived, capped at --max-running-requests. The same seeded
	// workload meets the same loads on any machine, however its clients are scheduled.
	Load int
	// Restored says the step's request opens a later round of its conversation: its
	// client was away, so its prefix comes back from HiCache's host copy and the step
	// reads restored index-K.
	Restored bool
	// Stale is set by the backend: whether this step read stale index-K.
	Stale bool
}

// BackendConfig is what a backend is built with; it mirrors the engine switches that
// decide whether the index-K restore race can happen at all.
type BackendConfig struct {
	BF16IndexK   bool    // BF16_INDEX_K=1: index-K stored in bf16 (256 B/token) instead of fp8
	HiCache      bool    // --enable-hierarchical-cache: pages are restored from host memory
	Gate         bool    // ARBITER_INDEX_K_GATE=1: reads wait for their restore (the fix)
	HiCacheRatio float64 // --hicache-ratio
	Seed         int64   // --seed
	// MaxRunning is --max-running-requests (0: unlimited), the largest batch a backend sees.
	MaxRunning int
	// FaultMultiplier is the launch's multiplier of every fault probability (launch.go);
	// 0 stands for 1. A backend whose race is physical (cuda) has none to scale.
	FaultMultiplier float64
}

// Backend runs the decode iterations of the scheduler and says which steps read stale
// index-K. The scheduler calls Decode once per iteration with every running request,
// so a GPU backend can launch one batch of kernels per iteration. Decode is called
// from one goroutine at a time.
type Backend interface {
	// Decode runs one decode iteration and sets Stale on each of steps. An error fails
	// the requests of this iteration, not the server.
	Decode(ctx context.Context, steps []Step) error
	// Close releases what the backend holds (device memory, a loaded library).
	Close() error
}

// backendFactories maps --backend names to constructors. A backend that needs more
// than the standard library (the GPU testbed) registers itself from its own file's
// init, so a binary built without that file says so instead of failing to link.
var backendFactories = map[string]func(BackendConfig) (Backend, error){
	"sim": newSimBackend,
}

// knownBackends are the values --backend accepts, built into this binary or not.
var knownBackends = []string{"sim", "cuda"}

// newBackend builds the backend named by --backend.
func newBackend(name string, cfg BackendConfig) (Backend, error) {
	f, ok := backendFactories[name]
	if !ok {
		built := make([]string, 0, len(backendFactories))
		for n := range backendFactories {
			built = append(built, n)
		}
		sort.Strings(built)
		return nil, fmt.Errorf("backend %q is not built into this binary (built in: %s); "+
			"the cuda backend needs cmd/refserve/backend_cuda.go and the kernels library from `make kernels`",
			name, strings.Join(built, ", "))
	}
	b, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return b, nil
}
