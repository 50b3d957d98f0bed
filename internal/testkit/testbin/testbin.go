// Package testbin builds arbiter's own commands (refserve, hostileserve, arbiter) for tests
// that need them as real processes. Each command is built once per test binary, into one
// folder that outlives the test so that later tests reuse it: the commands built without
// extra environment sit side by side there, so the arbiter built here runs the refserve
// built beside it, as bin/arbiter runs bin/refserve.
//
// `go test ./...` runs several test binaries at once, and several of them build the same
// commands. On an empty build cache each `go build` would compile the shared packages (the
// SQLite driver's C above all) on its own; a lock file shared by every test process makes
// the builds take turns, so the packages are compiled once and the later builds link.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type built struct {
	once sync.Once
	sub  string // the subfolder of a build with extra environment
	path string
	err  error
}

var (
	mu       sync.Mutex
	builds   = map[string]*built{}
	variants int // builds with extra environment so far, each in a subfolder of its own

	dirOnce sync.Once
	dir     string
	dirErr  error
)

// Dir returns the folder the commands built without extra environment go to, creating it
// on first use. A test binary that runs commands by name puts it on PATH. The folder is
// held by this process until it ends; the folders of test processes that have ended are
// removed when the next one is made.
func Dir() (string, error) {
	dirOnce.Do(func() {
		sweep(os.TempDir())
		if dir, dirErr = os.MkdirTemp("", dirPrefix); dirErr == nil {
			_, dirErr = hold(dir) // the descriptor stays open until the process ends
		}
	})
	return dir, dirErr
}

const dirPrefix = "arbiter-testbin-"

// Static is the environment `make image` builds refserve with for an image FROM scratch:
// no cgo, and the arbiter_static tag, which leaves out the loader of shared libraries
// (after the caller's own GOFLAGS).
var Static = []string{"CGO_ENABLED=0", "GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags=arbiter_static")}

// Build compiles the command package pkg (e.g. "github.com/arbiterlab/arbiter/cmd/hostileserve")
// with the given extra environment (e.g. "CGO_ENABLED=0") and returns the binary's path.
// The test fails if the build does.
func Build(t testing.TB, pkg string, env ...string) string {
	t.Helper()
	bin, err := Binary(pkg, env...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return bin
}

// Binary is Build for a caller that has no test at hand (a TestMain, a sync.Once shared
// by tests): it returns the build's error.
func Binary(pkg string, env ...string) (string, error) {
	key := pkg + "\x00" + strings.Join(env, "\x00")
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &built{}
		if len(env) > 0 {
			variants++
			b.sub = fmt.Sprintf("variant-%d", variants)
		}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = build(pkg, b.sub, env) })
	return b.path, b.err
}

// build runs go build for pkg into the shared folder (or its subfolder sub), holding the
// lock that the test processes share.
func build(pkg, sub string, env []string) (string, error) {
	out, err := Dir()
	if err != nil {
		return "", err
	}
	out = filepath.Join(out, sub)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockBuilds()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w", pkg, err)
	}
	defer unlock()
	bin := filepath.Join(out, path.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return bin, nil
}
