package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/internal/enginehttp"
	"github.com/arbiterlab/arbiter/openai"
)

// Default timeouts of a Client whose fields are zero, as in the spec's timeouts section.
const (
	DefaultRequestTimeout = 10 * time.Minute  // a long agentic turn on a loaded engine
	DefaultStallTimeout   = 120 * time.Second // longer than any healthy gap between tokens
)

// maxErrorBody bounds how much of a non-2xx body is kept.
const maxErrorBody = 1 << 20

// DefaultMaxResponseBytes caps one response when Client.MaxResponseBytes is 0: 8 MiB,
// some 40,000 streamed tokens at about 200 bytes of SSE per token.
const DefaultMaxResponseBytes = 8 << 20

// A reply's budget under max_tokens: an engine that ignores max_tokens (a runaway
// generation, a broken stop condition) would otherwise stream until the response cap, and
// a multi-turn session would send the runaway text back in every later request. A reply
// may carry at most ReplyBytesPerToken bytes of generated text (content, tool-call names
// and arguments) per token of max_tokens, plus ReplySlackBytes, and a stream at most
// ReplyEventsPerToken events that carry text per token, plus ReplySlackEvents. Past
// either, the client stops reading, closes the stream and fails the exchange with
// ErrPastMaxTokens. The factors are generous: tokens of common tokenizers average about
// four bytes, the longest (runs of spaces in code) some tens, and engines send at most
// one event per token and per tool-call fragment. A request without max_tokens has no
// budget beyond the response cap.
const (
	// ReplyBytesPerToken is the bytes of text a reply may carry per token of max_tokens.
	ReplyBytesPerToken = 16
	// ReplySlackBytes is the bytes of text a reply may carry beyond that (64 KiB).
	ReplySlackBytes = 64 << 10
	// ReplyEventsPerToken is the events carrying text a stream may have per token.
	ReplyEventsPerToken = 2
	// ReplySlackEvents is the events carrying text a stream may have beyond that.
	ReplySlackEvents = 64
)

// replyBudget is the most bytes of generated text, and of events carrying it, a reply to
// a request of maxTokens may have; 0 and 0 when maxTokens sets no bound.
func replyBudget(maxTokens int) (text int64, events int) {
	if maxTokens <= 0 {
		return 0, 0
	}
	return int64(maxTokens)*ReplyBytesPerToken + ReplySlackBytes, maxTokens*ReplyEventsPerToken + ReplySlackEvents
}

// KeptPrefixBytes is how much of a response that ran past its cap is kept in
// Exchange.Raw, for diagnosis: the rest is dropped as it arrives.
const KeptPrefixBytes = 64 << 10

// Errors a request can end with; Exchange.Err wraps one of them (or a transport error).
var (
	// ErrStalled: no stream event arrived within the stall timeout.
	ErrStalled = errors.New("stream stalled")
	// ErrRequestTimeout: the request ran past its end-to-end timeout.
	ErrRequestTimeout = errors.New("request timed out")
	// ErrBrokenStream: the connection failed or closed before the response was complete.
	ErrBrokenStream = errors.New("stream broken")
	// ErrNoChoices: a 2xx response carried no choice at all.
	ErrNoChoices = errors.New("response has no choices")
	// ErrResponseTooLarge: the response ran past Client.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("response too large")
	// ErrPastMaxTokens: the reply ran past what the request's max_tokens allows (see
	// ReplyBytesPerToken): the engine ignored it.
	ErrPastMaxTokens = errors.New("reply ran past max_tokens")
)

// StatusError is a non-2xx answer; Message is the server's error message when its body
// is the OpenAI error envelope, else the start of the body.
type StatusError struct {
	Code    int
	Message string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("http %d: %s", e.Code, e.Message)
}

