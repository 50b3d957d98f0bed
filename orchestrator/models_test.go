package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// The model file's digest reads the whole file, a minute for a large model: the
// writing and the digest stop when the launch that asked gives up, which leaves no file,
// so that the next one makes the digest again instead of inheriting the cancellation.
func TestModelDigestStopsWithItsLaunchAndIsNotRememberedThen(t *testing.T) {
	spec, err := arms.Parse("m.yaml", []byte(`version: 1
name: model-digest
engine:
  preset: ollama
  model: {name: "tiny:latest", random: {layers: 1, width: 64, seed: 1}}
arms:
  a: {env: {OLLAMA_NUM_PARALLEL: "1"}}
  b: {env: {OLLAMA_NUM_PARALLEL: "2"}}
workload: {kind: toolcall-agent, sessions: 1, rounds: 1, concurrency: 1, seed: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := &experiment{spec: spec, logDir: t.TempDir()}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := e.modelFile(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("a launch that gave up: %v, want its cancellation", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.logDir, "models", "*")); len(left) != 0 {
		t.Errorf("a launch that gave up left %v", left)
	}
	path, digest, err := e.modelFile(context.Background())
	if err != nil {
		t.Fatalf("the next launch: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if want := "sha256:" + hex.EncodeToString(sum[:]); digest != want {
		t.Errorf("digest %s, want %s", digest, want)
	}
	// Made once: a later launch, even one that has given up, gets the same file.
	if p, d, err := e.modelFile(cancelled); err != nil || p != path || d != digest {
		t.Errorf("asked again: %s %s %v", p, d, err)
	}
}
