package workload

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
)

// A length trace records requests by their shape, not their text: when each arrived, how
// long its prompt and its answer were, and (Mooncake) which 512-token blocks its prompt
// shares with others. arbiter writes a prompt of that length in the engine's own tokens
// for each request (lengthprompt.go) and sends it at its recorded time.
//
// Mooncake, one JSON object per line:
//
//	{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29, ...]}
//
// timestamp is milliseconds from the trace's start; hash_ids name the prompt's blocks of
// TraceBlockTokens tokens in order (the last one may be partial), and two requests whose
// ids agree up to a position share their prompt's bytes up to it.
//
// BurstGPT, CSV with a header:
//
//	Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
//	5,ChatGPT,472,18,490,Conversation log
//
// Timestamp is seconds from the trace's start; requests share no prefix.

// TraceBlockTokens is the length of one Mooncake block (one hash id), in tokens.
const TraceBlockTokens = 512

// MaxTraceInputTokens bounds one request's prompt in a length trace (a prompt is written
// at some four bytes a token, and held while the request is sent).
const MaxTraceInputTokens = 1 << 20

// burstGPTHeader is the header a BurstGPT file begins with.
var burstGPTHeader = []string{"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"}

// TraceRequest is one request of a length trace.
type TraceRequest struct {
	// Line is where it is written (from 1).
	Line int
	// At is its arrival time as recorded, from the trace's start.
	At time.Duration
	// InputTokens is the prompt's length and OutputTokens the answer's, in tokens.
	InputTokens, OutputTokens int
	// Blocks are its hash ids (Mooncake): block k covers the prompt's tokens
	// [k*TraceBlockTokens, (k+1)*TraceBlockTokens). Empty for BurstGPT.
	Blocks []int64
}

