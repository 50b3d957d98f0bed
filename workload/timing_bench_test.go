package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// The timing benchmark's server runs in a child process (this test binary, running
// TestPacedServerChild): a server in the benchmark's own process would share the
// clients' heap, so every pause of the clients' garbage collector would also hold up the
// server's pacing and its clock readings, and the two clients' errors would depend on
// each other's garbage. The child shares the machine's cores, not the heap.

// pacedHandler streams tokens tokens: the first ttft after the request arrives, then
// one every gap. Each token's text is the server's clock when it wrote it ("t<unix
// ns>"), so that a client's timing error, arrival minus sending, is measured token by
// token. GET /warm?n=N answers once N such requests are in, so that a client opens N
// connections at once and keeps them, as arbiter's Client.Warm does for arbiter.
func pacedHandler(tokens int, ttft, gap time.Duration) http.Handler {
	var (
		mu      sync.Mutex
		waiting int
		release = make(chan struct{})
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			mu.Lock()
			waiting++
			ch := release
			if waiting >= n {
				close(release)
				waiting, release = 0, make(chan struct{})
			}
			mu.Unlock()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.Method == http.MethodGet { // Client.Warm's GET /v1/models
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		start := time.Now()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		for k := range tokens {
			time.Sleep(time.Until(start.Add(ttft + time.Duration(k)*gap)))
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":null}]}`+"\n\n", time.Now().UnixNano())
			f.Flush()
		}
		fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}`+"\n\ndata: [DONE]\n\n", tokens, tokens+1)
	})
}

// pacedServer starts the paced server in a child process and returns its base URL; the
// child ends when the benchmark does (its stdin closes).
func pacedServer(tb testing.TB, tokens int, ttft, gap time.Duration) string {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPacedServerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("ARBITER_PACED_SERVER=%d,%d,%d", tokens, ttft, gap))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if base, ok := strings.CutPrefix(sc.Text(), "paced-server "); ok {
			go io.Copy(io.Discard, stdout)
			return base
		}
	}
	tb.Fatalf("paced server child did not start: %v", sc.Err())
	return ""
}

// TestPacedServerChild is the server of BenchmarkStreamTiming; it does nothing without
// ARBITER_PACED_SERVER (tokens,ttft ns,gap ns). It serves until its stdin closes.
func TestPacedServerChild(t *testing.T) {
	arg := os.Getenv("ARBITER_PACED_SERVER")
	if arg == "" {
		t.Skip("runs only as the child of BenchmarkStreamTiming")
	}
	var tokens int
	var ttft, gap time.Duration
	if _, err := fmt.Sscanf(arg, "%d,%d,%d", &tokens, &ttft, &gap); err != nil {
		t.Fatalf("ARBITER_PACED_SERVER=%q: %v", arg, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: pacedHandler(tokens, ttft, gap), MaxHeaderBytes: 1 << 16}
	go srv.Serve(ln)
	fmt.Printf("paced-server http://%s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

// sentAt reads the server's clock out of a token's text.
func sentAt(text []byte) (time.Time, bool) {
	i := bytes.Index(text, []byte(`"content":"t`))
	if i < 0 {
		return time.Time{}, false
	}
	rest := text[i+len(`"content":"t`):]
	j := bytes.IndexByte(rest, ' ')
	if j < 0 {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return time.Unix(0, ns), err == nil
}

// timingErrors are, over every stream, the first token's error (arrival − sending) and
// every later token's inter-token error |arrival gap − sending gap|, in ms.
type timingErrors struct {
	ttft, itl []float64
	gcs       uint32 // garbage collections that ran during the streams
}

func (e *timingErrors) add(arrived, sent []time.Time) {
	for k := range arrived {
		if k == 0 {
			e.ttft = append(e.ttft, ms(arrived[0].Sub(sent[0])))
			continue
		}
		d := arrived[k].Sub(arrived[k-1]) - sent[k].Sub(sent[k-1])
		e.itl = append(e.itl, ms(max(d, -d)))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func p(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// arbiterStreams runs n concurrent streams through the workload client, after a start
// barrier, and reads each token's arrival from the exchange's per-token times. The
// server's clock readings are read out of the kept bodies only after every stream has
// ended: parsing them is the benchmark's work, not the client's, and done at the end of
// each stream it would land on the last tokens of the streams still running.
func arbiterStreams(tb testing.TB, base string, n int) timingErrors {
	req := openai.ChatRequest{Model: "m", Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.Message{{Role: "user", Content: "go"}}}
	body, _ := json.Marshal(req)
	// The collection policy Run applies to every workload, applied here the same way.
	restore := ApplyRunGCPolicy(n)
	c := NewClient(n)
	defer c.CloseIdleConnections()
	if err := c.Warm(context.Background(), base, n); err != nil {
		tb.Fatal(err)
	}
	exs := make([]Exchange, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			exs[i] = c.chatBody(context.Background(), base, req, body)
		})
	}
	gc0 := startOnCollectedHeap(gate)
	wg.Wait()
	var errs timingErrors
	errs.gcs = numGC() - gc0
	restore()
	for _, ex := range exs {
		if ex.Err != nil {
			tb.Error(ex.Err)
			continue
		}
		var sent, arrived []time.Time
		var dec sseDecoder
		dec.Feed(ex.Raw, func(p []byte) error {
			if t, ok := sentAt(p); ok && len(arrived) < len(ex.DeltaTimes) {
				sent = append(sent, t)
				arrived = append(arrived, ex.Started.Add(ex.DeltaTimes[len(arrived)]))
			}
			return nil
		})
		errs.add(arrived, sent)
	}
	return errs
}

// scannerStreams is the minimal client: net/http and a bufio.Scanner, the time taken
// as each line is scanned and the line kept; as for arbiterStreams, the server's clock
// readings are parsed out of the lines after every stream has ended.
func scannerStreams(tb testing.TB, base string, n int) timingErrors {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxIdleConns: n,
		DialContext: (&net.Dialer{}).DialContext, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	warmScanner(tb, hc, base, n)
	// Each stream's lines go into storage made before the barrier opens, so that keeping
	// them allocates nothing while the streams run.
	type line struct {
		end int // the line is text[previous end:end]
		at  time.Time
	}
	texts, lines := make([][]byte, n), make([][]line, n)
	for i := range n {
		texts[i], lines[i] = make([]byte, 0, 64<<10), make([]line, 0, 256)
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			resp, err := hc.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				tb.Error(err)
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				now := time.Now()
				texts[i] = append(texts[i], sc.Bytes()...)
				lines[i] = append(lines[i], line{len(texts[i]), now})
			}
		})
	}
	gc0 := startOnCollectedHeap(gate)
	wg.Wait()
	var errs timingErrors
	errs.gcs = numGC() - gc0
	for i := range n {
		var sent, arrived []time.Time
		start := 0
		for _, l := range lines[i] {
			if t, ok := sentAt(texts[i][start:l.end]); ok {
				sent, arrived = append(sent, t), append(arrived, l.at)
			}
			start = l.end
		}
		errs.add(arrived, sent)
	}
	return errs
}