// Client speaks the OpenAI-compatible chat completions API to an engine. The zero value
// works, with a shared default transport and the default timeouts.
type Client struct {
	// HTTP sends the requests; nil: a client built by NewClient(16).
	HTTP *http.Client
	// RequestTimeout bounds one request end to end; 0: DefaultRequestTimeout.
	RequestTimeout time.Duration
	// StallTimeout bounds the silence between two stream events (and before the first);
	// 0: DefaultStallTimeout. SSE comments do not count as events: a keep-alive says
	// the connection lives, not that the engine makes progress.
	StallTimeout time.Duration
	// OnToken, if set, is called whenever generated text arrives: once for each read of
	// a stream that brought events carrying content or tool-call bytes, or for a whole
	// non-streamed answer that does. A liveness watchdog counts it as progress, which an
	// empty keep-alive event is not.
	// It is called from the request's goroutine and must be quick.
	OnToken func()
	// MaxResponseBytes caps one response body, SSE framing included; 0:
	// DefaultMaxResponseBytes. A response that runs past it is cut off there: the
	// exchange ends with ErrResponseTooLarge and keeps only its first KeptPrefixBytes,
	// so that concurrent giant replies cost at most concurrency x this in memory.
	MaxResponseBytes int64
	// Labels are the launch's labels every chat request carries in LabelsHeader, with its
	// session and round (labels.go); no header when LabelsHeader is empty. They are
	// encoded once, at the first request: set them before it.
	Labels       map[string]string
	LabelsHeader string
	labelsOnce   sync.Once
	labelPairs   []labelPair

	// dialed holds connections opened by Warm, which the transport takes first.
	dialed chan net.Conn
}

var defaultHTTP = newHTTPClient(16, nil)

// NewClient returns a Client whose transport keeps one idle connection per concurrent
// session, so that a run at concurrency C reuses C connections instead of churning.
func NewClient(concurrency int) *Client {
	c := &Client{dialed: make(chan net.Conn, max(concurrency, 1))}
	c.HTTP = newHTTPClient(concurrency, c.dialed)
	return c
}

// Warm opens n connections to base before a run's clock starts, so that the first
// requests do not measure the client's own dialling: the transport takes them as it
// would take connections it dialled. It then sends n concurrent GET /v1/models over
// them (the answer, whatever its status, is read and dropped), so that the transport
// has made each connection its own, with its buffers and reading goroutines, and keeps
// it idle: set up during the first wave, those would cost the most exactly when the
// first tokens of that wave arrive. Call it just before the requests, as a server may
// close a connection left idle (uvicorn after 5 s); one it closed is not used.
func (c *Client) Warm(ctx context.Context, base string, n int) error {
	if c.dialed == nil {
		return nil // a client of its own transport
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return nil // TLS or odd bases dial as usual
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	n = min(n, cap(c.dialed)-len(c.dialed))
	// An engine that does not answer this promptly is no reason to hold the run up.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	models := strings.TrimRight(base, "/") + "/v1/models"
	// The transport closes a connection instead of keeping it when its writer has not
	// reported the request written within 50 ms of the response, which a loaded host
	// sees, or when the engine asks it to: connections lost so are replaced, a few
	// times at most.
	kept := 0
	for round := 0; round < warmRounds && kept < n && ctx.Err() == nil; round++ {
		for range min(n-kept-len(c.dialed), cap(c.dialed)-len(c.dialed)) {
			conn, err := d.DialContext(ctx, "tcp", host)
			if err != nil {
				return fmt.Errorf("workload: warm connections to %s: %w", base, err)
			}
			select {
			case c.dialed <- conn:
			default:
				conn.Close()
			}
		}
		// Each request holds its connection until all have their answers, so that the
		// n requests run on n connections: one that finished first would otherwise
		// hand its connection to the next and leave a warmed one untouched.
		var wg, answered sync.WaitGroup
		var pooled atomic.Int32
		answered.Add(n)
		for range n {
			wg.Go(func() {
				trace := &httptrace.ClientTrace{PutIdleConn: func(err error) {
					if err == nil {
						pooled.Add(1)
					}
				}}
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, models, nil)
				if err != nil {
					answered.Done()
					return
				}
				resp, err := c.httpClient().Do(req)
				answered.Done()
				if err != nil {
					return // the first request will say what is wrong
				}
				answered.Wait()
				// Read to its end, the answer has put its connection back (or not) by now.
				io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
				resp.Body.Close()
			})
		}
		wg.Wait()
		kept = int(pooled.Load())
	}
	return nil
}

// warmRounds bounds how often Warm replaces connections the transport did not keep.
const warmRounds = 3

