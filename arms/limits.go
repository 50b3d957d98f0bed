package arms

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Limits on a spec file. A spec is a page of YAML: the largest real one (256 arms, each
// with a few pins) is some tens of kilobytes and a few thousand nodes. The YAML parser
// spends time and memory far out of proportion to a file's size on some shapes (deep
// nesting, tens of thousands of entries), so these limits are checked on the raw text,
// before the parser builds anything: a hostile or mistaken file fails in milliseconds
// with a position, instead of taking gigabytes or minutes.
const (
	// MaxSpecBytes is the largest spec file arbiter reads (1 MiB).
	MaxSpecBytes = 1 << 20
	// MaxSpecDepth is the deepest nesting of mappings and lists a spec may have; a real
	// one nests 6 deep (factors.hicache.on.args and its items).
	MaxSpecDepth = 32
	// MaxSpecNodes is the most keys, list items, comments, anchors, aliases and tags a
	// spec may hold: what the parser turns into tokens.
	MaxSpecNodes = 4096
)

// Bounds on the workload and the design, so that a typo of a few digits fails validation
// instead of exhausting memory at run time (every session's script and every planned
// launch is built up front).
const (
	// MaxSessions is the most sessions per arm and block.
	MaxSessions = 100_000
	// MaxRounds is the most user rounds of one session.
	MaxRounds = 1000
	// MaxTurnsPerRun bounds sessions x rounds: the conversations one launch of one arm
	// carries, each round at least one stored turn.
	MaxTurnsPerRun = 1_000_000
	// MaxConcurrency is the most sessions in flight at once against one engine.
	MaxConcurrency = 4096
	// MaxMaxTokens bounds max_tokens (1 Mi tokens, beyond any served context).
	MaxMaxTokens = 1 << 20
	// MaxBlocks is the most repetitions of the design.
	MaxBlocks = 100
	// MaxLooks is the most interim analyses of a group-sequential design.
	MaxLooks = 20
	// MaxGPUs is the most GPUs one arm may be given.
	MaxGPUs = 256
	// DefaultMaxResponseBytes is the default cap on one response's body, SSE framing
	// included: a streamed reply costs about 200 bytes per token, so 8 MiB holds some
	// 40,000 streamed tokens.
	DefaultMaxResponseBytes = 8 << 20
	// MinMaxResponseBytes and MaxMaxResponseBytes bound workload.max_response_bytes.
	MinMaxResponseBytes = 64 << 10
	MaxMaxResponseBytes = 1 << 30
	// MaxTraceBytes bounds a trace file (1 GiB), and MaxTraceLineBytes one of its lines
	// (one conversation); a trace holds at most MaxSessions conversations. They are
	// checked while the file is read, at the line that goes past them; the workload's
	// reader holds the same limits (workload.MaxTraceBytes, MaxTraceLine and
	// MaxTraceConversations).
	MaxTraceBytes     = 1 << 30
	MaxTraceLineBytes = 32 << 20
)

// readSpecFile reads a spec file: a regular file only (a named pipe would block, a device
// such as /dev/zero never ends), and no more than MaxSpecBytes of it.
func readSpecFile(path string) ([]byte, error) {
	// Stat before open: opening a FIFO for reading blocks until a writer comes, and
	// opening some devices has effects of its own.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if err := regularSpec(path, fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should the path be swapped for a FIFO after the stat, opening it
	// still returns at once, and the second check refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if err := regularSpec(path, fi); err != nil {
		return nil, err
	}
	// Read through a limit whatever the size said: a file may grow, and some
	// (under /proc) report no size at all.
	data, err := io.ReadAll(io.LimitReader(f, MaxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if len(data) > MaxSpecBytes {
		return nil, joinSorted([]*SpecError{tooBig(path, "more than")})
	}
	return data, nil
}

// regularSpec refuses anything but a regular file of at most MaxSpecBytes.
func regularSpec(path string, fi os.FileInfo) error {
	m := fi.Mode()
	if !m.IsRegular() {
		what := "not a regular file"
		switch {
		case m.IsDir():
			what = "a directory"
		case m&os.ModeNamedPipe != 0:
			what = "a named pipe"
		case m&os.ModeSocket != 0:
			what = "a socket"
		case m&os.ModeDevice != 0:
			what = "a device"
		}
		return joinSorted([]*SpecError{{File: path, Line: 1, Col: 1, Msg: what + ", not a regular file: a spec is a YAML file"}})
	}
	if fi.Size() > MaxSpecBytes {
		return joinSorted([]*SpecError{tooBig(path, strconv.FormatInt(fi.Size(), 10)+" bytes,")})
	}
	return nil
}

func tooBig(path, size string) *SpecError {
	return &SpecError{File: path, Line: 1, Col: 1,
		Msg: fmt.Sprintf("spec is %s more than the %d bytes (1 MiB) a spec may have", size, MaxSpecBytes)}
}

// checkShape scans a spec's text for what would make the YAML parser slow or greedy:
// nesting deeper than MaxSpecDepth, more than MaxArms arms or levels of one factor, more
// than MaxSpecNodes nodes. It reads the text once, in constant memory, without building
// anything: block indentation, list dashes, flow brackets and commas, keys, quotes,
// block scalars and comments are enough to bound the parser's work. It is an
// approximation of YAML's grammar on purpose; the parser, which runs next, still
// judges the syntax.
func checkShape(path string, data []byte) *SpecError {
	s := &shapeScan{file: path, data: data, scalarParent: noScalar}
	s.scan()
	switch {
	case s.deep != nil:
		return s.deep
	case s.wide != nil:
		return s.wide
	case s.nodes > MaxSpecNodes:
		at, p := s.overAt, ""
		if s.widest.entries*2 >= s.nodes {
			at, p = s.widest.at, s.widestPath
		}
		// When no one collection explains the count (comments, tags), the error
		// points where it went over.
		return s.errorAt(at, p, fmt.Sprintf("%d keys, list items, comments, anchors and tags, more than the %d a spec may hold; a spec of 256 arms holds a few thousand",
			s.nodes, MaxSpecNodes))
	}
	return nil
}

const noScalar = -2

// shapeNode is a mapping or list open at some point of the scan. Offsets are into the
// whole text; a node's path is built from the keys of the nodes around it only when a
// message or a rule needs it, so that the scan allocates nothing per entry.
type shapeNode struct {
	indent  int  // block: the column of its entries; flow: -1
	seq     bool // a list; else a mapping
	flow    bool
	entries int
	at      int // where it starts (its key, when it is a key's value)
	// keyFrom and keyTo delimit the key of the latest entry (mappings); keyFrom is -1
	// when it is not known.
	keyFrom, keyTo int
	open           bool // flow: an entry has begun since the last bracket or comma
	entryAt        int  // flow: where the current entry starts, for its key's text
}

type shapeScan struct {
	file  string
	data  []byte
	stack []shapeNode
	nodes int
	// overAt is where the node count passed MaxSpecNodes.
	overAt int
	// widest is the collection with the most entries seen closed, and its path.
	widest     shapeNode
	widestPath string
	deep       *SpecError // nesting past MaxSpecDepth; the scan stops there
	wide       *SpecError // too many arms or levels
	// quote is the quote character of a scalar that runs on past its line, or 0.
	quote byte
	// scalarParent is the indentation a block scalar's lines must exceed, or noScalar;
	// scalarIndent is that of its first line of text, which the others keep (0 until
	// that line is seen).
	scalarParent, scalarIndent int
	// lineAt is the byte offset of the line being scanned.
	lineAt int
}

func (s *shapeScan) scan() {
	data := s.data
	for len(data) > 0 && s.deep == nil {
		end := bytes.IndexByte(data, '\n')
		var line []byte
		if end < 0 {
			line, data = data, nil
		} else {
			line, data = data[:end], data[end+1:]
		}
		s.line(bytes.TrimSuffix(line, []byte{'\r'}))
		s.lineAt += end + 1
	}
	for len(s.stack) > 0 && s.deep == nil {
		s.pop()
	}
}

func (s *shapeScan) node() {
	s.nodes++
	if s.nodes == MaxSpecNodes+1 {
		s.overAt = s.lineAt
	}
}

func (s *shapeScan) top() *shapeNode {
	if len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

func (s *shapeScan) inFlow() bool {
	t := s.top()
	return t != nil && t.flow
}

// path is the dotted field path of the value the next node pushed would be: the keys
// (or list indexes) of the entries that hold it, as the decoder names fields.
func (s *shapeScan) path() string {
	var b strings.Builder
	for i := range s.stack {
		n := &s.stack[i]
		if i > 0 {
			b.WriteByte('.')
		}
		if n.seq {
			b.WriteString(strconv.Itoa(max(n.entries-1, 0)))
		} else if n.keyFrom >= 0 {
			b.WriteString(unquoteKey(string(s.data[n.keyFrom:n.keyTo])))
		}
	}
	return b.String()
}

func (s *shapeScan) line(line []byte) {
	i := 0
	if s.scalarParent != noScalar {
		if skipSpaces(line, 0) == len(line) {
			return
		}
		ind := indentOf(line)
		if s.scalarIndent == 0 && ind > s.scalarParent {
			s.scalarIndent = ind
		}
		if s.scalarIndent > 0 && ind >= s.scalarIndent {
			return // a line of the block scalar's text
		}
		s.scalarParent, s.scalarIndent = noScalar, 0
	}
	if s.quote != 0 {
		end, closed := quotedEnd(line, 0, s.quote)
		if !closed {
			return
		}
		s.quote, i = 0, end
		if !s.inFlow() {
			s.rest(line, i)
			return
		}
	}
	if s.inFlow() {
		s.flow(line, i)
		return
	}
	s.block(line)
}

// block reads a line outside flow collections: list dashes and keys at their columns.
func (s *shapeScan) block(line []byte) {
	col := indentOf(line)
	if skipSpaces(line, col) == len(line) {
		return
	}
	if line[col] == '#' {
		s.node() // a comment is a token to the parser
		return
	}
	if col == 0 && (marker(line, "---") || marker(line, "...")) {
		for len(s.stack) > 0 {
			s.pop()
		}
		s.value(line, skipSpaces(line, 3), s.lineAt, -1)
		return
	}
	if col == 0 && line[0] == '%' {
		return // a directive
	}
	for len(s.stack) > 0 && s.top().indent > col {
		s.pop()
	}
	// List dashes and explicit keys, any number of them on one line (- - a).
	for col < len(line) && (line[col] == '-' || line[col] == '?') && (col+1 == len(line) || line[col+1] == ' ' || line[col+1] == '\t') {
		s.entry(col, line[col] == '-', -1, -1)
		if s.deep != nil {
			return
		}
		col = skipSpaces(line, col+1)
	}
	if col == len(line) || line[col] == '#' {
		return
	}
	valueAt := s.lineAt + col
	if colon, from, to := keyEnd(line, col); colon >= 0 {
		s.entry(col, false, s.lineAt+from, s.lineAt+to)
		if s.deep != nil {
			return
		}
		valueAt = s.lineAt + from
		col = skipSpaces(line, colon+1)
	}
	s.value(line, col, valueAt, s.blockIndent())
}

// blockIndent is the indentation a block scalar's lines must exceed: that of the
// block collection it is an entry of.
func (s *shapeScan) blockIndent() int {
	if t := s.top(); t != nil && !t.flow {
		return t.indent
	}
	return -1
}

// entry counts one key (or list item) of the block collection at col, opening one there
// when none is open; keyFrom and keyTo delimit a key's text.
func (s *shapeScan) entry(col int, seq bool, keyFrom, keyTo int) {
	for {
		t := s.top()
		switch {
		case t == nil || t.indent < col || (t.indent == col && seq && !t.seq):
			// A new collection: the first entry under a key (a list may stand at its
			// key's own column), or the document's root.
			at := s.lineAt + col
			if t != nil && !t.seq && t.keyFrom >= 0 {
				at = t.keyFrom
			}
			if !s.push(shapeNode{indent: col, seq: seq, at: at, keyFrom: -1}) {
				return
			}
			t = s.top()
		case t.seq != seq:
			s.pop() // a key after a list at the same column: the list has ended
			continue
		}
		t.entries++
		s.node()
		if !seq {
			t.keyFrom, t.keyTo = keyFrom, keyTo
		}
		return
	}
}

// value reads what follows a key or a dash on its line: anchors, tags and aliases, then
// a flow collection, a block scalar, a quoted or a plain scalar. at is where the value's
// key (or the value) is written, for a flow collection.
func (s *shapeScan) value(line []byte, i int, at, parentIndent int) {
	for i < len(line) && (line[i] == '&' || line[i] == '!' || line[i] == '*') {
		s.node()
		// A flow indicator ends an anchor's or a tag's name (&a[...] opens a list).
		for i < len(line) && strings.IndexByte(" \t,[]{}", line[i]) < 0 {
			i++
		}
		i = skipSpaces(line, i)
	}
	if i >= len(line) {
		return
	}
	switch c := line[i]; c {
	case '[', '{':
		if s.push(shapeNode{indent: -1, flow: true, seq: c == '[', at: at, keyFrom: -1}) {
			s.flow(line, i+1)
		}
	case '|', '>':
		s.scalarParent, s.scalarIndent = parentIndent, 0
	case '"', '\'':
		end, closed := quotedEnd(line, i+1, c)
		if !closed {
			s.quote = c
			return
		}
		s.rest(line, end)
	case '#':
		s.node()
	}
}

// rest reads the end of a line after a value: a comment is one more token.
func (s *shapeScan) rest(line []byte, i int) {
	for ; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			s.node()
			return
		}
	}
}

// flow reads inside flow collections from line[i], until the outermost one closes.
func (s *shapeScan) flow(line []byte, i int) {
	for i < len(line) && s.deep == nil {
		t := s.top()
		if t == nil || !t.flow {
			s.rest(line, i)
			return
		}
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			s.node()
			return
		case c == '[' || c == '{':
			s.flowEntry(i)
			at := s.lineAt + i
			if !t.seq && t.keyFrom >= 0 {
				at = t.keyFrom
			}
			if !s.push(shapeNode{indent: -1, flow: true, seq: c == '[', at: at, keyFrom: -1}) {
				return
			}
			i++
		case c == ']' || c == '}':
			s.pop()
			i++
		case c == ',':
			t.open = false
			i++
		case (c == '"' || c == '\'') && quoteOpens(line, i):
			s.flowEntry(i)
			end, closed := quotedEnd(line, i+1, c)
			if !closed {
				s.quote = c
				return
			}
			i = end
		case c == ':' && !t.seq && (i+1 == len(line) || strings.IndexByte(" \t,]}", line[i+1]) >= 0 || i > 0 && (line[i-1] == '"' || line[i-1] == '\'')):
			if t.open && t.entryAt >= s.lineAt {
				t.keyFrom, t.keyTo = t.entryAt, s.lineAt+i
			}
			i++
		case (c == '&' || c == '!' || c == '*') && (i == 0 || strings.IndexByte(" \t[{,", line[i-1]) >= 0):
			s.node()
			if c == '*' {
				s.flowEntry(i)
			}
			for i < len(line) && strings.IndexByte(" \t,[]{}", line[i]) < 0 {
				i++
			}
		default:
			s.flowEntry(i)
			i++
		}
	}
}

