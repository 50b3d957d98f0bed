// Package plugins declares what arbiter asks of a detector and hosts detectors that live
// in other processes (hashicorp/go-plugin over gRPC). The built-in detectors are in
// plugins/detectors.
package plugins

import (
	"context"
	"encoding/json"

	"github.com/arbiterlab/arbiter/openai"
)

// Response is what a detector judges: one assembled chat completion and the tools the
// request offered, so that tool calls can be checked against their schemas.
type Response struct {
	// Completion is the assembled response (a streamed response is stored assembled).
	Completion openai.ChatCompletion
	// Tools are the tools offered in the request; empty when unknown.
	Tools []openai.Tool
	// ToolChoice is the request's tool_choice as sent ("auto", "none", "required" or an
	// object naming a function); empty when absent or unknown, which with tools offered
	// means auto.
	ToolChoice json.RawMessage
}

// Label is one detector's judgement of one response.
type Label struct {
	Detector  string `json:"detector"`
	Corrupted bool   `json:"corrupted"`
	// Reason says why in a few words; empty for a clean response.
	Reason string `json:"reason,omitempty"`
}

// Detector labels a response as corrupted or clean. Implementations must be safe for
// concurrent use: arbiter labels the turns of many sessions at once.
type Detector interface {
	// Name is the identifier a spec's detectors list uses.
	Name() string
	// Detect judges one response. An error means the detector could not judge, not
	// that the response is corrupted.
	Detect(ctx context.Context, r Response) (Label, error)
}
