// Command hostileserve is an OpenAI-compatible engine that misbehaves on purpose, so that
// arbiter's own defences can be tested against a real process on loopback: replies too
// large to hold, secrets streamed in fragments or encoded, requests that fail fast, an
// engine that wedges after it was found ready, one that ignores SIGTERM and leaves a child
// behind, and a log line without end. It is a test engine, never a reference: refserve is
// the engine that behaves like the real ones.
//
// Modes (--mode, comma-separated, combinable):
//
//	giant-body     non-streaming replies whose content is --size bytes
//	giant-stream   streaming replies of --size bytes in small events
//	giant-event    streaming replies that send one event of --size bytes
//	runaway        replies that ignore max_tokens: --size bytes of text, streamed in events
//	               of --chunk bytes, whatever the request's max_tokens asks
//	split-secret   replies that carry the value of $--secret-env in --chunk-byte pieces,
//	               and in base64, percent-encoded and JSON-escaped form; the log prints them too
//	fast-500       every chat completion after the readiness probe fails at once with HTTP 500
//	wedge          after --ready-requests completions, every chat completion hangs until the
//	               client goes away; /health keeps answering 200
//	ignore-sigterm SIGTERM and SIGINT are ignored; a child process that also ignores them is
//	               started and its pid logged
//	log-flood      --size bytes of log written as one line without a newline
//
// Like refserve it listens on --host:--port (the port 0 picks a free one) and logs the
// port it took.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// readyLine matches what refserve and SGLang print once they serve.
const readyLine = "The server is fired up and ready to roll!"

const modelName = "hostile-1"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	host, secretEnv string
	port            int
	modes           map[string]bool
	size            int64
	chunk           int
	readyRequests   int64
	child           bool
}

var knownModes = []string{"giant-body", "giant-stream", "giant-event", "runaway", "split-secret", "fast-500", "wedge", "ignore-sigterm", "log-flood"}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("hostileserve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var modes string
	fs.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.port, "port", 0, "port to listen on (0: any free port)")
	fs.StringVar(&modes, "mode", "", "comma-separated misbehaviours: "+strings.Join(knownModes, ", "))
	fs.Int64Var(&c.size, "size", 64<<20, "bytes of a giant reply, event or log line")
	fs.IntVar(&c.chunk, "chunk", 3, "bytes of the secret per streamed piece (split-secret), of text per event (runaway)")
	fs.StringVar(&c.secretEnv, "secret-env", "HF_TOKEN", "variable whose value split-secret leaks")
	fs.Int64Var(&c.readyRequests, "ready-requests", 1, "chat completions answered normally before fast-500 or wedge begins (the readiness probe is one)")
	fs.BoolVar(&c.child, "child", false, "run as the child that ignore-sigterm leaves behind")
	fs.String("tool-call-parser", "", "accepted for command-line compatibility with refserve; ignored")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.modes = map[string]bool{}
	for _, m := range strings.Split(modes, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		known := false
		for _, k := range knownModes {
			known = known || k == m
		}
		if !known {
			return c, fmt.Errorf("--mode: unknown mode %q (want %s)", m, strings.Join(knownModes, ", "))
		}
		c.modes[m] = true
	}
	if c.size < 0 || c.chunk < 1 {
		return c, errors.New("--size must be >= 0 and --chunk >= 1")
	}
	return c, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "hostileserve: %v\n", err)
		return 2
	}
	if c.child {
		// The orphan: ignores polite signals and lives until killed.
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		fmt.Fprintf(stderr, "hostileserve child pid=%d waiting\n", os.Getpid())
		select {}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	if c.modes["ignore-sigterm"] {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		go func() { <-sigs; stop() }()
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		fmt.Fprintf(stderr, "hostileserve: %v\n", err)
		return 1
	}
	s := &server{cfg: c, secret: os.Getenv(c.secretEnv), log: stderr}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Fprintf(stderr, "hostileserve listening on port %d, modes %s\n", ln.Addr().(*net.TCPAddr).Port, strings.Join(keys(c.modes), ","))
	if c.modes["ignore-sigterm"] {
		child := exec.Command(os.Args[0], "--child")
		child.Stderr = stderr
		if err := child.Start(); err != nil {
			fmt.Fprintf(stderr, "hostileserve: child: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "hostileserve started child pid=%d\n", child.Process.Pid)
	}
	if c.modes["split-secret"] && s.secret != "" {
		// A log that prints the secret in forms a plain search for the value misses.
		fmt.Fprintf(stderr, "token b64=%s url=%s json=%s\n", base64.StdEncoding.EncodeToString([]byte(s.secret)),
			urlEncoded(s.secret), jsonEscaped(s.secret))
	}
	if c.modes["log-flood"] {
		writeFlood(stderr, c.size)
	}
	fmt.Fprintln(stderr, readyLine)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "hostileserve: %v\n", err)
		return 1
	}
	return 0
}

func keys(m map[string]bool) []string {
	var out []string
	for _, k := range knownModes {
		if m[k] {
			out = append(out, k)
		}
	}
	return out
}

// writeFlood writes n bytes of log with no newline among them, then ends the line.
func writeFlood(w io.Writer, n int64) {
	block := []byte(strings.Repeat("x", 64<<10))
	for n > 0 {
		k := min(n, int64(len(block)))
		w.Write(block[:k])
		n -= k
	}
	fmt.Fprintln(w)
}