func newHTTPClient(concurrency int, dialed chan net.Conn) *http.Client {
	if concurrency < 1 {
		concurrency = 1
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		for {
			select {
			case conn := <-dialed: // a nil channel never yields
				if (conn.RemoteAddr().String() == addr || conn.RemoteAddr().Network() == network && sameHost(conn, addr)) && alive(conn) {
					return rxStamped(conn), nil
				}
				conn.Close()
				continue
			default:
			}
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return rxStamped(conn), nil
		}
	}
	t := &http.Transport{
		// Engines are reached directly; a proxy from the environment must not
		// intercept (or leak) experiment traffic.
		Proxy:       nil,
		DialContext: dial,
		// Raw bytes are kept exactly as the engine sent them, so no transparent gzip.
		DisableCompression:  true,
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	// Timeouts are per request (context), never on the client: a long stream is normal.
	return &http.Client{Transport: t, CheckRedirect: enginehttp.CheckRedirect}
}

// sameHost reports whether conn was dialled to addr (host:port as the transport names it).
func sameHost(conn net.Conn, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ips, err := net.DefaultResolver.LookupHost(context.Background(), host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if net.JoinHostPort(ip, port) == conn.RemoteAddr().String() {
			return true
		}
	}
	return false
}

// CloseIdleConnections closes the connections kept for reuse, and those warmed and not
// taken, at the end of a run.
func (c *Client) CloseIdleConnections() {
	c.httpClient().CloseIdleConnections()
	for c.dialed != nil {
		select {
		case conn := <-c.dialed:
			conn.Close()
		default:
			return
		}
	}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

func (c *Client) maxResponse() int64 {
	if c.MaxResponseBytes > 0 {
		return c.MaxResponseBytes
	}
	return DefaultMaxResponseBytes
}

func (c *Client) timeouts() (request, stall time.Duration) {
	request, stall = c.RequestTimeout, c.StallTimeout
	if request <= 0 {
		request = DefaultRequestTimeout
	}
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	return request, stall
}

// Exchange is one request and everything that came back, complete or not.
type Exchange struct {
	// Request is the JSON body sent.
	Request []byte
	Started time.Time
	// StatusCode is the HTTP status; 0 when no response arrived.
	StatusCode int
	// Completion is the assembled response (partial when Err is set).
	Completion openai.ChatCompletion
	// Raw is the body exactly as received, up to the failure if any; of a response over
	// the client's cap, its first KeptPrefixBytes (cut after the last whole SSE event).
	Raw []byte
	// TTFT is the time to the first content or tool-call delta; 0 if none came. A
	// non-streamed answer has its first token when it has all of them: TTFT = Latency.
	TTFT    time.Duration
	Latency time.Duration // from sending to the end of the body
	// LastDelta is the time to the last content or tool-call delta, and Deltas how many
	// events carried one: the decode time LastDelta − TTFT over the tokens after the
	// first is the inter-token latency, when the tokens arrived in more than one event.
	LastDelta time.Duration
	Deltas    int
	// DeltaTimes are the times, from Started, at which each of those Deltas events
	// arrived: with engines that stream one token per event, the per-token timeline
	// whose gaps are the true inter-token latencies.
	DeltaTimes []time.Duration
	// Err is nil when the request completed, whatever the content. It wraps ErrStalled,
	// ErrRequestTimeout, ErrBrokenStream, ErrNoChoices, ErrResponseTooLarge,
	// ErrPastMaxTokens, a *StatusError, or the context's error when the caller cancelled.
	Err error

	// hooks are the context's StreamHooks (WithStreamHooks).
	hooks StreamHooks
}

// Chat sends one chat completion request to base (e.g. http://127.0.0.1:30000) and
// reads the answer, streamed when req.Stream is set. A streamed request always asks for
// the final usage chunk.
func (c *Client) Chat(ctx context.Context, base string, req openai.ChatRequest) Exchange {
	if req.Stream && req.StreamOptions == nil {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Exchange{Err: fmt.Errorf("workload: encode request %s: %w", req.RID, err)}
	}
	return c.chatBody(ctx, base, req, body)
}

// The headers of a chat request, shared by every request and never changed: the
// transport only reads them.
var (
	wholeHeader  = http.Header{"Content-Type": {"application/json"}}
	streamHeader = http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}
)

// chatBody sends body, the encoding of req (which must already ask for the usage chunk
// when it streams), and reads the answer.
func (c *Client) chatBody(ctx context.Context, base string, req openai.ChatRequest, body []byte) Exchange {
	ex := Exchange{hooks: streamHooks(ctx)}
	ex.Request = body
	reqTimeout, stall := c.timeouts()

	// One context and one timer serve both the request timeout and, for a stream, the
	// stall check: the watch cancels sctx with the cause of whichever came first.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	url := strings.TrimRight(base, "/") + "/v1/chat/completions"
	rctx := context.Context(sctx)
	var rx receiveClock
	if req.Stream {
		// The connection the request goes out on, to read its tokens' receive times.
		rctx = httptrace.WithClientTrace(sctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			rx, _ = info.Conn.(receiveClock)
		}})
	}
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		ex.Err = fmt.Errorf("workload: request %s: %w", req.RID, err)
		return ex
	}
	header := wholeHeader
	if req.Stream {
		header = streamHeader
	}
	hreq.Header = c.labelHeader(ctx, header)

	ex.Started = time.Now()
	// The stall clock runs from sending: an engine that never answers a stream has
	// stalled as surely as one that stops mid-way. Only a stream can stall; a whole
	// answer runs under the request timeout alone.
	streamStall := time.Duration(0)
	if req.Stream {
		streamStall = stall
	}
	watch := newRequestWatch(reqTimeout, streamStall, cancel)
	defer watch.stop()
	// failure says what ended the request early, judged by which context fired.
	failure := func(where string, err error) error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("workload: %s %s: cancelled: %w", where, req.RID, ctx.Err())
		case errors.Is(context.Cause(sctx), ErrStalled):
			return fmt.Errorf("workload: %s %s: no event for %v: %w", where, req.RID, stall, ErrStalled)
		case errors.Is(context.Cause(sctx), ErrRequestTimeout):
			return fmt.Errorf("workload: %s %s: past %v: %w", where, req.RID, reqTimeout, ErrRequestTimeout)
		}
		return fmt.Errorf("workload: %s %s: %w: %w", where, req.RID, ErrBrokenStream, err)
	}

	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		ex.Latency = time.Since(ex.Started)
		ex.Err = failure("send", err)
		return ex
	}
	defer resp.Body.Close()
	ex.StatusCode = resp.StatusCode
	if ex.hooks.Accepted != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		ex.hooks.Accepted()
	}

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		ex.Raw = raw
		ex.Latency = time.Since(ex.Started)
		ex.Err = fmt.Errorf("workload: request %s: %w", req.RID, &StatusError{Code: resp.StatusCode, Message: errorMessage(raw)})
		if rerr != nil {
			ex.Err = fmt.Errorf("%w (body: %w)", ex.Err, failure("read error body", rerr))
		}
		return ex
	}

	limit := c.maxResponse()
	tooLarge := func() error {
		return fmt.Errorf("workload: request %s: response exceeded %d bytes (workload.max_response_bytes): %w", req.RID, limit, ErrResponseTooLarge)
	}
	budget, budgetEvents := replyBudget(req.MaxTokens)
	pastMaxTokens := func(text int64, events int) error {
		return fmt.Errorf("workload: request %s: %d bytes of text in %d events, more than max_tokens %d allows (%d bytes, %d events): %w",
			req.RID, text, events, req.MaxTokens, budget, budgetEvents, ErrPastMaxTokens)
	}
	if !req.Stream || isJSON(resp.Header.Get("Content-Type")) {
		// An engine may answer a stream request with one JSON body (some do on
		// validation errors that still carry 200); read it as such.
		readWhole(&ex, resp.Body, resp.ContentLength, limit, wholeSizes.first(), tooLarge, failure)
		if ex.Err == nil && resp.ContentLength < 0 {
			wholeSizes.observe(len(ex.Raw))
		}
		if n := replyText(ex.Completion); ex.Err == nil && budget > 0 && n > budget {
			// The whole body is read already (within the response cap); what is kept of
			// it is what a cut stream keeps.
			ex.Raw = append([]byte(nil), ex.Raw[:min(len(ex.Raw), KeptPrefixBytes)]...)
			cutReply(&ex.Completion, budget)
			ex.Err = pastMaxTokens(n, 1)
		}
		if ex.TTFT > 0 && c.OnToken != nil {
			c.OnToken()
		}
		return ex
	}
	readStream(&ex, resp.Body, rx, limit, streamSizes.first(), tooLarge, watch, c.OnToken, failure,
		func(text int64, events int) error {
			if budget > 0 && (text > budget || events > budgetEvents) {
				return pastMaxTokens(text, events)
			}
			return nil
		})
	if ex.Err == nil {
		streamSizes.observe(len(ex.Raw))
	}
	return ex
}

