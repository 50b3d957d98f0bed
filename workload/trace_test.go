package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/memtest"
)

func TestReadTraceSample(t *testing.T) {
	path := filepath.Join("..", "examples", "traces", "support.jsonl")
	index, err := ReadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if index.Len() != 12 {
		t.Fatalf("%d conversations, want 12", index.Len())
	}
	var convs []TraceConversation
	for i := range index.Len() {
		c, err := index.Conversation(i)
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, c)
	}
	for i, c := range convs {
		if c.Line != i+1 || !strings.HasPrefix(c.ID, "support-") || len(c.Tools) != 4 || c.MaxTokens != 256 {
			t.Errorf("conversation %d: line %d id %q, %d tools, max_tokens %d", i, c.Line, c.ID, len(c.Tools), c.MaxTokens)
		}
		// A request at each assistant message, and one at the end when the
		// conversation ends with a user or tool message.
		want := 0
		for _, m := range c.Messages {
			if m.Role == "assistant" {
				want++
			}
		}
		if c.Messages[len(c.Messages)-1].Role != "assistant" {
			want++
		}
		if len(c.Requests) != want {
			t.Errorf("%s: %d requests, want %d", c.ID, len(c.Requests), want)
		}
		for _, end := range c.Requests {
			if end < len(c.Messages) && c.Messages[end].Role != "assistant" {
				t.Errorf("%s: a request ends before message %d, a %s message", c.ID, end, c.Messages[end].Role)
			}
		}
	}
	// Content given as a list of text parts is read as its text.
	if got := convs[0].Messages[5].Content; !strings.HasPrefix(got, "Thanks. Also, how do I ") || strings.Contains(got, "type") {
		t.Errorf("text parts read as %q", got)
	}
}

