// Package testbin builds arbiter's own commands (refserve, hostileserve, arbiter) for tests
// that need them as real processes. Each command is built once per test binary, into a
// folder that outlives the test so that later tests reuse it.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*built{}
)

// Build compiles the command package pkg (e.g. "github.com/arbiterlab/arbiter/cmd/hostileserve")
// with the given extra environment (e.g. "CGO_ENABLED=0") and returns the binary's path.
// The test fails if the build does.
func Build(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	key := fmt.Sprint(pkg, env)
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &built{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "arbiter-testbin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("%v", b.err)
	}
	return b.path
}