// flowEntry counts an entry of the innermost flow collection, once per entry.
func (s *shapeScan) flowEntry(i int) {
	t := s.top()
	if t == nil || !t.flow || t.open {
		return
	}
	t.open, t.entryAt = true, s.lineAt+i
	t.entries++
	s.node()
	if !t.seq {
		t.keyFrom = -1
	}
}

// push opens a collection, unless that nests deeper than MaxSpecDepth: then the scan
// stops with that error.
func (s *shapeScan) push(n shapeNode) bool {
	if len(s.stack) >= MaxSpecDepth {
		s.deep = s.errorAt(n.at, s.path(), fmt.Sprintf("nested more than %d deep; a spec nests 6 deep", MaxSpecDepth))
		return false
	}
	s.stack = append(s.stack, n)
	return true
}

// pop closes the innermost collection and judges its size.
func (s *shapeScan) pop() {
	n := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	if n.entries > s.widest.entries {
		s.widest, s.widestPath = n, s.path()
	}
	if s.wide != nil || n.entries <= MaxArms {
		return
	}
	path := s.path()
	parts := strings.Split(path, ".")
	switch {
	case path == "arms":
		s.wide = s.errorAt(n.at, "arms", fmt.Sprintf("%d arms listed, more than %d; split the experiment", n.entries, MaxArms))
	case parts[0] == "factors" && (len(parts) == 2 || len(parts) == 3 && parts[2] == "levels"):
		s.wide = s.errorAt(n.at, path, fmt.Sprintf("factor %s has %d levels, so any design expands it to at least %d arms, more than %d; use fewer levels",
			parts[1], n.entries, n.entries, MaxArms))
	}
}

