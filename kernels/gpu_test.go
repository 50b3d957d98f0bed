package kernels

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// These tests need the library and a GPU. They skip without ARBITER_KERNELS_LIB unless
// ARBITER_REQUIRE_GPU=1, which turns the skip into a failure on the GPU machine.
func openGPU(t *testing.T) *Lib {
	t.Helper()
	if os.Getenv("ARBITER_EXPECT_NO_DEVICE") == "1" {
		t.Skip("this run checks the no-device error only")
	}
	if os.Getenv(EnvLib) == "" {
		if os.Getenv("ARBITER_REQUIRE_GPU") == "1" {
			t.Fatalf("ARBITER_REQUIRE_GPU=1 but %s is not set", EnvLib)
		}
		t.Skipf("no GPU testbed: set %s to a built %s on a machine with a GPU", EnvLib, LibName)
	}
	l, err := Open("")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// TestNoDeviceError runs on the GPU machine with CUDA_VISIBLE_DEVICES="" so that the
// library loads but CUDA sees no device.
func TestNoDeviceError(t *testing.T) {
	if os.Getenv("ARBITER_EXPECT_NO_DEVICE") != "1" {
		t.Skip("set ARBITER_EXPECT_NO_DEVICE=1 with CUDA_VISIBLE_DEVICES= and the library to run")
	}
	_, err := Open("")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open with no visible device = %v, want ErrNoDevice", err)
	}
	if !strings.Contains(err.Error(), "no CUDA device") {
		t.Errorf("error %q does not say there is no CUDA device", err)
	}
}

