// Package enginehttp is the one policy by which arbiter talks HTTP to what it tests: an
// engine, its metrics and server info, a replayed server. What answers is software under
// test, so a redirect may not take a request off the engine's own host and port (to a
// cloud metadata service, another engine, anything else), proxies from the environment
// are not used, and every client is bounded in time by its caller.
package enginehttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrRedirect reports a redirect off the engine's own scheme, host and port: an engine
// fault, never followed.
var ErrRedirect = errors.New("the engine redirected the request off its own host and port")

// maxRedirects bounds the redirects followed within the engine's own host and port.
const maxRedirects = 5

// CheckRedirect is an http.Client's CheckRedirect under the policy: a redirect is followed
// only to the scheme, host and port of the request it answered, at most 5 times.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) == 0 {
		return nil
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		// The target is named by host and port only: its path and query may carry what
		// the engine wants read back.
		return fmt.Errorf("%w (from %s to %s://%s)", ErrRedirect, first.Host, req.URL.Scheme, req.URL.Host)
	}
	if len(via) > maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", ErrRedirect, maxRedirects)
	}
	return nil
}

// transport reaches engines directly: a proxy from the environment must neither intercept
// nor leak experiment traffic.
var transport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return t
}()

// Client returns a client under the policy whose every request, body included, ends
// within timeout (0: only the request's context bounds it).
func Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: transport, CheckRedirect: CheckRedirect, Timeout: timeout}
}
