package workload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// The memory benchmark runs the driver in a child process (this test binary, running
// TestMemoryChild) against a server in the parent, and reads the child's peak resident
// set from the kernel (getrusage of the reaped child: ru_maxrss). The child records every
// turn as arbiter run does: a store.Turn per turn, with the request, raw body and
// assembled response, written by store.Writer into a real SQLite file.

const (
	memSessions    = 1000
	memRounds      = 8
	memConcurrency = 1000
	memChunks      = 340 // about 64 KiB of SSE per reply
)

func sseReply(chunks int) []byte {
	var b strings.Builder
	for i := range chunks {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-mem","object":"chat.completion.chunk","created":1733000000,"model":"bench","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-mem","object":"chat.completion.chunk","created":1733000000,"model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":340,"total_tokens":350}}` + "\n\ndata: [DONE]\n\n")
	return []byte(b.String())
}

func BenchmarkMemory1000Sessions(b *testing.B) {
	reply := sseReply(memChunks)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/v1/models") {
			w.Write([]byte(`{"object":"list","data":[{"id":"bench","object":"model"}]}`))
			return
		}
		var req openai.ChatRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(reply)
	}))
	defer srv.Close()
	for b.Loop() {
		db := filepath.Join(b.TempDir(), "mem.db")
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ARBITER_MEMORY_CHILD="+srv.URL+","+db)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		peak := float64(ru.Maxrss) * 1024 // Linux reports KiB
		b.ReportMetric(peak/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(1024, "target-MiB")
		b.ReportMetric(float64(len(reply))/1024, "reply-KiB")
		if !strings.Contains(string(out), "turns="+strconv.Itoa(memSessions*memRounds)) {
			b.Fatalf("child did not record every turn:\n%s", out)
		}
	}
}

// memRecorder stores turns as the orchestrator does, without copies of the bodies.
type memRecorder struct {
	w                 *store.Writer
	exp, runID, armID int64
}

func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (r *memRecorder) Turn(t workload.Turn) {
	resp, _ := json.Marshal(t.Response)
	row := store.Turn{ExperimentID: r.exp, RunID: r.runID, ArmID: r.armID, Session: t.Session, Index: t.Index, Round: t.Round,
		Started: t.Started, StatusCode: t.StatusCode, FinishReason: t.FinishReason, TTFT: t.TTFT, Latency: t.Latency,
		Request: view(t.Request), Raw: view(t.Raw), Response: string(resp), TokenTimes: t.DeltaTimes, Error: t.Err}
	if len(t.Response.Choices) > 0 {
		row.Content = t.Response.Choices[0].Message.Content
	}
	r.w.Turn(row)
}

func (r *memRecorder) SessionDone(s workload.SessionResult) {
	r.w.Session(store.Session{ExperimentID: r.exp, RunID: r.runID, ArmID: r.armID, Index: s.Session, Status: store.SessionStatus(s.Status), Turns: s.Turns})
}

// recordInto opens the database at db for a child's run: one experiment named name, one
// arm, one run, and a recorder writing turns and sessions into it. The store closes with
// the test.
func recordInto(t *testing.T, db, name string) (*store.Store, *memRecorder) {
	t.Helper()
	s, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: name, Spec: "version: 1", Seed: 1, Unit: "session", Alpha: 0.05,
		Baseline: "a", Version: "test", Host: "h", Created: time.Now(), Design: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	arm, err := s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: "a", Pins: "{}", Command: `["x"]`, Env: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: arm, Runtime: "process", Status: "starting", Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return s, &memRecorder{w: s.NewWriter(store.WriterOptions{}), exp: exp, runID: run, armID: arm}
}

// TestMemoryChild is the child of BenchmarkMemory1000Sessions; it does nothing
// without ARBITER_MEMORY_CHILD.
func TestMemoryChild(t *testing.T) {
	arg := os.Getenv("ARBITER_MEMORY_CHILD")
	if arg == "" {
		t.Skip("runs only as the child of BenchmarkMemory1000Sessions")
	}
	base, db, _ := strings.Cut(arg, ",")
	ctx := context.Background()
	s, rec := recordInto(t, db, "mem")
	w := rec.w
	err := workload.Run(ctx, workload.Config{Sessions: memSessions, Rounds: memRounds, Concurrency: memConcurrency, Seed: 1,
		Model: "bench"}, base, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	s.DB().Get(&n, "SELECT count(*) FROM turns")
	fmt.Printf("turns=%d\n", n)
}