func TestTraceErrorsNameFileLineAndField(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	for _, tc := range []struct{ name, text, want string }{
		{"not json", `{"messages": [` + "\n", "t.jsonl:1: not a JSON object"},
		{"array", `[1, 2]`, "t.jsonl:1: a line must be one JSON object"},
		{"no messages", `{"id": "x"}`, "t.jsonl:1: messages: missing or empty"},
		{"blank lines count", "\n\n" + `{"messages": [{"role": "wizard", "content": "x"}]}`, "t.jsonl:3: messages[0].role: \"wizard\" is not one of"},
		{"no role", `{"messages": [{"content": "x"}]}`, "t.jsonl:1: messages[0].role: missing"},
		{"assistant first", `{"messages": [{"role":"system","content":"s"},{"role":"assistant","content":"a"}]}`, "t.jsonl:1: messages[1]: an assistant message before any user message"},
		{"orphan tool", `{"messages": [` + user + `,{"role":"tool","tool_call_id":"c9","content":"{}"}]}`, `t.jsonl:1: messages[1].tool_call_id: "c9" answers no earlier tool call`},
		{"call without id", `{"messages": [` + user + `,{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`, "t.jsonl:1: messages[1].tool_calls[0].id: missing"},
		{"image part", `{"messages": [{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "t.jsonl:1: messages[0]: message content part 0: type \"image_url\" is not supported"},
		{"bad tool", `{"tools": [{"type": "retrieval"}], "messages": [` + user + `]}`, `t.jsonl:1: tools[0].type: "retrieval": only function tools`},
		{"tool params", `{"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}], "messages": [` + user + `]}`, "t.jsonl:1: tools[0].function.parameters: must be a JSON Schema object"},
		{"max_tokens", `{"max_tokens": -1, "messages": [` + user + `]}`, "t.jsonl:1: max_tokens: must be a whole number"},
		{"temperature", `{"temperature": "hot", "messages": [` + user + `]}`, "t.jsonl:1: temperature: must be a number"},
		{"tool_choice", `{"tool_choice": "sometimes", "messages": [` + user + `]}`, "t.jsonl:1: tool_choice: must be"},
		{"duplicate id", `{"id": "a", "messages": [` + user + `]}` + "\n" + `{"id": "a", "messages": [` + user + `]}`, `t.jsonl:2: id: "a" is also the id of line 1`},
		{"empty", "\n \n", "t.jsonl:1: the trace has no conversation"},
		{"user type", `{"messages": [{"role":"user","content":42}]}`, "t.jsonl:1: messages[0]: message content: want a string or a list of parts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrace("t.jsonl", strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			var te *TraceError
			if !errors.As(err, &te) || te.File != "t.jsonl" || te.Line < 1 {
				t.Fatalf("error %v is not a TraceError naming the file and line", err)
			}
		})
	}
}

func TestTraceLineLimit(t *testing.T) {
	long := `{"messages": [{"role":"user","content":"` + strings.Repeat("x", MaxTraceLine) + `"}]}`
	_, err := ParseTrace("big.jsonl", strings.NewReader(`{"messages": [{"role":"user","content":"hi"}]}`+"\n"+long+"\n"))
	if err == nil || !strings.Contains(err.Error(), "big.jsonl:2: line longer than") {
		t.Fatalf("a line past the limit: %v", err)
	}
}

func TestReadTraceMissingFile(t *testing.T) {
	if _, err := ReadTrace(filepath.Join(t.TempDir(), "none.jsonl")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzTraceReader: no input makes the reader panic, and what it accepts is a conversation
// it can replay (a request at each assistant message, tool messages answering calls made
// before them) that reads back the same after being written out again.
func FuzzTraceReader(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "examples", "traces", "support.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	// One line of the sample, not all of it: the fuzzer minimizes what it finds, which
	// takes long on a large input.
	first, _, _ := bytes.Cut(sample, []byte("\n"))
	f.Add(first)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`))
	f.Add([]byte("\n\n{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}],\"temperature\":0.5}\n"))
	f.Add([]byte(`{"messages":[{"role":"user","content":"u"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"{}"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		convs, err := ParseTrace("fuzz.jsonl", bytes.NewReader(data))
		if err != nil {
			var te *TraceError
			if errors.As(err, &te) && (te.Line < 1 || te.File != "fuzz.jsonl") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var again bytes.Buffer
		for _, c := range convs {
			if len(c.Requests) == 0 || len(c.Messages) == 0 {
				t.Fatalf("accepted a conversation with nothing to replay: %+v", c)
			}
			calls := map[string]bool{}
			for i, m := range c.Messages {
				for _, tc := range m.ToolCalls {
					calls[tc.ID] = true
				}
				if m.Role == "tool" && !calls[m.ToolCallID] {
					t.Fatalf("message %d answers a call never made: %+v", i, m)
				}
			}
			for _, end := range c.Requests {
				if end < 1 || end > len(c.Messages) {
					t.Fatalf("request end %d of %d messages", end, len(c.Messages))
				}
			}
			line := map[string]any{"id": c.ID, "messages": c.Messages, "tools": c.Tools, "max_tokens": c.MaxTokens}
			if c.Temperature != nil {
				line["temperature"] = *c.Temperature
			}
			if len(c.ToolChoice) > 0 {
				line["tool_choice"] = c.ToolChoice
			}
			b, err := json.Marshal(line)
			if err != nil {
				t.Fatal(err)
			}
			again.Write(append(b, '\n'))
		}
		back, err := ParseTrace("again.jsonl", &again)
		if err != nil {
			t.Fatalf("written out again, the trace is refused: %v", err)
		}
		if len(back) != len(convs) {
			t.Fatalf("%d conversations read back, want %d", len(back), len(convs))
		}
		for i := range back {
			if len(back[i].Requests) != len(convs[i].Requests) || len(back[i].Messages) != len(convs[i].Messages) {
				t.Fatalf("conversation %d reads back with %d requests, %d messages; want %d, %d", i,
					len(back[i].Requests), len(back[i].Messages), len(convs[i].Requests), len(convs[i].Messages))
			}
		}
	})
}

// repeatedLines reads as n copies of line (which ends with a newline), made as they are
// read: a trace of any size without a file or its bytes in memory.
type repeatedLines struct {
	line []byte
	n    int
	at   int // offset in the current copy
}

func (r *repeatedLines) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		k := copy(p, r.line[r.at:])
		p, total, r.at = p[k:], total+k, r.at+k
		if r.at == len(r.line) {
			r.at, r.n = 0, r.n-1
		}
	}
	if total == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return total, nil
}

// TestTraceLimitsWhileReading: every limit on a trace holds as it is read, and the error
// names the file and the line where it was passed: more conversations than a launch may
// run (which a million-line trace used to get past), a trace past its size, a line past
// its length. The limits are lowered, so that the test does not read a gigabyte.
func TestTraceLimitsWhileReading(t *testing.T) {
	saved := traceLimits
	t.Cleanup(func() { traceLimits = saved })
	traceLimits.bytes, traceLimits.line, traceLimits.conversations = 1<<20, 64<<10, 1000
	conv := []byte(`{"messages": [{"role":"user","content":"hi"}]}` + "\n")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want string
	}{
		{"conversations", &repeatedLines{line: conv, n: 1005}, "big.jsonl:1001: more than 1000 conversations"},
		// Blank lines of 16 KiB: only the size counts.
		{"size", &repeatedLines{line: []byte(strings.Repeat(" ", 16<<10-1) + "\n"), n: 100},
			"big.jsonl:65: the trace runs past 1048576 bytes"},
		{"line", io.MultiReader(bytes.NewReader(conv), &repeatedLines{line: []byte(" "), n: 64<<10 + 1}),
			"big.jsonl:2: line longer than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := ScanTrace("big.jsonl", tc.r, func(TraceConversation, TraceLine) error { n++; return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("after %d conversations: %v; want %q", n, err, tc.want)
			}
		})
	}
	// At each limit, the trace passes.
	traceLimits.bytes = 1000 * int64(len(conv))
	if err := ScanTrace("big.jsonl", &repeatedLines{line: conv, n: 1000}, func(TraceConversation, TraceLine) error { return nil }); err != nil {
		t.Errorf("a trace at its limits: %v", err)
	}
}

