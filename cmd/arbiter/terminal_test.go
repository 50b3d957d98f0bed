package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/orchestrator"
)

func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, tab\there":                     "plain text, tab\there",
		"\x1b[32mgreen\x1b[0m":                      "green",
		"\x1b[?25l\x1b[2J\x1b[Hcursor":              "cursor",
		"a\x1b]52;c;ZXZpbA==\x07b":                  "ab",       // OSC 52: write the clipboard
		"a\x1b]0;title\x1b\\b":                      "ab",       // OSC ended by ST
		"a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\": "alink",    // hyperlink
		"a\u009d52;c;ZXZpbA==\u009cb":               "ab",       // C1 OSC and ST
		"a\u009b31mred":                             "ared",     // C1 CSI
		"a\x1bPq#0;2;0;0;0\x1b\\b":                  "ab",       // DCS (sixel)
		"a\x1b_apc\x1b\\b":                          "ab",       // APC
		"reset\x1bc":                                "reset",    // ESC c: full reset
		"charset\x1b(B":                             "charset",  // ESC ( B
		"bell\x07":                                  `bell\x07`, // other controls shown, inert
		"nul\x00del\x7f":                            `nul\x00del\x7f`,
		"c1\u0085":                                  `c1\u0085`,
		"lone\x1b":                                  `lone\x1b`,
		"open\x1b]52;c;ZXZpbA==":                    `open\x1b]52;c;ZXZpbA==`, // unfinished: shown, inert
		"cr\rover":                                  "cr\nover",
		"crlf\r\nnext":                              "crlf\nnext",
		"bad\xffutf8":                               "bad\uFFFDutf8",
		"ünïcödé ｜DSML｜":                            "ünïcödé ｜DSML｜",
	} {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %q; want %q", in, got, want)
		}
	}
}

// FuzzTerminalSafe: whatever an engine writes, what reaches the terminal holds no
// control character but tab and newline, is UTF-8, and is unchanged when made safe again.
func FuzzTerminalSafe(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b]52;c;ZXZpbA==\x07", "\u009b2J", "\x1bP\x1b\\", "a\r\nb\x00", "\xff\xfe", "\x1b\x1b[", "\u009d\u009c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := terminalSafe(in)
		if !utf8.ValidString(out) {
			t.Fatalf("terminalSafe(%q) = %q: not UTF-8", in, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) && r != '\t' && r != '\n' {
				t.Fatalf("terminalSafe(%q) = %q holds %U", in, out, r)
			}
		}
		if again := terminalSafe(out); again != out {
			t.Fatalf("terminalSafe not idempotent on %q: %q, then %q", in, out, again)
		}
	})
}

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
