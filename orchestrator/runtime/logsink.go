package runtime

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Bounds on what an engine's log costs arbiter, whatever the engine prints: a line that
// never ends (a progress bar redrawn with \r, a dumped tensor, a hostile engine) must not
// be held whole in memory nor land whole in the database.
const (
	// MaxLogLine is the longest log line kept; the rest of a longer line is dropped and
	// a marker says how many bytes were.
	MaxLogLine = 64 << 10
	// MaxTailLine is the longest line an Exit's log tail keeps, and MaxTail the whole
	// tail's size: the last lines that fit, oldest dropped first.
	MaxTailLine = 4 << 10
	MaxTail     = 32 << 10
)

// cutBack is how far before the cut a long line is shortened further to end at
// whitespace, so that a credential straddling the cut is dropped whole rather than
// kept in part where the redactor cannot recognise it.
const cutBack = 4 << 10

// logSink writes an engine's output line by line, redacted, to its log file and keeps
// the last lines for crash reports.
type logSink struct {
	w      io.Writer
	redact func(string) string
	// redactCut redacts a line cut short, where a secret may have lost its end.
	redactCut func(string) string
	max       int

	mu        sync.Mutex
	lines     []string
	tailBytes int
}

func newLogSink(w io.Writer, l Launch, max int) *logSink {
	redact, redactCut := l.Redact, l.RedactCut
	if redact == nil {
		redact = func(s string) string { return s }
	}
	if redactCut == nil {
		redactCut = redact
	}
	return &logSink{w: w, redact: redact, redactCut: redactCut, max: max}
}

// copyFrom feeds r to the sink until r ends; memory stays bounded by MaxLogLine whatever
// the length of r's lines.
func (s *logSink) copyFrom(r io.Reader) {
	lw := &lineWriter{sink: s}
	_, _ = io.CopyBuffer(lw, r, make([]byte, 32<<10))
	lw.flush()
}

// writeLine writes one line (without its newline) of which dropped more bytes were cut.
func (s *logSink) writeLine(line []byte, dropped int64) {
	// Redact whole lines: a secret split across two writes is still one line.
	redact := s.redact
	if dropped > 0 {
		redact = s.redactCut
	}
	red := redact(string(line))
	if dropped > 0 {
		red += fmt.Sprintf(" [arbiter: line cut, %d more bytes dropped]", dropped)
	}
	io.WriteString(s.w, red+"\n")
	tl := strings.TrimRight(red, "\r")
	if len(tl) > MaxTailLine {
		cut := validPrefix(tl[:MaxTailLine])
		tl = cut + fmt.Sprintf(" [arbiter: %d more bytes in the log file]", len(tl)-len(cut))
	}
	s.mu.Lock()
	s.lines = append(s.lines, tl)
	s.tailBytes += len(tl) + 1
	for len(s.lines) > s.max || (s.tailBytes > MaxTail && len(s.lines) > 1) {
		s.tailBytes -= len(s.lines[0]) + 1
		s.lines[0] = ""
		s.lines = s.lines[1:]
	}
	s.mu.Unlock()
}

func (s *logSink) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// lineWriter cuts one stream into lines for the log sink, so that a line of stdout and a
// line of stderr never end up spliced into one. It holds at most MaxLogLine bytes of the
// current line and counts the rest, which is dropped.
type lineWriter struct {
	sink    *logSink
	buf     []byte
	dropped int64
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if room := MaxLogLine - len(w.buf); room > 0 {
			k := min(room, len(part))
			w.buf = append(w.buf, part[:k]...)
			w.dropped += int64(len(part) - k)
		} else {
			w.dropped += int64(len(part))
		}
		if i < 0 {
			break
		}
		w.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// endLine hands the current line to the sink.
func (w *lineWriter) endLine() {
	line := w.buf
	if w.dropped > 0 {
		keep := len(line)
		if j := bytes.LastIndexAny(line[max(0, len(line)-cutBack):], " \t\r"); j >= 0 {
			keep = max(0, len(line)-cutBack) + j
		}
		keep = len(validPrefix(string(line[:keep])))
		w.dropped += int64(len(line) - keep)
		line = line[:keep]
	}
	w.sink.writeLine(line, w.dropped)
	w.buf, w.dropped = w.buf[:0], 0
}

// flush ends an unfinished last line.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 || w.dropped > 0 {
		w.endLine()
	}
}

// validPrefix drops a UTF-8 sequence cut in half at the end of s.
func validPrefix(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			return s
		}
		s = s[:len(s)-1]
	}
	return s
}

var _ io.Writer = (*lineWriter)(nil)
