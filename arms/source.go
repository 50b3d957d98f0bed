package arms

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// RedactedSource is the spec's text as the store keeps it. The value of every
// credential-named env entry and of every credential flag in command and args
// (--api-key X, --hf-token=X) is replaced by "[redacted]" where it is written, whatever
// its length and scalar style: the whole value, from its first character to its last,
// so that nothing of a block scalar, an escaped or a wrapped string survives. Any other
// scalar that holds a secret of 4 bytes or more is rewritten as a quoted string with
// the secret replaced, and comments are redacted as text, so the result is still the
// same spec.
func (s *Spec) RedactedSource() []byte {
	r := s.Redactor(nil)
	f, err := parseYAML(s.Source)
	if err != nil {
		return r.RedactBytes(s.Source)
	}
	w := &sourceRewrite{src: s.Source, r: r, anchors: map[string]ast.Node{}, at: map[*token.Token]int{}}
	// YAML breaks lines at \n, \r\n and a lone \r, and so does the lexer's count.
	w.lineStarts = append(w.lineStarts, 0)
	for i, c := range s.Source {
		if c == '\n' || (c == '\r' && (i+1 == len(s.Source) || s.Source[i+1] != '\n')) {
			w.lineStarts = append(w.lineStarts, i+1)
		}
	}
	d := &decoder{anchors: w.anchors}
	for _, doc := range f.Docs {
		d.collectAnchors(doc.Body, 0)
	}
	for _, doc := range f.Docs {
		if doc.Body != nil && doc.Body.GetToken() != nil {
			w.locate(doc.Body.GetToken())
			break // one stream holds every document's tokens
		}
	}
	for _, doc := range f.Docs {
		w.walk(doc.Body, false, 0)
	}
	return w.apply()
}

// sourceRewrite collects the byte ranges of a spec's text to write over.
type sourceRewrite struct {
	src        []byte
	lineStarts []int // byte offset of each line
	r          *Redactor
	anchors    map[string]ast.Node
	spots      []spot
	at         map[*token.Token]int              // where each token is written; see locate
	col        struct{ line, byteAt, runes int } // columnOffset's last answer
}

// spot is a byte range [start, end) of the source and what replaces it.
type spot struct {
	start, end int
	text       string
}

var quotedRedacted = quoteYAML(Redacted)

