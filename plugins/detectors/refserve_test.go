package detectors

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
	"github.com/arbiterlab/arbiter/workload"
)

// startRefserve builds the reference engine once per test binary, runs it on a free
// loopback port with env and args, and returns its base URL; it is stopped when the test
// ends.
func startRefserve(t *testing.T, env []string, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs refserve")
	}
	cmd := exec.Command(testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve"), append([]string{"--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	urlRE := regexp.MustCompile(`url=(http://\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() { // read to the end, so the engine never blocks on its log
			if m := urlRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatal("refserve exited before it listened")
		}
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("refserve did not say where it listens within 30s")
	}
	return ""
}

// turnRecorder keeps the turns a workload reports.
type turnRecorder struct {
	mu    sync.Mutex
	turns []workload.Turn
}

func (r *turnRecorder) Turn(t workload.Turn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.turns = append(r.turns, t)
}

func (r *turnRecorder) SessionDone(workload.SessionResult) {}

// drive runs the tool-call agent against base and returns every turn.
func drive(t *testing.T, base string, cfg workload.Config) []workload.Turn {
	t.Helper()
	rec := &turnRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := workload.Run(ctx, cfg, base, rec); err != nil {
		t.Fatal(err)
	}
	return rec.turns
}

func judge(t *testing.T, name string, turn workload.Turn) (bool, string) {
	t.Helper()
	d, _ := Builtin(name)
	l, err := d.Detect(context.Background(), plugins.Response{Completion: turn.Response, Tools: turn.Tools, ToolChoice: turn.ToolChoice})
	if err != nil {
		t.Fatal(err)
	}
	return l.Corrupted, l.Reason
}

// TestFinishAnomalyOnRefserveRepliesCutByMaxTokens: with max_tokens too small for a
// call, refserve (like SGLang) stops with "length" and hands the markup its parser held
// back to the client as content: a finish anomaly in every parser's format. An answer in
// prose cut the same way is not.
func TestFinishAnomalyOnRefserveRepliesCutByMaxTokens(t *testing.T) {
	for _, parser := range []string{"deepseekv4", "deepseekv3", "qwen25", "kimi_k2", "llama3"} {
		base := startRefserve(t, []string{"BF16_INDEX_K=0"}, "--inter-token-delay", "0s", "--tool-call-parser", parser)
		cut := 0
		for _, turn := range drive(t, base, workload.Config{Sessions: 4, Rounds: 2, Concurrency: 4, Seed: 3, MaxTokens: 5}) {
			if turn.Err != "" || len(turn.Response.Choices) == 0 {
				t.Fatalf("%s: turn %d/%d failed: %s", parser, turn.Session, turn.Index, turn.Err)
			}
			bad, why := judge(t, FinishAnomalyName, turn)
			if fr := turn.Response.Choices[0].FinishReason; fr != "length" || !bad || !strings.Contains(why, `finish_reason "length" cut a tool call short`) {
				t.Errorf("%s: call cut by max_tokens (finish %q) judged %v %q: %q", parser, fr, bad, why, turn.Response.Choices[0].Message.Content)
			}
			cut++
		}
		if cut == 0 {
			t.Fatalf("%s: no turn", parser)
		}
	}

	// The same conversation once the tool answered: the agent writes prose, cut short.
	base := startRefserve(t, []string{"BF16_INDEX_K=0"}, "--inter-token-delay", "0s")
	script := workload.NewScript(3, 0, 1)
	msgs := []openai.Message{{Role: "system", Content: script.System}, {Role: "user", Content: script.Users[0]}}
	for range 4 { // answer the agent's calls until it writes its answer
		req := openai.ChatRequest{Messages: msgs, Tools: script.Tools, ToolChoice: json.RawMessage(`"auto"`), MaxTokens: 5}
		body, _ := json.Marshal(req)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var c openai.ChatCompletion
		err = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if err != nil || len(c.Choices) != 1 {
			t.Fatalf("reply: %v %+v", err, c)
		}
		turn := workload.Turn{Response: c, Tools: script.Tools, ToolChoice: req.ToolChoice}
		bad, why := judge(t, FinishAnomalyName, turn)
		_, markup := findLeak(c.Choices[0].Message.Content)
		if !markup {
			if c.Choices[0].FinishReason != "length" || bad {
				t.Fatalf("prose cut by max_tokens (finish %q) judged %v %q", c.Choices[0].FinishReason, bad, why)
			}
			return
		}
		// Cut mid-call: answer the call the agent meant, with its full arguments.
		full := req
		full.MaxTokens = 0
		body, _ = json.Marshal(full)
		resp, err = http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var whole openai.ChatCompletion
		json.NewDecoder(resp.Body).Decode(&whole)
		resp.Body.Close()
		m := whole.Choices[0].Message
		if len(m.ToolCalls) == 0 {
			t.Fatalf("uncut reply has no call: %+v", m)
		}
		msgs = append(msgs, openai.Message{Role: "assistant", ToolCalls: m.ToolCalls})
		for _, tc := range m.ToolCalls {
			msgs = append(msgs, openai.Message{Role: "tool", ToolCallID: tc.ID, Name: tc.Function.Name, Content: workload.ToolResult(script.Tools, tc.Function)})
		}
	}
	t.Fatal("the agent never answered in prose")
}

// TestFinishAnomalyOnCorruptedRefserveReplies: refserve's corrupted replies end with
// "stop" and markup in content, as in the field; finish-anomaly flags exactly the turns
// in which dsml-leak finds markup, and none of control's. toolcall-schema, judging the
// same calls by the same schemas refserve built them from, flags none.
func TestFinishAnomalyOnCorruptedRefserveReplies(t *testing.T) {
	for _, arm := range []string{"0", "1"} {
		t.Run("BF16_INDEX_K="+arm, func(t *testing.T) {
			t.Parallel()
			base := startRefserve(t, []string{"BF16_INDEX_K=" + arm}, "--enable-hierarchical-cache")
			flagged := 0
			for _, turn := range drive(t, base, workload.Config{Sessions: 100, Rounds: 3, Concurrency: 100, Seed: 42}) {
				finish, why := judge(t, FinishAnomalyName, turn)
				leak, _ := judge(t, DSMLLeakName, turn)
				// refserve builds its calls from the schemas the detector reads: a structured
				// call is never flagged, in either arm.
				if bad, why := judge(t, ToolcallSchemaName, turn); bad {
					t.Errorf("BF16_INDEX_K=%s turn %d/%d: toolcall-schema flagged refserve's own call: %q", arm, turn.Session, turn.Index, why)
				}
				if finish != leak {
					t.Errorf("BF16_INDEX_K=%s turn %d/%d: finish-anomaly %v (%q) but dsml-leak %v", arm, turn.Session, turn.Index, finish, why, leak)
				}
				if finish {
					flagged++
					if fr := turn.Response.Choices[0].FinishReason; fr != "stop" || !strings.HasPrefix(why, `finish_reason "stop" with DeepSeek`) {
						t.Errorf("flagged reply ended %q: %q", fr, why)
					}
				}
			}
			if (arm == "0") != (flagged == 0) {
				t.Errorf("BF16_INDEX_K=%s: %d replies flagged", arm, flagged)
			}
			t.Logf("BF16_INDEX_K=%s: %d replies flagged", arm, flagged)
		})
	}
}