// errorAt is a problem at byte offset at of the text.
func (s *shapeScan) errorAt(at int, path, msg string) *SpecError {
	if parts := strings.Split(path, "."); len(parts) > 8 {
		path = strings.Join(parts[:6], ".") + "..." // the depth is in the message
	}
	at = min(max(at, 0), len(s.data))
	start := bytes.LastIndexByte(s.data[:at], '\n') + 1
	return &SpecError{File: s.file, Line: bytes.Count(s.data[:start], []byte{'\n'}) + 1,
		Col: utf8.RuneCount(s.data[start:at]) + 1, Path: path, Msg: msg}
}

// keyEnd finds the colon that ends a block mapping key starting at line[i], and where
// the key's text is; colon is -1 when the line holds no key there.
func keyEnd(line []byte, i int) (colon, from, to int) {
	if i < len(line) && (line[i] == '"' || line[i] == '\'') {
		end, closed := quotedEnd(line, i+1, line[i])
		if !closed {
			return -1, 0, 0
		}
		j := skipSpaces(line, end)
		if j < len(line) && line[j] == ':' && (j+1 == len(line) || line[j+1] == ' ' || line[j+1] == '\t') {
			return j, i, end
		}
		return -1, 0, 0
	}
	if i < len(line) && (line[i] == '[' || line[i] == '{') {
		return -1, 0, 0
	}
	for j := i; j < len(line); j++ {
		switch line[j] {
		case '#':
			if j > i && (line[j-1] == ' ' || line[j-1] == '\t') {
				return -1, 0, 0
			}
		case ':':
			if j+1 == len(line) || line[j+1] == ' ' || line[j+1] == '\t' {
				return j, i, j
			}
		}
	}
	return -1, 0, 0
}