// ReadTraceFormat reads and checks the trace at path in format (an arms.Trace* word; ""
// is arbiter's own) and returns where each conversation or request is.
func ReadTraceFormat(path, format string) (*TraceIndex, error) {
	if format == "" || format == arms.TraceArbiter {
		return ReadTrace(path)
	}
	if format == arms.TraceVerify {
		return ReadVerifyRequests(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	x := &TraceIndex{Path: path, format: format}
	err = ScanLengthTrace(path, format, f, func(req TraceRequest, at TraceLine) error {
		x.lines = append(x.lines, traceLine{offset: at.Offset, size: int32(len(at.Text)), line: int32(req.Line), digest: lineDigest(at.Text)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Format is the trace's format: arms.TraceArbiter, TraceMooncake or TraceBurstGPT.
func (x *TraceIndex) Format() string {
	if x.format == "" {
		return arms.TraceArbiter
	}
	return x.format
}

// Request reads and parses request i (from 0) of a length trace from the file again. It
// fails when the line is no longer what was checked.
func (x *TraceIndex) Request(i int) (TraceRequest, error) {
	l := x.lines[i]
	f, err := os.Open(x.Path)
	if err != nil {
		return TraceRequest{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	text := make([]byte, l.size)
	if _, err := f.ReadAt(text, l.offset); err != nil {
		return TraceRequest{}, &TraceError{File: x.Path, Line: int(l.line), Msg: fmt.Sprintf("cannot read the line again: %v", err)}
	}
	if lineDigest(text) != l.digest {
		return TraceRequest{}, &TraceError{File: x.Path, Line: int(l.line), Msg: "the line changed since the trace was checked"}
	}
	var req TraceRequest
	var terr *TraceError
	if x.format == arms.TraceBurstGPT {
		req, terr = parseBurstGPT(bytes.TrimSpace(text))
	} else {
		req, terr = parseMooncake(bytes.TrimSpace(text))
	}
	if terr != nil {
		terr.File, terr.Line = x.Path, int(l.line)
		return TraceRequest{}, terr
	}
	req.Line = int(l.line)
	return req, nil
}

// ScanLengthTrace reads a mooncake or burstgpt trace from r line by line, checks each
// line, the order of the arrival times and each limit (MaxTraceLine, MaxTraceBytes,
// MaxTraceConversations requests) as it goes, and calls fn with each request; name is
// the file its errors name. It stops at the first problem, or at an error fn returns.
// Only the line being read is held.
func ScanLengthTrace(name, format string, r io.Reader, fn func(TraceRequest, TraceLine) error) error {
	var parse func([]byte) (TraceRequest, *TraceError)
	switch format {
	case arms.TraceMooncake:
		parse = parseMooncake
	case arms.TraceBurstGPT:
		parse = parseBurstGPT
	default:
		return fmt.Errorf("trace %s: format %q is not a length trace (mooncake or burstgpt)", name, format)
	}
	lim := traceLimits
	n := 0
	header := format == arms.TraceBurstGPT
	last, lastLine := time.Duration(-1), 0
	err := scanTraceLines(name, r, func(line int, t []byte, tl TraceLine) error {
		if header {
			header = false
			if terr := checkBurstGPTHeader(t); terr != nil {
				terr.File, terr.Line = name, line
				return terr
			}
			return nil
		}
		if n++; n > lim.conversations {
			return &TraceError{File: name, Line: line, Msg: fmt.Sprintf("more than %d requests, the most a trace may hold (one a session, and a launch runs at most %d sessions); split it",
				lim.conversations, MaxTraceConversations)}
		}
		req, terr := parse(t)
		if terr != nil {
			terr.File, terr.Line = name, line
			return terr
		}
		req.Line = line
		if req.At < last {
			return &TraceError{File: name, Line: line, Field: timestampField(format),
				Msg: fmt.Sprintf("%s is before line %d's %s: a trace lists requests in the order they arrived", req.At, lastLine, last)}
		}
		last, lastLine = req.At, line
		return fn(req, tl)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		msg := "the trace has no request: write one JSON object per line"
		if format == arms.TraceBurstGPT {
			msg = "the trace has no request: write the header, then one CSV row per request"
		}
		return &TraceError{File: name, Line: 1, Msg: msg}
	}
	return nil
}

func timestampField(format string) string {
	if format == arms.TraceBurstGPT {
		return "Timestamp"
	}
	return "timestamp"
}

// parseMooncake reads one line of a Mooncake trace.
func parseMooncake(text []byte) (TraceRequest, *TraceError) {
	var raw struct {
		Timestamp    json.RawMessage `json:"timestamp"`
		InputLength  json.RawMessage `json:"input_length"`
		OutputLength json.RawMessage `json:"output_length"`
		HashIDs      json.RawMessage `json:"hash_ids"`
	}
	var req TraceRequest
	if text[0] != '{' {
		return req, &TraceError{Msg: `a line must be one JSON object: {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`}
	}
	if err := json.Unmarshal(text, &raw); err != nil {
		return req, &TraceError{Msg: "not a JSON object of the trace's shape: " + jsonProblem(err)}
	}
	ms, terr := jsonNumber(raw.Timestamp, "timestamp", "milliseconds from the trace's start, 0 or more")
	if terr != nil {
		return req, terr
	}
	if ms < 0 || ms > maxTraceMillis {
		return req, &TraceError{Field: "timestamp", Msg: fmt.Sprintf("must be milliseconds from the trace's start, from 0 to %d", int64(maxTraceMillis))}
	}
	req.At = time.Duration(ms * float64(time.Millisecond))
	if req.InputTokens, terr = jsonCount(raw.InputLength, "input_length", 1, MaxTraceInputTokens); terr != nil {
		return req, terr
	}
	if req.OutputTokens, terr = jsonCount(raw.OutputLength, "output_length", 0, arms.MaxMaxTokens); terr != nil {
		return req, terr
	}
	if len(raw.HashIDs) > 0 && string(raw.HashIDs) != "null" {
		var ids []json.RawMessage
		if err := json.Unmarshal(raw.HashIDs, &ids); err != nil {
			return req, &TraceError{Field: "hash_ids", Msg: "must be a list of block ids (whole numbers, 0 or more)"}
		}
		// A request of n tokens has at most ceil(n/512) blocks.
		if most := (req.InputTokens + TraceBlockTokens - 1) / TraceBlockTokens; len(ids) > most {
			return req, &TraceError{Field: "hash_ids", Msg: fmt.Sprintf("%d blocks of %d tokens, more than an input of %d tokens holds (%d)",
				len(ids), TraceBlockTokens, req.InputTokens, most)}
		}
		req.Blocks = make([]int64, len(ids))
		for i, id := range ids {
			if err := json.Unmarshal(id, &req.Blocks[i]); err != nil || req.Blocks[i] < 0 {
				return req, &TraceError{Field: fmt.Sprintf("hash_ids[%d]", i), Msg: "must be a whole number, 0 or more"}
			}
		}
	}
	return req, nil
}

// maxTraceMillis bounds a recorded time: a year.
const maxTraceMillis = 365 * 24 * 3600 * 1000.0

// jsonNumber reads a required JSON number.
func jsonNumber(raw json.RawMessage, field, what string) (float64, *TraceError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, &TraceError{Field: field, Msg: "missing: " + what}
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || math.IsNaN(v) {
		return 0, &TraceError{Field: field, Msg: "must be a number: " + what}
	}
	return v, nil
}

// jsonCount reads a required whole number from lo to hi.
func jsonCount(raw json.RawMessage, field string, lo, hi int) (int, *TraceError) {
	what := fmt.Sprintf("a whole number of tokens from %d to %d", lo, hi)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, &TraceError{Field: field, Msg: "missing: " + what}
	}
	var v int64
	if err := json.Unmarshal(raw, &v); err != nil || v < int64(lo) || v > int64(hi) {
		return 0, &TraceError{Field: field, Msg: "must be " + what}
	}
	return int(v), nil
}

// checkBurstGPTHeader checks a BurstGPT file's first line.
func checkBurstGPTHeader(text []byte) *TraceError {
	cols, err := csv.NewReader(bytes.NewReader(text)).Read()
	if err != nil || len(cols) != len(burstGPTHeader) {
		return &TraceError{Msg: "the first line must be BurstGPT's header: " + strings.Join(burstGPTHeader, ",")}
	}
	for i, c := range cols {
		if !strings.EqualFold(strings.TrimSpace(c), burstGPTHeader[i]) {
			return &TraceError{Field: fmt.Sprintf("column %d", i+1), Msg: fmt.Sprintf("%q where the header has %q (%s)", c, burstGPTHeader[i], strings.Join(burstGPTHeader, ","))}
		}
	}
	return nil
}

// parseBurstGPT reads one row of a BurstGPT trace.
func parseBurstGPT(text []byte) (TraceRequest, *TraceError) {
	var req TraceRequest
	cr := csv.NewReader(bytes.NewReader(text))
	cr.FieldsPerRecord = -1
	cols, err := cr.Read()
	if err != nil {
		return req, &TraceError{Msg: "not a CSV row: " + err.Error()}
	}
	if len(cols) != len(burstGPTHeader) {
		return req, &TraceError{Msg: fmt.Sprintf("%d columns, want %d (%s)", len(cols), len(burstGPTHeader), strings.Join(burstGPTHeader, ","))}
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(cols[0]), 64)
	if err != nil || !(secs >= 0) || secs > maxTraceMillis/1000 {
		return req, &TraceError{Field: "Timestamp", Msg: fmt.Sprintf("%q: must be seconds from the trace's start, from 0 to %d", cols[0], int64(maxTraceMillis/1000))}
	}
	req.At = time.Duration(secs * float64(time.Second))
	count := func(i, lo, hi int) (int, *TraceError) {
		v, err := strconv.ParseInt(strings.TrimSpace(cols[i]), 10, 64)
		if err != nil || v < int64(lo) || v > int64(hi) {
			return 0, &TraceError{Field: burstGPTHeader[i], Msg: fmt.Sprintf("%q: must be a whole number of tokens from %d to %d", cols[i], lo, hi)}
		}
		return int(v), nil
	}
	var terr *TraceError
	if req.InputTokens, terr = count(2, 1, MaxTraceInputTokens); terr != nil {
		return req, terr
	}
	if req.OutputTokens, terr = count(3, 0, arms.MaxMaxTokens); terr != nil {
		return req, terr
	}
	return req, nil
}
