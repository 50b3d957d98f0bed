package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// pacedServer streams tokens tokens: the first ttft after the request arrives, then one
// every gap. Each token's text is the server's clock when it wrote it ("t<unix ns>"), so
// that a client's timing error, arrival minus sending, is measured token by token.
func pacedServer(tb testing.TB, tokens int, ttft, gap time.Duration) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var discard [4096]byte
		for {
			if _, err := r.Body.Read(discard[:]); err != nil {
				break
			}
		}
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
	}))
	srv.Config.MaxHeaderBytes = 1 << 16
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
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
type timingErrors struct{ ttft, itl []float64 }

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
// barrier, and reads each token's arrival from the exchange's per-token times.
func arbiterStreams(tb testing.TB, base string, n int) timingErrors {
	req := openai.ChatRequest{Model: "m", Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages: []openai.Message{{Role: "user", Content: "go"}}}
	body, _ := json.Marshal(req)
	c := NewClient(n)
	defer c.CloseIdleConnections()
	if err := c.Warm(context.Background(), base, n); err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var errs timingErrors
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-gate
			ex := c.chatBody(context.Background(), base, req, body)
			if ex.Err != nil {
				tb.Error(ex.Err)
				return
			}
			var sent, arrived []time.Time
			k := 0
			var dec sseDecoder
			dec.Feed(ex.Raw, func(p []byte) error {
				if t, ok := sentAt(p); ok {
					sent = append(sent, t)
					arrived = append(arrived, ex.Started.Add(ex.DeltaTimes[k]))
					k++
				}
				return nil
			})
			mu.Lock()
			errs.add(arrived, sent)
			mu.Unlock()
		})
	}
	close(gate)
	wg.Wait()
	return errs
}

// scannerStreams is the minimal client: net/http and a bufio.Scanner, the time taken
// as each line is scanned.
func scannerStreams(tb testing.TB, base string, n int) timingErrors {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxIdleConns: n,
		DialContext: (&net.Dialer{}).DialContext, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	var errs timingErrors
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-gate
			resp, err := hc.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				tb.Error(err)
				return
			}
			defer resp.Body.Close()
			var sent, arrived []time.Time
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				now := time.Now()
				if t, ok := sentAt(sc.Bytes()); ok {
					sent, arrived = append(sent, t), append(arrived, now)
				}
			}
			mu.Lock()
			errs.add(arrived, sent)
			mu.Unlock()
		})
	}
	close(gate)
	wg.Wait()
	return errs
}

// warmUp runs a few streams of each client unmeasured: the first streams of a process
// pay for the server's goroutines and buffers, whichever client comes first.
func warmUp(tb testing.TB, base string) {
	arbiterStreams(tb, base, 200)
	scannerStreams(tb, base, 200)
}

// sideBySide runs the two clients one after the other, in an order that alternates
// with i, so that neither always runs on a machine the other just loaded.
func sideBySide(tb testing.TB, base string, n, i int) (arbiter, scanner timingErrors) {
	if i%2 == 0 {
		arbiter = arbiterStreams(tb, base, n)
		scanner = scannerStreams(tb, base, n)
	} else {
		scanner = scannerStreams(tb, base, n)
		arbiter = arbiterStreams(tb, base, n)
	}
	return arbiter, scanner
}

// BenchmarkStreamTiming measures how far the driver's own clock readings are from when
// the server sent each token, side by side with the minimal client in one run:
// 1,000 concurrent streams (first token at 100 ms, then one every 20 ms) for TTFT, and
// 500 streams for the inter-token error. Each phase is a few hundred milliseconds; run
// it for an even number of iterations (-benchtime 2x) so that both orders count alike.
func BenchmarkStreamTiming(b *testing.B) {
	b.Run("ttft-1000-streams", func(b *testing.B) {
		srv := pacedServer(b, 6, 100*time.Millisecond, 20*time.Millisecond)
		var arb, min timingErrors
		warmUp(b, srv.URL)
		for i := 0; b.Loop(); i++ {
			a, m := sideBySide(b, srv.URL, 1000, i)
			arb.ttft, min.ttft = append(arb.ttft, a.ttft...), append(min.ttft, m.ttft...)
		}
		b.ReportMetric(p(arb.ttft, 0.5), "arbiter-p50-ms")
		b.ReportMetric(p(arb.ttft, 0.99), "arbiter-p99-ms")
		b.ReportMetric(p(min.ttft, 0.5), "scanner-p50-ms")
		b.ReportMetric(p(min.ttft, 0.99), "scanner-p99-ms")
		b.ReportMetric(p(arb.ttft, 0.99)/p(min.ttft, 0.99), "p99-ratio")
		b.ReportMetric(1.2, "target-ratio")
	})
	b.Run("itl-500-streams", func(b *testing.B) {
		srv := pacedServer(b, 16, 100*time.Millisecond, 20*time.Millisecond)
		var arb, min timingErrors
		warmUp(b, srv.URL)
		for i := 0; b.Loop(); i++ {
			a, m := sideBySide(b, srv.URL, 500, i)
			arb.itl, min.itl = append(arb.itl, a.itl...), append(min.itl, m.itl...)
		}
		b.ReportMetric(p(arb.itl, 0.5), "arbiter-p50-ms")
		b.ReportMetric(p(arb.itl, 0.99), "arbiter-p99-ms")
		b.ReportMetric(p(min.itl, 0.99), "scanner-p99-ms")
		b.ReportMetric(2, "target-p99-ms")
	})
}
