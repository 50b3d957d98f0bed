package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

func weatherRequest(rid string, stream bool) openai.ChatRequest {
	return openai.ChatRequest{
		Model:    "scripted-1",
		Messages: []openai.Message{{Role: "user", Content: "weather in Oslo?"}},
		Tools:    []openai.Tool{toolSet[0].spec()},
		Stream:   stream,
		RID:      rid,
	}
}

func TestChatStreamAssemblesToolCalls(t *testing.T) {
	e := newScriptedEngine(t)
	ex := (&Client{}).Chat(context.Background(), e.srv.URL, weatherRequest("r1", true))
	if ex.Err != nil {
		t.Fatal(ex.Err)
	}
	if ex.StatusCode != 200 {
		t.Fatalf("status %d", ex.StatusCode)
	}
	e.mu.Lock()
	sent, wantCalls := e.raws["r1"], e.calls["r1"]
	e.mu.Unlock()
	if !bytes.Equal(ex.Raw, sent) {
		t.Fatalf("raw differs from the bytes sent:\n got %q\nwant %q", ex.Raw, sent)
	}
	msg := ex.Completion.Choices[0].Message
	if !reflect.DeepEqual(msg.ToolCalls, wantCalls) {
		t.Fatalf("tool calls\n got %+v\nwant %+v", msg.ToolCalls, wantCalls)
	}
	if ex.Completion.Choices[0].FinishReason != "tool_calls" || ex.Completion.Usage == nil || ex.Completion.Usage.CompletionTokens != 9 {
		t.Fatalf("finish/usage not assembled: %+v", ex.Completion)
	}
	if ex.TTFT <= 0 || ex.TTFT > ex.Latency {
		t.Fatalf("TTFT %v, latency %v: want 0 < TTFT <= latency", ex.TTFT, ex.Latency)
	}
	var req openai.ChatRequest
	if err := json.Unmarshal(ex.Request, &req); err != nil || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage || !req.Stream {
		t.Fatalf("request did not ask for a stream with usage: %s (%v)", ex.Request, err)
	}
}

func TestChatNonStreaming(t *testing.T) {
	e := newScriptedEngine(t)
	ex := (&Client{}).Chat(context.Background(), e.srv.URL, weatherRequest("r2", false))
	if ex.Err != nil {
		t.Fatal(ex.Err)
	}
	e.mu.Lock()
	wantCalls := e.calls["r2"]
	e.mu.Unlock()
	if got := ex.Completion.Choices[0].Message.ToolCalls; !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("tool calls\n got %+v\nwant %+v", got, wantCalls)
	}
	if bytes.Contains(ex.Request, []byte("stream")) {
		t.Fatalf("non-streaming request mentions streaming: %s", ex.Request)
	}
	if ex.TTFT <= 0 || ex.TTFT > ex.Latency {
		t.Fatalf("TTFT %v, latency %v", ex.TTFT, ex.Latency)
	}
}

