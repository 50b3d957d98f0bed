package detectors

import (
	"sort"
	"strings"
)

// span is a half-open byte range [start, end) of a response's content.
type span struct{ start, end int }

// quotedSpans returns, in order, the byte ranges of s that markdown renders as code: closed
// fenced blocks (``` or ~~~, fence lines included) and inline code spans. Markup inside them
// is quoted, not emitted, so it is never a leak.
//
// The rules follow CommonMark where it matters for that question and are lenient where
// chat replies differ from documents:
//   - A fence may be indented by any amount, because replies nest code blocks in list items.
//   - A fence closes only on a line of the same character, at least as long as the opener,
//     with nothing but whitespace after it.
//   - An unclosed fence is NOT a quote: a degenerate reply can open a fence and then emit
//     raw tool-call markup until it stops, and that must still count as a leak.
//   - An inline span is a backtick run closed by the next run of exactly the same length in
//     the same paragraph (a blank line ends a paragraph); an unmatched run is literal text.
func quotedSpans(s string) []span {
	var out []span
	textStart := 0
	// failed[c] is the shortest opener of fence character c already known to have no
	// closer below it: a later opener of that length or more cannot close either, which
	// keeps a reply full of unclosed fences linear.
	failed := map[byte]int{}
	for pos := 0; pos < len(s); {
		line, next := lineAt(s, pos)
		if c, n, ok := openingFence(line); ok && (failed[c] == 0 || n < failed[c]) {
			if end, found := closingFence(s, next, c, n); found {
				out = append(out, inlineSpans(s, textStart, pos)...)
				out = append(out, span{pos, end})
				pos, textStart = end, end
				continue
			}
			failed[c] = n
		}
		pos = next
	}
	return append(out, inlineSpans(s, textStart, len(s))...)
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