// isJSON reports whether a Content-Type names application/json, whatever its
// parameters; mime.ParseMediaType would build a map of them for every response.
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// sizeEstimate follows the sizes of the bodies read, to size the first chunk of the next
// one so that it holds the whole body: it rises at once to a larger body and decays
// slowly (by an eighth of the gap per body) towards smaller ones.
type sizeEstimate struct{ n atomic.Int64 }

// streamSizes and wholeSizes follow the process's streamed bodies and whole bodies of
// unknown length. They are shared by every client, so that the first requests of a
// run, all sent before any answer came back, start from the sizes of the runs before.
var streamSizes, wholeSizes sizeEstimate

// maxFirstChunk bounds the first chunk; a longer body goes on in pooled chunks.
const maxFirstChunk = 1 << 20

// first is the size for the next body's first chunk: the estimate with a quarter and
// 512 bytes to spare; 0 before any body was seen.
func (e *sizeEstimate) first() int {
	n := e.n.Load()
	if n == 0 {
		return 0
	}
	return int(min(n+n/4+512, maxFirstChunk))
}

func (e *sizeEstimate) observe(size int) {
	n := int64(size)
	old := e.n.Load()
	if n < old {
		n = old - (old-n)/8
	}
	if n != old {
		e.n.Store(n)
	}
}