func TestChatHTTPError(t *testing.T) {
	const body = `{"error":{"message":"KV cache pool exhausted","type":"server_error","code":500}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	ex := (&Client{}).Chat(context.Background(), srv.URL, weatherRequest("r3", true))
	var se *StatusError
	if !errors.As(ex.Err, &se) || se.Code != 500 || se.Message != "KV cache pool exhausted" {
		t.Fatalf("err = %v, want a StatusError 500 with the server's message", ex.Err)
	}
	if ex.StatusCode != 500 || string(ex.Raw) != body {
		t.Fatalf("status %d raw %q", ex.StatusCode, ex.Raw)
	}
}

// stallAfter answers with the first n bytes of a stream, then sends nothing until the
// client goes away.
func stallAfter(t *testing.T, n int) *httptest.Server {
	partial := chunkStream(t, contentDelta("partial "), contentDelta("answer"))[:n]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(partial)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestChatStallTimeout(t *testing.T) {
	first := len(chunkStream(t, contentDelta("partial ")))
	first -= len("data: [DONE]\n\n")
	srv := stallAfter(t, first+10)
	c := &Client{StallTimeout: 300 * time.Millisecond} // long enough for the partial event to land first
	ex := c.Chat(context.Background(), srv.URL, weatherRequest("r4", true))
	if !errors.Is(ex.Err, ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", ex.Err)
	}
	if len(ex.Raw) != first+10 || ex.Completion.Choices[0].Message.Content != "partial " {
		t.Fatalf("what arrived was not kept: raw %q, completion %+v", ex.Raw, ex.Completion)
	}
}

func TestChatRequestTimeout(t *testing.T) {
	srv := stallAfter(t, 0)
	c := &Client{RequestTimeout: 50 * time.Millisecond, StallTimeout: time.Hour}
	ex := c.Chat(context.Background(), srv.URL, weatherRequest("r5", true))
	if !errors.Is(ex.Err, ErrRequestTimeout) || errors.Is(ex.Err, ErrStalled) {
		t.Fatalf("err = %v, want ErrRequestTimeout", ex.Err)
	}
}

func TestChatCancelled(t *testing.T) {
	srv := stallAfter(t, 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Exchange)
	go func() { done <- (&Client{}).Chat(ctx, srv.URL, weatherRequest("r6", true)) }()
	cancel()
	ex := <-done
	if !errors.Is(ex.Err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", ex.Err)
	}
}

func TestChatBrokenStream(t *testing.T) {
	stream := chunkStream(t, contentDelta("half"), finishChunk("stop"))
	cut := bytes.Index(stream, []byte("\n\n")) + 2 + 10 // the first event and a piece of the second
	t.Run("connection reset", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(stream[:cut])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drops the connection mid-stream
		}))
		defer srv.Close()
		ex := (&Client{}).Chat(context.Background(), srv.URL, weatherRequest("r7", true))
		if !errors.Is(ex.Err, ErrBrokenStream) {
			t.Fatalf("err = %v, want ErrBrokenStream", ex.Err)
		}
		if !bytes.Equal(ex.Raw, stream[:cut]) || ex.Completion.Choices[0].Message.Content != "half" {
			t.Fatalf("what arrived was not kept: %q %+v", ex.Raw, ex.Completion)
		}
	})
	t.Run("clean close before done", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(stream[:cut])
		}))
		defer srv.Close()
		ex := (&Client{}).Chat(context.Background(), srv.URL, weatherRequest("r8", true))
		if !errors.Is(ex.Err, ErrIncompleteStream) || !errors.Is(ex.Err, ErrBrokenStream) {
			t.Fatalf("err = %v, want ErrIncompleteStream", ex.Err)
		}
	})
	t.Run("garbage event", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: <|garbage|>\n\n"))
		}))
		defer srv.Close()
		ex := (&Client{}).Chat(context.Background(), srv.URL, weatherRequest("r9", true))
		if ex.Err == nil || !strings.Contains(ex.Err.Error(), "event 2") {
			t.Fatalf("err = %v, want a protocol error naming event 2", ex.Err)
		}
	})
}

func TestListModels(t *testing.T) {
	e := newScriptedEngine(t)
	ids, err := ListModels(context.Background(), e.srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, []string{"scripted-1", "other"}) {
		t.Fatalf("models = %q", ids)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var se *StatusError
	if _, err := ListModels(context.Background(), srv.URL); !errors.As(err, &se) || se.Code != 404 {
		t.Fatalf("err = %v, want StatusError 404", err)
	}
}

// TestChatStallClockResets streams events spaced under the stall timeout for longer
// than the timeout in total: every event must restart the clock.
func TestChatStallClockResets(t *testing.T) {
	const gap, stall, events = 30 * time.Millisecond, 250 * time.Millisecond, 12
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(gap) // pacing of the stream, not synchronization
		defer tick.Stop()
		for i := range events {
			j, _ := json.Marshal(contentDelta(fmt.Sprint(i % 10)))
			fmt.Fprintf(w, "data: %s\n\n", j)
			w.(http.Flusher).Flush()
			<-tick.C
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer srv.Close()
	c := &Client{StallTimeout: stall}
	ex := c.Chat(context.Background(), srv.URL, weatherRequest("r10", true))
	if ex.Err != nil {
		t.Fatalf("a steady stream of %d events %v apart ended with %v", events, gap, ex.Err)
	}
	if got := ex.Completion.Choices[0].Message.Content; got != "012345678901" {
		t.Fatalf("content %q", got)
	}
}

// TestChatTTFTWaitsForContent: a role-only or usage-only event is not a first token.
func TestChatTTFTWaitsForContent(t *testing.T) {
	role := openai.ChatCompletionChunk{ID: "c1", Choices: []openai.ChunkChoice{{Delta: openai.Delta{Role: "assistant"}}}}
	body := chunkStream(t, role, finishChunk("stop"), usageChunk(5, 0))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	ex := (&Client{}).Chat(context.Background(), srv.URL, weatherRequest("r11", true))
	if ex.Err != nil || ex.TTFT != 0 || ex.Latency <= 0 {
		t.Fatalf("empty answer: TTFT %v latency %v err %v, want TTFT 0", ex.TTFT, ex.Latency, ex.Err)
	}
}

// giantServer answers every chat completion with content of size bytes: one JSON body
// (with or without Content-Length), SSE events of 4 KiB, or one SSE event. It counts the
// bytes it managed to write, so a test can see the client stopped reading.
func giantServer(t *testing.T, mode string, size int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var written atomic.Int64
	chunk := func(content string) []byte {
		b, _ := json.Marshal(openai.ChatCompletionChunk{ID: "c1", Object: "chat.completion.chunk", Model: "m",
			Choices: []openai.ChunkChoice{{Delta: openai.Delta{Content: content}}}})
		return []byte("data: " + string(b) + "\n\n")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write := func(b []byte) bool {
			n, err := w.Write(b)
			written.Add(int64(n))
			return err == nil
		}
		switch mode {
		case "body", "chunked-body":
			b, _ := json.Marshal(openai.ChatCompletion{ID: "c1", Object: "chat.completion", Model: "m",
				Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: strings.Repeat("b", size)}, FinishReason: "stop"}}})
			w.Header().Set("Content-Type", "application/json")
			if mode == "body" {
				w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			}
			for len(b) > 0 && write(b[:min(len(b), 32<<10)]) {
				b = b[min(len(b), 32<<10):]
			}
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			piece := strings.Repeat("s", 4096)
			for n := 0; n < size && write(chunk(piece)); n += len(piece) {
			}
			write([]byte("data: [DONE]\n\n"))
		case "event":
			w.Header().Set("Content-Type", "text/event-stream")
			write(chunk(strings.Repeat("e", size)))
			write([]byte("data: [DONE]\n\n"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &written
}

func TestChatStopsReadingAtTheResponseCap(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		mode   string
		stream bool
	}{{"body", false}, {"chunked-body", false}, {"stream", true}, {"event", true}} {
		t.Run(tc.mode, func(t *testing.T) {
			srv, written := giantServer(t, tc.mode, 16<<20)
			c := &Client{MaxResponseBytes: limit}
			ex := c.Chat(context.Background(), srv.URL, weatherRequest("big", tc.stream))
			if !errors.Is(ex.Err, ErrResponseTooLarge) || !strings.Contains(ex.Err.Error(), "response exceeded 1048576 bytes") {
				t.Fatalf("err = %v, want the response cap", ex.Err)
			}
			if len(ex.Raw) == 0 || len(ex.Raw) > KeptPrefixBytes {
				t.Fatalf("kept %d bytes of raw, want a prefix of at most %d", len(ex.Raw), KeptPrefixBytes)
			}
			if cap(ex.Raw) > KeptPrefixBytes {
				t.Errorf("the kept prefix holds on to a %d-byte buffer", cap(ex.Raw))
			}
			if tc.mode == "stream" {
				// Cut after a whole event, and the completion is what those events say.
				if !bytes.HasSuffix(ex.Raw, []byte("\n\n")) {
					t.Errorf("raw prefix ends mid-event: %q", ex.Raw[max(len(ex.Raw)-40, 0):])
				}
				got := ex.Completion.Choices[0].Message.Content
				if len(got) == 0 || strings.Trim(got, "s") != "" || len(got)%4096 != 0 {
					t.Errorf("completion from the prefix has %d bytes of content", len(got))
				}
			}
			// The server could not write much past what arbiter read: the client
			// closed the connection instead of draining 16 MiB.
			srv.CloseClientConnections()
			if w := written.Load(); w >= 16<<20 {
				t.Errorf("server wrote all %d bytes: the client drained the response", w)
			}
		})
	}
	// A response within the cap is whole.
	srv, _ := giantServer(t, "stream", 512<<10)
	ex := (&Client{MaxResponseBytes: limit}).Chat(context.Background(), srv.URL, weatherRequest("ok", true))
	if ex.Err != nil || len(ex.Completion.Choices[0].Message.Content) != 512<<10 {
		t.Fatalf("a 512 KiB reply under a 1 MiB cap: err %v, %d bytes", ex.Err, len(ex.Raw))
	}
}

// TestChatRequestTimeoutDuringSteadyStream: a stream whose events keep the stall clock
// from firing still ends at the request timeout, which the same timer watches.
func TestChatRequestTimeoutDuringSteadyStream(t *testing.T) {
	const gap = 5 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(gap) // pacing of the stream, not synchronization
		defer tick.Stop()
		for {
			j, _ := json.Marshal(contentDelta("x"))
			fmt.Fprintf(w, "data: %s\n\n", j)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}))
	defer srv.Close()
	c := &Client{RequestTimeout: 500 * time.Millisecond, StallTimeout: 200 * time.Millisecond}
	ex := c.Chat(context.Background(), srv.URL, weatherRequest("r11", true))
	if !errors.Is(ex.Err, ErrRequestTimeout) || errors.Is(ex.Err, ErrStalled) {
		t.Fatalf("err = %v, want ErrRequestTimeout", ex.Err)
	}
	if ex.Deltas < 2 {
		t.Fatalf("only %d deltas arrived before the timeout", ex.Deltas)
	}
}

// TestChatRequestTimeoutWhole: a non-streamed answer that never comes ends at the
// request timeout, not as a stall.
func TestChatRequestTimeoutWhole(t *testing.T) {
	srv := stallAfter(t, 0)
	c := &Client{RequestTimeout: 50 * time.Millisecond, StallTimeout: 10 * time.Millisecond}
	ex := c.Chat(context.Background(), srv.URL, weatherRequest("r12", false))
	if !errors.Is(ex.Err, ErrRequestTimeout) || errors.Is(ex.Err, ErrStalled) {
		t.Fatalf("err = %v, want ErrRequestTimeout", ex.Err)
	}
}

// TestRawBodyFirstChunk: a body that fits the first chunk is handed over without a
// copy; one that outgrows it goes on in pooled chunks and is joined whole.
func TestRawBodyFirstChunk(t *testing.T) {
	body := bytes.Repeat([]byte("data: {}\n\n"), 300) // 3,000 bytes
	for _, first := range []int{0, 2000, 3200, 64 << 10} {
		raw := rawBody{first: first}
		r := bytes.NewReader(body)
		for {
			if _, err := raw.readFrom(r, 1<<20); err != nil {
				break
			}
		}
		var firstChunk []byte
		if first > 0 {
			firstChunk = raw.cur
			if len(raw.full) > 0 {
				firstChunk = raw.full[0]
			}
		}
		got := raw.bytes()
		if !bytes.Equal(got, body) {
			t.Fatalf("first %d: body of %d bytes came back as %d", first, len(body), len(got))
		}
		handed := first > 0 && &got[0] == &firstChunk[:1][0]
		if want := first == 3200; handed != want {
			t.Errorf("first %d: handed over without a copy = %v, want %v", first, handed, want)
		}
	}
}

func TestSizeEstimate(t *testing.T) {
	var e sizeEstimate
	if e.first() != 0 {
		t.Fatalf("first before any body = %d", e.first())
	}
	e.observe(1000)
	if got := e.first(); got < 1000 || got > 2000 {
		t.Fatalf("first after a body of 1000 = %d", got)
	}
	e.observe(8000) // rises at once
	if got := e.first(); got < 8000 {
		t.Fatalf("first after a body of 8000 = %d", got)
	}
	e.observe(0) // decays slowly
	if got := e.n.Load(); got != 7000 {
		t.Fatalf("estimate after a body of 0 = %d, want 7000", got)
	}
	e.observe(100 << 20)
	if got := e.first(); got != maxFirstChunk {
		t.Fatalf("first after a body of 100 MiB = %d, want %d", got, maxFirstChunk)
	}
}

// TestRunGCPolicy: the policy holds while runs overlap and the settings before it come
// back when the last ends.
func TestRunGCPolicy(t *testing.T) {
	if userGCSettings() {
		t.Skip("GOGC or GOMEMLIMIT set: the policy is off")
	}
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetGCPercent(percent)
	defer debug.SetMemoryLimit(limit)
	r1 := ApplyRunGCPolicy(10)
	l1 := debug.SetMemoryLimit(-1)
	if got := debug.SetGCPercent(-1); got != RunGCPercent {
		t.Fatalf("GC percent during a run = %d", got)
	}
	debug.SetGCPercent(RunGCPercent)
	if l1 < RunMemoryHeadroom+10*RunMemoryPerSession || l1 == math.MaxInt64 {
		t.Fatalf("memory limit during a run = %d", l1)
	}
	r2 := ApplyRunGCPolicy(4)
	if got := debug.SetMemoryLimit(-1); got != l1+4*RunMemoryPerSession {
		t.Fatalf("limit with a second run = %d, want %d", got, l1+4*RunMemoryPerSession)
	}
	r1()
	r1() // a second call changes nothing
	if got := debug.SetMemoryLimit(-1); got != l1-6*RunMemoryPerSession {
		t.Fatalf("limit after the first run ended = %d, want %d", got, l1-6*RunMemoryPerSession)
	}
	r2()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent after the runs = %d, want 100", got)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("memory limit after the runs = %d", got)
	}
	if gcPolicy.stop != nil {
		t.Error("the live heap is still followed after the last run ended")
	}
}

// A live heap that grows during a run raises the limit, so that the collector is not
// held at the limit, collecting over and over, for the rest of the run.
func TestRunGCPolicyFollowsTheLiveHeap(t *testing.T) {
	if userGCSettings() {
		t.Skip("GOGC or GOMEMLIMIT set: the policy is off")
	}
	for _, c := range []struct{ cur, live, want int64 }{
		{cur: 300 << 20, live: 100 << 20, want: 0},                           // a collection frees more than it marks
		{cur: 300 << 20, live: 200 << 20, want: 400<<20 + RunMemoryHeadroom}, // it would free less: raised
		{cur: math.MaxInt64, live: 1 << 30, want: 0},                         // no limit
	} {
		if got := raisedLimit(c.cur, c.live); got != c.want {
			t.Errorf("raisedLimit(%d, %d) = %d, want %d", c.cur, c.live, got, c.want)
		}
	}

	limit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(limit)
	restore := ApplyRunGCPolicy(10)
	before := debug.SetMemoryLimit(-1)
	// Live data of more than half the limit: a collection would free less than it marks.
	live := make([]byte, before/2+(16<<20))
	for i := range live {
		live[i] = byte(i)
	}
	runtime.GC() // the live heap is what the last collection found
	grown := liveHeap()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for debug.SetMemoryLimit(-1) < 2*grown {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d after the live heap grew to %d; want at least %d (it was %d)",
				debug.SetMemoryLimit(-1), grown, 2*grown, before)
		}
		<-tick.C
	}
	runtime.KeepAlive(live)
	restore()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("limit after the run = %d, want the one before it", got)
	}
}

// fixedStamp is a connection whose last read was received at t.
type fixedStamp time.Time

func (f fixedStamp) received() time.Time { return time.Time(f) }

// arrival takes only the wait since the kernel's stamp from the wall clock: the time
// since the request started stays on the monotonic clock, so a wall clock slewed or
// stepped during a long request does not move a token's time.
func TestArrivalTakesTheWaitOffTheMonotonicClock(t *testing.T) {
	started := time.Now().Add(-time.Second) // a request sent a second ago
	waited := 30 * time.Millisecond
	before := time.Since(started)
	at := arrival(started, fixedStamp(time.Now().Round(0).Add(-waited)), 0)
	after := time.Since(started)
	if at < before-waited || at > after-waited {
		t.Errorf("bytes received %v ago: at %v, want within [%v, %v]", waited, at, before-waited, after-waited)
	}
	// A stamp ahead of the wall clock (stepped back since): no wait, the read's time.
	if at := arrival(started, fixedStamp(time.Now().Add(time.Hour)), 0); at < before {
		t.Errorf("stamp in the future: at %v, want the read's time (at least %v)", at, before)
	}
	// A wait longer than the stream (stepped forward): never before the previous event.
	prev := 900 * time.Millisecond
	if at := arrival(started, fixedStamp(time.Now().Add(-time.Hour)), prev); at != prev {
		t.Errorf("stamp an hour old: at %v, want the previous event's %v", at, prev)
	}
	// No stamp, or no stamped connection: the read's time.
	for _, rx := range []receiveClock{nil, fixedStamp(time.Time{})} {
		if at := arrival(started, rx, 0); at < before {
			t.Errorf("%v: at %v, want the read's time", rx, at)
		}
	}
}

// ListModels asks base for its models with a default Client.
func ListModels(ctx context.Context, base string) ([]string, error) {
	return (&Client{}).ListModels(ctx, base)
}

// readPieces is a body that hands out one piece a Read.
type readPieces [][]byte

func (p *readPieces) Read(b []byte) (int, error) {
	if len(*p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, (*p)[0])
	if n < len((*p)[0]) {
		panic("a piece larger than the read")
	}
	*p = (*p)[1:]
	return n, nil
}

// OnToken hears generated text once for each read that brought some, however many
// events it held, and not for a read whose events carried none.
func TestOnTokenOncePerReadThatBroughtText(t *testing.T) {
	event := func(delta string) string {
		return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	body := readPieces{
		[]byte(strings.Repeat(event(`{"content":"tok "}`), 12)),
		[]byte(event(`{"role":"assistant"}`)),
		[]byte(event(`{"content":"a"}`) + event(`{"content":"b"}`)),
		[]byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"),
	}
	var ex Exchange
	ex.Started = time.Now()
	calls := 0
	watch := newRequestWatch(time.Hour, time.Hour, func(error) {})
	defer watch.stop()
	readStream(&ex, &body, nil, DefaultMaxResponseBytes, 0, nil, watch, func() { calls++ }, nil, nil)
	if ex.Err != nil || ex.Deltas != 14 || calls != 2 {
		t.Errorf("err %v, %d deltas, OnToken called %d times; want 14 deltas and 2 calls (the first read and the third)", ex.Err, ex.Deltas, calls)
	}
}
