package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/kernels"
)

func TestReadCUDASettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := readCUDASettings(env(nil))
	if err != nil || s.gate || s.poolPages != 2048 || s.context != 4096 || s.contextBase != 2048 || s.layerWorkUS != 40 {
		t.Fatalf("defaults = %+v, %v", s, err)
	}
	s, err = readCUDASettings(env(map[string]string{"ARBITER_INDEX_K_GATE": "1", "ARBITER_INDEX_K_POOL_PAGES": "512",
		"ARBITER_INDEX_K_CONTEXT_BASE": "0", "ARBITER_INDEX_K_LAYER_WORK_US": "0"}))
	if err != nil || !s.gate || s.poolPages != 512 || s.contextBase != 0 || layerWork(s.layerWorkUS) != -1 {
		t.Fatalf("pinned = %+v, %v", s, err)
	}
	for _, bad := range []map[string]string{
		{"ARBITER_INDEX_K_GATE": "yes"},
		{"ARBITER_INDEX_K_POOL_PAGES": "0"},
		{"ARBITER_INDEX_K_CONTEXT": "4k"},
		{"ARBITER_INDEX_K_LAYER_WORK_US": "-5"},
	} {
		if _, err := readCUDASettings(env(bad)); err == nil {
			t.Errorf("readCUDASettings(%v) accepted it", bad)
		}
	}
}

func TestCUDABackendWithoutLibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), kernels.LibName)
	t.Setenv(kernels.EnvLib, missing)
	t.Chdir(t.TempDir())
	exe, _ := os.Executable()
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), kernels.LibName)); err == nil {
		t.Skip("a library sits next to the test binary")
	}
	_, err := newBackend("cuda", BackendConfig{})
	if !errors.Is(err, kernels.ErrNoLibrary) {
		t.Fatalf("newBackend(cuda) = %v, want ErrNoLibrary", err)
	}
	if !strings.Contains(err.Error(), "backend cuda") || !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q should name the backend and the path it looked in", err)
	}
}

// TestCUDABackendOnGPU needs the library and a GPU (see kernels/gpu_test.go).
func TestCUDABackendOnGPU(t *testing.T) {
	if os.Getenv(kernels.EnvLib) == "" || os.Getenv("ARBITER_EXPECT_NO_DEVICE") == "1" {
		t.Skip("no GPU testbed: set ARBITER_KERNELS_LIB on a machine with a GPU")
	}
	t.Setenv("ARBITER_INDEX_K_POOL_PAGES", "256")
	t.Setenv("ARBITER_INDEX_K_CONTEXT", "4096")
	t.Setenv("ARBITER_INDEX_K_LAYER_WORK_US", "0")
	decode := func(b Backend, sessions []uint64, pos int) (stale int) {
		steps := make([]Step, len(sessions))
		for i, s := range sessions {
			steps[i] = Step{Session: s, Position: pos, InFlight: len(sessions)}
		}
		if err := b.Decode(context.Background(), steps); err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if s.Stale {
				stale++
			}
		}
		return stale
	}
	// Two groups of four sessions of 64 pages each take turns in a pool of 256 pages.
	groups := [][]uint64{{1, 2, 3, 4}, {5, 6, 7, 8}}
	for _, tc := range []struct {
		gate      string
		wantStale bool
	}{{"1", false}, {"0", true}} {
		t.Setenv("ARBITER_INDEX_K_GATE", tc.gate)
		b, err := newBackend("cuda", BackendConfig{BF16IndexK: true, HiCache: true, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		stale := 0
		for round := 0; round < 6; round++ {
			for _, g := range groups {
				stale += decode(b, g, 4000+round)
			}
		}
		if alone := decode(b, []uint64{9}, 100); alone != 0 {
			t.Errorf("gate=%s: a lone new session read stale index-K", tc.gate)
		}
		b.Close()
		if (stale > 0) != tc.wantStale {
			t.Errorf("gate=%s: %d stale steps, want stale=%v", tc.gate, stale, tc.wantStale)
		}
	}
}

// FuzzReadCUDASettings: any environment either fails with an error that names the
// variable or yields settings inside their bounds.
func FuzzReadCUDASettings(f *testing.F) {
	f.Add("1", "2048", "4096", "2048", "40")
	f.Add("0", "1", "1", "0", "-1")
	f.Add("true", "", "", "", "")
	f.Add("yes", "0", "-3", "x", "-2")
	f.Add("", "99999999999999999999", "4k", " 7", "1e3")
	f.Fuzz(func(t *testing.T, gate, pool, ctx, base, work string) {
		env := map[string]string{"ARBITER_INDEX_K_GATE": gate, "ARBITER_INDEX_K_POOL_PAGES": pool,
			"ARBITER_INDEX_K_CONTEXT": ctx, "ARBITER_INDEX_K_CONTEXT_BASE": base, "ARBITER_INDEX_K_LAYER_WORK_US": work}
		s, err := readCUDASettings(func(k string) string { return env[k] })
		if err != nil {
			if !strings.Contains(err.Error(), "ARBITER_INDEX_K_") {
				t.Fatalf("error %q does not name the variable", err)
			}
			return
		}
		if s.poolPages < 1 || s.context < 1 || s.contextBase < 0 || s.layerWorkUS < -1 {
			t.Fatalf("out-of-bounds settings %+v from %v", s, env)
		}
		if s.gate != (gate == "1" || gate == "true") {
			t.Fatalf("gate %q read as %v", gate, s.gate)
		}
	})
}
