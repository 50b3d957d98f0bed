package workload_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/workload"
)

// Trace memory: a trace of some 670 MB (20,000 conversations of six messages, 33 KB each)
// is checked and its first 2,000 conversations replayed at concurrency 64, in a child
// process whose peak resident set (VmHWM) is read at its end. Holding every
// conversation, a trace of this size took arbiter to 2.6 GB; the index it keeps now is
// some 40 bytes a conversation.
const (
	traceMemConversations = 20_000
	traceMemReplayed      = 2_000
	traceMemPart          = 5600 // bytes of each of a conversation's six messages
)

func BenchmarkTraceMemory(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	part := strings.Repeat("y", traceMemPart)
	for i := range traceMemConversations {
		fmt.Fprintf(bw, `{"id": "t%d", "max_tokens": 16, "messages": [{"role":"system","content":"%s"},{"role":"user","content":"%s"},`+
			`{"role":"assistant","content":"%s"},{"role":"user","content":"%s"},{"role":"assistant","content":"%s"},{"role":"user","content":"%s"}]}`+"\n",
			i, part, part, part, part, part, part)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	f.Close()
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTraceMemoryChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ARBITER_TRACE_MEMORY_CHILD="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`vmhwm_kb=(\d+) requests=(\d+)`).FindStringSubmatch(string(out))
		if m == nil {
			b.Fatalf("the child said nothing of its memory:\n%s", out)
		}
		peak, _ := strconv.ParseFloat(m[1], 64)
		if requests, _ := strconv.Atoi(m[2]); requests != 3*traceMemReplayed {
			b.Fatalf("%d requests replayed, want %d", requests, 3*traceMemReplayed)
		}
		b.ReportMetric(peak/1024, "peak-RSS-MiB")
		b.ReportMetric(500, "target-MiB")
		b.ReportMetric(float64(fi.Size())/(1<<20), "trace-MiB")
	}
}

// countingRecorder counts turns and keeps nothing.
type countingRecorder struct{ turns atomic.Int64 }

func (r *countingRecorder) Turn(workload.Turn)                 { r.turns.Add(1) }
func (r *countingRecorder) SessionDone(workload.SessionResult) {}

// TestTraceMemoryChild is the child of BenchmarkTraceMemory; it does nothing without
// ARBITER_TRACE_MEMORY_CHILD.
func TestTraceMemoryChild(t *testing.T) {
	path := os.Getenv("ARBITER_TRACE_MEMORY_CHILD")
	if path == "" {
		t.Skip("runs only as the child of BenchmarkTraceMemory")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(sseReply(4))
	}))
	defer srv.Close()
	index, err := workload.ReadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &countingRecorder{}
	cfg := workload.Config{Kind: arms.WorkloadTrace, Sessions: traceMemReplayed, Concurrency: 64, Seed: 1, Model: "bench",
		Trace: &workload.TraceConfig{Path: path, Index: index}}
	if err := workload.Run(context.Background(), cfg, srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("vmhwm_kb=%d requests=%d\n", vmHWM(t), rec.turns.Load())
}
