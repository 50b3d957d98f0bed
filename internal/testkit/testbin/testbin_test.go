package testbin

import (
	"os/exec"
	"strings"
	"testing"
)

func TestBuildRunsTheCommandAndBuildsOnce(t *testing.T) {
	a := Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	b := Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	if a != b {
		t.Fatalf("built twice: %s and %s", a, b)
	}
	out, err := exec.Command(a, "--mode", "no-such-mode").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown mode") {
		t.Fatalf("built binary did not run as hostileserve: %v %s", err, out)
	}
}
