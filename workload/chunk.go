package workload

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
)

// chunkDecoder reads the one JSON shape a streaming chat completion sends per token,
// {"id":…,"choices":[{"index":0,"delta":{"content":"…"},"finish_reason":null}],…},
// without reflection and with no allocation for the chunk itself: strings are slices of
// the payload (or of a scratch buffer when they carry escapes), valid until the next
// chunk. encoding/json spent most of a stream's CPU and some 14 allocations per chunk.
//
// It is an accelerator, not a second JSON dialect: whenever a payload is anything but a
// plain well-formed chunk (an error envelope, a type mismatch, a duplicated or
// case-folded key, invalid UTF-8, numbers that are not plain integers, deep nesting), it
// reports !ok and the caller decodes the payload with encoding/json, whose result (and
// error) is then the answer. FuzzChunkDecoder holds the two to the same result.
type chunkDecoder struct {
	buf     []byte // the payload being decoded
	pos     int
	scratch []byte // unescaped strings
	c       fastChunk
	// whole reads a non-streamed completion: choices carry a message, not a delta.
	whole bool

	// Engines send every token in the same chunk but for its text: the bytes around
	// the content string of the last plain text chunk are kept, and a chunk that has
	// exactly those bytes around a string is that chunk with the new text, read
	// without parsing the rest again.
	pre, suf   []byte
	tmpl       fastChunk  // the chunk decoded from pre and suf, strings owned, less its choice
	tmplChoice fastChoice // its one choice, less the text
	contentAt  [2]int     // where the content string of the chunk being decoded lies
	contentHit bool
}

// fastChunk is a decoded chunk; its byte slices live until the next decode.
type fastChunk struct {
	id, object, model []byte
	created           int64
	usage             openai.Usage
	hasUsage          bool
	choices           []fastChoice
	choicesFound      bool // choices was an array, not null or absent
}

type fastChoice struct {
	index          int
	role, content  []byte
	name, callID   []byte // a whole message's name and tool_call_id
	calls          []fastCall
	finish         []byte
	hasFinish      bool // finish_reason was a string, not null
	toolCallsFound bool
}

type fastCall struct {
	index      int
	hasIndex   bool
	id, typ    []byte
	name, args []byte
}

// maxChunkDepth is how deep skipped values may nest before the decoder hands the
// payload to encoding/json (which has its own, larger, limit).
const maxChunkDepth = 64

// decode parses payload; ok is false when encoding/json must decide instead.
func (d *chunkDecoder) decode(payload []byte) (c *fastChunk, ok bool) {
	d.buf, d.pos, d.scratch = payload, 0, d.scratch[:0]
	if c, ok := d.templated(payload); ok {
		d.buf = nil
		return c, true
	}
	d.c = fastChunk{choices: d.c.choices[:0]}
	d.contentHit = false
	ok = d.chunk()
	if ok {
		d.ws()
		ok = d.pos == len(d.buf)
	}
	if ok && !d.whole {
		d.remember(payload)
	}
	d.buf = nil
	return &d.c, ok
}

// templated decodes payload by the kept template, when it fits.
func (d *chunkDecoder) templated(payload []byte) (*fastChunk, bool) {
	if d.pre == nil || len(payload) < len(d.pre)+len(d.suf)+1 ||
		!bytes.HasPrefix(payload, d.pre) || !bytes.HasSuffix(payload, d.suf) {
		return nil, false
	}
	d.pos = len(d.pre) - 1 // the opening quote
	text, _ := d.str()
	if text == nil || d.pos != len(payload)-len(d.suf) {
		return nil, false
	}
	own := d.c.choices[:0]
	d.c = d.tmpl
	d.c.choices = append(own, d.tmplChoice)
	d.c.choices[0].content = text
	return &d.c, true
}