// requestWatch cancels a request when its timeout passes or, when it has a stall time,
// when no stream event arrived for that long, with ErrRequestTimeout or ErrStalled as
// the cause. Events only record when they came; the one timer, armed once, re-arms
// itself for what remains of the nearer of the two windows, so that a stream of
// thousands of events does not reset a timer for each, and a request needs no second
// context or timer for its deadline.
type requestWatch struct {
	timeout time.Duration
	stall   time.Duration // 0: no stall check
	start   time.Time
	last    atomic.Int64 // the latest event, as time since start
	timer   *time.Timer
	cancel  context.CancelCauseFunc
	mu      sync.Mutex
	closed  bool
}

func newRequestWatch(timeout, stall time.Duration, cancel context.CancelCauseFunc) *requestWatch {
	w := &requestWatch{timeout: timeout, stall: stall, start: time.Now(), cancel: cancel}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(w.next(0), w.check)
	return w
}

// next is how long from elapsed (time since start) until the nearer window closes.
func (w *requestWatch) next(elapsed time.Duration) time.Duration {
	d := w.timeout - elapsed
	if w.stall > 0 {
		d = min(d, w.stall-(elapsed-time.Duration(w.last.Load())))
	}
	return d
}

// event records an event at since (time since the request was sent; the watch's
// clock started at most microseconds later, so the window is never shortened).
func (w *requestWatch) event(since time.Duration) {
	if w != nil {
		w.last.Store(int64(since))
	}
}

func (w *requestWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	elapsed := time.Since(w.start)
	var cause error
	switch {
	case elapsed >= w.timeout:
		cause = ErrRequestTimeout
	case w.stall > 0 && elapsed-time.Duration(w.last.Load()) >= w.stall:
		cause = ErrStalled
	default:
		w.timer.Reset(w.next(elapsed))
		return
	}
	w.closed = true
	w.cancel(cause)
}

func (w *requestWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.timer.Stop()
}

// readWhole reads a JSON body of at most limit bytes. A longer one (by its
// Content-Length, or as it arrives) is not read past limit: its first KeptPrefixBytes
// are kept and the exchange fails.
func readWhole(ex *Exchange, body io.Reader, length, limit int64, first int, tooLarge func() error, failure func(string, error) error) {
	if length > limit {
		ex.Raw, _ = io.ReadAll(io.LimitReader(body, KeptPrefixBytes))
		ex.Latency = time.Since(ex.Started)
		ex.Err = tooLarge()
		return
	}
	if length >= 0 {
		// The size is known: one buffer of it, and the reads land in place.
		raw := make([]byte, length)
		n, err := io.ReadFull(body, raw)
		ex.Latency = time.Since(ex.Started)
		ex.Raw = raw[:n]
		if err != nil {
			ex.Err = failure("read", err)
			return
		}
		decodeWhole(ex)
		return
	}
	// Of unknown size: read straight into the chunks it is kept in, the first sized
	// from recent bodies.
	raw := rawBody{first: first}
	var err error
	for err == nil && int64(raw.n) <= limit {
		_, err = raw.readFrom(body, int(min(limit-int64(raw.n)+1, 1<<30)))
	}
	if err == io.EOF {
		err = nil
	}
	ex.Latency = time.Since(ex.Started)
	if int64(raw.n) > limit {
		ex.Raw = raw.prefix(KeptPrefixBytes)
		raw.release()
		ex.Err = tooLarge()
		return
	}
	ex.Raw = raw.bytes()
	if err != nil {
		ex.Err = failure("read", err)
		return
	}
	decodeWhole(ex)
}

