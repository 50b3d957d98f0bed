package repro

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
	"github.com/arbiterlab/arbiter/plugins/detectors"
	"github.com/arbiterlab/arbiter/workload"
)

// ReplayOptions say how a bundle's requests are sent again.
type ReplayOptions struct {
	// BaseURL is the running engine, e.g. http://127.0.0.1:30000.
	BaseURL string
	// Concurrency is how many requests are in flight at once; 0 takes the experiment's.
	// A load-dependent failure needs the load: the cases are sent again and again to fill it.
	Concurrency int
	// Rounds is how many times each slot sends a case (default 2).
	Rounds int
	// Timeout bounds one request, from sending it to the end of its answer, and the
	// silence within a streamed answer (default DefaultReplayTimeout).
	Timeout time.Duration
}

// DefaultReplayTimeout bounds one replayed request when ReplayOptions.Timeout is 0.
const DefaultReplayTimeout = 2 * time.Minute

// MaxReplayConcurrency bounds the requests a replay has in flight, whatever the bundle or
// the caller asks: a bundle of 20,000 cases is sent through this many connections.
const MaxReplayConcurrency = 256

// CaseResult is how one failing request fared when sent again.
type CaseResult struct {
	ID string `json:"id"`
	// Sent is how many times it was sent; Corrupted how many of the answers a detector
	// flagged, Reason the first flag's reason.
	Sent, Corrupted int
	Failed          int    `json:"failed"`
	Reason          string `json:"reason,omitempty"`
}

// Reproduced reports whether any answer to the case was flagged again.
func (c CaseResult) Reproduced() bool { return c.Corrupted > 0 }

// Judged reports whether any answer to the case came back whole and was judged.
func (c CaseResult) Judged() bool { return c.Sent > c.Failed }

// Outcome is what a replay showed, as a CI job needs to tell it.
type Outcome string

// What a replay can show.
const (
	// Reproduced: a failing request was flagged again.
	Reproduced Outcome = "reproduced"
	// NoLongerReproduces: every failing request was answered and judged, none flagged.
	NoLongerReproduces Outcome = "no_longer_reproduces"
	// Unreached: none was flagged, and some got no answer that could be judged (the
	// engine could not be reached, failed, redirected elsewhere or ran past the timeout):
	// the replay says nothing about the failure.
	Unreached Outcome = "unreached"
)

// OutcomeOf is what results show.
func OutcomeOf(results []CaseResult) Outcome {
	judged := true
	for _, r := range results {
		if r.Reproduced() {
			return Reproduced
		}
		judged = judged && r.Judged()
	}
	if !judged {
		return Unreached
	}
	return NoLongerReproduces
}

// Load reads the bundle in dir.
func Load(dir string) (*Bundle, error) {
	data, err := os.ReadFile(filepath.Join(dir, BundleFile))
	if err != nil {
		return nil, err
	}
	var b Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: not a bundle: %v", filepath.Join(dir, BundleFile), err)
	}
	if len(b.Cases) == 0 {
		return nil, fmt.Errorf("%s holds no failing request", filepath.Join(dir, BundleFile))
	}
	return &b, nil
}

// Replay sends the bundle's failing requests to the engine at o.BaseURL, o.Concurrency at
// once, and labels every answer with the bundle's built-in detectors (a plugin detector is
// left out, and said so in skipped).
func Replay(ctx context.Context, b *Bundle, o ReplayOptions) (results []CaseResult, skipped []string, err error) {
	var ds []plugins.Detector
	for _, name := range b.Detectors {
		if strings.HasPrefix(name, detectors.PluginPrefix) || name == detectors.DivergenceName {
			skipped = append(skipped, name)
			continue
		}
		d, release, err := detectors.Resolve(ctx, name)
		if err != nil {
			skipped = append(skipped, name)
			continue
		}
		defer release()
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return nil, skipped, fmt.Errorf("none of the bundle's detectors (%s) can judge a replay", strings.Join(b.Detectors, ", "))
	}
	conc := o.Concurrency
	if conc <= 0 {
		conc = max(b.Concurrency, len(b.Cases))
	}
	conc = min(conc, len(b.Cases)+len(b.Load), MaxReplayConcurrency)
	rounds := max(o.Rounds, 1)
	if o.Rounds == 0 {
		rounds = 2
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultReplayTimeout
	}
	// The cases first, then the load: every request at once, the cases judged.
	reqs := make([]openai.ChatRequest, len(b.Cases), len(b.Cases)+len(b.Load))
	for i, c := range b.Cases {
		if err := json.Unmarshal(c.Request, &reqs[i]); err != nil {
			return nil, skipped, fmt.Errorf("%s: the request is not a chat request: %v", c.ID, err)
		}
	}
	for i, raw := range b.Load {
		var r openai.ChatRequest
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, skipped, fmt.Errorf("load request %d is not a chat request: %v", i, err)
		}
		reqs = append(reqs, r)
	}
	client := workload.NewClient(conc)
	client.RequestTimeout, client.StallTimeout = timeout, timeout
	defer client.CloseIdleConnections()
	results = make([]CaseResult, len(b.Cases))
	for i, c := range b.Cases {
		results[i].ID = c.ID
	}
	// Every request is sent rounds times at least, conc at once: with more requests than
	// slots, the slots take the next one as each answer ends.
	sends := int64(rounds * max(conc, len(reqs)))
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= sends || ctx.Err() != nil {
					return
				}
				i := int(k % int64(len(reqs)))
				req := reqs[i]
				req.RID = fmt.Sprintf("arb-replay-%d-%d", i, k)
				ex := client.Chat(ctx, o.BaseURL, req)
				if i >= len(b.Cases) {
					continue // the load: not judged
				}
				resp := plugins.Response{Completion: ex.Completion, Tools: req.Tools, ToolChoice: req.ToolChoice}
				labels, corrupted, lerr := detectors.Label(ctx, ds, resp)
				mu.Lock()
				res := &results[i]
				res.Sent++
				switch {
				case ex.Err != nil || lerr != nil:
					res.Failed++
				case corrupted:
					res.Corrupted++
					for _, l := range labels {
						if l.Corrupted && res.Reason == "" {
							res.Reason = l.Detector + ": " + l.Reason
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results, skipped, ctx.Err()
}
