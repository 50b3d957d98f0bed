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
		if n := EscapeLen(s[i:]); n > 0 {
			i += n
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0x1b || r == 0x9b {
			i += n // a lone or unfinished escape: its introducer goes, its text is shown
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

// EscapeLen is the length in bytes of the complete escape sequence s starts with, or 0
// when it starts with none: CSI, OSC, DCS, SOS, PM and APC in their 7-bit (ESC [) and C1
// (U+009B) forms, strings ended by BEL (OSC), ESC \ or the C1 string terminator, and the
// two-byte ESC commands. A lone or unfinished ESC is no sequence: what shows text treats it
// as the control character it is.
func EscapeLen(s string) int {
	r, n := utf8.DecodeRuneInString(s)
	var intro rune // the sequence's kind: '[' for CSI, ']' for OSC, ...
	switch {
	case r == 0x1b && len(s) >= 2:
		intro, n = rune(s[1]), 2
	case r == 0x9b: // the C1 forms of CSI, OSC, DCS, SOS, PM, APC
		intro = '['
	case r == 0x9d:
		intro = ']'
	case r == 0x90:
		intro = 'P'
	case r == 0x98:
		intro = 'X'
	case r == 0x9e:
		intro = '^'
	case r == 0x9f:
		intro = '_'
	default:
		return 0
	}
	switch intro {
	case '[':
		// Parameters 0x30-0x3f, intermediates 0x20-0x2f, one final byte 0x40-0x7e.
		for j := n; j < len(s); j++ {
			switch c := s[j]; {
			case c >= 0x20 && c <= 0x3f:
			case c >= 0x40 && c <= 0x7e:
				return j + 1
			default:
				return 0
			}
		}
		return 0
	case ']', 'P', 'X', '^', '_':
		// A string, ended by BEL (OSC's usual end), ESC \ or the C1 string terminator.
		for j := n; j < len(s); {
			c, m := utf8.DecodeRuneInString(s[j:])
			switch {
			case c == 0x07 && intro == ']':
				return j + 1
			case c == 0x1b && j+1 < len(s) && s[j+1] == '\\':
				return j + 2
			case c == 0x9c:
				return j + m
			}
			j += m
		}
		return 0
	}
	// ESC with intermediates (0x20-0x2f) then a final byte (0x30-0x7e), or ESC and one
	// byte 0x30-0x7e alone (ESC c resets the terminal, ESC 7 saves the cursor).
	j := 1
	for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
		j++
	}
	if j < len(s) && s[j] >= 0x30 && s[j] <= 0x7e {
		return j + 1
	}
	return 0
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
