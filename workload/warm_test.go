package workload

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
)

// connCounter is a streaming server that records how many connections it had accepted
// when each chat request arrived.
type connCounter struct {
	srv     *httptest.Server
	mu      sync.Mutex
	conns   int
	atChats []int
}

func newConnCounter(t *testing.T) *connCounter {
	c := &connCounter{}
	body := renderStream(2)
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		c.mu.Lock()
		c.atChats = append(c.atChats, c.conns)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(body)
	}))
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.mu.Lock()
			c.conns++
			c.mu.Unlock()
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *connCounter) accepted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// Every kind that opens a wave of connections at once opens them before the wave
// starts, so that its first requests do not time arbiter's own dialling.
func TestFirstWaveRunsOnWarmedConnections(t *testing.T) {
	for _, cfg := range []Config{
		{Kind: arms.WorkloadThroughput, Throughput: &ThroughputConfig{Concurrency: []int{4}, Requests: 4, PromptTokens: 8}},
		{Kind: arms.WorkloadLongContext, Sessions: 4, Rounds: 1, Concurrency: 4},
	} {
		t.Run(cfg.Kind, func(t *testing.T) {
			srv := newConnCounter(t)
			cfg.Model, cfg.Seed, cfg.MaxTokens = "m", 1, 4
			if err := Run(context.Background(), cfg, srv.srv.URL, &memRecorder{}); err != nil {
				t.Fatal(err)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.atChats) == 0 || srv.conns != 4 {
				t.Fatalf("%d requests over %d connections, want 4 connections", len(srv.atChats), srv.conns)
			}
			if srv.atChats[0] != 4 {
				t.Fatalf("the first request arrived with %d of 4 connections open", srv.atChats[0])
			}
		})
	}
}

// A warmed connection the server closed while it waited is not used: the request
// dials a fresh one instead of failing as a broken stream.
func TestWarmedConnectionClosedByTheServerIsSkipped(t *testing.T) {
	srv := newConnCounter(t)
	c := NewClient(2)
	defer c.CloseIdleConnections()
	for range 2 { // as Warm dials them, before its requests take them
		conn, err := net.Dial("tcp", srv.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.dialed <- conn
	}
	deadline := time.Now().Add(10 * time.Second)
	// The server accepts in its own time; a connection it has not taken yet it cannot close.
	for srv.accepted() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the server never accepted the warmed connections")
		}
		runtime.Gosched()
	}
	srv.srv.CloseClientConnections()
	var warmed []net.Conn
	for range 2 {
		warmed = append(warmed, <-c.dialed)
	}
	for _, conn := range warmed {
		for alive(conn) {
			if time.Now().After(deadline) {
				t.Fatal("the server's close never reached the client")
			}
			runtime.Gosched()
		}
		c.dialed <- conn
	}
	req := openai.ChatRequest{Model: "m", Stream: true, Messages: []openai.Message{{Role: "user", Content: "hi"}}}
	for range 2 {
		if ex := c.Chat(context.Background(), srv.srv.URL, req); ex.Err != nil {
			t.Fatalf("request on a closed warmed connection: %v", ex.Err)
		}
	}
}

// A warmed connection the transport closes after its warm-up request (here the server
// asks it to; on a loaded host the transport does so on its own when its writer is
// slow to report) is replaced before the run starts, so that every request of the
// first wave still runs on a warmed connection.
func TestWarmReplacesAConnectionTheTransportClosed(t *testing.T) {
	var mu sync.Mutex
	warm := map[string]bool{} // remote addresses that served a warm-up request
	closed := false
	var cold []string
	chats := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet {
			warm[r.RemoteAddr] = true
			if !closed {
				closed = true
				w.Header().Set("Connection", "close")
			}
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		chats[r.RemoteAddr] = true
		if !warm[r.RemoteAddr] {
			cold = append(cold, r.RemoteAddr)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(renderStream(2))
	}))
	defer srv.Close()
	cfg := Config{Kind: arms.WorkloadThroughput, Model: "m", Seed: 1, MaxTokens: 4,
		Throughput: &ThroughputConfig{Concurrency: []int{4}, Requests: 4, PromptTokens: 8}}
	if err := Run(context.Background(), cfg, srv.URL, &memRecorder{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !closed || len(chats) == 0 {
		t.Fatalf("the server closed a warmed connection: %v; chats over %d connections", closed, len(chats))
	}
	if len(cold) > 0 {
		t.Fatalf("%d of the first wave's connections were not warmed: %v", len(cold), cold)
	}
}
