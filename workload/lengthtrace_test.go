package workload

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
)

// scanAll reads a length trace whole, for tests.
func scanAll(name, format string, r io.Reader) ([]TraceRequest, error) {
	var out []TraceRequest
	err := ScanLengthTrace(name, format, r, func(req TraceRequest, _ TraceLine) error {
		out = append(out, req)
		return nil
	})
	return out, err
}

func TestReadMooncakeSample(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "mooncake-24.jsonl")
	x, err := ReadTraceFormat(path, arms.TraceMooncake)
	if err != nil {
		t.Fatal(err)
	}
	if x.Len() != 24 || x.Format() != arms.TraceMooncake {
		t.Fatalf("%d requests of format %s, want 24 mooncake", x.Len(), x.Format())
	}
	prefixes := map[int64]int{}
	for i := range x.Len() {
		req, err := x.Request(i)
		if err != nil {
			t.Fatal(err)
		}
		if req.Line != i+1 || req.At != time.Duration(i)*400*time.Millisecond || len(req.Blocks) != 5 ||
			req.InputTokens <= 4*TraceBlockTokens || req.OutputTokens < 16 {
			t.Fatalf("request %d: %+v", i, req)
		}
		prefixes[req.Blocks[0]]++
	}
	if len(prefixes) != 4 {
		t.Errorf("%d shared prefixes, want 4: %v", len(prefixes), prefixes)
	}
}

func TestReadBurstGPTSample(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "burstgpt-16.csv")
	x, err := ReadTraceFormat(path, arms.TraceBurstGPT)
	if err != nil {
		t.Fatal(err)
	}
	if x.Len() != 16 {
		t.Fatalf("%d requests, want 16", x.Len())
	}
	first, err := x.Request(0)
	if err != nil {
		t.Fatal(err)
	}
	// The header is line 1; the first row is 3,GPT-4,701,15,716,API log.
	if first.Line != 2 || first.At != 3*time.Second || first.InputTokens != 701 || first.OutputTokens != 15 || first.Blocks != nil {
		t.Errorf("first request %+v", first)
	}
}

// TestLengthTraceErrorsNameFileLineAndField: every problem names the file, the line and,
// where there is one, the field.
func TestLengthTraceErrorsNameFileLineAndField(t *testing.T) {
	const ok = `{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}` + "\n"
	const header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
	for _, tc := range []struct {
		format, text, want string
	}{
		{arms.TraceMooncake, ok + `{"timestamp": 5, "input_length": 600, "output_length": 8, "hash_ids": [1, 2, 3]}`,
			"m:2: hash_ids: 3 blocks of 512 tokens, more than an input of 600 tokens holds (2)"},
		{arms.TraceMooncake, ok + `{"timestamp": 5, "output_length": 8}`, "m:2: input_length: missing"},
		{arms.TraceMooncake, ok + `{"timestamp": 5, "input_length": -3, "output_length": 8}`, "m:2: input_length: must be a whole number of tokens from 1 to 1048576"},
		{arms.TraceMooncake, ok + `{"timestamp": "soon", "input_length": 3, "output_length": 8}`, "m:2: timestamp: must be a number"},
		{arms.TraceMooncake, ok + `{"timestamp": 5, "input_length": 3, "output_length": 8, "hash_ids": [-1]}`, "m:2: hash_ids[0]: must be a whole number, 0 or more"},
		{arms.TraceMooncake, `{"timestamp": 50, "input_length": 3, "output_length": 1}` + "\n" + ok, "m:2: timestamp: 0s is before line 1's 50ms"},
		{arms.TraceMooncake, "\n[1, 2]\n", "m:2: a line must be one JSON object"},
		{arms.TraceMooncake, "\n\n", "m:1: the trace has no request"},
		{arms.TraceBurstGPT, "Timestamp,Model,Prompt tokens,Response tokens,Total tokens,Log Type\n", `m:1: column 3: "Prompt tokens" where the header has "Request tokens"`},
		{arms.TraceBurstGPT, header + "1,ChatGPT,12,4,16,API log\n0.5,ChatGPT,x,4,16,API log\n", `m:3: Request tokens: "x": must be a whole number`},
		{arms.TraceBurstGPT, header + "1,ChatGPT,12,4\n", "m:2: 4 columns, want 6"},
		{arms.TraceBurstGPT, header + "-1,ChatGPT,12,4,16,API log\n", `m:2: Timestamp: "-1": must be seconds`},
		{arms.TraceBurstGPT, header + "3,ChatGPT,12,4,16,API log\n2,ChatGPT,12,4,16,API log\n", "m:3: Timestamp: 2s is before line 2's 3s"},
		{arms.TraceBurstGPT, header, "m:1: the trace has no request: write the header"},
	} {
		_, err := scanAll("m", tc.format, strings.NewReader(tc.text))
		var te *TraceError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &te) {
			t.Errorf("%s %q:\n  error %v\n  want %q", tc.format, tc.text, err, tc.want)
		}
	}
}

// TestLengthTraceLimitsWhileReading: the limits of a conversation trace hold for a length
// trace as it is read, and name the line where they were passed.
func TestLengthTraceLimitsWhileReading(t *testing.T) {
	saved := traceLimits
	t.Cleanup(func() { traceLimits = saved })
	traceLimits.bytes, traceLimits.line, traceLimits.conversations = 1<<20, 64<<10, 1000
	row := []byte(`{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}` + "\n")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want string
	}{
		{"requests", &repeatedLines{line: row, n: 1005}, "big.jsonl:1001: more than 1000 requests"},
		{"size", &repeatedLines{line: []byte(strings.Repeat(" ", 16<<10-1) + "\n"), n: 100}, "big.jsonl:65: the trace runs past 1048576 bytes"},
		{"line", io.MultiReader(bytes.NewReader(row), &repeatedLines{line: []byte(" "), n: 64<<10 + 1}), "big.jsonl:2: line longer than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := scanAll("big.jsonl", arms.TraceMooncake, tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want %q", err, tc.want)
			}
		})
	}
	traceLimits.bytes = 1000 * int64(len(row))
	if _, err := scanAll("big.jsonl", arms.TraceMooncake, &repeatedLines{line: row, n: 1000}); err != nil {
		t.Errorf("a trace at its limits: %v", err)
	}
}

