package detectors

import (
	"sort"
	"strings"
)

// span is a half-open byte range [start, end) of a response's content.
type span struct{ start, end int }

// quotedSpans returns, in order, the byte ranges of s that markdown renders as code: closed
// fenced blocks (``` or ~~~, fence lines included), indented code blocks, closed <pre>
// blocks and inline code spans. Markup inside them is quoted, not emitted, so it is never
// a leak.
//
// The rules follow CommonMark where it matters for that question and are lenient where
// chat replies differ from documents:
//   - A fence may be indented by any amount, because replies nest code blocks in list items.
//   - A fence closes only on a line of the same character, at least as long as the opener,
//     with nothing but whitespace after it.
//   - An unclosed fence is NOT a quote: a degenerate reply can open a fence and then emit
//     raw tool-call markup until it stops, and that must still count as a leak. The same
//     holds for an unclosed <pre>.
//   - An indented code block starts on a line indented by four columns or more after a
//     blank line (or at the start) and runs over indented and blank lines; an indented
//     line right under text continues that text and quotes nothing.
//   - An inline span is a backtick run closed by the next run of exactly the same length in
//     the same paragraph (a blank line ends a paragraph); an unmatched run is literal text.
func quotedSpans(s string) []span {
	var out []span
	from := 0
	for _, b := range blockSpans(s, true) {
		out = append(out, textSpans(s, from, b.start)...)
		out = append(out, b)
		from = b.end
	}
	return append(out, textSpans(s, from, len(s))...)
}

// fencedSpans returns, in order, the closed fenced blocks of s.
func fencedSpans(s string) []span { return blockSpans(s, false) }

// blockSpans returns the closed fenced blocks of s and, when indented is set, its indented
// code blocks.
func blockSpans(s string, indented bool) []span {
	var out []span
	// failed[c] is the shortest opener of fence character c already known to have no
	// closer below it: a later opener of that length or more cannot close either, which
	// keeps a reply full of unclosed fences linear.
	failed := map[byte]int{}
	afterBlank := true // the start of the content counts as after a blank line
	for pos := 0; pos < len(s); {
		line, next := lineAt(s, pos)
		if c, n, ok := openingFence(line); ok && (failed[c] == 0 || n < failed[c]) {
			if end, found := closingFence(s, next, c, n); found {
				out = append(out, span{pos, end})
				pos, afterBlank = end, false
				continue
			}
			failed[c] = n
		}
		if indented && afterBlank && !blank(line) && indentColumns(line) >= 4 {
			end := indentedEnd(s, next)
			out = append(out, span{pos, end})
			pos, afterBlank = end, false
			continue
		}
		afterBlank = blank(line)
		pos = next
	}
	return out
}

// indentedEnd returns the offset just past the last indented line of the indented code
// block whose next line starts at pos; blank lines inside the block belong to it, those
// after it do not.
func indentedEnd(s string, pos int) int {
	end := pos
	for pos < len(s) {
		line, next := lineAt(s, pos)
		if !blank(line) {
			if indentColumns(line) < 4 {
				break
			}
			end = next
		}
		pos = next
	}
	return end
}

// indentColumns returns the width of line's leading whitespace, a tab reaching the next
// multiple of four as CommonMark counts it.
func indentColumns(line string) int {
	cols := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case ' ':
			cols++
		case '\t':
			cols += 4 - cols%4
		default:
			return cols
		}
	}
	return cols
}

// blank reports whether line holds only whitespace.
func blank(line string) bool { return strings.TrimLeft(line, " \t\r") == "" }

