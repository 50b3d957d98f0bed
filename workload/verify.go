package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// A verify workload's request file is a vendor verifier's: one OpenAI chat request per
// line (messages, tools, tool_choice, max_tokens, temperature; model and stream are
// ignored, as the workload sets them), each sent once to every arm in every launch. It
// is arbiter's trace line format with one rule more: a line is one request, so its
// messages end with the message the engine answers, never with an assistant's.

// ScanVerify reads a request file from r line by line, checking each line as
// ScanTrace does and each request's verifier rules, and calls fn with each; name is
// the file its errors name (file:line: field: problem).
func ScanVerify(name string, r io.Reader, fn func(TraceConversation, TraceLine) error) error {
	withTools := 0
	err := ScanTrace(name, r, func(c TraceConversation, at TraceLine) error {
		if last := len(c.Messages) - 1; c.Messages[last].Role == "assistant" {
			return &TraceError{File: name, Line: c.Line, Field: fmt.Sprintf("messages[%d].role", last),
				Msg: "a verification request ends with the message the engine answers, not with an assistant's"}
		}
		if n, ok := requestCount(at.Text); ok && n != 1 {
			return &TraceError{File: name, Line: c.Line, Field: "n", Msg: "must be 1: each request is scored on one choice"}
		}
		if len(c.Tools) > 0 {
			withTools++
		}
		return fn(c, at)
	})
	if err != nil {
		return err
	}
	if withTools == 0 {
		return fmt.Errorf("%s: no request offers tools: tool-call F1 and schema accuracy need requests with tools", name)
	}
	return nil
}

// requestCount reads a line's "n" (choices asked for), when it has one.
func requestCount(line []byte) (int, bool) {
	var raw struct {
		N json.RawMessage `json:"n"`
	}
	if json.Unmarshal(line, &raw) != nil || len(bytes.TrimSpace(raw.N)) == 0 || string(raw.N) == "null" {
		return 0, false
	}
	var n float64
	if json.Unmarshal(raw.N, &n) != nil {
		return -1, true
	}
	return int(n), true
}

// ReadVerifyRequests reads and checks the request file at path, and returns where each
// request is; the trace replay sends them, each its own one-request session.
func ReadVerifyRequests(path string) (*TraceIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	x := &TraceIndex{Path: path}
	err = ScanVerify(path, f, func(c TraceConversation, at TraceLine) error {
		x.lines = append(x.lines, traceLine{offset: at.Offset, size: int32(len(at.Text)), line: int32(c.Line), digest: lineDigest(at.Text)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}
