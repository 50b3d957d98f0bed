package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/arbiterlab/arbiter/openai"
)

// maxEventBytes bounds one SSE line or event, so that an engine streaming garbage
// without line breaks cannot exhaust arbiter's memory.
const maxEventBytes = 8 << 20

// ErrEventTooLarge reports an SSE line or event longer than arbiter accepts (8 MiB).
var ErrEventTooLarge = errors.New("sse event too large")

// sseDecoder splits a text/event-stream into the data payloads of its events. It keeps
// its state between Feed calls, so the payloads it emits do not depend on where the
// transport happened to cut the byte stream.
type sseDecoder struct {
	line    []byte // a line whose end has not arrived yet
	data    []byte // the data field of the event being built
	hasData bool   // a data field was seen (an empty "data:" still makes an event)
	skipLF  bool   // the previous line ended in CR; a following LF belongs to it
	// lent says data is a slice of the bytes being fed, not of own: an event of one data
	// line that ends within one Feed is emitted from where it lies, without a copy.
	lent bool
	own  []byte
}

// Feed consumes p and calls emit with the data of every event p completes. emit must not
// keep the slice it is given.
func (d *sseDecoder) Feed(p []byte, emit func(data []byte) error) error {
	defer d.keep()
	for len(p) > 0 {
		if d.skipLF {
			d.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		end := bytes.IndexByte(p, '\n')
		head := p
		if end >= 0 {
			head = p[:end]
		}
		if cr := bytes.IndexByte(head, '\r'); cr >= 0 {
			end = cr
		}
		if end < 0 {
			if len(d.line)+len(p) > maxEventBytes {
				return fmt.Errorf("sse line longer than %d bytes: %w", maxEventBytes, ErrEventTooLarge)
			}
			d.line = append(d.line, p...)
			return nil
		}
		line, lent := p[:end], true
		if len(d.line) > 0 {
			d.line = append(d.line, line...)
			line, lent = d.line, false
		}
		d.skipLF = p[end] == '\r'
		p = p[end+1:]
		err := d.processLine(line, lent, emit)
		d.line = d.line[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

// processLine applies one complete line: a blank line dispatches the event, a line
// starting with ':' is a comment (keep-alive), and only the data field matters to
// chat completions (event, id and retry are ignored).
// keep copies a lent data field into the decoder's own buffer, before the bytes it
// lies in go back to the caller.
func (d *sseDecoder) keep() {
	if d.lent {
		d.own = append(d.own[:0], d.data...)
		d.data, d.lent = d.own, false
	}
}

func (d *sseDecoder) processLine(line []byte, lent bool, emit func([]byte) error) error {
	if len(line) > maxEventBytes {
		return fmt.Errorf("sse line longer than %d bytes: %w", maxEventBytes, ErrEventTooLarge)
	}
	if len(line) == 0 {
		if !d.hasData {
			return nil
		}
		err := emit(d.data)
		d.data, d.lent = d.own[:0], false
		d.hasData = false
		return err
	}
	if line[0] == ':' {
		return nil
	}
	field, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	if string(field) != "data" {
		return nil
	}
	if !d.hasData && lent {
		d.data, d.lent, d.hasData = value, true, true
		return nil
	}
	d.keep()
	if d.hasData {
		d.data = append(d.data, '\n')
	}
	if len(d.data)+len(value) > maxEventBytes {
		return fmt.Errorf("sse event longer than %d bytes: %w", maxEventBytes, ErrEventTooLarge)
	}
	d.data = append(d.data, value...)
	d.own = d.data
	d.hasData = true
	return nil
}

// ErrServerStreamError reports an error object the server sent inside the stream.
var ErrServerStreamError = errors.New("server sent an error in the stream")

// streamEvent is one data payload: a chunk, or the error envelope some engines (SGLang)
// send in place of a chunk when a request fails mid-stream.
type streamEvent struct {
	openai.ChatCompletionChunk
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error,omitempty"`
}

// choiceAssembly accumulates the deltas of one choice.
type choiceAssembly struct {
	role    string
	content pieces
	calls   map[int]*openai.ToolCall
	args    map[int]*pieces // each call's arguments, joined by completion
	order   []int           // call indices in order of first appearance, for calls without index
	finish  string
}

// pieces is text that arrives in fragments. The fragments are kept as the JSON decoder
// made them and joined once, at the exact length, at the end: a growing buffer would
// copy a long reply over and over and leave the garbage of each copy behind, which for
// several concurrent multi-megabyte replies is most of arbiter's memory.
type pieces struct {
	small  []byte  // the text while it is short, grown in place
	b      rawBody // the text once it is long, in pooled chunks
	joined string
	done   bool
}

// smallPieces is how long a text grows in one slice before it moves to chunks: most
// replies stay below it, and a 4 KiB chunk for each would be most of what a stream
// allocates.
const smallPieces = 2 << 10

func (p *pieces) add(s string) { addPiece(p, s) }

// addBytes appends a fragment that is a slice of a payload, copying its bytes only
// (a string of each token would be an allocation per token).
func (p *pieces) addBytes(s []byte) { addPiece(p, s) }

func addPiece[S string | []byte](p *pieces, s S) {
	if p.b.n == 0 && len(p.small)+len(s) <= smallPieces {
		p.small = append(p.small, s...)
		return
	}
	p.spill()
	writeRaw(&p.b, s)
}

// spill moves the short text into the chunks, once it outgrows its slice.
func (p *pieces) spill() {
	if len(p.small) > 0 {
		p.b.write(p.small)
		p.small = nil
	}
}

// String is the joined text; the fragments' chunks go back to their pool the first time.
func (p *pieces) String() string {
	if !p.done {
		if p.b.n == 0 {
			p.joined = string(p.small)
		} else {
			p.joined = p.b.string()
		}
		p.small, p.done = nil, true
	}
	return p.joined
}

// streamAssembly turns a stream's chunks back into the completion a non-streaming
// request would have returned.
type streamAssembly struct {
	id, model string
	created   int64
	usage     *openai.Usage
	choices   map[int]*choiceAssembly
	events    int  // data events decoded, [DONE] excluded
	done      bool // [DONE] arrived
	finished  bool // some choice carried a finish_reason
	// text counts the bytes of generated text so far: content, tool-call ids, names
	// and arguments (what a reply's budget under max_tokens bounds).
	text int64

	dec chunkDecoder
	// last is the choice the previous chunk touched: nearly every chunk touches the one
	// choice again, and the map lookup is then skipped.
	last    *choiceAssembly
	lastIdx int
}

// event applies one data payload. delta reports whether it carried content or a tool-call
// fragment (what TTFT waits for). Payloads after [DONE] are ignored.
func (a *streamAssembly) event(payload []byte) (delta bool, err error) {
	if a.done {
		return false, nil
	}
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 {
		return false, nil
	}
	if string(payload) == "[DONE]" {
		a.done = true
		return false, nil
	}
	if c, ok := a.dec.decode(payload); ok {
		return a.fast(c), nil
	}
	var ev streamEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return false, fmt.Errorf("event %d is not a chunk: %w", a.events+1, err)
	}
	a.events++
	if ev.Error != nil {
		return false, fmt.Errorf("event %d: %w: %s (%s)", a.events, ErrServerStreamError, ev.Error.Message, ev.Error.Type)
	}
	if a.id == "" {
		a.id = ev.ID
	}
	if a.model == "" {
		a.model = ev.Model
	}
	if a.created == 0 {
		a.created = ev.Created
	}
	if ev.Usage != nil {
		u := *ev.Usage
		a.usage = &u
	}
	if a.choices == nil {
		a.choices = make(map[int]*choiceAssembly)
	}
	for _, cc := range ev.Choices {
		c := a.choice(cc.Index)
		if c.role == "" {
			c.role = cc.Delta.Role
		}
		if cc.Delta.Content != "" {
			c.content.add(cc.Delta.Content)
			a.text += int64(len(cc.Delta.Content))
			delta = true
		}
		for _, frag := range cc.Delta.ToolCalls {
			c.addFragment(frag)
			a.text += int64(len(frag.ID) + len(frag.Function.Name) + len(frag.Function.Arguments))
			delta = true
		}
		if cc.FinishReason != nil && *cc.FinishReason != "" {
			c.finish = *cc.FinishReason
			a.finished = true
		}
	}
	return delta, nil
}

// choice is the assembly of choice i, made on first use.
func (a *streamAssembly) choice(i int) *choiceAssembly {
	if a.last != nil && a.lastIdx == i {
		return a.last
	}
	if a.choices == nil {
		a.choices = make(map[int]*choiceAssembly)
	}
	c := a.choices[i]
	if c == nil {
		c = &choiceAssembly{} // its tool-call maps are made by the first call's fragment
		a.choices[i] = c
	}
	a.last, a.lastIdx = c, i
	return c
}

// fast applies a chunk from the chunkDecoder exactly as event applies the same chunk
// decoded by encoding/json; only the strings kept are copied out of the payload.
func (a *streamAssembly) fast(ch *fastChunk) (delta bool) {
	a.events++
	if a.id == "" {
		a.id = string(ch.id)
	}
	if a.model == "" {
		a.model = string(ch.model)
	}
	if a.created == 0 {
		a.created = ch.created
	}
	if ch.hasUsage {
		u := ch.usage
		a.usage = &u
	}
	for i := range ch.choices {
		cc := &ch.choices[i]
		c := a.choice(cc.index)
		if c.role == "" && len(cc.role) > 0 {
			c.role = string(cc.role)
		}
		if len(cc.content) > 0 {
			c.content.addBytes(cc.content)
			a.text += int64(len(cc.content))
			delta = true
		}
		for _, f := range cc.calls {
			a.text += int64(len(f.id) + len(f.name) + len(f.args))
			frag := openai.ToolCall{ID: string(f.id), Type: string(f.typ),
				Function: openai.FunctionCall{Name: string(f.name), Arguments: string(f.args)}}
			if f.hasIndex {
				frag.Index = &f.index
			}
			c.addFragment(frag)
			delta = true
		}
		if cc.hasFinish && len(cc.finish) > 0 {
			c.finish = string(cc.finish)
			a.finished = true
		}
	}
	return delta
}

// addFragment merges one tool-call delta: id, type and name come with the first fragment
// of a call, arguments arrive in pieces that are concatenated.
func (c *choiceAssembly) addFragment(f openai.ToolCall) {
	idx := -1
	switch {
	case f.Index != nil:
		idx = *f.Index
	case f.ID != "" && c.byID(f.ID) < 0:
		idx = len(c.order) // a new call from a server that omits indices
		for c.calls[idx] != nil {
			idx++
		}
	case f.ID != "":
		idx = c.byID(f.ID)
	case len(c.order) > 0:
		idx = c.order[len(c.order)-1]
	default:
		idx = 0
	}
	if c.calls == nil {
		c.calls, c.args = make(map[int]*openai.ToolCall), make(map[int]*pieces)
	}
	call := c.calls[idx]
	if call == nil {
		call = &openai.ToolCall{}
		c.calls[idx] = call
		c.args[idx] = &pieces{}
		c.order = append(c.order, idx)
	}
	if call.ID == "" {
		call.ID = f.ID
	}
	if call.Type == "" {
		call.Type = f.Type
	}
	if call.Function.Name == "" {
		call.Function.Name = f.Function.Name
	}
	c.args[idx].add(f.Function.Arguments)
}

func (c *choiceAssembly) byID(id string) int {
	for _, i := range c.order {
		if c.calls[i].ID == id {
			return i
		}
	}
	return -1
}

// completion is the assembled response, choices and tool calls in index order.
func (a *streamAssembly) completion() openai.ChatCompletion {
	out := openai.ChatCompletion{
		ID:      a.id,
		Object:  "chat.completion",
		Created: a.created,
		Model:   a.model,
		Usage:   a.usage,
	}
	idxs := make([]int, 0, len(a.choices))
	for i := range a.choices {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		c := a.choices[i]
		role := c.role
		if role == "" {
			role = "assistant"
		}
		msg := openai.Message{Role: role, Content: c.content.String()}
		calls := make([]int, 0, len(c.calls))
		for k := range c.calls {
			calls = append(calls, k)
		}
		sort.Ints(calls)
		for _, k := range calls {
			tc := *c.calls[k]
			tc.Function.Arguments = c.args[k].String()
			tc.Index = nil // an assembled call has the non-streaming shape
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		out.Choices = append(out.Choices, openai.Choice{Index: i, Message: msg, FinishReason: c.finish})
	}
	return out
}

// ErrIncompleteStream reports a stream that ended before [DONE] and before any choice
// finished.
var ErrIncompleteStream = errors.New("stream ended before [DONE]")

// AssembleStream rebuilds the completion from a raw text/event-stream body as arbiter
// stores it, so that saved responses can be labelled again later. The error says why
// the stream is not a complete response; the completion holds what arrived regardless.
func AssembleStream(raw []byte) (openai.ChatCompletion, error) {
	var (
		dec sseDecoder
		asm streamAssembly
	)
	err := dec.Feed(raw, func(p []byte) error {
		_, err := asm.event(p)
		return err
	})
	if err == nil && !asm.done && !asm.finished {
		err = ErrIncompleteStream
	}
	return asm.completion(), err
}