// textSpans returns the quoted spans of s[from:to], a stretch outside block quotes: closed
// <pre> blocks, and the inline code spans outside them. A <pre> tag inside an inline span
// is quoted text and opens nothing.
func textSpans(s string, from, to int) []span {
	inline := inlineSpans(s, from, to)
	var pres []span
	for at := from; at < to; {
		open, ok := nextTag(s, at, to, "pre", inline)
		if !ok {
			break
		}
		shut, ok := nextTag(s, open.end, to, "/pre", inline)
		if !ok {
			break // no later <pre> can close either
		}
		pres = append(pres, span{open.start, shut.end})
		at = shut.end
	}
	if len(pres) == 0 {
		return inline
	}
	out := pres
	for _, sp := range inline {
		if !overlaps(pres, sp) {
			out = append(out, sp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// nextTag finds the first HTML tag named name (ASCII case folded, attributes allowed) in
// s[at:to] that does not start inside one of the spans skip.
func nextTag(s string, at, to int, name string, skip []span) (span, bool) {
	for at < to {
		i := strings.IndexByte(s[at:to], '<')
		if i < 0 {
			return span{}, false
		}
		start := at + i
		at = start + 1
		j := at
		for j < to && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if to-j < len(name) || !strings.EqualFold(s[j:j+len(name)], name) {
			continue
		}
		j += len(name)
		if j >= to || (s[j] != '>' && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r') {
			continue // <preview>, <prefix>
		}
		k := strings.IndexByte(s[j:to], '>')
		if k < 0 {
			return span{}, false
		}
		if inSpans(skip, start) {
			continue
		}
		return span{start, j + k + 1}, true
	}
	return span{}, false
}

// overlaps reports whether sp shares a byte with one of the sorted, disjoint spans.
func overlaps(spans []span, sp span) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].end > sp.start })
	return i < len(spans) && spans[i].start < sp.end
}

// lineAt returns the line starting at pos without its newline, and where the next begins.
func lineAt(s string, pos int) (string, int) {
	if i := strings.IndexByte(s[pos:], '\n'); i >= 0 {
		return s[pos : pos+i], pos + i + 1
	}
	return s[pos:], len(s)
}

// openingFence reports whether line opens a fenced block, with its character and length.
func openingFence(line string) (byte, int, bool) {
	t := strings.TrimLeft(line, " \t")
	if len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, 0, false
	}
	c := t[0]
	n := 0
	for n < len(t) && t[n] == c {
		n++
	}
	// A backtick fence's info string may not hold backticks, or ```x``` would be inline code.
	if n < 3 || (c == '`' && strings.IndexByte(t[n:], '`') >= 0) {
		return 0, 0, false
	}
	return c, n, true
}

// closingFence finds the line at or after pos that closes a fence of n characters c, and
// returns the offset just past it.
func closingFence(s string, pos int, c byte, n int) (int, bool) {
	for pos < len(s) {
		line, next := lineAt(s, pos)
		t := strings.TrimLeft(line, " \t")
		k := 0
		for k < len(t) && t[k] == c {
			k++
		}
		if k >= n && strings.TrimRight(t[k:], " \t\r") == "" {
			return next, true
		}
		pos = next
	}
	return 0, false
}

// backtickRun is one run of backticks outside fenced blocks.
type backtickRun struct {
	start, n  int
	paragraph int
}

// inlineSpans returns the inline code spans of s[from:to].
func inlineSpans(s string, from, to int) []span {
	var runs []backtickRun
	paragraph := 0
	lineStart, blank := true, true
	for i := from; i < to; {
		switch c := s[i]; {
		case c == '`':
			j := i
			for j < to && s[j] == '`' {
				j++
			}
			runs = append(runs, backtickRun{start: i, n: j - i, paragraph: paragraph})
			blank, lineStart = false, false
			i = j
			continue
		case c == '\n':
			if lineStart && blank {
				paragraph++
			}
			lineStart, blank = true, true
		case c != ' ' && c != '\t' && c != '\r':
			blank, lineStart = false, false
		}
		i++
	}
	if len(runs) < 2 {
		return nil
	}
	// byLen lists, for each run length, the indexes of the runs of that length, so the
	// closer of an opener is found without rescanning: the whole pass stays linear.
	byLen := map[int][]int{}
	for k, r := range runs {
		byLen[r.n] = append(byLen[r.n], k)
	}
	cursor := map[int]int{}
	var out []span
	for k := 0; k < len(runs); k++ {
		r := runs[k]
		idx := byLen[r.n]
		c := cursor[r.n]
		for c < len(idx) && idx[c] <= k {
			c++
		}
		cursor[r.n] = c
		if c == len(idx) || runs[idx[c]].paragraph != r.paragraph {
			continue // unmatched: literal backticks
		}
		closer := runs[idx[c]]
		out = append(out, span{r.start, closer.start + closer.n})
		k = idx[c] // runs inside the span are code, not openers
	}
	return out
}

// inSpans reports whether byte offset off lies inside one of the sorted spans.
func inSpans(spans []span, off int) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].end > off })
	return i < len(spans) && spans[i].start <= off
}
