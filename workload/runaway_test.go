package workload_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/workload"
)

// startHostile starts hostileserve with args on a free port of loopback and returns its
// base URL; the process is killed when the test ends.
func startHostile(t testing.TB, args ...string) string {
	t.Helper()
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/hostileserve")
	cmd := exec.Command(bin, append([]string{"--port", "0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	port := regexp.MustCompile(`listening on port (\d+)`)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := port.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr) // the rest of its log
			return "http://127.0.0.1:" + m[1]
		}
	}
	t.Fatal("hostileserve never said which port it took")
	return ""
}

// turnLog keeps what a workload reports.
type turnLog struct {
	mu       sync.Mutex
	turns    []workload.Turn
	sessions []workload.SessionResult
}

func (l *turnLog) Turn(t workload.Turn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.turns = append(l.turns, t)
}

func (l *turnLog) SessionDone(s workload.SessionResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sessions = append(l.sessions, s)
}

// TestRunawayReplyIsCut: an engine that ignores max_tokens (hostileserve's runaway mode:
// 4 MiB of text per reply, within the 8 MiB response cap) drives long-context sessions.
// Each reply is cut once it is past what max_tokens allows, the turn fails with
// ErrPastMaxTokens as the engine's fault, its stored reply stays within the budget, and
// no later request carries the runaway text: before the budget, every round sent the
// replies back, and requests grew by 4 MiB a round.
func TestRunawayReplyIsCut(t *testing.T) {
	const maxTokens = 64
	base := startHostile(t, "--mode", "runaway", "--size", "4194304", "--chunk", "512", "--ready-requests", "0")
	budget := int64(maxTokens*workload.ReplyBytesPerToken + workload.ReplySlackBytes)
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			var log turnLog
			cfg := workload.Config{Kind: arms.WorkloadLongContext, Sessions: 3, Rounds: 4, Concurrency: 3, Seed: 7,
				MaxTokens: maxTokens, NoStream: !stream, RequestTimeout: time.Minute, StallTimeout: 30 * time.Second,
				LongContext: &workload.LongContextConfig{StartTokens: 400, CeilingTokens: 1200}}
			if err := workload.Run(context.Background(), cfg, base, &log); err != nil {
				t.Fatal(err)
			}
			if len(log.turns) == 0 || len(log.sessions) != cfg.Sessions {
				t.Fatalf("%d turns, %d sessions", len(log.turns), len(log.sessions))
			}
			for _, tr := range log.turns {
				if bytes.Contains(tr.Request, []byte("kept on writing")) {
					t.Errorf("session %d turn %d: a %d-byte request sends a runaway reply back", tr.Session, tr.Index, len(tr.Request))
				}
				if !strings.Contains(tr.Err, "more than max_tokens 64 allows") || tr.Failure != workload.FailureFast {
					t.Errorf("session %d turn %d: error %q (%s), want the runaway's", tr.Session, tr.Index, tr.Err, tr.Failure)
				}
				var text int64
				if len(tr.Response.Choices) > 0 {
					text = int64(len(tr.Response.Choices[0].Message.Content))
				}
				// The cut comes at the event that crosses the budget.
				if text > budget+512 || len(tr.Raw) > 256<<10 {
					t.Errorf("session %d turn %d: %d bytes of text and %d of raw body kept; want at most %d and 256 KiB",
						tr.Session, tr.Index, text, len(tr.Raw), budget+512)
				}
			}
			for _, s := range log.sessions {
				if s.Status != workload.SessionError || s.Turns != 1 {
					t.Errorf("session %d: %s after %d turns (%s); want an error after the first", s.Session, s.Status, s.Turns, s.Err)
				}
			}
		})
	}
}

// TestReplyBudget: a reply within what max_tokens allows passes however its text is cut
// into events; one past the bytes or the events it allows fails with ErrPastMaxTokens,
// and a request without max_tokens has no budget.
func TestReplyBudget(t *testing.T) {
	// The base URL's path says the reply: /NxS, N events of S bytes of text each.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n, size int
		fmt.Sscanf(r.URL.Path, "/%dx%d/", &n, &size)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q}}]}`+"\n\n",
				strings.Repeat(string(rune('a'+i%26)), size))
		}
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	const maxTokens = 100
	budget := maxTokens*workload.ReplyBytesPerToken + workload.ReplySlackBytes
	events := maxTokens*workload.ReplyEventsPerToken + workload.ReplySlackEvents
	for _, tc := range []struct {
		name      string
		reply     string
		maxTokens int
		past      bool
	}{
		{"max_tokens of four-byte tokens", fmt.Sprintf("%dx4", maxTokens), maxTokens, false},
		{"bytes at the budget", fmt.Sprintf("%dx%d", 2, budget/2), maxTokens, false},
		{"bytes past the budget", fmt.Sprintf("%dx%d", 2, budget/2+1), maxTokens, true},
		{"events at the budget", fmt.Sprintf("%dx1", events), maxTokens, false},
		{"events past the budget", fmt.Sprintf("%dx1", events+1), maxTokens, true},
		{"no max_tokens", fmt.Sprintf("%dx1", 4*events), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &workload.Client{}
			ex := c.Chat(context.Background(), srv.URL+"/"+tc.reply, openai.ChatRequest{Model: "m", Stream: true, MaxTokens: tc.maxTokens,
				Messages: []openai.Message{{Role: "user", Content: "hi"}}})
			if got := errors.Is(ex.Err, workload.ErrPastMaxTokens); got != tc.past {
				t.Fatalf("error %v; want past max_tokens: %v", ex.Err, tc.past)
			}
			if !tc.past && ex.Err != nil {
				t.Fatal(ex.Err)
			}
		})
	}
}
