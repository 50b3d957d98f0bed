package runtime

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

var cutMarker = regexp.MustCompile(` \[arbiter: line cut, (\d+) more bytes dropped\]$`)

func TestLongLinesAreCutWithAMarker(t *testing.T) {
	var file bytes.Buffer
	sink := newLogSink(&file, Launch{}, 40)
	w := &lineWriter{sink: sink}
	// 1 MiB without a newline, in pieces, then a normal line.
	long := strings.Repeat("x", 1000) + " " + strings.Repeat("y", 1<<20)
	for i := 0; i < len(long); i += 7777 {
		w.Write([]byte(long[i:min(i+7777, len(long))]))
	}
	w.Write([]byte("\nnext line\n"))
	lines := strings.Split(strings.TrimSuffix(file.String(), "\n"), "\n")
	if len(lines) != 2 || lines[1] != "next line" {
		t.Fatalf("log has %d lines, last %q", len(lines), lines[len(lines)-1])
	}
	m := cutMarker.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("long line kept without a cut marker: ...%q", lines[0][max(0, len(lines[0])-80):])
	}
	kept := strings.TrimSuffix(lines[0], m[0])
	if len(kept) > MaxLogLine {
		t.Errorf("kept %d bytes of the line, more than MaxLogLine %d", len(kept), MaxLogLine)
	}
	// No whitespace in the last cutBack bytes before the cap: the cut stays at the cap.
	if len(kept) != MaxLogLine || m[1] != itoa(len(long)-MaxLogLine) {
		t.Errorf("kept %d bytes, dropped %s; want %d and %d", len(kept), m[1], MaxLogLine, len(long)-MaxLogLine)
	}
	tail := sink.tail()
	if len(tail) > MaxTail || !strings.HasSuffix(tail, "\nnext line") {
		t.Errorf("tail is %d bytes (cap %d), ends %q", len(tail), MaxTail, tail[max(0, len(tail)-40):])
	}
}

func TestCutLineEndsAtWhitespaceSoAStraddlingTokenIsDroppedWhole(t *testing.T) {
	var file bytes.Buffer
	sink := newLogSink(&file, Launch{}, 40)
	w := &lineWriter{sink: sink}
	// A credential-looking token straddles the cap.
	head := strings.Repeat("a", MaxLogLine-100) + " token="
	line := head + "hf_" + strings.Repeat("S", 300) + " rest"
	w.Write([]byte(line))
	w.flush()
	got := strings.TrimSuffix(file.String(), "\n")
	m := cutMarker.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no cut marker")
	}
	kept := strings.TrimSuffix(got, m[0])
	if strings.Contains(kept, "hf_") || strings.Contains(kept, "token=") {
		t.Errorf("the cut kept part of the straddling token: ...%q", kept[len(kept)-20:])
	}
	if m[1] != itoa(len(line)-len(kept)) {
		t.Errorf("marker says %s dropped, want %d", m[1], len(line)-len(kept))
	}
}

func TestTailIsBoundedInLinesAndBytes(t *testing.T) {
	var file bytes.Buffer
	sink := newLogSink(&file, Launch{}, 40)
	w := &lineWriter{sink: sink}
	for range 100 {
		w.Write([]byte(strings.Repeat("z", 10<<10) + "\n"))
	}
	tail := sink.tail()
	lines := strings.Split(tail, "\n")
	if len(tail) > MaxTail || len(lines) > 40 {
		t.Errorf("tail: %d bytes in %d lines; caps %d bytes, 40 lines", len(tail), len(lines), MaxTail)
	}
	for _, l := range lines {
		if len(l) > MaxTailLine+64 {
			t.Errorf("a tail line holds %d bytes", len(l))
		}
	}
	if !strings.Contains(lines[len(lines)-1], "more bytes in the log file") {
		t.Errorf("a cut tail line does not say where the rest is: %q", lines[len(lines)-1][MaxTailLine-10:])
	}
}

