package workload

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/arbiterlab/arbiter/openai"
)

// requestBuilder encodes a session's requests from parts encoded once: everything but
// the messages and the request id (model, tools with their schemas, sampling) once per
// session, and each message once, when it joins the conversation. Marshalling the whole
// growing request every turn re-encoded the history and re-compacted every tool schema.
// The bytes are those json.Marshal writes for the same request.
type requestBuilder struct {
	head   []byte   // `{"model":…,"messages":[`
	tail   []byte   // `],"tools":…,"seed":…` without the closing brace
	msgs   [][]byte // the encoded messages, in order
	length int      // of msgs, commas included
}

// messagesKey is where the template's empty message list is cut.
const messagesKey = `"messages":[]`

// newRequestBuilder takes the fields every request of the session shares from tmpl
// (its Messages and RID are ignored).
func newRequestBuilder(tmpl openai.ChatRequest) (*requestBuilder, error) {
	tmpl.Messages, tmpl.RID = []openai.Message{}, ""
	b, err := json.Marshal(tmpl)
	if err != nil {
		return nil, fmt.Errorf("workload: encode request: %w", err)
	}
	// The model, the only string before the messages, is escaped: no quote in it can
	// start this key.
	i := bytes.Index(b, []byte(messagesKey))
	if i < 0 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("workload: encode request: no messages field in %.80s", b)
	}
	cut := i + len(messagesKey) - 1
	return &requestBuilder{head: b[:cut:cut], tail: b[cut : len(b)-1 : len(b)-1]}, nil
}

// add encodes a message that joined the conversation.
func (r *requestBuilder) add(m openai.Message) error {
	// The method, not json.Marshal: that would check and compact the method's output
	// again, which is already compact, and the longest messages are the replies.
	b, err := m.MarshalJSON()
	if err != nil {
		return fmt.Errorf("workload: encode message %d: %w", len(r.msgs), err)
	}
	if len(r.msgs) > 0 {
		r.length++
	}
	r.msgs = append(r.msgs, b)
	r.length += len(b)
	return nil
}

// body is the request with the messages so far and request id rid, in one allocation
// of its exact size.
func (r *requestBuilder) body(rid string) ([]byte, error) {
	var id []byte
	if rid != "" {
		var err error
		if id, err = json.Marshal(rid); err != nil {
			return nil, fmt.Errorf("workload: encode request id: %w", err)
		}
	}
	n := len(r.head) + r.length + len(r.tail) + 1
	if id != nil {
		n += len(`,"rid":`) + len(id)
	}
	out := make([]byte, 0, n)
	out = append(out, r.head...)
	for i, m := range r.msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	out = append(out, r.tail...)
	if id != nil {
		out = append(out, `,"rid":`...)
		out = append(out, id...)
	}
	return append(out, '}'), nil
}
