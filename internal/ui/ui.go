// Package ui is how arbiter writes to a terminal: prose wrapped to its width, text that
// arbiter did not write (an engine's log, an error it answered) made inert before it gets
// there, and whether an output is a terminal that bars can be drawn on. The CLI's
// progress and messages and the verdict's terminal summary share it.
package ui

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/arbiterlab/arbiter/internal/inert"
)

// Wrap breaks text into lines of at most width columns (a longer word stays whole), each
// starting with indent.
func Wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// IsTerminal reports whether w is a terminal that bars can be drawn on. A character
// device is not enough: /dev/null is one too. A terminal of no width (a pseudo-terminal
// nobody sized) would show bars cut to nothing, so it is not counted as one.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	width, _, err := term.GetSize(int(f.Fd()))
	return err == nil && width > 0
}

// Safe makes text that came from an engine (its log, an error it answered) inert
// on a terminal: escape sequences (CSI colours and cursor moves, OSC titles, hyperlinks
// and OSC 52 clipboard writes, DCS, SOS, PM and APC strings, two-byte ESC commands such
// as a full reset), in their 7-bit and C1 forms, are removed; every other control
// character but tab and newline is written visibly as \xNN or \uNNNN; a carriage return
// ends a line, as a terminal would show it; bytes that are not UTF-8 become U+FFFD.
func Safe(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if n := inert.EscapeLen(s[i:]); n > 0 {
			i += n
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '\r':
			if i < len(s) && s[i] == '\n' {
				continue // \r\n: the \n ends the line
			}
			b.WriteByte('\n')
		case r == '\t' || r == '\n':
			b.WriteRune(r)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
