package arms

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// The workload kinds, in the words a spec uses. They are the one home of these words: the
// workload package runs them and the verdict reads them back from the database.
const (
	// WorkloadAgent is multi-turn tool-calling agents, the default kind.
	WorkloadAgent = "toolcall-agent"
	// WorkloadThroughput is a closed loop at each listed concurrency, then open-loop
	// Poisson arrivals at each listed rate: one-request sessions of seeded prompts.
	WorkloadThroughput = "throughput"
	// WorkloadAbortCascade starts sessions, aborts them mid-flight, and measures how long
	// the engine takes to serve again, and its throughput before and after.
	WorkloadAbortCascade = "abort-cascade"
	// WorkloadLongContext is multi-turn agent sessions whose context grows from a start
	// size to a ceiling, with long generations and a prefix shared across sessions.
	WorkloadLongContext = "long-context"
	// WorkloadTrace replays recorded conversations from a JSONL file.
	WorkloadTrace = "trace"
	// WorkloadVerify sends every request of a verifier's request file (OpenAI chat
	// requests with tools, one per line) to every arm, once per launch, and scores each
	// arm's tool calls against the reference arm's.
	WorkloadVerify = "verify"
)

// Formats of a trace workload's file (workload.format).
const (
	// TraceArbiter is arbiter's own JSONL of recorded conversations, the default.
	TraceArbiter = "arbiter"
	// TraceMooncake is Mooncake's JSONL of request lengths and arrival times, with
	// hash_ids naming the 512-token blocks requests share.
	TraceMooncake = "mooncake"
	// TraceBurstGPT is BurstGPT's CSV of arrival times and token counts.
	TraceBurstGPT = "burstgpt"
	// TraceVerify is a verifier's request file: arbiter's own line format, each line one
	// request (its messages do not end with an assistant message). Only the verify
	// workload reads it; a trace workload cannot name it.
	TraceVerify = "verify"
)

// TraceFormats are the formats a trace may have, the default first.
var TraceFormats = []string{TraceArbiter, TraceMooncake, TraceBurstGPT}

// Arrivals of a length trace (mooncake, burstgpt).
const (
	// ArrivalsRecorded sends each request at its recorded time (open loop), the default.
	ArrivalsRecorded = "recorded"
	// ArrivalsClosed sends the requests in order, Concurrency in flight at once.
	ArrivalsClosed = "closed"
)

// Abort modes of an abort cascade.
var abortModes = []string{"abort_all", "abort_request", "disconnect"}

// ThroughputSpec is workload kind throughput: a closed loop at each concurrency, then
// open-loop Poisson arrivals at each rate; every request is a session of its own.
type ThroughputSpec struct {
	// Concurrency lists the closed-loop phases: that many requests in flight until the
	// phase's requests are done.
	Concurrency []int
	// Rates lists the open-loop phases, in requests per second: arrivals at seeded
	// exponential gaps, sent whether or not earlier requests have finished.
	Rates []float64
	// Requests per phase; 0 is the workload's default (32).
	Requests int
	// PromptTokens is each request's prompt, approximately; 0 is the workload's default.
	PromptTokens int
	// SharedPrefixTokens is a system prompt every request shares, for prefix caches; 0
	// for none.
	SharedPrefixTokens int
	// KeepEOS is ignore_eos: false in the spec; by default every request asks for exactly
	// max_tokens tokens, so that every arm generates as much.
	KeepEOS bool
}

// PhaseNames names the phases in the order they run: the closed loops, then the open ones.
// The verdict groups its results by these names.
func (t ThroughputSpec) PhaseNames() []string {
	var out []string
	for _, c := range t.Concurrency {
		out = append(out, ClosedPhaseName(c, ""))
	}
	for _, r := range t.Rates {
		out = append(out, OpenPhaseName(r))
	}
	return out
}

// ClosedPhaseName names a closed-loop phase at concurrency c, with a stage ("before",
// "after") when it has one.
func ClosedPhaseName(c int, stage string) string {
	if stage == "" {
		return fmt.Sprintf("c=%d", c)
	}
	return fmt.Sprintf("c=%d %s", c, stage)
}

// OpenPhaseName names an open-loop phase at rate requests per second.
func OpenPhaseName(rate float64) string {
	return "poisson " + strconv.FormatFloat(rate, 'g', -1, 64) + "/s"
}