func newTestbed(t *testing.T, l *Lib, cfg Config) *Testbed {
	t.Helper()
	tb, err := l.NewTestbed(cfg)
	if err != nil {
		t.Fatalf("NewTestbed(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// rotate runs groups of sessions in turn through a pool that holds only one group, so every
// return of a group finds its pages evicted.
func rotate(t *testing.T, tb *Testbed, groups, perGroup, ctx, rounds int) (corrupted, stale, restored int) {
	t.Helper()
	for round := 0; round < rounds; round++ {
		for g := 0; g < groups; g++ {
			reqs := make([]Request, perGroup)
			for i := range reqs {
				reqs[i] = Request{Session: uint64(1000 + g*perGroup + i), ContextTokens: ctx}
			}
			res, err := tb.Step(reqs)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Corrupted {
					corrupted++
					if r.StalePages == 0 {
						t.Errorf("round %d group %d: corrupted without a stale read: %+v", round, g, r)
					}
					if r.Jaccard >= 1 {
						t.Errorf("corrupted step with Jaccard %v", r.Jaccard)
					}
				} else if r.Jaccard != 1 {
					t.Errorf("clean step with Jaccard %v", r.Jaccard)
				}
				stale += r.StalePages
				restored += r.RestoredPages
			}
		}
	}
	return corrupted, stale, restored
}

func TestSingleRequestIsNeverEvicted(t *testing.T) {
	l := openGPU(t)
	tb := newTestbed(t, l, Config{Dtype: BF16, HiCache: true, PoolPages: 256, ContextLen: 4096, LayerWorkUS: -1})
	for i := 0; i < 48; i++ { // 2000..2047 tokens: 32 pages
		res, err := tb.Step([]Request{{Session: 7, ContextTokens: 2000 + i}})
		if err != nil {
			t.Fatal(err)
		}
		if r := res[0]; r.Corrupted || r.StalePages != 0 || r.RestoredPages != 0 {
			t.Fatalf("step %d: %+v, want clean with no restore", i, r)
		}
	}
	st, err := tb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Evictions != 0 || st.RestoredPages != 0 || st.RecomputedPages != 32 {
		t.Fatalf("stats %+v: want no eviction, no restore, 32 pages computed once", st)
	}
}

func TestGateOrdersEveryRestore(t *testing.T) {
	l := openGPU(t)
	for _, d := range []Dtype{FP8, BF16} {
		tb := newTestbed(t, l, Config{Dtype: d, HiCache: true, Gate: true, PoolPages: 256, ContextLen: 4096, LayerWorkUS: -1})
		c, s, r := rotate(t, tb, 2, 4, 4096, 6)
		if r == 0 || c != 0 || s != 0 {
			t.Errorf("%s gated: corrupted %d stale %d restored %d, want restores and nothing stale", d, c, s, r)
		}
	}
}

func TestHiCacheOffRecomputesInOrder(t *testing.T) {
	l := openGPU(t)
	tb := newTestbed(t, l, Config{Dtype: BF16, HiCache: false, Gate: false, PoolPages: 256, ContextLen: 4096, LayerWorkUS: -1})
	c, s, r := rotate(t, tb, 2, 4, 4096, 6)
	st, _ := tb.Stats()
	if r != 0 || c != 0 || s != 0 || st.RecomputedPages <= 512 {
		t.Errorf("HiCache off: corrupted %d stale %d restored %d recomputed %d, want only recomputes", c, s, r, st.RecomputedPages)
	}
}

func TestUngatedRestoreRaces(t *testing.T) {
	l := openGPU(t)
	// No work ahead of the read and 4 MiB of restores per layer: the read wins the race.
	tb := newTestbed(t, l, Config{Dtype: BF16, HiCache: true, Gate: false, PoolPages: 256, ContextLen: 4096, LayerWorkUS: -1})
	c, s, r := rotate(t, tb, 2, 4, 4096, 6)
	if r == 0 || s == 0 || c == 0 {
		t.Fatalf("ungated: corrupted %d stale %d restored %d, want the race to show", c, s, r)
	}
	t.Logf("ungated bf16: %d corrupted request steps, %d stale page reads, %d pages restored", c, s, r)
}

func TestConfigErrors(t *testing.T) {
	l := openGPU(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{PoolPages: 10, ContextLen: 4096}, "pool_pages"},
		{Config{Dtype: 7}, "dtype"},
		{Config{ContextLen: 40000}, "context_len"},
	} {
		tb, err := l.NewTestbed(tc.cfg)
		if err == nil {
			tb.Close()
			t.Errorf("NewTestbed(%+v) succeeded", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewTestbed(%+v) = %v, want it to mention %s", tc.cfg, err, tc.want)
		}
	}
}

func TestDeviceAndBench(t *testing.T) {
	l := openGPU(t)
	name, err := l.DeviceName(0)
	if err != nil || name == "" {
		t.Fatalf("DeviceName = %q, %v", name, err)
	}
	bw, err := l.BenchCopy(64<<20, 5)
	if err != nil || bw <= 0 {
		t.Fatalf("BenchCopy = %v, %v", bw, err)
	}
	tb := newTestbed(t, l, Config{PoolPages: 512, ContextLen: 8192, Layers: 1})
	p, err := tb.BenchPass(4, 5)
	if err != nil || p.MedianMS <= 0 || p.IndexKBytes != 4*8192*132 {
		t.Fatalf("BenchPass = %+v, %v", p, err)
	}
	t.Logf("%s: copy %.2f TB/s, pass %.3f ms", name, bw, p.MedianMS)
}

// BenchmarkStep times one decode step of 32 running requests of 4096 tokens whose pages
// are resident: the indexer's steady state, without restores.
func BenchmarkStep(b *testing.B) {
	if os.Getenv(EnvLib) == "" {
		b.Skip("no GPU testbed: set ARBITER_KERNELS_LIB")
	}
	l, err := Open("")
	if err != nil {
		b.Fatal(err)
	}
	tb, err := l.NewTestbed(Config{Dtype: FP8, HiCache: true, PoolPages: 2048, ContextLen: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	reqs := make([]Request, 32)
	for i := range reqs {
		reqs[i] = Request{Session: uint64(i + 1), ContextTokens: 4096}
	}
	if _, err := tb.Step(reqs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := tb.Step(reqs); err != nil {
			b.Fatal(err)
		}
	}
}