// decodeWhole decodes the non-streamed answer in ex.Raw.
func decodeWhole(ex *Exchange) {
	if err := decodeCompletion(ex.Raw, &ex.Completion); err != nil {
		ex.Err = fmt.Errorf("workload: decode completion: %w: %w", ErrBrokenStream, err)
		return
	}
	if len(ex.Completion.Choices) == 0 {
		ex.Err = fmt.Errorf("workload: completion %s: %w", ex.Completion.ID, ErrNoChoices)
		return
	}
	if m := ex.Completion.Choices[0].Message; m.Content != "" || len(m.ToolCalls) > 0 {
		ex.TTFT = ex.Latency
	}
}

// readStream reads an SSE body of at most limit bytes, assembling the completion as
// events arrive. At the limit it stops reading: the raw prefix up to the last whole event
// within KeptPrefixBytes is kept, with the completion those events make.
//
// An event's arrival time is taken once per Read, for the Read that brought the
// event's last byte, before any framing or decoding: the events a Read completes
// arrived together, and the time the decoding of the first of them takes is not the
// arrival of the second. It is the kernel's receive time of the last segment read, when
// rx (the connection) gives it, else the clock when the Read returned: a driver busy
// with a thousand streams reads some of them late, and that delay is its own, not the
// engine's. The bytes are read straight into the chunks the raw body is kept in, so a
// stream holds no read buffer of its own.
//
// first is the size of the first chunk the body is read into (0: a pooled 4 KiB one).
// overBudget, if set, hears the bytes of text and the events carrying it after each such
// event; an error it returns (ErrPastMaxTokens) ends the reading there.
func readStream(ex *Exchange, body io.Reader, rx receiveClock, limit int64, first int, tooLarge func() error, watch *requestWatch,
	onToken func(), failure func(string, error) error, overBudget func(text int64, events int) error) {
	var (
		dec sseDecoder
		asm streamAssembly
		at  time.Duration // when the current Read's bytes arrived
		// text says that the current Read's events carried generated text: onToken
		// hears it once per Read, not once per event (a Read of a fast stream holds
		// hundreds, all of one arrival).
		text bool
	)
	emit := func(p []byte) error {
		delta, err := asm.event(p)
		if err != nil {
			return err
		}
		watch.event(at)
		if !delta {
			return nil
		}
		ex.LastDelta = at
		ex.Deltas++
		ex.DeltaTimes = append(ex.DeltaTimes, at)
		if ex.TTFT == 0 {
			ex.TTFT = at
			if ex.hooks.FirstDelta != nil {
				ex.hooks.FirstDelta()
			}
		}
		text = true
		if overBudget != nil {
			return overBudget(asm.text, ex.Deltas)
		}
		return nil
	}
	raw := rawBody{first: first}
	for {
		// One byte past the limit is read, so that a body of exactly limit bytes passes.
		p, rerr := raw.readFrom(body, int(min(limit-int64(raw.n)+1, 1<<30)))
		at = arrival(ex.Started, rx, at)
		if int64(raw.n) > limit {
			ex.Latency = at
			ex.Raw = raw.keptPrefix()
			raw.release()
			ex.Completion, _ = AssembleStream(ex.Raw)
			ex.Err = tooLarge()
			return
		}
		if len(p) > 0 {
			text = false
			err := dec.Feed(p, emit)
			if text && onToken != nil {
				onToken()
			}
			if errors.Is(err, ErrPastMaxTokens) {
				// Reading stops here; the caller closes the body, and with it the stream.
				ex.Err = err
				break
			} else if err != nil {
				ex.Err = fmt.Errorf("workload: stream: %w", err)
				break
			}
		}
		if rerr == io.EOF {
			if !asm.done && !asm.finished {
				ex.Err = fmt.Errorf("workload: stream after %d events: %w: %w", asm.events, ErrBrokenStream, ErrIncompleteStream)
			}
			break
		}
		if rerr != nil {
			ex.Err = failure("stream", rerr)
			break
		}
	}
	ex.Latency = time.Since(ex.Started)
	ex.Raw = raw.bytes()
	ex.Completion = asm.completion()
	if ex.Err == nil && len(ex.Completion.Choices) == 0 {
		ex.Err = fmt.Errorf("workload: stream of %d events: %w", asm.events, ErrNoChoices)
	}
}