// remember keeps payload as the template when it is a plain text chunk: one choice
// carrying content and nothing else that changes from token to token.
func (d *chunkDecoder) remember(payload []byte) {
	c := &d.c
	if !d.contentHit || len(c.choices) != 1 || c.hasUsage {
		return
	}
	ch := c.choices[0]
	if ch.role != nil || ch.toolCallsFound || len(ch.calls) > 0 || ch.hasFinish || ch.name != nil || ch.callID != nil {
		return
	}
	start, end := d.contentAt[0], d.contentAt[1]
	if bytes.Equal(d.pre, payload[:start+1]) && bytes.Equal(d.suf, payload[end:]) {
		return // kept already
	}
	d.pre = append(d.pre[:0], payload[:start+1]...)
	d.suf = append(d.suf[:0], payload[end:]...)
	d.tmpl = fastChunk{id: bytes.Clone(c.id), object: bytes.Clone(c.object), model: bytes.Clone(c.model),
		created: c.created, choicesFound: true}
	d.tmplChoice = fastChoice{index: ch.index}
	if d.pre == nil {
		d.pre = []byte{}
	}
}

func (d *chunkDecoder) ws() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek is the next non-space byte, 0 at the end.
func (d *chunkDecoder) peek() byte {
	d.ws()
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

func (d *chunkDecoder) eat(b byte) bool {
	if d.peek() == b {
		d.pos++
		return true
	}
	return false
}

// null consumes a literal null.
func (d *chunkDecoder) null() bool {
	if d.peek() == 'n' && len(d.buf)-d.pos >= 4 && string(d.buf[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

// object walks the members of an object, calling member for each key; a member that
// returns false aborts. Keys must be plain (no escapes).
func (d *chunkDecoder) object(member func(key []byte) bool) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	for {
		if d.peek() != '"' {
			return false
		}
		key, plain := d.str()
		if key == nil || !plain {
			return false
		}
		if !d.eat(':') {
			return false
		}
		if !member(key) {
			return false
		}
		if d.eat(',') {
			continue
		}
		return d.eat('}')
	}
}

// unknownKey reports whether key may be skipped: encoding/json matches field names
// case-insensitively (with Unicode folding), so anything non-ASCII or folding to a
// known name goes to it.
func unknownKey(key []byte, names ...string) bool {
	for _, b := range key {
		if b >= utf8.RuneSelf {
			return false
		}
	}
	for _, n := range names {
		if len(n) == len(key) && asciiFold(n, key) {
			return false
		}
	}
	return true
}

func asciiFold(n string, key []byte) bool {
	for i := range len(n) {
		a, b := n[i], key[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// present reads past a key of an object being decoded, with bit i of mask its place
// among the object's keys: ok is false when the key came before (a chunk that repeats a
// key does not decode), has is false when the value is null (the field keeps its zero
// value); otherwise the value is next.
func (d *chunkDecoder) present(mask *uint32, i uint) (has, ok bool) {
	if !seen(mask, i) {
		return false, false
	}
	if d.null() {
		return false, true
	}
	return true, true
}

// seen marks bit i of *mask; false when it was marked already (a duplicated key, whose
// merge semantics are encoding/json's to decide).
func seen(mask *uint32, i uint) bool {
	if *mask&(1<<i) != 0 {
		return false
	}
	*mask |= 1 << i
	return true
}

var (
	chunkKeys  = []string{"id", "object", "created", "model", "choices", "usage", "error"}
	choiceKeys = []string{"index", "delta", "message", "finish_reason"}
	callKeys   = []string{"index", "id", "type", "function"}
	funcKeys   = []string{"name", "arguments"}
	usageKeys  = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
)

func (d *chunkDecoder) chunk() bool {
	var mask uint32
	return d.object(func(key []byte) bool {
		c := &d.c
		switch string(key) {
		case "id":
			return seen(&mask, 0) && d.strField(&c.id)
		case "object":
			return seen(&mask, 1) && d.strField(&c.object)
		case "created":
			return seen(&mask, 2) && d.intField(&c.created)
		case "model":
			return seen(&mask, 3) && d.strField(&c.model)
		case "choices":
			if has, ok := d.present(&mask, 4); !has {
				return ok
			}
			c.choicesFound = true
			return d.array(func() bool {
				// The slots of earlier chunks are reused, tool-call slices included.
				n := len(c.choices)
				if n < cap(c.choices) {
					c.choices = c.choices[:n+1]
					c.choices[n] = fastChoice{calls: c.choices[n].calls[:0]}
				} else {
					c.choices = append(c.choices, fastChoice{})
				}
				return d.choice(&c.choices[n])
			})
		case "usage":
			if has, ok := d.present(&mask, 5); !has {
				return ok
			}
			c.hasUsage = true
			return d.usage(&c.usage)
		}
		return unknownKey(key, chunkKeys...) && d.skip(0)
	})
}

func (d *chunkDecoder) choice(ch *fastChoice) bool {
	if d.peek() != '{' {
		return false // null or a mismatch
	}
	var mask uint32
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			var v int64
			if has, ok := d.present(&mask, 0); !has {
				return ok
			}
			if !d.intField(&v) {
				return false
			}
			ch.index = int(v)
			return true
		case "delta", "message":
			if (string(key) == "message") != d.whole {
				break // the other form's key: unknown here
			}
			if has, ok := d.present(&mask, 1); !has {
				return ok
			}
			return d.delta(ch)
		case "finish_reason":
			if has, ok := d.present(&mask, 2); !has {
				return ok
			}
			ch.hasFinish = true
			return d.strField(&ch.finish)
		}
		return unknownKey(key, choiceKeys...) && d.skip(0)
	})
}

// messageKeys are the fields of openai.Message beyond a delta's.
var messageKeys = []string{"role", "content", "tool_calls", "name", "tool_call_id"}

func (d *chunkDecoder) delta(ch *fastChoice) bool {
	var mask uint32
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "role":
			return seen(&mask, 0) && d.strField(&ch.role)
		case "content":
			if !seen(&mask, 1) {
				return false
			}
			d.ws()
			start := d.pos
			if !d.strField(&ch.content) {
				return false
			}
			if d.buf[start] == '"' {
				d.contentAt, d.contentHit = [2]int{start, d.pos}, true
			}
			return true
		case "name", "tool_call_id":
			if !d.whole {
				break
			}
			if string(key) == "name" {
				return seen(&mask, 3) && d.strField(&ch.name)
			}
			return seen(&mask, 4) && d.strField(&ch.callID)
		case "tool_calls":
			if has, ok := d.present(&mask, 2); !has {
				return ok
			}
			ch.toolCallsFound = true
			return d.array(func() bool {
				ch.calls = append(ch.calls, fastCall{})
				return d.call(&ch.calls[len(ch.calls)-1])
			})
		}
		return unknownKey(key, messageKeys...) && d.skip(0)
	})
}