// quoteYAML writes s as a double-quoted YAML scalar: JSON's escapes are YAML's too.
func quoteYAML(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// walk visits the nodes under n; underEnv says n's entries are env variables.
func (w *sourceRewrite) walk(n ast.Node, underEnv bool, depth int) {
	if n == nil || depth > 200 {
		return
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, mv := range v.Values {
			w.walk(mv, underEnv, depth+1)
		}
	case *ast.MappingValueNode:
		w.walk(v.Key, false, depth+1)
		key := w.keyText(v.Key)
		switch {
		case underEnv && LooksLikeCredential(key):
			w.hide(v.Value, depth+1)
		case key == "args" || key == "command":
			w.walkArgs(v.Value, depth+1)
		default:
			w.walk(v.Value, key == "env", depth+1)
		}
	case *ast.MappingKeyNode:
		w.walk(v.Value, false, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			w.walk(e, false, depth+1)
		}
	case *ast.AnchorNode:
		w.walk(v.Value, underEnv, depth+1)
	case *ast.TagNode:
		w.walk(v.Value, underEnv, depth+1)
	case ast.ScalarNode:
		w.scalar(n)
	}
}

// keyText is a mapping key's text, looking through ? keys, tags and anchors.
func (w *sourceRewrite) keyText(k ast.Node) string {
	for range maxAliasResolveDepth {
		switch v := k.(type) {
		case *ast.MappingKeyNode:
			k = v.Value
		case *ast.TagNode:
			k = v.Value
		case *ast.AnchorNode:
			k = v.Value
		case ast.ScalarNode:
			if tk := v.GetToken(); tk != nil {
				return tk.Value
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// walkArgs visits a command line, hiding the values of credential flags.
func (w *sourceRewrite) walkArgs(n ast.Node, depth int) {
	for range maxAliasResolveDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
			continue
		case *ast.TagNode:
			n = v.Value
			continue
		}
		break
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		w.walk(n, false, depth)
		return
	}
	texts := make([]string, len(seq.Values))
	for i, e := range seq.Values {
		if sc, ok := w.scalarOf(e).(ast.ScalarNode); ok && sc.GetToken() != nil {
			texts[i] = scalarValue(sc)
		}
	}
	done := make([]bool, len(texts))
	credentialArgs(texts, func(i int) {
		w.hide(seq.Values[i], depth+1)
		done[i] = true
	}, func(i int, name, _ string) {
		if sc, ok := w.scalarOf(seq.Values[i]).(ast.ScalarNode); ok {
			w.replace(sc, quoteYAML(name+"="+Redacted))
			done[i] = true
		}
	})
	for i, e := range seq.Values {
		if !done[i] {
			w.walk(e, false, depth+1)
		}
	}
}

// scalarOf looks through anchors and tags (not aliases) to the node that is written.
func (w *sourceRewrite) scalarOf(n ast.Node) ast.Node {
	for range maxAliasResolveDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		default:
			return n
		}
	}
	return n
}

// scalarValue is a scalar's value as decoded.
func scalarValue(n ast.ScalarNode) string {
	if l, ok := n.(*ast.LiteralNode); ok {
		if l.Value == nil {
			return ""
		}
		return l.Value.Value
	}
	return n.GetToken().Value
}

// hide replaces the value n with "[redacted]". An alias is replaced, and so is the
// scalar it points at, wherever that is written.
func (w *sourceRewrite) hide(n ast.Node, depth int) {
	n = w.scalarOf(n)
	if a, ok := n.(*ast.AliasNode); ok {
		w.replace(a, quotedRedacted)
		if a.Value != nil && a.Value.GetToken() != nil {
			if target, ok := w.anchors[a.Value.GetToken().Value]; ok && depth < maxAliasResolveDepth {
				w.hide(target, depth+1)
			}
		}
		return
	}
	if sc, ok := n.(ast.ScalarNode); ok {
		w.replace(sc, quotedRedacted)
		return
	}
	// Not a string, so not a valid env value; its scalars may still hold secrets.
	w.walk(n, false, depth)
}

// scalar rewrites a scalar that holds a secret as a quoted string without it.
func (w *sourceRewrite) scalar(n ast.Node) {
	sc, ok := n.(ast.ScalarNode)
	if !ok || sc.GetToken() == nil {
		return
	}
	start, end, ok := w.span(n)
	if !ok {
		return
	}
	v := scalarValue(sc)
	written := string(w.src[start:end])
	if w.r.Redact(v) == v && w.r.Redact(written) == written {
		return
	}
	w.spots = append(w.spots, spot{start: start, end: end, text: quoteYAML(w.r.Redact(v))})
}

func (w *sourceRewrite) replace(n ast.Node, text string) {
	if start, end, ok := w.span(n); ok {
		w.spots = append(w.spots, spot{start: start, end: end, text: text})
	}
}

// span is the byte range in which a scalar or alias is written: from its first token
// (the quote, the | or > of a block scalar, the * of an alias) to the last character
// before the token that follows it, less the whitespace in between.
func (w *sourceRewrite) span(n ast.Node) (start, end int, ok bool) {
	var first, last *token.Token
	switch v := n.(type) {
	case *ast.LiteralNode:
		first, last = v.Start, v.Start
		if v.Value != nil && v.Value.Token != nil {
			last = v.Value.Token
		}
	case *ast.AliasNode:
		first, last = v.Start, v.Start
		if v.Value != nil && v.Value.GetToken() != nil {
			last = v.Value.GetToken()
		}
	default:
		first = n.GetToken()
		last = first
	}
	if first == nil || first.Position == nil {
		return 0, 0, false
	}
	start, ok = w.offset(first)
	if !ok {
		return 0, 0, false
	}
	end = len(w.src)
	for next := last.Next; next != nil; next = next.Next {
		if next.Position == nil {
			continue
		}
		at, ok := w.offset(next)
		if !ok || at <= start {
			return 0, 0, false // never guess where a value ends
		}
		end = at
		break
	}
	for end > start && strings.IndexByte(" \t\r\n", w.src[end-1]) >= 0 {
		end--
	}
	return start, end, end > start
}

// offset is the byte offset at which tk is written, as located by locate.
func (w *sourceRewrite) offset(tk *token.Token) (int, bool) {
	at, ok := w.at[tk]
	return at, ok
}

// locate finds where each token of the stream that holds tk is written. The lexer's
// columns are hints only: a column or two short after a tag or a tab, several long
// before trailing blanks. So each token is looked for on its line, after the token
// before it, nearest its column: its first character at a token boundary (a scalar
// follows a space or a flow indicator, an anchor or alias name its & or *; a flow
// indicator or a colon may follow anything). A token not found is left out, and nothing that needs it is rewritten.
func (w *sourceRewrite) locate(tk *token.Token) {
	for tk != nil && tk.Prev != nil {
		tk = tk.Prev
	}
	cursor := 0
	for ; tk != nil; tk = tk.Next {
		if tk.Position == nil {
			continue
		}
		if at, ok := w.find(tk, cursor); ok {
			w.at[tk] = at
			cursor = at + 1
		}
	}
}

func (w *sourceRewrite) find(tk *token.Token, cursor int) (int, bool) {
	line, col := tk.Position.Line, tk.Position.Column
	if line < 1 || line > len(w.lineStarts) {
		return 0, false
	}
	ls := w.lineStarts[line-1]
	le := len(w.src)
	if line < len(w.lineStarts) {
		le = w.lineStarts[line]
	}
	want := strings.TrimLeft(tk.Origin, " \t\r\n")
	if want == "" {
		want = tk.Value
	}
	if want == "" || cursor >= le {
		return 0, false
	}
	// Compared as runes: the lexer writes an invalid byte as U+FFFD.
	first, _ := utf8.DecodeRuneInString(want)
	anywhere := strings.IndexByte(",]}:", want[0]) >= 0
	text := w.src[ls:le]
	hint := w.columnOffset(line, text, max(col-1, 0))
	best, bestDist := -1, 0
	// Bounded, so that a spec written on one long line stays linear: the lexer is never
	// off by more than a few columns past where it says.
	limit := min(len(text), max(hint, cursor-ls)+64)
	for p := max(cursor-ls, 0); p < limit; p++ {
		if best >= 0 && p-hint >= bestDist {
			break // only farther from the hint from here on
		}
		if r, _ := utf8.DecodeRune(text[p:]); r != first {
			continue
		}
		if !anywhere && p > 0 && strings.IndexByte(" \t[{,:&*", text[p-1]) < 0 {
			continue
		}
		if d := max(p-hint, hint-p); best < 0 || d < bestDist {
			best, bestDist = p, d
		}
	}
	if best < 0 {
		return 0, false
	}
	return ls + best, true
}

// columnOffset is the byte offset in text (line number line) of the rune at column n
// from 0, or len(text) past its end. Tokens come left to right, so it counts on from
// the previous answer on the same line rather than from the line's start.
func (w *sourceRewrite) columnOffset(line int, text []byte, n int) int {
	i, r := 0, 0
	if w.col.line == line && w.col.runes <= n {
		i, r = w.col.byteAt, w.col.runes
	}
	for ; i < len(text) && r < n; r++ {
		_, size := utf8.DecodeRune(text[i:])
		i += size
	}
	w.col.line, w.col.byteAt, w.col.runes = line, i, r
	return i
}

// apply writes the spots over the source, first come first served where two overlap,
// and redacts the text between them (comments, anchors) as plain text.
func (w *sourceRewrite) apply() []byte {
	slices.SortStableFunc(w.spots, func(a, b spot) int { return cmp.Compare(a.start, b.start) })
	var out bytes.Buffer
	at := 0
	for _, sp := range w.spots {
		if sp.start < at {
			continue
		}
		out.Write(w.r.RedactBytes(w.src[at:sp.start]))
		out.WriteString(sp.text)
		at = sp.end
	}
	out.Write(w.r.RedactBytes(w.src[at:]))
	return out.Bytes()
}
