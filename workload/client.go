package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// Default timeouts of a Client whose fields are zero, as in the spec's timeouts section.
const (
	DefaultRequestTimeout = 10 * time.Minute  // a long agentic turn on a loaded engine
	DefaultStallTimeout   = 120 * time.Second // longer than any healthy gap between tokens
)

// maxErrorBody bounds how much of a non-2xx body is kept.
const maxErrorBody = 1 << 20

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
}

var defaultHTTP = newHTTPClient(16)

// NewClient returns a Client whose transport keeps one idle connection per concurrent
// session, so that a run at concurrency C reuses C connections instead of churning.
func NewClient(concurrency int) *Client {
	return &Client{HTTP: newHTTPClient(concurrency)}
}

func newHTTPClient(concurrency int) *http.Client {
	if concurrency < 1 {
		concurrency = 1
	}
	t := &http.Transport{
		// Engines are reached directly; a proxy from the environment must not
		// intercept (or leak) experiment traffic.
		Proxy:       nil,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// Raw bytes are kept exactly as the engine sent them, so no transparent gzip.
		DisableCompression:  true,
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	// Timeouts are per request (context), never on the client: a long stream is normal.
	return &http.Client{Transport: t}
}

// CloseIdleConnections closes the connections kept for reuse, at the end of a run.
func (c *Client) CloseIdleConnections() { c.httpClient().CloseIdleConnections() }

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
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
	// Raw is the body exactly as received, up to the failure if any.
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
	// Err is nil when the request completed, whatever the content. It wraps ErrStalled,
	// ErrRequestTimeout, ErrBrokenStream, ErrNoChoices, a *StatusError, or the context's
	// error when the caller cancelled.
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
	ex := Exchange{hooks: streamHooks(ctx)}
	body, err := json.Marshal(req)
	if err != nil {
		ex.Err = fmt.Errorf("workload: encode request %s: %w", req.RID, err)
		return ex
	}
	ex.Request = body
	reqTimeout, stall := c.timeouts()

	rctx, cancelTimeout := context.WithTimeoutCause(ctx, reqTimeout, ErrRequestTimeout)
	defer cancelTimeout()
	sctx, cancelStall := context.WithCancelCause(rctx)
	defer cancelStall(nil)

	url := strings.TrimRight(base, "/") + "/v1/chat/completions"
	hreq, err := http.NewRequestWithContext(sctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		ex.Err = fmt.Errorf("workload: request %s: %w", req.RID, err)
		return ex
	}
	hreq.Header.Set("Content-Type", "application/json")
	if req.Stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}

	ex.Started = time.Now()
	var stallTimer *time.Timer
	if req.Stream {
		// The stall clock runs from sending: an engine that never answers a stream
		// has stalled as surely as one that stops mid-way.
		stallTimer = time.AfterFunc(stall, func() { cancelStall(ErrStalled) })
		defer stallTimer.Stop()
	}
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

	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if !req.Stream || mt == "application/json" {
		// An engine may answer a stream request with one JSON body (some do on
		// validation errors that still carry 200); read it as such.
		readWhole(&ex, resp.Body, failure)
		return ex
	}
	readStream(&ex, resp.Body, stallTimer, stall, failure)
	return ex
}

func readWhole(ex *Exchange, body io.Reader, failure func(string, error) error) {
	raw, err := io.ReadAll(body)
	ex.Raw = raw
	ex.Latency = time.Since(ex.Started)
	if err != nil {
		ex.Err = failure("read", err)
		return
	}
	if err := json.Unmarshal(raw, &ex.Completion); err != nil {
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

func readStream(ex *Exchange, body io.Reader, stallTimer *time.Timer, stall time.Duration, failure func(string, error) error) {
	var (
		dec sseDecoder
		asm streamAssembly
		buf = make([]byte, 32<<10)
	)
	emit := func(p []byte) error {
		delta, err := asm.event(p)
		if err != nil {
			return err
		}
		stallTimer.Reset(stall)
		if delta {
			ex.LastDelta = time.Since(ex.Started)
			ex.Deltas++
		}
		if delta && ex.TTFT == 0 {
			ex.TTFT = time.Since(ex.Started)
			if ex.hooks.FirstDelta != nil {
				ex.hooks.FirstDelta()
			}
		}
		return nil
	}
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			ex.Raw = append(ex.Raw, buf[:n]...)
			if err := dec.Feed(buf[:n], emit); err != nil {
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
	ex.Completion = asm.completion()
	if ex.Err == nil && len(ex.Completion.Choices) == 0 {
		ex.Err = fmt.Errorf("workload: stream of %d events: %w", asm.events, ErrNoChoices)
	}
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

// ListModels asks base for its models with a default Client.
func ListModels(ctx context.Context, base string) ([]string, error) {
	return (&Client{}).ListModels(ctx, base)
}