func (d *chunkDecoder) call(tc *fastCall) bool {
	if d.peek() != '{' {
		return false
	}
	var mask uint32
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			if has, ok := d.present(&mask, 0); !has {
				return ok
			}
			var v int64
			if !d.intField(&v) {
				return false
			}
			tc.index, tc.hasIndex = int(v), true
			return true
		case "id":
			return seen(&mask, 1) && d.strField(&tc.id)
		case "type":
			return seen(&mask, 2) && d.strField(&tc.typ)
		case "function":
			if has, ok := d.present(&mask, 3); !has {
				return ok
			}
			var fmask uint32
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "name":
					return seen(&fmask, 0) && d.strField(&tc.name)
				case "arguments":
					return seen(&fmask, 1) && d.strField(&tc.args)
				}
				return unknownKey(key, funcKeys...) && d.skip(0)
			})
		}
		return unknownKey(key, callKeys...) && d.skip(0)
	})
}

func (d *chunkDecoder) usage(u *openai.Usage) bool {
	var mask uint32
	return d.object(func(key []byte) bool {
		var dst *int
		var bit uint
		switch string(key) {
		case "prompt_tokens":
			dst, bit = &u.PromptTokens, 0
		case "completion_tokens":
			dst, bit = &u.CompletionTokens, 1
		case "total_tokens":
			dst, bit = &u.TotalTokens, 2
		default:
			return unknownKey(key, usageKeys...) && d.skip(0)
		}
		if has, ok := d.present(&mask, bit); !has {
			return ok
		}
		var v int64
		if !d.intField(&v) {
			return false
		}
		*dst = int(v)
		return true
	})
}

