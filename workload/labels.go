package workload

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
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

// labelHeader is the request's header with the labels added, or base when the client
// sends none. base is never changed: it is shared by every request.
func (c *Client) labelHeader(ctx context.Context, base http.Header) http.Header {
	if c.LabelsHeader == "" {
		return base
	}
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if tag, ok := ctx.Value(requestTagKey{}).(requestTag); ok {
		labels["session"], labels["round"] = strconv.Itoa(tag.session), strconv.Itoa(tag.round)
	}
	if len(labels) == 0 {
		return base
	}
	b, err := json.Marshal(labels) // keys sorted: the same labels, the same text
	if err != nil {
		return base
	}
	h := base.Clone()
	h.Set(c.LabelsHeader, string(b))
	return h
}