// AbortCascadeSpec is workload kind abort-cascade: throughput at ThroughputAt before,
// Cascades abort cascades of Sessions sessions each with a canary after each, and
// throughput at ThroughputAt after.
type AbortCascadeSpec struct {
	// Sessions started per cascade, and Cascades; 0 is the workload's default of each.
	Sessions, Cascades int
	// Abort lists how each cascade aborts (abort_all, abort_request, disconnect), in
	// turn; none is abort_all.
	Abort []string
	// AbortWhen is "streaming" (every session streams; the default) or "first-token"
	// (the first one does, the others still queued or prefilling).
	AbortWhen string
	// CascadeTokens is each aborted session's generation, CanaryTokens each canary's.
	CascadeTokens, CanaryTokens int
	// AbortAfter bounds the wait for every session to stream before the abort;
	// RecoveryTimeout how long the canaries wait for the engine to serve again.
	AbortAfter, RecoveryTimeout time.Duration
	// ThroughputAt lists the concurrencies of the throughput phases before and after,
	// of ThroughputRequests requests (0: the workload's default) of PromptTokens.
	ThroughputAt       []int
	ThroughputRequests int
	PromptTokens       int
}

// LongContextSpec is workload kind long-context: agent sessions whose context grows from
// StartTokens to CeilingTokens over their rounds.
type LongContextSpec struct {
	StartTokens, CeilingTokens int
	// SharedPrefixTokens: 0 means the workload's default, capped at half of StartTokens;
	// a negative value shares nothing.
	SharedPrefixTokens int
	// AskFirst puts each round's request before its part of the case file instead of
	// after it (ask_first: true), so that a call's arguments are copied from the far
	// end of a long message.
	AskFirst bool
}

// TraceSpec is workload kind trace: the conversations of a JSONL file, replayed as
// recorded, or the requests of a length trace (mooncake, burstgpt), whose prompts
// arbiter writes to the recorded lengths.
type TraceSpec struct {
	// Path is the trace file as written in the spec; Resolved is where it is, a relative
	// path taken from the spec's folder.
	Path, Resolved string
	// Format is TraceArbiter (the default), TraceMooncake or TraceBurstGPT.
	Format string
	// Conversations is how many the file holds (its non-blank lines; a burstgpt file's
	// header is not one): each is a session.
	Conversations int
	// Arrivals of a length trace: ArrivalsRecorded (the default) or ArrivalsClosed.
	Arrivals string
	// Speed compresses a length trace's recorded time: 2 sends it in half the time.
	// 0 is 1.
	Speed float64
}

// LengthTrace says whether the trace gives lengths and arrival times rather than
// conversations (mooncake, burstgpt).
func (t *TraceSpec) LengthTrace() bool {
	return t != nil && (t.Format == TraceMooncake || t.Format == TraceBurstGPT)
}

// Defaults the decoder writes into a kind's fields, the same as the workload's.
const (
	defaultPhaseRequests  = 32
	defaultCascadeSession = 60
	defaultCascades       = 2
	defaultLongRounds     = 8
	defaultLongSessions   = 8
	maxCascades           = 1000
	// maxTraceSpeed bounds how much a length trace's time is compressed.
	maxTraceSpeed = 1_000_000
)

// workloadKind finds the kind a workload mapping declares (the default when it declares
// none, or one that is not a string), so that its fields can be read by its rules.
func (d *decoder) workloadKind(e entry) string {
	entries, _ := d.mapping(e.val, e.path)
	for _, f := range entries {
		if f.key == "kind" {
			if s, ok := f.val.(*ast.StringNode); ok {
				return s.Value
			}
		}
	}
	return DefaultWorkload
}

// commonWorkloadFields are read the same way for every kind.
var commonWorkloadFields = []string{"kind", "seed", "temperature", "max_tokens", "model", "max_response_bytes", "stream"}

// kindFields are each kind's own fields.
var kindFields = map[string][]string{
	WorkloadThroughput: {"concurrency", "rate", "requests", "prompt_tokens", "shared_prefix_tokens", "ignore_eos"},
	WorkloadAbortCascade: {"sessions", "cascades", "abort", "abort_when", "cascade_tokens", "canary_tokens", "abort_after",
		"recovery_timeout", "throughput_at", "throughput_requests", "prompt_tokens"},
	WorkloadLongContext: {"sessions", "rounds", "concurrency", "start_tokens", "ceiling_tokens", "shared_prefix_tokens", "ask_first"},
	WorkloadTrace:       {"path", "sessions", "concurrency", "format", "arrivals", "speed"},
	WorkloadVerify:      {"path", "concurrency"},
}

