package kernels

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenMissingLibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), LibName)
	_, err := Open(missing)
	if !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("Open(%s) = %v, want ErrNoLibrary", missing, err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the path", err)
	}
}

func TestOpenSearchesEnvFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nowhere", LibName)
	t.Setenv(EnvLib, missing)
	c := Candidates()
	if len(c) < 2 || c[0] != missing {
		t.Fatalf("Candidates() = %v, want %s first", c, missing)
	}
	if last := c[len(c)-1]; last != filepath.Join("kernels", "build", LibName) {
		t.Errorf("last candidate = %s, want kernels/build/%s", last, LibName)
	}
	// Run from an empty directory so kernels/build/ does not exist either.
	t.Chdir(t.TempDir())
	if _, err := os.Stat(filepath.Join(filepath.Dir(c[1]), LibName)); err == nil {
		t.Skip("a library sits next to the test binary")
	}
	_, err := Open("")
	if !errors.Is(err, ErrNoLibrary) {
		t.Fatalf("Open(\"\") = %v, want ErrNoLibrary", err)
	}
	for _, want := range []string{missing, EnvLib, "build.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestOpenRejectsNonLibrary(t *testing.T) {
	p := filepath.Join(t.TempDir(), LibName)
	if err := os.WriteFile(p, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(p)
	if err == nil || errors.Is(err, ErrNoLibrary) || errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open(non-ELF) = %v, want a load error", err)
	}
	if !strings.Contains(err.Error(), p) {
		t.Errorf("error %q does not name the path", err)
	}
}

func TestDtype(t *testing.T) {
	if FP8.TokenBytes() != 132 || BF16.TokenBytes() != 256 {
		t.Fatalf("token bytes fp8=%d bf16=%d, want 132 and 256", FP8.TokenBytes(), BF16.TokenBytes())
	}
	if FP8.String() != "fp8" || BF16.String() != "bf16" {
		t.Fatalf("names %s %s", FP8, BF16)
	}
}
