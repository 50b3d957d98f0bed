package ui

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestSafe(t *testing.T) {
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
		if got := Safe(in); got != want {
			t.Errorf("Safe(%q) = %q; want %q", in, got, want)
		}
	}
}

// FuzzSafe: whatever an engine writes, what reaches the terminal holds no
// control character but tab and newline, is UTF-8, and is unchanged when made safe again.
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b]52;c;ZXZpbA==\x07", "\u009b2J", "\x1bP\x1b\\", "a\r\nb\x00", "\xff\xfe", "\x1b\x1b[", "\u009d\u009c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Safe(in)
		if !utf8.ValidString(out) {
			t.Fatalf("Safe(%q) = %q: not UTF-8", in, out)
		}
		for _, r := range out {
			if unicode.IsControl(r) && r != '\t' && r != '\n' {
				t.Fatalf("Safe(%q) = %q holds %U", in, out, r)
			}
		}
		if again := Safe(out); again != out {
			t.Fatalf("Safe not idempotent on %q: %q, then %q", in, out, again)
		}
	})
}

// Wrap keeps every line within the width but for a word longer than it, which stands
// whole on its own line, and starts each with the indent.
func TestWrap(t *testing.T) {
	got := Wrap("a verdict in three sentences, wrapped to twenty columns: unbreakable-words-stay-whole here.", "  ", 20)
	want := "  a verdict in three\n  sentences, wrapped\n  to twenty columns:\n  unbreakable-words-stay-whole\n  here.\n"
	if got != want {
		t.Errorf("Wrap:\n%s\nwant:\n%s", got, want)
	}
	if Wrap("   ", "  ", 20) != "" {
		t.Error("blank text wraps to lines")
	}
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if len(line) > 20 && strings.Contains(strings.TrimSpace(line), " ") {
			t.Errorf("line %q runs past 20 columns", line)
		}
	}
}
