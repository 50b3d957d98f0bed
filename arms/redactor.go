package arms

import (
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Redactor replaces secret values with [redacted] wherever arbiter writes text: the
// database, engine logs, arbiter's own log, verdicts. It is immutable once built, so it
// is safe for concurrent use; the zero value and nil hide nothing.
//
// A secret is found in the forms a careless engine or a log may write it, not only as
// itself:
//   - escaped, one character at a time or all of them, in any mix: percent-encoding in
//     either case (%68%66, %2568 when encoded twice, + for a space), JSON and JavaScript
//     escapes (\u0068 in either case, surrogate pairs, \x68, \/ and \\, with any number
//     of backslashes for a JSON string inside a JSON string), and HTML character
//     references (&#104; &#x68; &amp;);
//   - encoded whole: base64 in the standard and URL-safe alphabets, with or without
//     padding, at each of the three byte alignments it can have inside a longer encoded
//     text (the characters that depend on the secret's bytes alone are matched), and
//     hex in either case; these encoded forms may themselves be escaped as above.
//
// A secret split across the events of a stream is a matter for the stream's reader
// (workload.RedactRaw), which reassembles the text and asks Find where secrets are.
type Redactor struct {
	// patterns are the secrets and their base64 and hex forms, longest first.
	patterns []pattern
	// byFirst lists, for each byte, the patterns whose text starts with it.
	byFirst [256][]int
}

// pattern is one text to find.
type pattern struct {
	text  string
	runes []rune
	// runeAt is the byte offset in text of each rune, and len(text) last.
	runeAt []int
	// plain says text holds none of the bytes an escape starts with, so that a text
	// that matches it byte for byte up to a byte that starts no escape cannot match
	// it another way.
	plain bool
	// base64 marks the part of a base64 encoding that depends on the secret alone: the
	// characters around it that mix in its first or last bits, and the padding that
	// ends it, go with it.
	base64 bool
}

// escapeStart marks the bytes with which a character may be written escaped.
var escapeStart = [256]bool{'%': true, '\\': true, '&': true, '+': true}

// newRedactor builds a Redactor for the secret values: values shorter than
// minSecretLen and common words are skipped; surrounding whitespace is not part of a
// value (a block scalar's trailing newline is YAML's).
func newRedactor(values []string) *Redactor {
	var texts []string
	cores := map[string]bool{}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) < minSecretLen || slices.Contains(commonWords, strings.ToLower(v)) {
			continue
		}
		texts = append(texts, v)
		for _, c := range base64Cores(v) {
			texts = append(texts, c)
			cores[c] = true
		}
		texts = append(texts, hex.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v))))
	}
	if len(texts) == 0 {
		return &Redactor{}
	}
	// Longest first, so that where two patterns match at one place the longer wins
	// (Find also keeps the longest match).
	slices.SortFunc(texts, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	texts = slices.Compact(texts)
	r := &Redactor{}
	for i, t := range texts {
		p := pattern{text: t, runes: []rune(t), plain: !strings.ContainsAny(t, "%\\&+"), base64: cores[t]}
		for at := range t {
			if utf8.RuneStart(t[at]) {
				p.runeAt = append(p.runeAt, at)
			}
		}
		p.runeAt = append(p.runeAt, len(t))
		r.patterns = append(r.patterns, p)
		r.byFirst[t[0]] = append(r.byFirst[t[0]], i)
	}
	return r
}

// base64Cores are the parts of v's base64 encodings that depend on v's bytes alone: v
// may start at any byte of a longer encoded text, so at any of three alignments, and
// the characters that also carry bits of the bytes around it differ with them.
func base64Cores(v string) []string {
	var out []string
	for align := range 3 {
		buf := append(make([]byte, align), v...)
		first := (8*align + 5) / 6       // the first character whose 6 bits are all v's
		last := 8 * (align + len(v)) / 6 // one past the last such character
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			core := enc.EncodeToString(buf)[first:last]
			if len(core) >= minSecretLen && !slices.Contains(out, core) {
				out = append(out, core)
			}
		}
	}
	return out
}

// Active reports whether the Redactor has anything to hide.
func (r *Redactor) Active() bool { return r != nil && len(r.patterns) > 0 }

