// Package workload generates the identical, seeded traffic that every arm of an
// experiment receives, drives it through an OpenAI-compatible streaming client, and
// reports every turn with its timings and raw bytes.
package workload

import (
	"encoding/json"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// Config is the shape of one workload run against one arm. The zero value of each
// optional field is a documented default.
type Config struct {
	Kind        string // "toolcall-agent" (default), "throughput", "abort-cascade", "long-context" or "trace"
	Sessions    int
	Rounds      int
	Concurrency int
	Seed        int64
	Temperature float64
	MaxTokens   int    // 0: left to the engine
	Model       string // empty: the first model the engine lists at /v1/models
	// RequestTimeout bounds one request end to end (default 10m).
	RequestTimeout time.Duration
	// StallTimeout bounds the silence between two stream events (default 120s).
	StallTimeout time.Duration
	// MaxResponseBytes caps one response (default DefaultMaxResponseBytes); a turn
	// whose response runs past it fails with ErrResponseTooLarge.
	MaxResponseBytes int64
	// SessionOffset shifts session indices (and their seeds' derivation), so that the
	// blocks of a sequential experiment draw fresh sessions: block k runs sessions
	// [k*Sessions, (k+1)*Sessions). Sessions with the same index are identical in every arm.
	SessionOffset int
	// MaxToolSteps caps the requests that answer tool calls within one round, so that an
	// engine calling tools in a loop cannot hold a session forever (default 8).
	MaxToolSteps int
	// NoStream sends non-streaming requests; the default streams (SSE), which is what
	// measures TTFT and what keeps every event.
	NoStream bool
	// Labels are the launch's labels (experiment, arm, block) that every chat request
	// carries, with its session and round, in the header LabelsHeader names (labels.go);
	// no header when LabelsHeader is empty.
	Labels       map[string]string
	LabelsHeader string
	// Throughput, AbortCascade, LongContext and Trace hold the fields of their kinds;
	// each is nil (its defaults) unless Kind names it.
	Throughput   *ThroughputConfig
	AbortCascade *AbortCascadeConfig
	LongContext  *LongContextConfig
	Trace        *TraceConfig
	// OnToken, if set, hears every arrival of generated text (see Client.OnToken).
	OnToken func()
}

// Turn is one request and its response within a session.
type Turn struct {
	Session int // session index, SessionOffset included
	Index   int // turn index within the session, from 0
	Round   int // user round the turn belongs to, from 0
	Started time.Time
	// Request is the JSON body sent.
	Request []byte
	// Tools are the tools the request offered (for schema checks).
	Tools []openai.Tool
	// ToolChoice is the request's tool_choice as sent; empty when it sent none.
	ToolChoice json.RawMessage
	// StatusCode is the HTTP status; 0 when no response arrived.
	StatusCode int
	// Response is the assembled completion (from the SSE chunks when streaming).
	Response openai.ChatCompletion
	// Raw is the response body exactly as received (SSE events when streaming).
	Raw     []byte
	TTFT    time.Duration // to the first content or tool-call byte; 0 if none
	Latency time.Duration // end to end
	// DecodeTime is from the first to the last content or tool-call delta, and Deltas
	// the events that carried one; with two or more, DecodeTime / (CompletionTokens − 1)
	// is the inter-token latency.
	DecodeTime time.Duration
	Deltas     int
	// DeltaTimes are the arrival times of those events from Started (see
	// Exchange.DeltaTimes); empty for a non-streamed answer.
	DeltaTimes       []time.Duration
	PromptTokens     int
	CompletionTokens int
	FinishReason     string
	// Err says what went wrong at the transport or protocol level; empty when the
	// request completed (whatever its content).
	Err string
	// Cut is true for a request the workload itself aborted (an abort cascade): its
	// response ends where the abort cut it, which says nothing about the engine's health
	// (its Failure is FailureCancelled, whatever the engine answered).
	Cut bool
	// Failure classifies Err; FailureNone when the request completed.
	Failure Failure
}

// Session states reported in SessionResult.Status.
const (
	SessionOK      = "ok"      // every round completed
	SessionError   = "error"   // a request failed (HTTP error, broken stream)
	SessionTimeout = "timeout" // a request ran past RequestTimeout or stalled
	SessionAborted = "aborted" // the run was cancelled before the session finished
)

// SessionResult closes one session.
type SessionResult struct {
	Session int
	Status  string
	Turns   int
	Err     string
}

// Recorder receives the workload's output as it happens. Calls may come from many
// goroutines at once; a Turn always arrives before its session's SessionResult.
type Recorder interface {
	Turn(Turn)
	SessionDone(SessionResult)
}