// decodeKindWorkload reads a workload of a kind other than the tool-call agent: the
// common fields, then the kind's own, and sets Sessions to the sessions one run reports
// (what the verdict counts as planned), Rounds and Concurrency to their shape.
func (d *decoder) decodeKindWorkload(e entry, kind string) {
	w := &d.spec.Workload
	w.Kind = kind
	known := append(slices.Clone(commonWorkloadFields), kindFields[kind]...)
	var (
		tp = &ThroughputSpec{}
		ac = &AbortCascadeSpec{}
		lc = &LongContextSpec{}
		tr = &TraceSpec{}
	)
	counts := map[string]int{}
	seen := d.fields(e.val, e.path, known, func(f entry) {
		switch f.key {
		case "kind":
		case "seed", "temperature", "max_tokens", "model", "max_response_bytes", "stream":
			d.requestField(f, w)
		case "concurrency":
			if kind == WorkloadThroughput {
				tp.Concurrency = d.counts(f, MaxConcurrency)
			} else {
				w.Concurrency, _ = d.bounded(f, 1, MaxConcurrency, "sessions in flight at once against one engine")
			}
		case "rate":
			tp.Rates = d.rates(f)
		case "throughput_at":
			ac.ThroughputAt = d.counts(f, MaxConcurrency)
		case "abort":
			ac.Abort = d.abortModes(f)
		case "abort_when":
			ac.AbortWhen, _ = d.oneOf(f, "abort_when", []string{"streaming", "first-token"})
		case "abort_after":
			ac.AbortAfter, _ = d.duration(f)
		case "recovery_timeout":
			ac.RecoveryTimeout, _ = d.duration(f)
		case "ignore_eos":
			v, _ := d.boolean(f)
			tp.KeepEOS = !v
		case "ask_first":
			lc.AskFirst, _ = d.boolean(f)
		case "path":
			tr.Path, _ = d.str(f)
			d.spec.pos[f.path] = posOf(f.val)
		case "format":
			tr.Format, _ = d.oneOf(f, "format", TraceFormats)
			d.spec.pos[f.path] = posOf(f.val)
		case "arrivals":
			tr.Arrivals, _ = d.oneOf(f, "arrivals", []string{ArrivalsRecorded, ArrivalsClosed})
			d.spec.pos[f.path] = posOf(f.val)
		case "speed":
			if v, ok := d.number(f); ok {
				if !(v > 0 && v <= maxTraceSpeed) {
					d.add(f.val, f.path, "speed compresses the recorded time: a number above 0, at most %d", maxTraceSpeed)
				} else {
					tr.Speed = v
				}
			}
			d.spec.pos[f.path] = posOf(f.val)
		case "shared_prefix_tokens":
			counts[f.key], _ = d.bounded(f, 0, MaxMaxTokens, "tokens of a prompt")
		case "sessions", "requests", "throughput_requests":
			counts[f.key], _ = d.bounded(f, 1, MaxSessions, "sessions per arm and block; use blocks for more")
			d.spec.pos[f.path] = posOf(f.val)
		case "rounds":
			counts[f.key], _ = d.bounded(f, 1, MaxRounds, "rounds of one conversation")
		case "cascades":
			counts[f.key], _ = d.bounded(f, 1, maxCascades, "abort cascades in one launch")
		default: // token counts of at least 1
			counts[f.key], _ = d.bounded(f, 1, MaxMaxTokens, "tokens")
			d.spec.pos[f.path] = posOf(f.val)
		}
	})
	if w.MaxResponseBytes == 0 {
		w.MaxResponseBytes = DefaultMaxResponseBytes
	}
	at := func(name string) Position { return d.spec.pos[joinPath(e.path, name)] }
	switch kind {
	case WorkloadThroughput:
		tp.Requests = orDefault(counts["requests"], defaultPhaseRequests)
		tp.PromptTokens, tp.SharedPrefixTokens = counts["prompt_tokens"], counts["shared_prefix_tokens"]
		if len(tp.Concurrency)+len(tp.Rates) == 0 {
			if _, ok := seen["concurrency"]; !ok {
				d.add(e.keyNode, joinPath(e.path, "concurrency"), "a throughput workload needs concurrency (a closed loop at each, e.g. [1, 32]) or rate (open-loop requests per second), or both")
			}
		}
		for _, c := range tp.Concurrency {
			if c > tp.Requests {
				d.addAt(posOf(seen["concurrency"].val), joinPath(e.path, "concurrency"),
					"concurrency %d needs at least as many requests per phase, but requests is %d", c, tp.Requests)
				break
			}
		}
		w.Throughput = tp
		w.Sessions = (len(tp.Concurrency) + len(tp.Rates)) * tp.Requests
		w.Rounds, w.Concurrency = 1, max(slices.Max(append([]int{1}, tp.Concurrency...)), 1)
	case WorkloadAbortCascade:
		ac.Sessions = orDefault(counts["sessions"], defaultCascadeSession)
		ac.Cascades = orDefault(counts["cascades"], defaultCascades)
		ac.ThroughputRequests = orDefault(counts["throughput_requests"], defaultPhaseRequests)
		ac.CascadeTokens, ac.CanaryTokens, ac.PromptTokens = counts["cascade_tokens"], counts["canary_tokens"], counts["prompt_tokens"]
		for _, c := range ac.ThroughputAt {
			if c > ac.ThroughputRequests {
				d.addAt(posOf(seen["throughput_at"].val), joinPath(e.path, "throughput_at"),
					"concurrency %d needs at least as many requests per phase, but throughput_requests is %d", c, ac.ThroughputRequests)
				break
			}
		}
		if len(ac.Abort) == 0 {
			ac.Abort = []string{"abort_all"}
		}
		w.AbortCascade = ac
		w.Sessions = 2*len(ac.ThroughputAt)*ac.ThroughputRequests + ac.Cascades*(ac.Sessions+1)
		w.Rounds, w.Concurrency = 1, ac.Sessions+1
	case WorkloadLongContext:
		lc.StartTokens, lc.CeilingTokens, lc.SharedPrefixTokens = counts["start_tokens"], counts["ceiling_tokens"], counts["shared_prefix_tokens"]
		if lc.StartTokens > 0 && lc.CeilingTokens > 0 && lc.CeilingTokens < lc.StartTokens {
			d.addAt(at("ceiling_tokens"), joinPath(e.path, "ceiling_tokens"), "the ceiling (%d) is below the start (%d): the context grows from start_tokens to ceiling_tokens", lc.CeilingTokens, lc.StartTokens)
		}
		w.LongContext = lc
		w.Sessions = orDefault(counts["sessions"], defaultLongSessions)
		w.Rounds = orDefault(counts["rounds"], defaultLongRounds)
		if _, ok := seen["concurrency"]; !ok {
			w.Concurrency = w.Sessions
		}
	case WorkloadVerify:
		d.require(seen, e.keyNode, e.path, "path")
		tr.Format = TraceVerify
		if tr.Path != "" {
			d.readTraceFile(tr, joinPath(e.path, "path"))
		}
		w.Trace = tr
		w.Sessions, w.Rounds = tr.Conversations, 1
		if _, ok := seen["concurrency"]; !ok {
			w.Concurrency = min(max(w.Sessions, 1), MaxConcurrency)
		}
	case WorkloadTrace:
		d.require(seen, e.keyNode, e.path, "path")
		if tr.Format == "" {
			tr.Format = TraceArbiter
		}
		if !tr.LengthTrace() {
			for _, k := range []string{"arrivals", "speed"} {
				if _, ok := seen[k]; ok {
					d.addAt(at(k), joinPath(e.path, k), "%s is a field of a length trace (format: mooncake or burstgpt); a conversation trace replays conversations, %s at once", k, "concurrency")
				}
			}
		} else {
			if tr.Arrivals == "" {
				tr.Arrivals = ArrivalsRecorded
			}
			if tr.Speed == 0 {
				tr.Speed = 1
			}
			if _, ok := seen["speed"]; ok && tr.Arrivals == ArrivalsClosed {
				d.addAt(at("speed"), joinPath(e.path, "speed"), "speed compresses recorded arrival times, which arrivals: closed does not follow")
			}
		}
		if tr.Path != "" {
			d.readTraceFile(tr, joinPath(e.path, "path"))
		}
		w.Trace = tr
		w.Sessions, w.Rounds = tr.Conversations, 1
		if n := counts["sessions"]; n > 0 {
			if tr.Conversations > 0 && n > tr.Conversations {
				d.addAt(at("sessions"), joinPath(e.path, "sessions"), "the trace holds %d conversations, fewer than %d", tr.Conversations, n)
			}
			w.Sessions = n
		}
		if _, ok := seen["concurrency"]; !ok {
			w.Concurrency = min(max(w.Sessions, 1), MaxConcurrency)
		}
	}
	if turns := int64(w.Sessions) * int64(max(w.Rounds, 1)); turns > MaxTurnsPerRun {
		d.add(e.keyNode, e.path, "this workload runs %d sessions x %d rounds per arm and block, more than %d; use fewer, or more blocks",
			w.Sessions, max(w.Rounds, 1), MaxTurnsPerRun)
	}
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// counts reads a whole number from 1 to most, or a list of them, as a list.
func (d *decoder) counts(e entry, most int64) []int {
	if _, ok := e.val.(*ast.SequenceNode); !ok {
		v, ok := d.bounded(e, 1, most, "requests in flight at once against one engine")
		if !ok {
			return nil
		}
		return []int{v}
	}
	var out []int
	d.list(e, func(it entry) {
		if v, ok := d.bounded(it, 1, most, "requests in flight at once against one engine"); ok {
			if slices.Contains(out, v) {
				d.add(it.val, it.path, "%d is listed twice", v)
				return
			}
			out = append(out, v)
		}
	})
	if len(out) == 0 {
		d.add(e.val, e.path, "list at least one value")
	}
	return out
}

// rates reads a positive number of requests per second, or a list of them.
func (d *decoder) rates(e entry) []float64 {
	one := func(it entry) (float64, bool) {
		v, ok := d.number(it)
		if ok && !(v > 0 && !math.IsInf(v, 0)) {
			d.add(it.val, it.path, "a rate is requests per second, above 0")
			return 0, false
		}
		return v, ok
	}
	if _, ok := e.val.(*ast.SequenceNode); !ok {
		if v, ok := one(e); ok {
			return []float64{v}
		}
		return nil
	}
	var out []float64
	d.list(e, func(it entry) {
		if v, ok := one(it); ok {
			out = append(out, v)
		}
	})
	return out
}

// abortModes reads one abort mode or a list of them, cycled over the cascades.
func (d *decoder) abortModes(e entry) []string {
	if _, ok := e.val.(*ast.SequenceNode); !ok {
		if v, ok := d.oneOf(e, "abort", abortModes); ok {
			return []string{v}
		}
		return nil
	}
	var out []string
	d.list(e, func(it entry) {
		if v, ok := d.oneOf(it, "abort", abortModes); ok {
			out = append(out, v)
		}
	})
	return out
}

// readTraceFile resolves a trace's path against the spec's folder and counts its
// conversations; what is inside each line is checked by the workload's reader before
// any engine starts (arbiter validate and run).
func (d *decoder) readTraceFile(tr *TraceSpec, path string) {
	tr.Resolved = tr.Path
	if !filepath.IsAbs(tr.Resolved) {
		tr.Resolved = filepath.Join(filepath.Dir(d.file), tr.Resolved)
	}
	// Stat before opening: opening a FIFO or a device named by a spec could block.
	if st, err := os.Stat(tr.Resolved); err != nil {
		d.addAt(d.spec.pos[path], path, "cannot read the trace: %v", err)
		return
	} else if !st.Mode().IsRegular() {
		d.addAt(d.spec.pos[path], path, "%s is not a regular file", tr.Resolved)
		return
	}
	f, err := os.Open(tr.Resolved)
	if err != nil {
		d.addAt(d.spec.pos[path], path, "cannot read the trace: %v", err)
		return
	}
	defer f.Close()
	n, err := countConversations(tr.Resolved, f)
	if err == nil && tr.Format == TraceBurstGPT && n > 0 {
		n-- // the header
	}
	switch {
	case err != nil:
		d.addAt(d.spec.pos[path], path, "%v", err)
	case n == 0 && tr.Format == TraceBurstGPT:
		d.addAt(d.spec.pos[path], path, "%s holds no request (a header line, then one CSV row per request)", tr.Resolved)
	case n == 0 && tr.Format == TraceMooncake:
		d.addAt(d.spec.pos[path], path, "%s holds no request (one JSON object per line)", tr.Resolved)
	case n == 0:
		d.addAt(d.spec.pos[path], path, "%s holds no conversation (one JSON object per line)", tr.Resolved)
	}
	tr.Conversations = n
}

// countConversations counts the non-blank lines of a trace, and holds it to the limits
// on a trace (MaxTraceLineBytes, MaxTraceBytes, and MaxSessions conversations) as it
// reads: a file past one fails at the line where it went past, whatever follows.
func countConversations(name string, r io.Reader) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	n, line, blank, length := 0, 1, true, 0
	var total int64
	for {
		part, err := br.ReadSlice('\n')
		if total += int64(len(part)); total > MaxTraceBytes {
			return n, fmt.Errorf("%s:%d: the trace runs past %d bytes (1 GiB), the most a trace may hold; split it", name, line, MaxTraceBytes)
		}
		text := part
		if err == nil {
			text = part[:len(part)-1] // the newline
		}
		if length += len(text); length > MaxTraceLineBytes {
			return n, fmt.Errorf("%s:%d: line longer than %d bytes", name, line, MaxTraceLineBytes)
		}
		if blank && len(bytes.Trim(text, " \t\r")) > 0 {
			blank = false
			if n++; n > MaxSessions {
				return n, fmt.Errorf("%s:%d: more than %d conversations, the most a trace may hold (a launch runs at most %d sessions); split it",
					name, line, MaxSessions, MaxSessions)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading %s: %w", name, err)
		}
		line, blank, length = line+1, true, 0
	}
}

// Describe is the workload in one sentence, for the verdict's "what was compared".
func (w Workload) Describe() string {
	switch w.Kind {
	case WorkloadThroughput:
		t := w.Throughput
		var parts []string
		if len(t.Concurrency) > 0 {
			parts = append(parts, "a closed loop at concurrency "+joinInts(t.Concurrency))
		}
		if len(t.Rates) > 0 {
			var rs []string
			for _, r := range t.Rates {
				rs = append(rs, fmt.Sprintf("%g", r))
			}
			parts = append(parts, "open-loop Poisson arrivals at "+strings.Join(rs, ", ")+" requests/s")
		}
		return fmt.Sprintf("throughput: %s; %d one-request sessions per phase", strings.Join(parts, ", then "), t.Requests)
	case WorkloadAbortCascade:
		a := w.AbortCascade
		s := fmt.Sprintf("abort cascade: %d sessions started and aborted mid-flight (%s), %d times, a canary after each",
			a.Sessions, strings.Join(a.Abort, ", "), a.Cascades)
		if len(a.ThroughputAt) > 0 {
			s += fmt.Sprintf("; throughput at concurrency %s before and after (%d requests each)", joinInts(a.ThroughputAt), a.ThroughputRequests)
		}
		return s
	case WorkloadLongContext:
		l := w.LongContext
		return fmt.Sprintf("long context: %d agent sessions of %d rounds, %d at once, the context growing from %d to %d tokens",
			w.Sessions, w.Rounds, w.Concurrency, orDefault(l.StartTokens, 2000), orDefault(l.CeilingTokens, 80000))
	case WorkloadVerify:
		return fmt.Sprintf("verification: the %d requests of %s sent to every arm, %d at once, tool calls scored against the reference arm's", w.Sessions, w.Trace.Path, w.Concurrency)
	case WorkloadTrace:
		t := w.Trace
		if !t.LengthTrace() {
			return fmt.Sprintf("trace %s: %d recorded conversations replayed as recorded, %d at once", t.Path, w.Sessions, w.Concurrency)
		}
		s := fmt.Sprintf("%s trace %s: %d requests, prompts written to the recorded lengths in the engine's tokens", t.Format, t.Path, w.Sessions)
		if t.Arrivals == ArrivalsClosed {
			return s + fmt.Sprintf(", %d at once", w.Concurrency)
		}
		if t.Speed != 1 {
			return s + fmt.Sprintf(", at the recorded arrival times %gx faster", t.Speed)
		}
		return s + ", at the recorded arrival times"
	}
	return ""
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, " and ")
}

// share reads a share in (0, 1): a number (0.05) or a percentage ("5%").
func (d *decoder) share(e entry) (float64, bool) {
	var v float64
	if s, ok := e.val.(*ast.StringNode); ok {
		text := strings.TrimSpace(s.Value)
		pct, isPct := strings.CutSuffix(text, "%")
		var err error
		if v, err = strconv.ParseFloat(strings.TrimSpace(pct), 64); err != nil || !isPct {
			d.add(e.val, e.path, "write a share such as 0.05 or 5%%, not %q", s.Value)
			return 0, false
		}
		v /= 100
	} else {
		var ok bool
		if v, ok = d.number(e); !ok {
			return 0, false
		}
	}
	if !(v > 0 && v < 1) {
		d.add(e.val, e.path, "a share is above 0 and below 1 (100%%), e.g. 0.05 or 5%%")
		return 0, false
	}
	return v, true
}