// replyText is the bytes of generated text of a completion: what ReplyBytesPerToken
// bounds.
func replyText(c openai.ChatCompletion) int64 {
	var n int64
	for _, ch := range c.Choices {
		n += int64(len(ch.Message.Content))
		for _, tc := range ch.Message.ToolCalls {
			n += int64(len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments))
		}
	}
	return n
}

// cutReply cuts a completion's generated text to its first budget bytes (at a rune's
// start), as a stream cut at its budget would have it.
func cutReply(c *openai.ChatCompletion, budget int64) {
	cut := func(s string) string {
		if int64(len(s)) <= budget {
			budget -= int64(len(s))
			return s
		}
		n := int(budget)
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		budget = 0
		return strings.Clone(s[:n])
	}
	for i := range c.Choices {
		m := &c.Choices[i].Message
		m.Content = cut(m.Content)
		for k := range m.ToolCalls {
			m.ToolCalls[k].Function.Arguments = cut(m.ToolCalls[k].Function.Arguments)
		}
	}
}

// receiveClock is a connection that says when the kernel received the last segment a
// read of it took in (rxStamped makes one where the platform can).
type receiveClock interface{ received() time.Time }

// arrival is when the bytes a Read of a stream just returned arrived, as time since
// started (prev: the previous Read's): now, less how long they waited since the kernel
// received them when the connection says. The bytes a Read returns from the transport's
// buffer came in the connection's latest read or before it, so the receive time is never
// earlier than their arrival.
//
// The kernel stamps with the wall clock, which a time daemon may slew (by up to 8% while
// it catches up) or step; a request's times are on the monotonic clock. So the wall
// clock only measures the wait, from the stamp to now, a span of microseconds to
// milliseconds, and the wait is taken off the monotonic time since started; a wait the
// wall clock makes negative (stepped back) counts as none. A time.Now reads the two
// clocks one after the other, so a thread preempted between them skews the result by
// as long as it waited: microseconds, on a loaded machine now and then a few hundred.
func arrival(started time.Time, rx receiveClock, prev time.Duration) time.Duration {
	now := time.Now()
	at := now.Sub(started)
	if rx == nil {
		return at
	}
	t := rx.received()
	if t.IsZero() {
		return at
	}
	if waited := now.Round(0).Sub(t); waited > 0 {
		at -= waited
	}
	return max(at, prev)
}

// rawBody keeps a streamed body as it arrives, in chunks that grow from 4 KiB to 1 MiB
// and are joined once, at the exact length, when the body is complete; the chunks then
// go back to a pool for the next body. One growing slice would copy a long body over
// and over, and the garbage of the copies of several concurrent multi-megabyte streams
// would be most of arbiter's memory.
//
// A rawBody with a first size starts in a chunk of its own of that size, outside the
// pool: sized to hold the whole body, it is handed over as the body with no copy, and
// no pooled chunk leaves the pool with it (a pool that a collection empties would
// otherwise allocate a fresh first chunk per stream, and the final copy besides).
type rawBody struct {
	full  [][]byte // chunks filled to their capacity
	cur   []byte
	n     int
	first int
}

// rawChunks pools the chunks by size class: 4 KiB << i.
var rawChunks [9]sync.Pool

func chunkClass(size int) int {
	c := 0
	for 4<<10<<c < size {
		c++
	}
	return min(c, len(rawChunks)-1)
}

func getChunk(size int) []byte {
	c := chunkClass(size)
	if b, ok := rawChunks[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4<<10<<c)
}

