package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/arbiterlab/arbiter/kernels"
)

func TestInts(t *testing.T) {
	got, err := ints(" 1, 60 ,,5", 1)
	if err != nil || !slices.Equal(got, []int{1, 60, 5}) {
		t.Fatalf("ints = %v, %v", got, err)
	}
	if _, err := ints("1,0", 1); err == nil {
		t.Fatal("ints accepted 0 below the bound 1")
	}
	if _, err := ints("4k", 0); err == nil {
		t.Fatal("ints accepted 4k")
	}
}

func TestTurnStepsStayInRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[int]bool{}
	for range 10000 {
		n := turnSteps(rng, 32)
		if n < 16 || n > 48 {
			t.Fatalf("turnSteps(32) = %d, want 16..48", n)
		}
		seen[n] = true
	}
	if len(seen) != 33 {
		t.Errorf("turnSteps(32) took %d distinct values, want all 33", len(seen))
	}
	if turnSteps(rng, 1) < 1 {
		t.Error("a turn must have at least one step")
	}
}

func TestRunRefusesBadFlagsAndMissingLibrary(t *testing.T) {
	if err := run([]string{"-concurrency", "0"}, io.Discard); err == nil {
		t.Error("run accepted -concurrency 0")
	}
	if err := run([]string{"-sweep", "-5"}, io.Discard); err == nil {
		t.Error("run accepted -sweep -5")
	}
	missing := filepath.Join(t.TempDir(), kernels.LibName)
	if err := run([]string{"-lib", missing}, io.Discard); !errors.Is(err, kernels.ErrNoLibrary) {
		t.Errorf("run -lib %s = %v, want ErrNoLibrary", missing, err)
	}
}
