package inert

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTextRemovesWhatATerminalWouldObey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain words", "plain words"},
		{"red \x1b[31malert\x1b[0m", "red alert"},
		{"title \x1b]0;owned\x07done", "title done"},
		{"title \x1b]8;;http://x\x1b\\link", "title link"},
		{"clear\x1b[2J\x1b[Hscreen", "clearscreen"},
		{"line\nbreak\rand\ttab", "line break and tab"},
		{"bell\x07", "bell "},
		{"c1 \u009b31mcsi", "c1 csi"},
		{"bidi \u202egnp.exe", "bidi  gnp.exe"},
		{"bad \xff byte", "bad \ufffd byte"},
		{"lone esc\x1b", "lone esc"},
	} {
		if got := Text(c.in, 0); got != c.want {
			t.Errorf("Text(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

func TestTextCutsAtALimitOnARuneBoundary(t *testing.T) {
	in := strings.Repeat("é", 100) // 200 bytes
	got := Text(in, 11)
	if !strings.HasPrefix(got, strings.Repeat("é", 5)+"…") || !strings.Contains(got, "190 more bytes cut") {
		t.Fatalf("Text = %q", got)
	}
	if !utf8.ValidString(got) {
		t.Fatalf("Text cut inside a rune: %q", got)
	}
	if got := Text("short", 11); got != "short" {
		t.Fatalf("Text(short) = %q", got)
	}
}

func FuzzText(f *testing.F) {
	f.Add("red \x1b[31malert\x1b[0m", 16)
	f.Add("\x1b]0;x\x07\u202e\xff", 3)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = limit % 4096
		got := Text(s, limit)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out: %q", got)
		}
		for _, r := range got {
			if r == 0x1b || unsafe(r) {
				t.Fatalf("unsafe rune %U left in %q", r, got)
			}
		}
		if limit > 0 && len(got) > limit+64 {
			t.Fatalf("%d bytes out for a limit of %d", len(got), limit)
		}
	})
}

func TestMarkdownEscapesWhatMarkdownWouldAct(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain words", "plain words"},
		{"**bold** and _em_", `\*\*bold\*\* and \_em\_`},
		{"BF16_INDEX_K=1 __init__", `BF16_INDEX_K=1 \_\_init\_\_`},
		{"[x](http://h) <img src=x>", `\[x\](http://h) \<img src=x\>`},
		{"a | b `code` ~~s~~", "a \\| b \\`code\\` \\~\\~s\\~\\~"},
		{`back\slash`, `back\\slash`},
		{"two\nlines \x1b[31mred", "two lines red"},
	} {
		if got := Markdown(c.in, 0); got != c.want {
			t.Errorf("Markdown(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

func FuzzMarkdown(f *testing.F) {
	f.Add("**x** | `y` <b>", 32)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		got := Markdown(s, limit%4096)
		// Read back, every special character is escaped (an underscore inside a word
		// needs none): no unescaped one remains.
		rs := []rune(got)
		escaped := false
		for i, r := range rs {
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case strings.ContainsRune(markdownSpecial, r) && !intraword(rs, i):
				t.Fatalf("unescaped %q in %q", r, got)
			}
			if r == '\n' || r == 0x1b {
				t.Fatalf("control %U in %q", r, got)
			}
		}
		if escaped {
			t.Fatalf("a lone backslash ends %q", got)
		}
	})
}
