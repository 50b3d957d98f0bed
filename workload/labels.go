package workload

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
)

// Every chat request carries what it belongs to, so that the engine's own metrics and
// logs can be joined to arbiter's records: the launch's labels (experiment, arm, block;
// Config.Labels) and the request's session and round, as one JSON object of strings in
// the header Config.LabelsHeader names. SGLang reads x-custom-labels so (its
// --tokenizer-metrics-custom-labels-header) and labels its request metrics with the
// names it is told to allow (--tokenizer-metrics-allowed-custom-labels arm,block,...).

type requestTagKey struct{}

// requestTag is a request's place in its launch's workload.
type requestTag struct{ session, round int }

// withRequestTag marks ctx as the context of session's request in round.
func withRequestTag(ctx context.Context, session, round int) context.Context {
	return context.WithValue(ctx, requestTagKey{}, requestTag{session, round})
}

// labelPair is one label as its JSON object member, `"key":"value"`.
type labelPair struct {
	key    string
	member []byte
}

// member encodes one label as json.Marshal writes it in a map.
func member(key, value string) []byte {
	k, _ := json.Marshal(key)
	v, _ := json.Marshal(value)
	return append(append(k, ':'), v...)
}

// numberMember is member(key, strconv.Itoa(n)) for a key JSON writes as it is.
func numberMember(key string, n int) []byte {
	b := make([]byte, 0, len(key)+24)
	b = append(append(append(b, '"'), key...), `":"`...)
	return append(strconv.AppendInt(b, int64(n), 10), '"')
}

// labelHeader is the request's header with the labels added, or base when the client
// sends none. base is never changed: it is shared by every request. The text is what
// json.Marshal writes for the labels as a map, keys sorted (the same labels, the same
// text), from the launch's labels encoded once.
func (c *Client) labelHeader(ctx context.Context, base http.Header) http.Header {
	if c.LabelsHeader == "" {
		return base
	}
	c.labelsOnce.Do(func() {
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			c.labelPairs = append(c.labelPairs, labelPair{k, member(k, c.Labels[k])})
		}
	})
	// The request's own, in key order: they replace the launch's of the same names.
	var own []labelPair
	if tag, ok := ctx.Value(requestTagKey{}).(requestTag); ok {
		own = []labelPair{{"round", numberMember("round", tag.round)}, {"session", numberMember("session", tag.session)}}
	}
	if len(c.labelPairs) == 0 && len(own) == 0 {
		return base
	}
	b := make([]byte, 0, 256)
	b = append(b, '{')
	add := func(p labelPair) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, p.member...)
	}
	for _, p := range c.labelPairs {
		for len(own) > 0 && own[0].key < p.key {
			add(own[0])
			own = own[1:]
		}
		if len(own) > 0 && own[0].key == p.key {
			continue // the request's own takes its place, next
		}
		add(p)
	}
	for _, p := range own {
		add(p)
	}
	b = append(b, '}')
	h := base.Clone()
	h.Set(c.LabelsHeader, string(b))
	return h
}
