package arms

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const kindsHead = `version: 1
name: kinds
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
`

func TestWorkloadKindsDecode(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "traces"), 0o755); err != nil {
		t.Fatal(err)
	}
	trace := "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n\n  \n{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n{\"messages\":[]}"
	if err := os.WriteFile(filepath.Join(dir, "traces", "t.jsonl"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml string
		check      func(t *testing.T, s *Spec)
	}{
		{"throughput", `workload: {kind: throughput, seed: 3, concurrency: [1, 32], rate: 16, requests: 40, prompt_tokens: 256, shared_prefix_tokens: 100, max_tokens: 64, ignore_eos: false}
analysis: {throughput_margin: 5%}`, func(t *testing.T, s *Spec) {
			w := s.Workload
			want := &ThroughputSpec{Concurrency: []int{1, 32}, Rates: []float64{16}, Requests: 40, PromptTokens: 256, SharedPrefixTokens: 100, KeepEOS: true}
			if !reflect.DeepEqual(w.Throughput, want) || w.Sessions != 120 || w.Concurrency != 32 || w.Rounds != 1 || w.MaxTokens != 64 {
				t.Errorf("decoded %+v %+v", w, w.Throughput)
			}
			if s.Analysis.ThroughputMargin != 0.05 {
				t.Errorf("margin %v", s.Analysis.ThroughputMargin)
			}
		}},
		{"throughput plan", `workload: {kind: throughput, concurrency: 4}
analysis: {throughput_margin: 5%, plan: {power: 0.9}}`, func(t *testing.T, s *Spec) {
			// A speed claim's plan declares its power alone: there are no rates to plan for.
			if pl := s.Analysis.Plan; pl.Power != 0.9 || pl.P0 != 0 || pl.P1 != 0 {
				t.Errorf("plan %+v", pl)
			}
		}},
		{"throughput defaults", `workload: {kind: throughput, concurrency: 4}
analysis: {throughput_margin: 0.1}`, func(t *testing.T, s *Spec) {
			if tp := s.Workload.Throughput; tp.Requests != 32 || !reflect.DeepEqual(tp.Concurrency, []int{4}) || s.Workload.Sessions != 32 || s.Analysis.ThroughputMargin != 0.1 {
				t.Errorf("decoded %+v", tp)
			}
		}},
		{"abort cascade", `workload:
  kind: abort-cascade
  sessions: 60
  cascades: 2
  abort: [abort_all, disconnect]
  abort_when: first-token
  abort_after: 500ms
  recovery_timeout: 20s
  throughput_at: [1, 32]
  throughput_requests: 32
  canary_tokens: 4
  cascade_tokens: 2048`, func(t *testing.T, s *Spec) {
			a := s.Workload.AbortCascade
			want := &AbortCascadeSpec{Sessions: 60, Cascades: 2, Abort: []string{"abort_all", "disconnect"}, AbortWhen: "first-token",
				CascadeTokens: 2048, CanaryTokens: 4, AbortAfter: 500 * time.Millisecond, RecoveryTimeout: 20 * time.Second,
				ThroughputAt: []int{1, 32}, ThroughputRequests: 32}
			if !reflect.DeepEqual(a, want) {
				t.Errorf("decoded %+v", a)
			}
			// 2 stages x 2 concurrencies x 32 requests, and 2 cascades of 60 and a canary.
			if s.Workload.Sessions != 2*2*32+2*61 || s.Workload.Concurrency != 61 {
				t.Errorf("sessions %d concurrency %d", s.Workload.Sessions, s.Workload.Concurrency)
			}
			if d := s.Workload.Describe(); !strings.Contains(d, "60 sessions started and aborted mid-flight (abort_all, disconnect), 2 times") {
				t.Errorf("described as %q", d)
			}
		}},
		{"abort cascade defaults", `workload: {kind: abort-cascade}`, func(t *testing.T, s *Spec) {
			if a := s.Workload.AbortCascade; a.Sessions != 60 || a.Cascades != 2 || !reflect.DeepEqual(a.Abort, []string{"abort_all"}) || s.Workload.Sessions != 122 {
				t.Errorf("decoded %+v, %d sessions", a, s.Workload.Sessions)
			}
		}},
		{"long context", `workload: {kind: long-context, sessions: 8, rounds: 6, concurrency: 4, start_tokens: 2000, ceiling_tokens: 80000, shared_prefix_tokens: 0, max_tokens: 512}`, func(t *testing.T, s *Spec) {
			w := s.Workload
			if !reflect.DeepEqual(w.LongContext, &LongContextSpec{StartTokens: 2000, CeilingTokens: 80000}) || w.Sessions != 8 || w.Rounds != 6 || w.Concurrency != 4 {
				t.Errorf("decoded %+v %+v", w, w.LongContext)
			}
		}},
		{"trace", `workload: {kind: trace, path: traces/t.jsonl, sessions: 2, concurrency: 2}`, func(t *testing.T, s *Spec) {
			tr := s.Workload.Trace
			// Three conversations (blank lines are not), read from the spec's folder.
			if tr.Conversations != 3 || tr.Resolved != filepath.Join(dir, "traces", "t.jsonl") || s.Workload.Sessions != 2 {
				t.Errorf("decoded %+v, %d sessions", tr, s.Workload.Sessions)
			}
		}},
		{"trace, every conversation", `workload: {kind: trace, path: traces/t.jsonl}`, func(t *testing.T, s *Spec) {
			if s.Workload.Sessions != 3 || s.Workload.Concurrency != 3 {
				t.Errorf("%d sessions, concurrency %d", s.Workload.Sessions, s.Workload.Concurrency)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "spec.yaml")
			s, err := Parse(path, []byte(kindsHead+tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func TestWorkloadKindErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`workload: {kind: trace, path: none.jsonl}`, "workload.path: cannot read the trace"},
		{`workload: {kind: trace}`, "workload.path: missing required field"},
		{`workload: {kind: throughput, rate: 0}`, "workload.rate: a rate is requests per second, above 0"},
		{`workload: {kind: throughput, concurrency: [4, 4]}`, "workload.concurrency.1: 4 is listed twice"},
		{`workload: {kind: abort-cascade, abort_when: later}`, `workload.abort_when: unknown abort_when "later"`},
		{`workload: {kind: abort-cascade, recovery_timeout: 5}`, "workload.recovery_timeout: value must be a duration"},
		{"workload: {kind: throughput, concurrency: 1}\nanalysis: {throughput_margin: 5 percent}", `analysis.throughput_margin: write a share such as 0.05 or 5%, not "5 percent"`},
		{"workload: {kind: throughput, concurrency: 1}\nanalysis: {throughput_margin: 0}", "analysis.throughput_margin: a share is above 0"},
		{"workload: {kind: throughput, concurrency: 1}\nanalysis: {throughput_margin: 5%, sequential: {looks: 4}}", "analysis.sequential.looks: a group-sequential design stops on the launches' corruption rates, but workload kind throughput claims a speed"},
		{"workload: {kind: abort-cascade, sessions: 4}\nanalysis: {sequential: {looks: 4}}", "but workload kind abort-cascade claims wedged launches"},
		{"workload: {kind: toolcall-agent, sessions: 4, rounds: 2}\nanalysis: {plan: {p0: 0.1, p1: 0.1}}", "analysis.plan: plan needs two different rates p0 and p1"},
		{"workload: {kind: toolcall-agent, sessions: 4, rounds: 2}\nanalysis: {plan: {p1: 0}}", "analysis.plan: plan needs two different rates p0 and p1"},
	} {
		_, err := Parse("s.yaml", []byte(kindsHead+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n  error %v\n  want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestMinEffect(t *testing.T) {
	for _, tc := range []struct {
		analysis string
		want     float64
	}{
		{"", DefaultMinEffect},
		{"analysis: {min_effect: 5%}", 0.05},
		{"analysis: {min_effect: 0.01}", 0.01},
		{"analysis: {min_effect: 0}", 0},
		{"analysis: {min_effect: 0.0}", 0},
	} {
		s, err := Parse("s.yaml", []byte(kindsHead+"workload: {kind: throughput, concurrency: 1}\n"+tc.analysis))
		if err != nil {
			t.Fatalf("%s: %v", tc.analysis, err)
		}
		if s.Analysis.MinEffect != tc.want {
			t.Errorf("%q: min_effect %v, want %v", tc.analysis, s.Analysis.MinEffect, tc.want)
		}
	}
	for _, tc := range []struct{ analysis, want string }{
		{"analysis: {min_effect: 2 percent}", `analysis.min_effect: write a share such as 0.05 or 5%, not "2 percent"`},
		{"analysis: {min_effect: 1.5}", "analysis.min_effect: a share is above 0 and below 1"},
		{"analysis: {min_effect: -0.1}", "analysis.min_effect: a share is above 0 and below 1"},
	} {
		_, err := Parse("s.yaml", []byte(kindsHead+"workload: {kind: throughput, concurrency: 1}\n"+tc.analysis))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n  error %v\n  want %q", tc.analysis, err, tc.want)
		}
	}
}

// TestTraceLimits: a trace is held to its limits while it is read, and the spec's error
// names the trace file and the line where it went past one: a trace of a million lines
// used to give a million sessions, past MaxSessions.
func TestTraceLimits(t *testing.T) {
	dir := t.TempDir()
	line := "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n"
	trace := filepath.Join(dir, "t.jsonl")
	if err := os.WriteFile(trace, []byte(strings.Repeat(line, MaxSessions+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Parse(filepath.Join(dir, "spec.yaml"), []byte(kindsHead+`workload: {kind: trace, path: t.jsonl, sessions: 10}`))
	want := fmt.Sprintf("workload.path: %s:%d: more than 100000 conversations", trace, MaxSessions+1)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a trace of %d conversations: %v; want %q", MaxSessions+1, err, want)
	}
	// Lines of 16 MiB (65 of them make a file past 1 GiB), made as they are read.
	var lines []io.Reader
	for range 100 {
		lines = append(lines, io.LimitReader(xs{}, 16<<20-1), strings.NewReader("\n"))
	}
	big := io.MultiReader(lines...)
	if _, err := countConversations("big.jsonl", big); err == nil || !strings.Contains(err.Error(), "big.jsonl:65: the trace runs past 1073741824 bytes") {
		t.Errorf("a trace past 1 GiB: %v", err)
	}
	long := io.MultiReader(strings.NewReader(line), io.LimitReader(xs{}, MaxTraceLineBytes+1))
	if _, err := countConversations("long.jsonl", long); err == nil || !strings.Contains(err.Error(), "long.jsonl:2: line longer than 33554432 bytes") {
		t.Errorf("a line past 32 MiB: %v", err)
	}
	exact := io.MultiReader(strings.NewReader(line), io.LimitReader(xs{}, MaxTraceLineBytes), strings.NewReader("\n"))
	if n, err := countConversations("exact.jsonl", exact); err != nil || n != 2 {
		t.Errorf("a line of exactly 32 MiB: %d conversations, %v", n, err)
	}
}

// xs reads as x without end.
type xs struct{}

var xBlock = []byte(strings.Repeat("x", 64<<10))

func (xs) Read(p []byte) (int, error) {
	n := copy(p, xBlock)
	return n, nil
}

// TestLengthTraceDecode: a mooncake or burstgpt trace counts its requests (a BurstGPT
// header is not one), takes recorded arrivals at speed 1 by default, and refuses the
// fields of a length trace on a conversation trace, and a speed with closed arrivals.
func TestLengthTraceDecode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("m.jsonl", `{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}`+"\n"+
		`{"timestamp": 10, "input_length": 700, "output_length": 8, "hash_ids": [1, 3]}`+"\n")
	write("b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,10,5,15,API log\n")
	write("c.jsonl", `{"messages":[{"role":"user","content":"a"}]}`+"\n")
	parse := func(yaml string) (*Spec, error) {
		return Parse(filepath.Join(dir, "spec.yaml"), []byte(kindsHead+yaml))
	}
	s, err := parse(`workload: {kind: trace, format: mooncake, path: m.jsonl}`)
	if err != nil {
		t.Fatal(err)
	}
	if tr := s.Workload.Trace; tr.Format != TraceMooncake || tr.Arrivals != ArrivalsRecorded || tr.Speed != 1 || tr.Conversations != 2 || s.Workload.Sessions != 2 {
		t.Errorf("mooncake decoded %+v, %d sessions", tr, s.Workload.Sessions)
	}
	if !strings.Contains(s.Workload.Describe(), "mooncake trace m.jsonl: 2 requests") {
		t.Errorf("described as %q", s.Workload.Describe())
	}
	s, err = parse(`workload: {kind: trace, format: burstgpt, path: b.csv, arrivals: closed, concurrency: 4}`)
	if err != nil {
		t.Fatal(err)
	}
	if tr := s.Workload.Trace; tr.Format != TraceBurstGPT || tr.Arrivals != ArrivalsClosed || tr.Conversations != 1 || s.Workload.Concurrency != 4 {
		t.Errorf("burstgpt decoded %+v, concurrency %d", tr, s.Workload.Concurrency)
	}
	s, err = parse(`workload: {kind: trace, path: c.jsonl}`)
	if err != nil || s.Workload.Trace.Format != TraceArbiter || s.Workload.Trace.LengthTrace() {
		t.Errorf("a trace without a format: %v, %+v", err, s.Workload.Trace)
	}
	for _, tc := range []struct{ yaml, want string }{
		{`workload: {kind: trace, path: c.jsonl, speed: 2}`, "workload.speed: speed is a field of a length trace"},
		{`workload: {kind: trace, format: sharegpt, path: c.jsonl}`, `workload.format: unknown format "sharegpt"`},
		{`workload: {kind: trace, format: mooncake, path: m.jsonl, speed: 0}`, "workload.speed: speed compresses the recorded time"},
		{`workload: {kind: trace, format: mooncake, path: m.jsonl, arrivals: closed, speed: 2}`, "workload.speed: speed compresses recorded arrival times, which arrivals: closed does not follow"},
		{`workload: {kind: trace, format: burstgpt, path: c.jsonl, sessions: 1}`, "holds no request"},
	} {
		if _, err := parse(tc.yaml); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n  error %v\n  want %q", tc.yaml, err, tc.want)
		}
	}
}
