package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/orchestrator"
)

// TestEngineOutputReachesTheTerminalInert: the last log line shown while an engine starts,
// and the log tail and reason shown when it does not, carry no escape sequence.
func TestEngineOutputReachesTheTerminalInert(t *testing.T) {
	var out lockedbuf.Buffer
	p := startProgress(&out, false, time.Hour)
	defer p.Wait()
	logPath := filepath.Join(t.TempDir(), "engine.log")
	os.WriteFile(logPath, []byte("Loading\n\x1b]52;c;c2VjcmV0\x07\x1b[2Jready \x9b31m\u009d0;pwned\u009c\n"), 0o644)
	p.EngineStarting(orchestrator.LaunchInfo{Arm: "control", Position: 1, Arms: 2, Blocks: 1, Sessions: 60, LogPath: logPath})
	p.readLogs()
	p.printActive()
	p.EngineFailed("control", 0, "engine said \x1b]52;c;c2VjcmV0\x07 and died", "")
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07\u009b\u009d\u009c") {
		t.Errorf("an escape sequence reached the terminal:\n%q", got)
	}
	if !strings.Contains(got, "| ready") || !strings.Contains(got, "engine said  and died") {
		t.Errorf("the text around the sequences is lost:\n%s", got)
	}
}