// TestLengthTraceChangedSinceChecked: a request is read again when it is due, and a line
// changed since the trace was checked is refused.
func TestLengthTraceChangedSinceChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.jsonl")
	line := `{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}` + "\n"
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	x, err := ReadTraceFormat(path, arms.TraceMooncake)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(line, "600", "700", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Request(0); err == nil || !strings.Contains(err.Error(), "m.jsonl:1: the line changed") {
		t.Errorf("a changed line: %v", err)
	}
}

// TestLengthPromptsShareTheirBlocks: requests whose hash ids agree up to a block send
// byte-identical prompts up to it and differ from the first block that differs; a
// prompt is as long as its calibration asks, whatever its blocks cover.
func TestLengthPromptsShareTheirBlocks(t *testing.T) {
	cal := TraceCalibration{BytesPerToken: 3.7, TemplateTokens: 9}
	block := cal.bytesFor(TraceBlockTokens)
	a := lengthPrompt(7, cal, TraceRequest{InputTokens: 3*512 + 100, Blocks: []int64{5, 6, 7, 8}}, 0)
	b := lengthPrompt(7, cal, TraceRequest{InputTokens: 3*512 + 300, Blocks: []int64{5, 6, 9, 10}}, 1)
	c := lengthPrompt(7, cal, TraceRequest{InputTokens: 600}, 2)
	shared := 0
	for shared < min(len(a), len(b)) && a[shared] == b[shared] {
		shared++
	}
	if shared < 2*block || shared > 2*block+16 {
		t.Errorf("prompts share %d bytes; want their two shared blocks, %d", shared, 2*block)
	}
	for _, tc := range []struct {
		prompt string
		tokens int
	}{{a, 3*512 + 100}, {b, 3*512 + 300}, {c, 600}} {
		if want := cal.bytesFor(tc.tokens - cal.TemplateTokens); len(tc.prompt) != want {
			t.Errorf("a prompt of %d tokens has %d bytes, want %d", tc.tokens, len(tc.prompt), want)
		}
	}
	if again := lengthPrompt(7, cal, TraceRequest{InputTokens: 3*512 + 100, Blocks: []int64{5, 6, 7, 8}}, 0); again != a {
		t.Error("the same request wrote another prompt")
	}
	if other := lengthPrompt(8, cal, TraceRequest{InputTokens: 600, Blocks: []int64{5}}, 0); other[:64] == a[:64] {
		t.Error("another seed wrote the same block")
	}
	if !strings.HasPrefix(c, "Request 2. ") {
		t.Errorf("a request without blocks begins %q; want its own number", c[:20])
	}
}

// FuzzMooncakeReader: no input makes the reader panic; an error names the file and a
// line; what it accepts has prompts it can write (blocks no more than its input holds)
// and arrival times in order.
func FuzzMooncakeReader(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "examples", "traces", "mooncake-24.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	first, _, _ := bytes.Cut(sample, []byte("\n"))
	f.Add(first)
	f.Add([]byte(`{"timestamp": 0.5, "input_length": 1, "output_length": 0}` + "\n\n" + `{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": [0, 1]}`))
	f.Add([]byte(`{"timestamp": 1e3, "input_length": 5, "output_length": 2, "hash_ids": null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLengthTrace(t, arms.TraceMooncake, data)
	})
}

// FuzzBurstGPTReader: the same for BurstGPT's CSV.
func FuzzBurstGPTReader(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "examples", "traces", "burstgpt-16.csv"))
	if err != nil {
		f.Fatal(err)
	}
	lines := bytes.SplitN(sample, []byte("\n"), 3)
	f.Add(append(append(lines[0], '\n'), lines[1]...))
	f.Add([]byte("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,\"GPT, 4\",1,0,1,API log\n0.25,ChatGPT,20,3,23,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLengthTrace(t, arms.TraceBurstGPT, data)
	})
}

func checkLengthTrace(t *testing.T, format string, data []byte) {
	reqs, err := scanAll("fuzz", format, bytes.NewReader(data))
	if err != nil {
		var te *TraceError
		if errors.As(err, &te) && (te.Line < 1 || te.File != "fuzz") {
			t.Fatalf("error without a line: %v", err)
		}
		if !errors.As(err, &te) {
			t.Fatalf("error that is not a TraceError: %v", err)
		}
		return
	}
	cal := TraceCalibration{BytesPerToken: 4, TemplateTokens: 3}
	var last time.Duration
	for i, req := range reqs {
		if req.At < last || req.InputTokens < 1 || req.InputTokens > MaxTraceInputTokens || req.OutputTokens < 0 ||
			len(req.Blocks)*TraceBlockTokens >= req.InputTokens+TraceBlockTokens {
			t.Fatalf("request %d accepted: %+v", i, req)
		}
		last = req.At
		if req.InputTokens <= 4096 {
			if p := lengthPrompt(1, cal, req, i); len(p) != cal.bytesFor(max(req.InputTokens-cal.TemplateTokens, 1)) {
				t.Fatalf("request %d: a prompt of %d bytes for %d tokens", i, len(p), req.InputTokens)
			}
		}
	}
}