// Redact returns s with every secret, in any of its forms, replaced by [redacted].
func (r *Redactor) Redact(s string) string {
	spans := r.find(s, false)
	if len(spans) == 0 {
		return s
	}
	return replaceSpans(s, spans)
}

// RedactBytes is Redact for bytes; it returns b itself when nothing needs hiding.
func (r *Redactor) RedactBytes(b []byte) []byte {
	// Scanned in place: find reads the bytes and keeps none of them.
	spans := r.find(unsafe.String(unsafe.SliceData(b), len(b)), false)
	if len(spans) == 0 {
		return b
	}
	return []byte(replaceSpans(string(b), spans))
}

// RedactCut is Redact for a text cut short (a stream broken off, a log line cut at its
// limit): the start of a secret at its very end, 4 characters or more of it, is hidden
// too, since the rest of it was only cut away.
func (r *Redactor) RedactCut(s string) string {
	spans := r.find(s, true)
	if len(spans) == 0 {
		return s
	}
	return replaceSpans(s, spans)
}

// Find returns the byte ranges [start, end) of s in which a secret is written, in any of
// its forms, in order and without overlap.
func (r *Redactor) Find(s string) [][2]int { return r.find(s, false) }

// FindCut is Find for a text cut short; see RedactCut.
func (r *Redactor) FindCut(s string) [][2]int { return r.find(s, true) }

func replaceSpans(s string, spans [][2]int) string {
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for _, sp := range spans {
		b.WriteString(s[at:sp[0]])
		b.WriteString(Redacted)
		at = sp[1]
	}
	b.WriteString(s[at:])
	return b.String()
}

func (r *Redactor) find(s string, cut bool) [][2]int {
	if !r.Active() {
		return nil
	}
	var spans [][2]int
	for i := 0; i < len(s); {
		c := s[i]
		cands := r.byFirst[c]
		var escaped, space []int
		if escapeStart[c] {
			// Only the patterns that start with what the escape stands for.
			if b, ok := escapedFirstByte(s, i); ok {
				escaped = r.byFirst[b]
				if b == '+' {
					space = r.byFirst[' '] // %2B: a plus, or a form's space encoded again
				}
			}
		}
		if len(cands) == 0 && len(escaped) == 0 && len(space) == 0 {
			i++
			continue
		}
		best, b64 := -1, false
		for _, list := range [3][]int{cands, escaped, space} {
			for _, pi := range list {
				if end := r.patterns[pi].matchAt(s, i, cut); end > best {
					best, b64 = end, r.patterns[pi].base64
				}
			}
		}
		if best > i {
			start := i
			if b64 {
				start, best = widenBase64(s, i, best)
				if len(spans) > 0 {
					start = max(start, spans[len(spans)-1][1])
				}
			}
			spans = append(spans, [2]int{start, best})
			i = best
			continue
		}
		i++
	}
	return spans
}

// widenBase64 extends a match of a base64 core [start, end) over the characters of the
// same encoding around it: one before (it carries the secret's first bits), one after
// (its last bits) and the = padding that may end it.
func widenBase64(s string, start, end int) (int, int) {
	if start > 0 && isBase64Char(s[start-1]) {
		start--
	}
	if end < len(s) && isBase64Char(s[end]) {
		end++
	}
	for range 2 {
		switch {
		case end < len(s) && s[end] == '=':
			end++
		case strings.HasPrefix(s[end:], "%3D") || strings.HasPrefix(s[end:], "%3d"):
			end += 3
		}
	}
	return start, end
}