// TestReadTraceHoldsNoConversation: a checked trace keeps where each conversation is, not
// the conversations: checking a 4 MiB trace leaves a small part of that on the heap
// (holding it whole, a 672 MB trace took arbiter to 2.6 GB), and each conversation reads
// back as it was written.
func TestReadTraceHoldsNoConversation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	const convs = 128
	for i := range convs {
		fmt.Fprintf(bw, `{"id": "c%d", "messages": [{"role":"user","content":"%s"},{"role":"assistant","content":"ok"},{"role":"user","content":"again"}]}`+"\n",
			i, strings.Repeat("x", 32<<10))
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Measured in a process of its own: the tests beside this one hold heap too.
	var index *TraceIndex
	use := memtest.Measure(t, func() { index, err = ReadTrace(path) })
	if err != nil {
		t.Fatal(err)
	}
	if index.Len() != convs {
		t.Fatalf("%d conversations, want %d", index.Len(), convs)
	}
	if grew := use.HeapGrowth; grew > 1<<20 {
		t.Errorf("the checked 4 MiB trace holds %d KiB of heap", grew>>10)
	} else {
		t.Logf("the checked 4 MiB trace holds %d KiB of heap", grew>>10)
	}
	c, err := index.Conversation(100)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "c100" || c.Line != 101 || len(c.Messages) != 3 || len(c.Messages[0].Content) != 32<<10 || !reflect.DeepEqual(c.Requests, []int{1, 3}) {
		t.Errorf("conversation 100 reads back as %s at line %d, %d messages, requests %v", c.ID, c.Line, len(c.Messages), c.Requests)
	}
}

// TestTraceChangedSinceChecked: a line that changed between the check and its session's
// start fails that session, naming the file and the line, rather than replaying
// something that was never checked.
func TestTraceChangedSinceChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	line := `{"messages": [{"role":"user","content":"hi"}]}` + "\n"
	if err := os.WriteFile(path, []byte(line+line), 0o644); err != nil {
		t.Fatal(err)
	}
	index, err := ReadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(line+strings.Replace(line, "hi", "ho", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := index.Conversation(0); err != nil {
		t.Errorf("an unchanged line: %v", err)
	}
	if _, err := index.Conversation(1); err == nil || !strings.Contains(err.Error(), path+":2: the line changed since the trace was checked") {
		t.Errorf("a changed line: %v", err)
	}
}

// TestTraceLimitsAreTheSpecs: arbiter validate and the workload hold a trace to the same
// limits.
func TestTraceLimitsAreTheSpecs(t *testing.T) {
	if MaxTraceBytes != arms.MaxTraceBytes || MaxTraceLine != arms.MaxTraceLineBytes || MaxTraceConversations != arms.MaxSessions {
		t.Errorf("workload: %d bytes, lines of %d, %d conversations; arms: %d, %d, %d", MaxTraceBytes, MaxTraceLine, MaxTraceConversations,
			arms.MaxTraceBytes, arms.MaxTraceLineBytes, arms.MaxSessions)
	}
}

// ParseTrace reads a whole trace from r and returns its conversations; name is the file
// its errors name. It stops at the first line with a problem. A run does not hold its
// trace this way (see ReadTrace); this is for tools and tests.
func ParseTrace(name string, r io.Reader) ([]TraceConversation, error) {
	var out []TraceConversation
	err := ScanTrace(name, r, func(c TraceConversation, _ TraceLine) error {
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