type server struct {
	cfg       config
	secret    string
	log       io.Writer
	completed atomic.Int64
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	mux.HandleFunc("GET /health", ok)
	mux.HandleFunc("GET /health_generate", ok)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, openai.ModelList{Object: "list", Data: []openai.Model{{ID: modelName, Object: "model"}}})
	})
	mux.HandleFunc("GET /get_server_info", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"engine": "hostileserve", "modes": keys(s.cfg.modes)})
	})
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *server) chat(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ready := s.completed.Load() >= s.cfg.readyRequests
	switch {
	case ready && s.cfg.modes["fast-500"]:
		http.Error(w, `{"error":"internal server error"}`, http.StatusInternalServerError)
		return
	case ready && s.cfg.modes["wedge"]:
		<-r.Context().Done() // answers nothing, ever
		return
	}
	defer s.completed.Add(1)
	if !ready {
		// The readiness probe gets a short, well-formed answer whatever the mode.
		s.reply(w, req, []string{"ok"})
		return
	}
	switch {
	case s.cfg.modes["giant-event"] && req.Stream:
		s.reply(w, req, []string{strings.Repeat("a", int(s.cfg.size))})
	case s.cfg.modes["giant-body"] && !req.Stream, s.cfg.modes["giant-stream"] && req.Stream:
		pieces := make([]string, 0, s.cfg.size/4096+1)
		for n := s.cfg.size; n > 0; n -= 4096 {
			pieces = append(pieces, strings.Repeat("b", int(min(n, 4096))))
		}
		s.reply(w, req, pieces)
	case s.cfg.modes["runaway"]:
		s.runaway(w, req)
	case s.cfg.modes["split-secret"]:
		s.reply(w, req, s.secretPieces())
	default:
		s.reply(w, req, []string{"The answer is 42."})
	}
}

// secretPieces is a reply that carries the secret split into chunk-sized fragments, then
// whole in its encoded forms.
func (s *server) secretPieces() []string {
	pieces := []string{"Here is the token: "}
	for i := 0; i < len(s.secret); i += s.cfg.chunk {
		pieces = append(pieces, s.secret[i:min(i+s.cfg.chunk, len(s.secret))])
	}
	pieces = append(pieces, " base64 ", base64.StdEncoding.EncodeToString([]byte(s.secret)),
		" url ", urlEncoded(s.secret), " json ", jsonEscaped(s.secret), ".")
	return pieces
}

// urlEncoded is the secret with every byte percent-encoded: the form a URL or a form body
// may carry, which no search for the plain value finds.
func urlEncoded(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&b, "%%%02X", v[i])
	}
	return b.String()
}

// jsonEscaped is the secret as it looks inside a JSON string with every character escaped.
func jsonEscaped(v string) string {
	var b strings.Builder
	for _, r := range v {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// runawayText is what a runaway reply repeats: words, as a model stuck in a loop
// writes them.
const runawayText = "and then the assistant kept on writing, "

// runaway answers with --size bytes of text whatever max_tokens says, made as it is sent
// (the default size is too large to hold), in events of --chunk bytes when streaming.
func (s *server) runaway(w http.ResponseWriter, req openai.ChatRequest) {
	text := func(from, n int64) string {
		var b strings.Builder
		b.Grow(int(n))
		for i := from; i < from+n; i++ {
			b.WriteByte(runawayText[i%int64(len(runawayText))])
		}
		return b.String()
	}
	if !req.Stream {
		s.reply(w, req, []string{text(0, s.cfg.size)})
		return
	}
	id := fmt.Sprintf("chatcmpl-%d", s.completed.Load())
	created := time.Now().Unix()
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	bw := bufio.NewWriterSize(w, 64<<10)
	send := func(chunk openai.ChatCompletionChunk) bool {
		b, _ := json.Marshal(chunk)
		_, err := fmt.Fprintf(bw, "data: %s\n\n", b)
		return err == nil
	}
	events := 0
	for at := int64(0); at < s.cfg.size; at += int64(s.cfg.chunk) {
		d := openai.Delta{Content: text(at, min(int64(s.cfg.chunk), s.cfg.size-at))}
		if at == 0 {
			d.Role = "assistant"
		}
		if !send(openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
			Choices: []openai.ChunkChoice{{Delta: d}}}) {
			return
		}
		if events++; events%64 == 0 {
			// Flushed now and then, as an engine sends a batch of tokens at once.
			if bw.Flush() != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
	length := "length"
	send(openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
		Choices: []openai.ChunkChoice{{Delta: openai.Delta{}, FinishReason: &length}},
		Usage:   &openai.Usage{PromptTokens: 1, CompletionTokens: events, TotalTokens: 1 + events}})
	fmt.Fprint(bw, "data: [DONE]\n\n")
	bw.Flush()
}

// reply answers with content made of pieces: one event per piece when streaming, their
// concatenation otherwise.
func (s *server) reply(w http.ResponseWriter, req openai.ChatRequest, pieces []string) {
	id := fmt.Sprintf("chatcmpl-%d", s.completed.Load())
	created := time.Now().Unix()
	if !req.Stream {
		writeJSON(w, openai.ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: modelName,
			Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: strings.Join(pieces, "")}, FinishReason: "stop"}},
			Usage:   &openai.Usage{PromptTokens: 1, CompletionTokens: len(pieces), TotalTokens: 1 + len(pieces)}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(chunk openai.ChatCompletionChunk) bool {
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for i, p := range pieces {
		d := openai.Delta{Content: p}
		if i == 0 {
			d.Role = "assistant"
		}
		if !send(openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
			Choices: []openai.ChunkChoice{{Delta: d}}}) {
			return
		}
	}
	stop := "stop"
	send(openai.ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
		Choices: []openai.ChunkChoice{{Delta: openai.Delta{}, FinishReason: &stop}}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