// warmScanner opens n connections for the minimal client, kept in its pool, so that
// it starts from connections in place as arbiter does after Client.Warm: a client that
// dials during the measurement spreads its requests over the dialling time, and the
// server's first tokens with them, which would flatter it.
func warmScanner(tb testing.TB, hc *http.Client, base string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := hc.Get(base + "/warm?n=" + strconv.Itoa(n))
			if err != nil {
				tb.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
}

// warmUp runs a few streams of each client unmeasured: the first streams of a process
// pay for the server's goroutines and buffers, whichever client comes first.
func warmUp(tb testing.TB, base string) {
	arbiterStreams(tb, base, 200)
	scannerStreams(tb, base, 200)
}

// sideBySide runs the two clients in both orders, arbiter–scanner then
// scanner–arbiter, so that each runs as often first as second, on a machine the other
// just loaded, whatever the number of iterations.
func sideBySide(tb testing.TB, base string, n int) (arbiter, scanner timingErrors) {
	a1 := arbiterStreams(tb, base, n)
	s1 := scannerStreams(tb, base, n)
	s2 := scannerStreams(tb, base, n)
	a2 := arbiterStreams(tb, base, n)
	arbiter = timingErrors{ttft: append(a1.ttft, a2.ttft...), itl: append(a1.itl, a2.itl...), gcs: a1.gcs + a2.gcs}
	scanner = timingErrors{ttft: append(s1.ttft, s2.ttft...), itl: append(s1.itl, s2.itl...), gcs: s1.gcs + s2.gcs}
	return arbiter, scanner
}

// startOnCollectedHeap opens the start barrier right after a collection, once the
// client's connections are open and its goroutines wait at the barrier: the collections
// (and their stop-the-world pauses, which on a loaded machine last tens of
// milliseconds) that happen during the streams are then those the client's own
// allocations cause, not the leftovers of the client before it or of its warming.
// It returns the number of collections so far.
func startOnCollectedHeap(gate chan struct{}) uint32 {
	runtime.GC()
	n := numGC()
	close(gate)
	return n
}

func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}