// TestProcessLogFloodIsCut runs an engine that writes 8 MiB as one line, as hostileserve's
// log-flood mode does with 64 MiB, and checks both the log file and the Exit's tail.
func TestProcessLogFloodIsCut(t *testing.T) {
	l := shLaunch(t, `head -c 8388608 /dev/zero | tr '\0' x; echo; echo "after the flood"`)
	inst, err := Process{}.Start(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	<-inst.Done()
	inst.Stop(context.Background())
	b, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxLogLine+200 || !bytes.Contains(b, []byte("more bytes dropped]\nafter the flood\n")) {
		t.Errorf("log file is %d bytes, ends %q", len(b), b[max(0, len(b)-80):])
	}
	if tail := inst.Exit().LogTail; len(tail) > MaxTail || !strings.HasSuffix(tail, "after the flood") {
		t.Errorf("tail is %d bytes, ends %q", len(tail), tail[max(0, len(tail)-40):])
	}
}

func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("ready\npartial"), 3)
	f.Add(bytes.Repeat([]byte("ab c"), 40000), 1000)
	f.Add([]byte("\n\n\xe2\x82"), 1)
	f.Fuzz(func(t *testing.T, in []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		var file bytes.Buffer
		sink := newLogSink(&file, Launch{}, 40)
		w := &lineWriter{sink: sink}
		for i := 0; i < len(in); i += chunk {
			w.Write(in[i:min(i+chunk, len(in))])
		}
		w.flush()
		out := file.String()
		if len(in) > 0 && !strings.HasSuffix(out, "\n") {
			t.Fatalf("output %q does not end its last line", out)
		}
		inLines := strings.Split(strings.TrimSuffix(string(in), "\n"), "\n")
		outLines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(in) == 0 {
			if out != "" {
				t.Fatalf("empty input wrote %q", out)
			}
			return
		}
		if len(inLines) != len(outLines) {
			t.Fatalf("%d lines in, %d out", len(inLines), len(outLines))
		}
		for i, l := range inLines {
			o := outLines[i]
			if len(l) <= MaxLogLine {
				if o != l {
					t.Fatalf("line %d of %d bytes changed: %q -> %q", i, len(l), l, o)
				}
				continue
			}
			m := cutMarker.FindStringSubmatch(o)
			if m == nil {
				t.Fatalf("line %d of %d bytes kept without a marker", i, len(l))
			}
			kept := strings.TrimSuffix(o, m[0])
			if len(kept) > MaxLogLine || !strings.HasPrefix(l, kept) || m[1] != itoa(len(l)-len(kept)) {
				t.Fatalf("line %d: kept %d bytes, marker %q", i, len(kept), m[0])
			}
		}
		if len(sink.tail()) > MaxTail {
			t.Fatalf("tail of %d bytes", len(sink.tail()))
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestCutLineHidesTheStartOfASecretLeftAtTheCut(t *testing.T) {
	const secret = "hf_QmV5c2VjcmV0VG9rZW4xMjM0NTY3ODkw"
	spec := &arms.Spec{Engine: arms.Engine{Secrets: []string{"HF_TOKEN"}}}
	r := spec.Redactor(func(name string) (string, bool) { return secret, name == "HF_TOKEN" })
	var file bytes.Buffer
	sink := newLogSink(&file, Launch{Redact: r.Redact, RedactCut: r.RedactCut}, 40)
	w := &lineWriter{sink: sink}
	// No whitespace near the cap, so the cut falls inside the secret: its first 20
	// characters end the kept line, the rest is dropped.
	line := strings.Repeat("z", MaxLogLine-20) + secret + strings.Repeat("z", 100)
	w.Write([]byte(line + "\n"))
	got := file.String()
	if strings.Contains(got, secret[:8]) {
		t.Fatalf("the start of a secret cut at the line limit was kept: ...%q", got[max(0, len(got)-120):])
	}
	if !strings.Contains(got, arms.Redacted) || cutMarker.FindString(strings.TrimSuffix(got, "\n")) == "" {
		t.Errorf("cut line not redacted and marked: ...%q", got[max(0, len(got)-120):])
	}
	// The same start of a secret in a line that was not cut is only text.
	file.Reset()
	w.Write([]byte("prefix hf_QmV5 suffix\n"))
	if got := file.String(); got != "prefix hf_QmV5 suffix\n" {
		t.Errorf("uncut line = %q", got)
	}
}
