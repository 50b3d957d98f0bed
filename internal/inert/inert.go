// Package inert makes text that arbiter did not write fit to store and to show: what a
// detector plugin says, what an engine reports about itself. Such text reaches terminals,
// markdown verdicts and issue bundles; it must not move a cursor, recolour a screen,
// reorder a line, or run to megabytes.
package inert

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s as one line of plain text at most limit bytes long (limit <= 0: no
// limit): escape sequences (CSI, OSC and the other ESC forms) removed, other control
// characters and the bidirectional overrides replaced by a space, invalid UTF-8 by U+FFFD,
// and what runs past limit cut at a rune boundary with a note of how much was cut.
func Text(s string, limit int) string {
	if clean(s) && (limit <= 0 || len(s) <= limit) {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max(limit, 0)+64))
	i := 0
	for i < len(s) {
		if s[i] == 0x1b {
			i += escapeLen(s[i:])
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0x9b { // the one-character CSI: its parameters go with it
			i += n + csiLen(s[i+n:])
			continue
		}
		if unsafe(r) {
			r = ' '
		}
		if limit > 0 && b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r) // an invalid byte is written as U+FFFD
		i += n
	}
	if i < len(s) {
		return fmt.Sprintf("%s… (%d more bytes cut)", b.String(), len(s)-i)
	}
	return b.String()
}

// clean reports whether s needs no change.
func clean(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == 0x1b || r == 0x9b || unsafe(r) {
			return false
		}
	}
	return true
}

// unsafe reports whether r must not reach a terminal or a one-line cell: control
// characters, and the invisible characters that reorder or hide what follows.
func unsafe(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	}
	return false
}

// escapeLen is the length of the escape sequence at the start of s (s[0] is ESC).
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[':
		return 2 + csiLen(s[2:])
	case ']', 'P', 'X', '^', '_':
		// OSC, DCS, SOS, PM, APC: a string up to BEL or ESC \ (ST).
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	// ESC followed by intermediates (0x20-0x2f) and one final byte.
	i := 1
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	return min(i+1, len(s))
}

// csiLen is the length of a control sequence's parameters and final byte.
func csiLen(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x40 && s[i] <= 0x7e {
			return i + 1
		}
		if s[i] < 0x20 || s[i] > 0x3f && s[i] < 0x40 {
			return i
		}
	}
	return len(s)
}

// Markdown returns s as Text does, with every character markdown would act on escaped
// (emphasis, links, embedded HTML, code spans, strikethrough and table pipes), so that it
// reads as written in prose and in a table cell and can neither bold, link nor embed
// anything, nor end a cell.
func Markdown(s string, limit int) string {
	s = Text(s, limit)
	if !strings.ContainsAny(s, markdownSpecial) {
		return s
	}
	rs := []rune(s)
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i, r := range rs {
		if strings.ContainsRune(markdownSpecial, r) && !intraword(rs, i) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// markdownSpecial are the characters Markdown escapes.
const markdownSpecial = "\\`*_[]<>|~"

// intraword reports whether rs[i] is an underscore between two letters or digits, which
// CommonMark never reads as emphasis: BF16_INDEX_K stays as it is written.
func intraword(rs []rune, i int) bool {
	word := func(j int) bool { return j >= 0 && j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j])) }
	return rs[i] == '_' && word(i-1) && word(i+1)
}