// array walks the elements of an array.
func (d *chunkDecoder) array(elem func() bool) bool {
	if !d.eat('[') {
		return false
	}
	if d.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.eat(',') {
			continue
		}
		return d.eat(']')
	}
}

// strField reads a string or null (which leaves *dst as it is, as encoding/json does).
func (d *chunkDecoder) strField(dst *[]byte) bool {
	if d.null() {
		return true
	}
	if d.peek() != '"' {
		return false
	}
	s, _ := d.str()
	if s == nil {
		return false
	}
	*dst = s
	return true
}

// str reads a string at d.pos ('"'); plain says it had no escapes. nil: not a string
// this decoder takes (bad syntax, control characters, invalid UTF-8, broken surrogates).
func (d *chunkDecoder) str() (s []byte, plain bool) {
	start := d.pos + 1
	i := start
	ascii := true
	for i < len(d.buf) {
		b := d.buf[i]
		switch {
		case b == '"':
			s = d.buf[start:i:i]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			d.pos = i + 1
			return s, true
		case b == '\\':
			return d.escaped(start)
		case b < 0x20:
			return nil, false
		case b >= utf8.RuneSelf:
			ascii = false
		}
		i++
	}
	return nil, false
}

// escaped reads a string with escapes into the scratch buffer.
func (d *chunkDecoder) escaped(start int) ([]byte, bool) {
	from := len(d.scratch)
	i := start
	for i < len(d.buf) {
		b := d.buf[i]
		switch {
		case b == '"':
			out := d.scratch[from:len(d.scratch):len(d.scratch)]
			if !utf8.Valid(out) {
				return nil, false
			}
			d.pos = i + 1
			if len(out) == 0 {
				out = d.buf[i:i:i] // empty, not nil
			}
			return out, false
		case b < 0x20:
			return nil, false
		case b != '\\':
			d.scratch = append(d.scratch, b)
			i++
			continue
		}
		if i+1 >= len(d.buf) {
			return nil, false
		}
		e := d.buf[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			d.scratch = append(d.scratch, e)
		case 'b':
			d.scratch = append(d.scratch, '\b')
		case 'f':
			d.scratch = append(d.scratch, '\f')
		case 'n':
			d.scratch = append(d.scratch, '\n')
		case 'r':
			d.scratch = append(d.scratch, '\r')
		case 't':
			d.scratch = append(d.scratch, '\t')
		case 'u':
			r, ok := hex4(d.buf, i)
			if !ok {
				return nil, false
			}
			i += 4
			if 0xD800 <= r && r < 0xE000 {
				// Only a well-formed pair is taken; encoding/json decides the rest.
				if r >= 0xDC00 || i+6 > len(d.buf) || d.buf[i] != '\\' || d.buf[i+1] != 'u' {
					return nil, false
				}
				lo, ok := hex4(d.buf, i+2)
				if !ok || lo < 0xDC00 || lo >= 0xE000 {
					return nil, false
				}
				i += 6
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			}
			d.scratch = utf8.AppendRune(d.scratch, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// intField reads a plain integer (no fraction, no exponent, at most 18 digits), which
// fits any Go int field that encoding/json would fill from it.
func (d *chunkDecoder) intField(dst *int64) bool {
	d.ws()
	i := d.pos
	if i < len(d.buf) && d.buf[i] == '-' {
		i++
	}
	digits := i
	for i < len(d.buf) && '0' <= d.buf[i] && d.buf[i] <= '9' {
		i++
	}
	n := i - digits
	if n == 0 || n > 18 || (n > 1 && d.buf[digits] == '0') {
		return false
	}
	if i < len(d.buf) {
		switch d.buf[i] {
		case '.', 'e', 'E':
			return false
		}
	}
	var v int64
	for _, c := range d.buf[digits:i] {
		v = v*10 + int64(c-'0') // 18 digits cannot overflow
	}
	if digits > d.pos {
		v = -v
	}
	*dst, d.pos = v, i
	return true
}

// skip passes over one well-formed JSON value of any kind.
func (d *chunkDecoder) skip(depth int) bool {
	if depth > maxChunkDepth {
		return false
	}
	switch b := d.peek(); {
	case b == '"':
		s, _ := d.skipStr()
		return s
	case b == '{':
		d.pos++
		if d.eat('}') {
			return true
		}
		for {
			if d.peek() != '"' {
				return false
			}
			if ok, _ := d.skipStr(); !ok || !d.eat(':') || !d.skip(depth+1) {
				return false
			}
			if d.eat(',') {
				continue
			}
			return d.eat('}')
		}
	case b == '[':
		d.pos++
		if d.eat(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			if d.eat(',') {
				continue
			}
			return d.eat(']')
		}
	case b == 't':
		return d.lit("true")
	case b == 'f':
		return d.lit("false")
	case b == 'n':
		return d.lit("null")
	case b == '-' || ('0' <= b && b <= '9'):
		return d.skipNumber()
	}
	return false
}

func (d *chunkDecoder) lit(s string) bool {
	if len(d.buf)-d.pos >= len(s) && string(d.buf[d.pos:d.pos+len(s)]) == s {
		d.pos += len(s)
		return true
	}
	return false
}

// skipStr passes over a string, checking only its syntax: encoding/json accepts
// invalid UTF-8 in a value it does not keep.
func (d *chunkDecoder) skipStr() (ok, plain bool) {
	i := d.pos + 1
	plain = true
	for i < len(d.buf) {
		b := d.buf[i]
		switch {
		case b == '"':
			d.pos = i + 1
			return true, plain
		case b < 0x20:
			return false, false
		case b == '\\':
			plain = false
			if i+1 >= len(d.buf) {
				return false, false
			}
			switch d.buf[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(d.buf, i+2); !ok {
					return false, false
				}
				i += 6
			default:
				return false, false
			}
			continue
		}
		i++
	}
	return false, false
}

// skipNumber passes over a number of JSON's grammar.
func (d *chunkDecoder) skipNumber() bool {
	b, i := d.buf, d.pos
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == j {
			return false
		}
	}
	d.pos = i
	return true
}

// completion is a non-streamed answer decoded with whole set, as encoding/json would
// have decoded it into an openai.ChatCompletion.
func (c *fastChunk) completion() openai.ChatCompletion {
	out := openai.ChatCompletion{ID: string(c.id), Object: string(c.object), Created: c.created, Model: string(c.model)}
	if c.hasUsage {
		u := c.usage
		out.Usage = &u
	}
	if c.choicesFound {
		out.Choices = make([]openai.Choice, 0, len(c.choices))
	}
	for _, ch := range c.choices {
		m := openai.Message{Role: string(ch.role), Content: string(ch.content), Name: string(ch.name), ToolCallID: string(ch.callID)}
		if ch.toolCallsFound {
			m.ToolCalls = make([]openai.ToolCall, 0, len(ch.calls))
		}
		for _, tc := range ch.calls {
			call := openai.ToolCall{ID: string(tc.id), Type: string(tc.typ),
				Function: openai.FunctionCall{Name: string(tc.name), Arguments: string(tc.args)}}
			if tc.hasIndex {
				i := tc.index
				call.Index = &i
			}
			m.ToolCalls = append(m.ToolCalls, call)
		}
		out.Choices = append(out.Choices, openai.Choice{Index: ch.index, Message: m, FinishReason: string(ch.finish)})
	}
	return out
}

// decodeCompletion decodes a non-streamed answer, fast when it is plain.
func decodeCompletion(raw []byte, out *openai.ChatCompletion) error {
	d := chunkDecoder{whole: true}
	if c, ok := d.decode(raw); ok {
		*out = c.completion()
		return nil
	}
	return json.Unmarshal(raw, out)
}
