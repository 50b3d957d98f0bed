//go:build unix

package gguf

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/internal/testkit/lockedbuf"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
)

// This file runs a TinyLlama model in a real ollama (written against
// v0.6.5). The helpers that start `ollama serve` live here, in a test file,
// so that no other package depends on them.

// ollamaServer is an `ollama serve` process started for one test, with its
// own port, model directory and home directory.
type ollamaServer struct {
	url    string            // http://127.0.0.1:port
	log    *lockedbuf.Buffer // the server's stdout and stderr, including its runners'
	exited chan struct{}     // closed when the process has exited
}

// startOllama starts `ollama serve` in a new process group and waits until
// GET / answers 200. The test's cleanup kills the whole process group,
// which includes the runner processes the server starts.
func startOllama(t *testing.T, bin string) *ollamaServer {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)

	cmd := exec.Command(bin, "serve")
	cmd.Env = append(cleanEnv(),
		"HOME="+home,
		"OLLAMA_HOST="+addr,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"),
	)
	s := &ollamaServer{url: "http://" + addr, log: &lockedbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	pgid := cmd.Process.Pid
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Logf("ollama did not exit on SIGTERM; killing process group %d", pgid)
		}
		// Runners may outlive the server; make sure the group is gone.
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exited
		if t.Failed() {
			t.Logf("ollama log:\n%s", s.log.String())
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.url + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ollama at %s did not answer GET / with 200 within 60s (last error %v)", s.url, err)
		}
		select {
		case <-s.exited:
			t.Fatalf("ollama serve exited before answering; log:\n%s", s.log.String())
		case <-tick.C:
		}
	}
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// cleanEnv returns the environment without HOME and OLLAMA_* variables, so
// that the caller's ollama settings do not leak into the test server.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OLLAMA_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// do sends a request and returns the status and body.
func (s *ollamaServer) do(t *testing.T, method, path, contentType string, body io.Reader, timeout time.Duration) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, data
}

// createModel uploads a GGUF file as a blob and registers it under name,
// the way ollama v0.6.5's client does it: POST /api/blobs/sha256:<hex> with
// the file, then POST /api/create naming the blob in "files" (see
// api.CreateRequest and server.CreateHandler in v0.6.5).
func (s *ollamaServer) createModel(t *testing.T, name string, model []byte, template string, params map[string]any) {
	t.Helper()
	sum := sha256.Sum256(model)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	status, body := s.do(t, http.MethodPost, "/api/blobs/"+digest, "application/octet-stream", bytes.NewReader(model), time.Minute)
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("POST /api/blobs/%s: %d %s", digest, status, body)
	}

	req, err := json.Marshal(map[string]any{
		"model":      name,
		"files":      map[string]string{name + ".gguf": digest},
		"template":   template,
		"parameters": params,
	})
	if err != nil {
		t.Fatal(err)
	}
	status, body = s.do(t, http.MethodPost, "/api/create", "application/json", bytes.NewReader(req), 2*time.Minute)
	if status != http.StatusOK {
		t.Fatalf("POST /api/create: %d %s", status, body)
	}
	// The response is a stream of JSON progress lines ending in
	// {"status":"success"}, or a line with "error".
	var last string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("POST /api/create: bad progress line %q: %v", sc.Text(), err)
		}
		if line.Error != "" {
			t.Fatalf("POST /api/create: %s", line.Error)
		}
		last = line.Status
	}
	if last != "success" {
		t.Fatalf("POST /api/create ended with status %q:\n%s", last, body)
	}
}

type chatReply struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// chat sends one OpenAI-style chat completion with temperature 0.
func (s *ollamaServer) chat(t *testing.T, model, prompt string, maxTokens int) chatReply {
	t.Helper()
	req, err := json.Marshal(map[string]any{
		"model":       model,
		"messages":    []map[string]string{{"role": "user", "content": prompt}},
		"temperature": 0,
		"max_tokens":  maxTokens,
	})
	if err != nil {
		t.Fatal(err)
	}
	status, body := s.do(t, http.MethodPost, "/v1/chat/completions", "application/json", bytes.NewReader(req), 5*time.Minute)
	if status != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions: %d %s", status, body)
	}
	var r chatReply
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("POST /v1/chat/completions: %v in %s", err, body)
	}
	if len(r.Choices) != 1 {
		t.Fatalf("POST /v1/chat/completions: %d choices in %s", len(r.Choices), body)
	}
	return r
}

// tinyTemplate is the chat template registered with the model.
const tinyTemplate = "{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}\n{{- end }}<|assistant|>"

// kvCacheLine matches the llama.cpp log lines that show how the runner set
// up the context and KV cache, and the line with the runner's command.
var kvCacheLine = regexp.MustCompile(`type_k|flash_attn|n_ctx|--parallel`)

func TestOllamaEndToEnd(t *testing.T) {
	bin := testbin.Ollama(t)
	s := startOllama(t, bin)

	model := writeModel(t, TinyLlama{})
	s.createModel(t, "tiny", model, tinyTemplate, map[string]any{"num_ctx": 4096})

	const prompt = "Tell me a story about the world."
	start := time.Now()
	first := s.chat(t, "tiny", prompt, 32)
	loadAndAnswer := time.Since(start)
	start = time.Now()
	second := s.chat(t, "tiny", prompt, 32)
	t.Logf("model %d bytes; first reply (load and answer) %v, second %v", len(model), loadAndAnswer, time.Since(start))

	a, b := first.Choices[0].Message.Content, second.Choices[0].Message.Content
	t.Logf("reply: %q", a)
	if strings.TrimSpace(a) == "" {
		t.Fatal("empty reply")
	}
	if a != b {
		t.Errorf("greedy replies differ:\n%q\n%q", a, b)
	}
	words := strings.Fields(a)
	distinct := make(map[string]bool)
	for _, w := range words {
		distinct[w] = true
	}
	if len(distinct) < 2 {
		t.Errorf("reply repeats a single token: %q", a)
	}

	// What the model's construction promises: no end-of-sequence token, so
	// the reply runs to max_tokens, and only words and punctuation.
	if first.Usage.CompletionTokens != 32 || first.Choices[0].FinishReason != "length" {
		t.Errorf("completion_tokens %d, finish_reason %q; want 32 and length",
			first.Usage.CompletionTokens, first.Choices[0].FinishReason)
	}
	if !utf8.ValidString(a) {
		t.Errorf("reply is not valid UTF-8: %q", a)
	}
	known := make(map[string]bool)
	for _, w := range vocabWords {
		known[w] = true
	}
	for _, w := range words {
		if core := strings.TrimRight(w, vocabPunct); core != "" && !known[core] {
			t.Errorf("reply word %q is not in the vocabulary's word list", w)
		}
	}

	for _, line := range strings.Split(s.log.String(), "\n") {
		if kvCacheLine.MatchString(line) {
			t.Logf("ollama: %s", line)
		}
	}
}