// reportGCs reports how many collections ran during each client's streams, per run of
// them (two per iteration): the figure that explains most of a p99 gap between them.
func reportGCs(b *testing.B, arb, min timingErrors) {
	b.ReportMetric(float64(arb.gcs)/float64(2*b.N), "arbiter-gcs/run")
	b.ReportMetric(float64(min.gcs)/float64(2*b.N), "scanner-gcs/run")
}

// BenchmarkStreamTiming measures how far the driver's recorded times are from when the
// server sent each token, side by side with the minimal client in one run: 1,000
// concurrent streams (first token at 100 ms, then one every 20 ms) for TTFT, and 500
// streams of 16 tokens for the inter-token error. Method: the server runs in a child
// process (see pacedServer); both clients start from warm connections, a start barrier
// and a collected heap (startOnCollectedHeap), and only record while the streams run;
// each iteration runs both clients in both orders (sideBySide); the percentiles are over
// every stream (TTFT) or token gap (ITL) of every iteration, so -benchtime 4x gives 8,000
// TTFT samples per client, 80 beyond the p99. arbiter's times are the kernel's receive
// times (rxStamped) where the platform gives them; the minimal client's, the clock after
// each line, which carries the machine's scheduling delay.
func BenchmarkStreamTiming(b *testing.B) {
	b.Run("ttft-1000-streams", func(b *testing.B) {
		base := pacedServer(b, 6, 100*time.Millisecond, 20*time.Millisecond)
		var arb, min timingErrors
		warmUp(b, base)
		for b.Loop() {
			a, m := sideBySide(b, base, 1000)
			arb.ttft, min.ttft = append(arb.ttft, a.ttft...), append(min.ttft, m.ttft...)
			arb.gcs, min.gcs = arb.gcs+a.gcs, min.gcs+m.gcs
		}
		reportGCs(b, arb, min)
		b.ReportMetric(p(arb.ttft, 0.5), "arbiter-p50-ms")
		b.ReportMetric(p(arb.ttft, 0.99), "arbiter-p99-ms")
		b.ReportMetric(p(min.ttft, 0.5), "scanner-p50-ms")
		b.ReportMetric(p(min.ttft, 0.99), "scanner-p99-ms")
		b.ReportMetric(p(arb.ttft, 0.99)/p(min.ttft, 0.99), "p99-ratio")
		b.ReportMetric(1.2, "target-ratio")
	})
	b.Run("itl-500-streams", func(b *testing.B) {
		base := pacedServer(b, 16, 100*time.Millisecond, 20*time.Millisecond)
		var arb, min timingErrors
		warmUp(b, base)
		for b.Loop() {
			a, m := sideBySide(b, base, 500)
			arb.itl, min.itl = append(arb.itl, a.itl...), append(min.itl, m.itl...)
			arb.gcs, min.gcs = arb.gcs+a.gcs, min.gcs+m.gcs
		}
		reportGCs(b, arb, min)
		b.ReportMetric(p(arb.itl, 0.5), "arbiter-p50-ms")
		b.ReportMetric(p(arb.itl, 0.99), "arbiter-p99-ms")
		b.ReportMetric(p(min.itl, 0.5), "scanner-p50-ms")
		b.ReportMetric(p(min.itl, 0.99), "scanner-p99-ms")
		b.ReportMetric(p(arb.itl, 0.99)/p(min.itl, 0.99), "p99-ratio")
		b.ReportMetric(2, "target-p99-ms")
	})
}