// room makes sure the current chunk has free space, taking a chunk twice the size of
// the last from the pool when it is full.
func (r *rawBody) room() {
	if len(r.cur) == cap(r.cur) {
		if r.cur != nil {
			r.full = append(r.full, r.cur)
		} else if r.first > 0 && len(r.full) == 0 {
			r.cur = make([]byte, 0, r.first)
			return
		}
		r.cur = getChunk(min(max(4<<10, 2*cap(r.cur)), 1<<20))
	}
}

// readFrom reads once from body straight into the current chunk, at most max bytes,
// and returns what it read: the bytes land where they are kept, with no copy through
// a read buffer.
func (r *rawBody) readFrom(body io.Reader, max int) ([]byte, error) {
	r.room()
	free := r.cur[len(r.cur):min(cap(r.cur), len(r.cur)+max)]
	n, err := body.Read(free)
	r.cur = r.cur[:len(r.cur)+n]
	r.n += n
	return free[:n], err
}

// string is the whole text, joined once; the chunks go back to the pool.
func (r *rawBody) string() string {
	if r.n == 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(r.n)
	for _, c := range r.full {
		b.Write(c)
	}
	b.Write(r.cur)
	r.release()
	return b.String()
}

func (r *rawBody) write(p []byte) { writeRaw(r, p) }

// writeRaw appends text, of a string or of bytes, to the chunks.
func writeRaw[S string | []byte](r *rawBody, s S) {
	r.n += len(s)
	for len(s) > 0 {
		r.room()
		k := min(len(s), cap(r.cur)-len(r.cur))
		r.cur = append(r.cur, s[:k]...)
		s = s[k:]
	}
}

// bytes is the whole body, in a slice of its own; nil when nothing arrived. The
// chunks are given back (or the one chunk handed over): the rawBody is empty afterwards.
func (r *rawBody) bytes() []byte {
	if r.n == 0 {
		return nil
	}
	if len(r.full) == 0 && 2*len(r.cur) >= cap(r.cur) {
		// A body in one chunk it fills at least half of is handed over as it is:
		// a copy would cost as much memory and a second pass over the bytes.
		out := r.cur
		*r = rawBody{}
		return out
	}
	out := make([]byte, 0, r.n)
	for _, c := range r.full {
		out = append(out, c...)
	}
	out = append(out, r.cur...)
	r.release()
	return out
}

// release gives the chunks back to the pool.
func (r *rawBody) release() {
	for _, c := range r.full {
		putChunk(c)
	}
	putChunk(r.cur)
	*r = rawBody{}
}

func putChunk(c []byte) {
	if cap(c) == 4<<10<<chunkClass(cap(c)) {
		c = c[:0]
		rawChunks[chunkClass(cap(c))].Put(&c)
	}
}

// prefix is a copy of the body's first n bytes.
func (r *rawBody) prefix(n int) []byte {
	p := make([]byte, 0, min(r.n, n))
	for _, c := range append(r.full, r.cur) {
		p = append(p, c[:min(len(c), cap(p)-len(p))]...)
	}
	return p
}

// keptPrefix is what is kept of a stream that ran past its cap: its first
// KeptPrefixBytes, cut after the last event that ends within them.
func (r *rawBody) keptPrefix() []byte {
	p := r.prefix(KeptPrefixBytes)
	if end := bytes.LastIndex(p, []byte("\n\n")); end >= 0 {
		p = p[:end+2]
	}
	return p
}

// errorMessage extracts the message of an OpenAI error envelope, else the body's start.
func errorMessage(raw []byte) string {
	var eb openai.ErrorBody
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Message != "" {
		return eb.Error.Message
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// ListModels returns the ids of the models base serves (GET /v1/models), in its order.
func (c *Client) ListModels(ctx context.Context, base string) ([]string, error) {
	reqTimeout, _ := c.timeouts()
	ctx, cancel := context.WithTimeoutCause(ctx, reqTimeout, ErrRequestTimeout)
	defer cancel()
	url := strings.TrimRight(base, "/") + "/v1/models"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("workload: list models: %w", err)
	}
	resp, err := c.httpClient().Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("workload: list models at %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return nil, fmt.Errorf("workload: list models at %s: read: %w", url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("workload: list models at %s: %w", url, &StatusError{Code: resp.StatusCode, Message: errorMessage(raw)})
	}
	var list openai.ModelList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("workload: list models at %s: decode: %w", url, err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}
