//go:build linux

package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// stampedPair is a stamped client connection and the server's end of it, on loopback.
func stampedPair(t *testing.T) (*stampedConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	c, ok := rxStamped(raw).(*stampedConn)
	if !ok {
		t.Fatal("rxStamped did not stamp a TCP connection")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	// The kernel turns receive stamping on for the whole host a moment after the first
	// socket asks for it; until then reads carry no stamp.
	for deadline := time.Now().Add(10 * time.Second); ; {
		srv.Write([]byte{0})
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if !c.received().IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Skip("this kernel gives no receive timestamps for TCP")
		}
	}
	return c, srv
}

// The time a read reports is when the bytes reached the host: after the server wrote
// them and before the client got round to reading, however late that was.
func TestStampedConnReadsTheKernelsReceiveTime(t *testing.T) {
	c, srv := stampedPair(t)
	for i := range 3 {
		sent := time.Now().Round(0) // the wall clock, as the kernel's stamp is
		if _, err := fmt.Fprintf(srv, "event %d", i); err != nil {
			t.Fatal(err)
		}
		// The bytes are in the client's socket by now (loopback delivers within the write).
		reading := time.Now().Round(0)
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != fmt.Sprintf("event %d", i) {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		got := c.received()
		if got.Before(sent) || got.After(reading) {
			t.Errorf("event %d: receive time %v is not within [written %v, read began %v]",
				i, got.Format(time.StampMicro), sent.Format(time.StampMicro), reading.Format(time.StampMicro))
		}
	}
}

func TestStampedConnEndsAsAConnectionDoes(t *testing.T) {
	t.Run("eof", func(t *testing.T) {
		c, srv := stampedPair(t)
		srv.Write([]byte("last"))
		srv.Close()
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "last" {
			t.Errorf("read %q, %v; want the bytes and a clean end", b, err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c, _ := stampedPair(t)
		c.SetReadDeadline(time.Now().Add(-time.Second))
		_, err := c.Read(make([]byte, 8))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("read past the deadline: %v; want a timeout", err)
		}
	})
	t.Run("closed-while-reading", func(t *testing.T) {
		c, _ := stampedPair(t)
		done := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 8))
			done <- err
		}()
		c.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("read on a connection closed under it: %v; want net.ErrClosed", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		c, srv := stampedPair(t)
		srv.(*net.TCPConn).SetLinger(0)
		srv.Close()
		_, err := c.Read(make([]byte, 8))
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("read after a reset: %v; want the reset", err)
		}
	})
}

// A stream's per-token times are the tokens' arrival, not when a busy client read them:
// here the client is held up (in OnToken) after the first token until the second has
// been written and for a further busyFor, and the second token's time must fall near its
// writing, well before the client was free to read it. (The hold is the busy client
// under test, not a wait for something.) Both bounds have margins that a read-time
// stamp, busyFor late, cannot meet: the loopback of a loaded machine delivers bytes a
// little after the write returns, and a time.Now reads the wall and the monotonic clock
// one after the other, so a thread preempted between the two (138 µs, seen under load)
// dates a time that mixes them that much early or late.
func TestStreamTokenTimesAreArrivalsNotReads(t *testing.T) {
	const busyFor = 100 * time.Millisecond
	const skew = 10 * time.Millisecond // well below busyFor/2
	stampedPair(t)                     // stamping on for the host, and kept on while this pair is open
	second := make(chan struct{})      // the client took the first token
	written := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(s string) {
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", s)
			w.(http.Flusher).Flush()
		}
		chunk("one")
		<-second
		sent := time.Now().Round(0)
		chunk("two")
		written <- sent
		fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()

	var sent, resumed time.Time
	first := true
	c := NewClient(1)
	defer c.CloseIdleConnections()
	c.OnToken = func() {
		if first {
			first = false
			close(second)
			sent = <-written
			time.Sleep(busyFor)
			resumed = time.Now().Round(0)
		}
	}
	ex := c.Chat(context.Background(), srv.URL, openai.ChatRequest{Model: "m", Stream: true,
		Messages: []openai.Message{{Role: "user", Content: "go"}}})
	if ex.Err != nil || len(ex.DeltaTimes) != 2 {
		t.Fatalf("%v, %d token times", ex.Err, len(ex.DeltaTimes))
	}
	got := ex.Started.Round(0).Add(ex.DeltaTimes[1])
	if lo, hi := sent.Add(-skew), resumed.Add(-busyFor/2); got.Before(lo) || got.After(hi) {
		t.Errorf("second token at %v: want its arrival, within [written %v − %v, client free to read %v − %v]",
			got.Format(time.StampMicro), sent.Format(time.StampMicro), skew, resumed.Format(time.StampMicro), busyFor/2)
	}
	if ex.TTFT != ex.DeltaTimes[0] || ex.LastDelta != ex.DeltaTimes[1] {
		t.Errorf("TTFT %v, last delta %v; want the token times %v", ex.TTFT, ex.LastDelta, ex.DeltaTimes)
	}
}
