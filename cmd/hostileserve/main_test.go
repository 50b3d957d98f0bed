package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

// The test binary doubles as the engine: started with HOSTILESERVE_MAIN=1 it runs main.
func TestMain(m *testing.M) {
	if os.Getenv("HOSTILESERVE_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type engine struct {
	cmd  *exec.Cmd
	base string
	log  *bytes.Buffer
	// lines receives the engine's log lines after the one that names its port.
	lines chan string
}

func start(t *testing.T, env []string, args ...string) *engine {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "HOSTILESERVE_MAIN=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the engine and any child it left
		cmd.Wait()
	})
	e := &engine{cmd: cmd, log: &bytes.Buffer{}, lines: make(chan string, 1024)}
	port := regexp.MustCompile(`listening on port (\d+)`)
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		if m := port.FindStringSubmatch(sc.Text()); m != nil {
			e.base = "http://127.0.0.1:" + m[1]
			break
		}
	}
	if e.base == "" {
		t.Fatal("hostileserve never said which port it took")
	}
	go func() {
		defer close(e.lines)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
	}()
	return e
}

func (e *engine) chat(t *testing.T, ctx context.Context, stream bool) (*http.Response, error) {
	t.Helper()
	body, _ := json.Marshal(openai.ChatRequest{Model: modelName, Stream: stream,
		Messages: []openai.Message{{Role: "user", Content: "hi"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return http.DefaultClient.Do(req)
}

// content reads a reply's assistant content, streamed or not.
func content(t *testing.T, resp *http.Response) (string, []string) {
	t.Helper()
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var cc openai.ChatCompletion
		if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil {
			t.Fatal(err)
		}
		return cc.Choices[0].Message.Content, nil
	}
	var pieces []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatal(err)
		}
		if c := ch.Choices[0].Delta.Content; c != "" {
			pieces = append(pieces, c)
		}
	}
	return strings.Join(pieces, ""), pieces
}

func TestSplitSecretStreamsFragmentsAndEncodedForms(t *testing.T) {
	const secret = "hf_SPLITsecretVALUE123"
	e := start(t, []string{"HF_TOKEN=" + secret}, "--mode", "split-secret", "--chunk", "3")
	ctx := context.Background()
	for probe := true; ; probe = false {
		resp, err := e.chat(t, ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		text, pieces := content(t, resp)
		if probe {
			continue // the readiness probe gets a plain answer
		}
		for _, p := range pieces {
			if strings.Contains(p, secret) {
				t.Fatalf("a single event carries the whole secret: %q", p)
			}
		}
		for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), jsonEscaped(secret)} {
			if !strings.Contains(text, form) {
				t.Errorf("assembled reply %q lacks %q", text, form)
			}
		}
		break
	}
}

func TestFastFiveHundredAfterTheReadinessProbe(t *testing.T) {
	e := start(t, nil, "--mode", "fast-500")
	ctx := context.Background()
	codes := []int{}
	for range 3 {
		resp, err := e.chat(t, ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 500 500]" {
		t.Fatalf("status codes %v, want the probe answered then 500s", codes)
	}
}

func TestWedgeHangsWhileHealthAnswers(t *testing.T) {
	e := start(t, nil, "--mode", "wedge")
	ctx := context.Background()
	resp, err := e.chat(t, ctx, false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readiness probe: %v %v", resp, err)
	}
	resp.Body.Close()
	hung, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		resp, err := e.chat(t, hung, false)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// Health still answers while the request hangs.
	h, err := http.Get(e.base + "/health")
	if err != nil || h.StatusCode != 200 {
		t.Fatalf("health while wedged: %v %v", h, err)
	}
	h.Body.Close()
	select {
	case err := <-done:
		t.Fatalf("a wedged request returned: %v", err)
	default:
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a wedged request returned a response")
	}
}

func TestIgnoreSigtermLeavesAChild(t *testing.T) {
	e := start(t, nil, "--mode", "ignore-sigterm")
	var child int
	for line := range e.lines {
		if _, err := fmt.Sscanf(line, "hostileserve started child pid=%d", &child); err == nil {
			break
		}
	}
	if child == 0 {
		t.Fatal("no child pid logged")
	}
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Still serving after SIGTERM: a request round-trips.
	resp, err := e.chat(t, context.Background(), false)
	if err != nil {
		t.Fatalf("engine gone after SIGTERM: %v", err)
	}
	resp.Body.Close()
	if err := syscall.Kill(child, 0); err != nil {
		t.Fatalf("child %d not alive: %v", child, err)
	}
	// Its process group holds both, so a group kill reaps them (the cleanup does).
	if pgid, err := syscall.Getpgid(child); err != nil || pgid != e.cmd.Process.Pid {
		t.Fatalf("child pgid %d (%v), want %d", pgid, err, e.cmd.Process.Pid)
	}
}

func TestGiantModesSendWhatTheyPromise(t *testing.T) {
	const size = 3 << 20
	e := start(t, nil, "--mode", "giant-body,giant-stream", "--size", fmt.Sprint(size))
	ctx := context.Background()
	resp, _ := e.chat(t, ctx, false) // probe
	resp.Body.Close()
	resp, err := e.chat(t, ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := content(t, resp); len(text) != size {
		t.Errorf("giant body content %d bytes, want %d", len(text), size)
	}
	resp, err = e.chat(t, ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	text, pieces := content(t, resp)
	if len(text) != size || len(pieces) < size/4096 {
		t.Errorf("giant stream %d bytes in %d events, want %d in small events", len(text), len(pieces), size)
	}
}

// TestRunawayIgnoresMaxTokens: asked for 8 tokens, the runaway mode sends --size bytes of
// text in events of --chunk bytes, streamed or whole, the readiness probe included when
// --ready-requests is 0.
func TestRunawayIgnoresMaxTokens(t *testing.T) {
	const size = 1 << 20
	e := start(t, nil, "--mode", "runaway", "--size", fmt.Sprint(size), "--chunk", "100", "--ready-requests", "0")
	for _, stream := range []bool{true, false} {
		body, _ := json.Marshal(openai.ChatRequest{Model: modelName, Stream: stream, MaxTokens: 8,
			Messages: []openai.Message{{Role: "user", Content: "hi"}}})
		resp, err := http.Post(e.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		text, pieces := content(t, resp)
		if len(text) != size || !strings.HasPrefix(text, runawayText) || stream && len(pieces) != size/100+1 {
			t.Errorf("stream %v: %d bytes in %d events, want %d in events of 100", stream, len(text), len(pieces), size)
		}
	}
}

func TestLogFloodIsOneLongLine(t *testing.T) {
	const size = 2 << 20
	e := start(t, nil, "--mode", "log-flood", "--size", fmt.Sprint(size))
	for line := range e.lines {
		if strings.HasPrefix(line, "xxxx") {
			if len(line) != size {
				t.Fatalf("flood line of %d bytes, want %d", len(line), size)
			}
			return
		}
	}
	t.Fatal("no flood line")
}

func TestUnknownModeIsBadUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--mode", "melt"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown mode "melt"`) {
		t.Fatalf("exit %d, %q", code, stderr.String())
	}
}