func isBase64Char(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

// maxPaths bounds the places a partial match may stand at once; escapes that read
// alike (a literal % against %XX) give a few, never many.
const maxPaths = 16

// matchAt is the end of the longest match of p at s[i], or -1. Each rune of p may be
// written as itself or escaped (see Redactor), so a match is followed along every way
// the text can be read, as a set of positions. With cut, a text that ends after
// minSecretLen runes or more of p matches up to its end.
func (p *pattern) matchAt(s string, i int, cut bool) int {
	// Most places match a pattern byte for byte, or not at all: compare bytes first,
	// and read escapes only from where the bytes part.
	n := 0
	for n < len(p.text) && i+n < len(s) && s[i+n] == p.text[n] {
		n++
	}
	if n == len(p.text) {
		return i + n
	}
	from := 0
	if p.plain {
		for from+1 < len(p.runeAt) && p.runeAt[from+1] <= n {
			from++ // whole runes matched as themselves
		}
		if i+n == len(s) {
			if cut && from >= minSecretLen {
				return len(s)
			}
			return -1
		}
		if !escapeStart[s[i+n]] {
			return -1
		}
	}
	var bufs [2][maxPaths]int
	cur := append(bufs[0][:0], i+p.runeAt[from])
	for k := from; k < len(p.runes); k++ {
		c := p.runes[k]
		next := bufs[(k+1)%2][:0]
		for _, at := range cur {
			if at == len(s) {
				if cut && k >= minSecretLen {
					return len(s)
				}
				continue
			}
			next = runeEnds(s, at, c, next)
		}
		if len(next) == 0 {
			return -1
		}
		cur = next
	}
	return slices.Max(cur)
}

// escapedFirstByte is the first byte of what an escape at s[i] stands for: the byte of
// %XX (or %25XX), the first UTF-8 byte of the character of \uXXXX, \xXX, \/ or an HTML
// character reference, a space for +.
func escapedFirstByte(s string, i int) (byte, bool) {
	switch s[i] {
	case '+':
		return ' ', true
	case '%':
		j := i + 1
		for strings.HasPrefix(s[j:], "25") && j < i+9 {
			if _, ok := hexValue(s, j+2, 2); !ok {
				break
			}
			j += 2
		}
		v, ok := hexValue(s, j, 2)
		return byte(v), ok
	case '\\':
		k := i
		for k < len(s) && s[k] == '\\' {
			k++
		}
		if k == len(s) {
			return '\\', true
		}
		switch s[k] {
		case 'u', 'U':
			u, ok := hexValue(s, k+1, 4)
			if !ok {
				return '\\', true
			}
			if u >= 0xD800 && u < 0xDC00 {
				// A surrogate pair stands for one character past U+FFFF.
				j := k + 5
				for j < len(s) && s[j] == '\\' {
					j++
				}
				lo, ok := 0, false
				if j > k+5 && j < len(s) && (s[j] == 'u' || s[j] == 'U') {
					lo, ok = hexValue(s, j+1, 4)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return 0, false
				}
				u = 0x10000 + (u-0xD800)<<10 + (lo - 0xDC00)
			}
			var enc [utf8.UTFMax]byte
			utf8.EncodeRune(enc[:], rune(u))
			return enc[0], true
		case 'x', 'X':
			v, ok := hexValue(s, k+1, 2)
			if !ok {
				return '\\', true
			}
			return byte(v), true
		}
		return s[k], true
	case '&':
		for _, c := range "&<>\"'" {
			if entityEnd(s, i, c) > 0 {
				return byte(c), true
			}
		}
		v, _, ok := charRef(s, i)
		if !ok || v > utf8.MaxRune {
			return 0, false
		}
		var enc [utf8.UTFMax]byte
		utf8.EncodeRune(enc[:], rune(v))
		return enc[0], true
	}
	return 0, false
}

// addEnd adds e to a set of at most maxPaths positions.
func addEnd(ends []int, e int) []int {
	if len(ends) < maxPaths && !slices.Contains(ends, e) {
		ends = append(ends, e)
	}
	return ends
}

// runeEnds appends to ends every position at which one way of writing c that starts at
// s[at] ends.
func runeEnds(s string, at int, c rune, ends []int) []int {
	rest := s[at:]
	// As itself.
	if r, n := utf8.DecodeRuneInString(rest); r == c && (r != utf8.RuneError || n > 1) {
		ends = addEnd(ends, at+n)
	}
	switch rest[0] {
	case '%':
		// Percent-encoded, byte by byte, possibly encoded again (%25 for %).
		var enc [utf8.UTFMax]byte
		n := utf8.EncodeRune(enc[:], c)
		ends = percentEnds(s, at, enc[:n], ends)
		if c == ' ' {
			ends = percentEnds(s, at, []byte{'+'}, ends) // a form's + for a space, encoded again
		}
	case '+':
		if c == ' ' {
			ends = addEnd(ends, at+1)
		}
	case '\\':
		// Escaped with one backslash or more (a JSON string inside a JSON string
		// doubles them).
		k := at
		for k < len(s) && s[k] == '\\' {
			k++
		}
		if c == '\\' {
			for e := at + 2; e <= k; e++ {
				ends = addEnd(ends, e) // \\ and \\\\
			}
		}
		if k == len(s) {
			break
		}
		switch s[k] {
		case 'u', 'U':
			if u, ok := hexValue(s, k+1, 4); ok {
				if rune(u) == c {
					ends = addEnd(ends, k+5)
				} else if c > 0xFFFF && utf16Hi(c) == rune(u) {
					// A surrogate pair: \uD83D\uDE00, the second with as many backslashes.
					j := k + 5
					for j < len(s) && s[j] == '\\' {
						j++
					}
					if j > k+5 && j < len(s) && (s[j] == 'u' || s[j] == 'U') {
						if lo, ok := hexValue(s, j+1, 4); ok && utf16Lo(c) == rune(lo) {
							ends = addEnd(ends, j+5)
						}
					}
				}
			}
		case 'x', 'X':
			if v, ok := hexValue(s, k+1, 2); ok && rune(v) == c {
				ends = addEnd(ends, k+3)
			}
		case '/', '"', '\'':
			if rune(s[k]) == c {
				ends = addEnd(ends, k+1)
			}
		}
	case '&':
		if e := entityEnd(s, at, c); e > 0 {
			ends = addEnd(ends, e)
		}
	}
	return ends
}

// percentEnds adds to ends the ends of the bytes b written percent-encoded from s[at]:
// each byte %XX in either case, or encoded again as %25XX.
func percentEnds(s string, at int, b []byte, ends []int) []int {
	if len(b) == 0 {
		return addEnd(ends, at)
	}
	if at >= len(s) || s[at] != '%' {
		return ends
	}
	j := at + 1
	for range 4 { // %XX, %25XX, %2525XX, %252525XX: encoded up to four times
		if v, ok := hexValue(s, j, 2); ok && byte(v) == b[0] {
			ends = percentEnds(s, j+2, b[1:], ends)
		}
		if !strings.HasPrefix(s[j:], "25") {
			break
		}
		j += 2
	}
	return ends
}

// entityEnd is the end of an HTML character reference for c at s[at] (&#104;, &#x68;,
// &amp;), or 0.
func entityEnd(s string, at int, c rune) int {
	rest := s[at:]
	name := ""
	switch c {
	case '&':
		name = "&amp;"
	case '<':
		name = "&lt;"
	case '>':
		name = "&gt;"
	case '"':
		name = "&quot;"
	case '\'':
		name = "&apos;"
	}
	if name != "" && strings.HasPrefix(rest, name) {
		return at + len(name)
	}
	v, k, ok := charRef(s, at)
	if !ok || k >= len(s) || s[k] != ';' || rune(v) != c {
		return 0
	}
	return k + 1
}

// hexValue reads n hex digits, in either case, at s[at].
func hexValue(s string, at, n int) (int, bool) {
	if at+n > len(s) {
		return 0, false
	}
	v := 0
	for i := at; i < at+n; i++ {
		d := digitValue(s[i], 16)
		if d < 0 {
			return 0, false
		}
		v = v<<4 | d
	}
	return v, true
}

func digitValue(c byte, base int) int {
	d := -1
	switch {
	case c >= '0' && c <= '9':
		d = int(c - '0')
	case c >= 'a' && c <= 'f':
		d = int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		d = int(c-'A') + 10
	}
	if d >= base {
		return -1
	}
	return d
}

func utf16Hi(c rune) rune { return 0xD800 + (c-0x10000)>>10 }
func utf16Lo(c rune) rune { return 0xDC00 + (c-0x10000)&0x3FF }

// charRef reads the numeric character reference at s[at:] (&#65 or &#x41, at most 8
// digits), up to but not including its ';': its value and the index after its digits;
// ok is false where s[at:] starts none.
func charRef(s string, at int) (v, end int, ok bool) {
	if !strings.HasPrefix(s[at:], "&#") {
		return 0, 0, false
	}
	j, base := at+2, 10
	if j < len(s) && (s[j] == 'x' || s[j] == 'X') {
		j, base = j+1, 16
	}
	k := j
	for k < len(s) && k-j < 8 {
		d := digitValue(s[k], base)
		if d < 0 {
			break
		}
		v = v*base + d
		k++
	}
	return v, k, k > j
}
