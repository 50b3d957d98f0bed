package workload

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerifyExampleRequestsRead(t *testing.T) {
	x, err := ReadVerifyRequests(filepath.Join("..", "examples", "verify", "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if x.Len() != 36 {
		t.Fatalf("%d requests, want 36", x.Len())
	}
}

func TestVerifyErrorsNameFileLineField(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}]}` + "\n" +
			`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`,
			"r.jsonl:2: messages[1].role: a verification request ends with the message the engine answers"},
		{`{"messages":[{"role":"user","content":"a"}],"n":2,"tools":[{"type":"function","function":{"name":"f"}}]}`, "r.jsonl:1: n: must be 1"},
		{`{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{}}]}`, "r.jsonl:1: tools[0].function.name: missing"},
		{`{"messages":[{"role":"user","content":"a"}]}`, "r.jsonl: no request offers tools"},
	} {
		err := ScanVerify("r.jsonl", strings.NewReader(c.in), func(TraceConversation, TraceLine) error { return nil })
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s\n got %v\nwant %s...", c.in, err, c.want)
		}
	}
}

// FuzzVerifyReader: no input makes the request-file reader panic; an error about a line
// names the file and a line from 1; an accepted request is one request.
func FuzzVerifyReader(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("..", "examples", "verify", "requests.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	first, _, _ := bytes.Cut(sample, []byte("\n"))
	f.Add(first)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"u"}],"n":1,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := ScanVerify("fuzz.jsonl", bytes.NewReader(data), func(c TraceConversation, _ TraceLine) error {
			if len(c.Requests) != 1 || c.Requests[0] != len(c.Messages) {
				t.Fatalf("accepted a line that is not one request: %+v", c)
			}
			return nil
		})
		var te *TraceError
		if errors.As(err, &te) && (te.Line < 1 || te.File != "fuzz.jsonl") {
			t.Fatalf("error without a line: %v", err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz.jsonl") {
			t.Fatalf("error without the file: %v", err)
		}
	})
}
