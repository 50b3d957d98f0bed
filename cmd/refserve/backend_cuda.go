package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/arbiterlab/arbiter/kernels"
)

// The cuda backend answers each decode step from arbiter's GPU testbed: every iteration
// of the scheduler is one batched GPU pass (restores on the load stream, score + top-512
// on the compute stream), and a step is stale when its top-512 selection on the pool
// differed from the selection on canonical bytes. The race is physical: nothing here
// draws a random number to decide it.
//
// BF16_INDEX_K picks the index-K dtype and --enable-hierarchical-cache turns restores on,
// as for the sim backend. Settings that SGLang has no flag for are read from the
// environment, so an arm pins them like any other env var:
//
//	ARBITER_INDEX_K_GATE=1             the fix arm: compute waits on each restore's event
//	ARBITER_INDEX_K_POOL_PAGES=2048    device pool, pages of 64 tokens
//	ARBITER_INDEX_K_CONTEXT=4096       longest context the testbed holds, tokens
//	ARBITER_INDEX_K_CONTEXT_BASE=2048  tokens of agent preamble (system prompt, tool
//	                                   schemas) ahead of refserve's short scripted prompts
//	ARBITER_INDEX_K_LAYER_WORK_US=40   other work of a layer ahead of its indexer read
//	ARBITER_KERNELS_LIB                the library, else next to refserve, else kernels/build/
func init() { backendFactories["cuda"] = newCUDABackend }

// cudaSettings are the cuda backend's environment settings, resolved.
type cudaSettings struct {
	gate        bool
	poolPages   int
	context     int
	contextBase int
	layerWorkUS int
}

func readCUDASettings(getenv func(string) string) (cudaSettings, error) {
	s := cudaSettings{poolPages: 2048, context: 4096, contextBase: 2048, layerWorkUS: 40}
	switch v := getenv("ARBITER_INDEX_K_GATE"); v {
	case "", "0", "false":
	case "1", "true":
		s.gate = true
	default:
		return s, fmt.Errorf("ARBITER_INDEX_K_GATE=%q: want 0 or 1", v)
	}
	for _, e := range []struct {
		name string
		dst  *int
		min  int
	}{
		{"ARBITER_INDEX_K_POOL_PAGES", &s.poolPages, 1},
		{"ARBITER_INDEX_K_CONTEXT", &s.context, 1},
		{"ARBITER_INDEX_K_CONTEXT_BASE", &s.contextBase, 0},
		{"ARBITER_INDEX_K_LAYER_WORK_US", &s.layerWorkUS, -1},
	} {
		v := getenv(e.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < e.min {
			return s, fmt.Errorf("%s=%q: want an integer of at least %d", e.name, v, e.min)
		}
		*e.dst = n
	}
	return s, nil
}

// cudaBackend adapts the scheduler's per-iteration Decode to one testbed step.
type cudaBackend struct {
	tb   *kernels.Testbed
	set  cudaSettings
	reqs []kernels.Request // reused across iterations
}

func newCUDABackend(cfg BackendConfig) (Backend, error) {
	set, err := readCUDASettings(os.Getenv)
	if err != nil {
		return nil, err
	}
	lib, err := kernels.Open("")
	if err != nil {
		return nil, err
	}
	dtype := kernels.FP8
	if cfg.BF16IndexK {
		dtype = kernels.BF16
	}
	batch := 64
	if cfg.MaxRunning > 0 {
		batch = cfg.MaxRunning
	}
	tb, err := lib.NewTestbed(kernels.Config{
		Seed: uint64(cfg.Seed), Dtype: dtype, HiCache: cfg.HiCache, Gate: cfg.Gate || set.gate,
		PoolPages: set.poolPages, ContextLen: set.context, MaxSessions: max(128, 2*batch),
		MaxBatch: batch, LayerWorkUS: layerWork(set.layerWorkUS),
	})
	if err != nil {
		return nil, err
	}
	return &cudaBackend{tb: tb, set: set}, nil
}

// layerWork maps the setting to the kernels convention, where 0 means the default and a
// negative value means none.
func layerWork(us int) int {
	if us == 0 {
		return -1
	}
	return us
}

// Decode runs one GPU pass over every running request. A step is stale when the
// selection it read differed from the canonical one: a stale page that happened not to
// change the top-512 leaves the output as it was, as on a real engine.
func (b *cudaBackend) Decode(ctx context.Context, steps []Step) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.reqs = b.reqs[:0]
	for _, s := range steps {
		b.reqs = append(b.reqs, kernels.Request{Session: s.Session, ContextTokens: b.contextOf(s.Position)})
	}
	res, err := b.tb.Step(b.reqs)
	if err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	for i := range steps {
		steps[i].Stale = res[i].Corrupted
	}
	return nil
}

// contextOf is the testbed context of a step at position: the preamble, the position and
// the token being decoded, capped at what the testbed holds.
func (b *cudaBackend) contextOf(position int) int {
	return min(b.set.contextBase+position+1, b.set.context)
}

// Close frees the testbed's GPU and pinned memory.
func (b *cudaBackend) Close() error { return b.tb.Close() }