// unquoteKey is a key's text without its quotes, anchor or tag, near enough to name a
// field in a message.
func unquoteKey(k string) string {
	k = strings.TrimSpace(k)
	for len(k) > 0 && (k[0] == '&' || k[0] == '!') {
		sp := strings.IndexAny(k, " \t")
		if sp < 0 {
			return ""
		}
		k = strings.TrimSpace(k[sp:])
	}
	if len(k) >= 2 && (k[0] == '"' || k[0] == '\'') && k[len(k)-1] == k[0] {
		k = k[1 : len(k)-1]
	}
	return k
}

// quoteOpens reports whether the quote at line[i], inside a flow collection, opens a
// quoted scalar: at an entry's start or after ": ", or after the colon of a quoted
// key ("a":"b"). Elsewhere (it's) it is a character of a plain scalar, and the
// brackets that follow count.
func quoteOpens(line []byte, i int) bool {
	j := i - 1
	for j >= 0 && (line[j] == ' ' || line[j] == '\t') {
		j--
	}
	if j < 0 {
		return true
	}
	switch line[j] {
	case '[', '{', ',':
		return true
	case ':':
		return j < i-1 || j > 0 && (line[j-1] == '"' || line[j-1] == '\'')
	}
	return false
}

// quotedEnd is the offset just past the quote that closes a scalar whose text starts at
// line[i]; closed is false when it runs on past the line.
func quotedEnd(line []byte, i int, q byte) (int, bool) {
	for i < len(line) {
		switch c := line[i]; {
		case c == '\\' && q == '"':
			i += 2
		case c == q && q == '\'' && i+1 < len(line) && line[i+1] == '\'':
			i += 2
		case c == q:
			return i + 1, true
		default:
			i++
		}
	}
	return len(line), false
}

// indentOf counts the spaces that indent a line; tabs do not indent in YAML.
func indentOf(line []byte) int {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	return i
}

func skipSpaces(line []byte, i int) int {
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	return i
}

func marker(line []byte, m string) bool {
	return bytes.HasPrefix(line, []byte(m)) && (len(line) == len(m) || line[len(m)] == ' ' || line[len(m)] == '\t')
}
