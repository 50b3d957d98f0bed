package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

func TestRunToolLoopCloses(t *testing.T) {
	e := newScriptedEngine(t)
	rec := &memRecorder{}
	cfg := Config{Sessions: 3, Rounds: 2, Concurrency: 2, Seed: 42, Temperature: 0.5, MaxTokens: 64}
	if err := Run(context.Background(), cfg, e.srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	results := rec.bySession(t)
	if len(results) != 3 {
		t.Fatalf("sessions reported: %+v", results)
	}
	// Every request that follows tool calls must answer each of them, by id, in order.
	byRID := map[string]openai.ChatRequest{}
	for _, req := range e.requests() {
		byRID[req.RID] = req
	}
	for s := range 3 {
		r := results[s]
		turns := rec.turnsOf(s)
		// Each round: the user message draws two calls, the tool results an answer.
		if r.Status != SessionOK || r.Turns != 4 || len(turns) != 4 {
			t.Fatalf("session %d: %+v with %d turns", s, r, len(turns))
		}
		for i, turn := range turns {
			rid := fmt.Sprintf("arb-42-%d-%d", s, i)
			req, ok := byRID[rid]
			if !ok || turn.Index != i || turn.Round != i/2 {
				t.Fatalf("turn %d of session %d: index %d round %d, rid %s seen %v", i, s, turn.Index, turn.Round, rid, ok)
			}
			if *req.Temperature != 0.5 || *req.Seed != 42+int64(s) || req.MaxTokens != 64 || req.Model != "scripted-1" {
				t.Fatalf("request %s: temperature %v seed %v max_tokens %d model %q", rid, *req.Temperature, *req.Seed, req.MaxTokens, req.Model)
			}
			if turn.StatusCode != 200 || turn.Err != "" || len(turn.Raw) == 0 || len(turn.Request) == 0 ||
				len(turn.Tools) < 3 || turn.Started.IsZero() || turn.PromptTokens <= 0 || turn.CompletionTokens != 9 ||
				turn.FinishReason == "" || turn.TTFT <= 0 || turn.TTFT > turn.Latency {
				t.Fatalf("turn %s not filled: %+v", rid, turn)
			}
			if i%2 == 0 {
				continue
			}
			e.mu.Lock()
			calls := e.calls[fmt.Sprintf("arb-42-%d-%d", s, i-1)]
			e.mu.Unlock()
			msgs := req.Messages
			tools := msgs[len(msgs)-2:]
			asst := msgs[len(msgs)-3]
			if asst.Role != "assistant" || len(asst.ToolCalls) != 2 || asst.ToolCalls[0].ID != calls[0].ID {
				t.Fatalf("request %s: assistant message %+v, want the calls %+v", rid, asst, calls)
			}
			for k, tm := range tools {
				if tm.Role != "tool" || tm.ToolCallID != calls[k].ID {
					t.Fatalf("request %s: tool message %d answers %q, want %q", rid, k, tm.ToolCallID, calls[k].ID)
				}
			}
			if strings.Contains(tools[0].Content, `"error"`) || !strings.Contains(tools[1].Content, "not a JSON object") {
				t.Fatalf("request %s: tool results %q / %q: want a result, then an argument error", rid, tools[0].Content, tools[1].Content)
			}
		}
		// The next round starts after the assistant's final answer.
		last := byRID[fmt.Sprintf("arb-42-%d-2", s)].Messages
		if m := last[len(last)-2]; m.Role != "assistant" || !strings.HasPrefix(m.Content, "Done with 2 tool results") {
			t.Fatalf("session %d round 1 follows %+v", s, m)
		}
	}
}

func TestScriptsAreSeeded(t *testing.T) {
	a, b := NewScript(42, 3, 4), NewScript(42, 3, 4)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed and session, different scripts:\n%+v\n%+v", a, b)
	}
	if short := NewScript(42, 3, 2); !reflect.DeepEqual(short.Users, a.Users[:2]) || !reflect.DeepEqual(short.Tools, a.Tools) {
		t.Fatalf("a 2-round script is not the start of the 4-round one")
	}
	if other := NewScript(43, 3, 4); reflect.DeepEqual(other.Users, a.Users) {
		t.Fatalf("seed does not change the script")
	}
	firsts := map[string]int{}
	toolSets := map[string]bool{}
	for s := range 200 {
		sc := NewScript(42, s, 1)
		if prev, dup := firsts[sc.Users[0]]; dup {
			t.Fatalf("sessions %d and %d open with the same message %q", prev, s, sc.Users[0])
		}
		firsts[sc.Users[0]] = s
		if !strings.Contains(sc.Users[0], sc.Ticket) || !strings.Contains(sc.System, sc.Ticket) {
			t.Fatalf("session %d: ticket %s missing from %q", s, sc.Ticket, sc.Users[0])
		}
		if len(sc.Tools) < 3 {
			t.Fatalf("session %d offered %d tools", s, len(sc.Tools))
		}
		var names []string
		for _, tl := range sc.Tools {
			names = append(names, tl.Function.Name)
		}
		toolSets[strings.Join(names, ",")] = true
	}
	if len(toolSets) < 5 {
		t.Fatalf("only %d distinct tool offers over 200 sessions", len(toolSets))
	}
}

// TestRunIsIdenticalAcrossArms runs the same config twice, as against two arms, and
// compares every request body byte for byte.
func TestRunIsIdenticalAcrossArms(t *testing.T) {
	bodies := func() map[string]string {
		e := newScriptedEngine(t)
		rec := &memRecorder{}
		cfg := Config{Sessions: 4, Rounds: 2, Concurrency: 4, Seed: 7, SessionOffset: 10}
		if err := Run(context.Background(), cfg, e.srv.URL, rec); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, turn := range rec.turns {
			out[fmt.Sprintf("%d/%d", turn.Session, turn.Index)] = string(turn.Request)
		}
		return out
	}
	a, b := bodies(), bodies()
	if len(a) != 16 || !reflect.DeepEqual(a, b) {
		t.Fatalf("request bodies differ between two runs of one config (%d vs %d turns)", len(a), len(b))
	}
	if _, ok := a["10/0"]; !ok {
		t.Fatalf("session offset not applied: %v", keys(a))
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRunConcurrencyBound(t *testing.T) {
	const conc = 3
	e := newScriptedEngine(t)
	var inFlight, peak atomic.Int32
	full := make(chan struct{})
	var once sync.Once
	e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
		n := inFlight.Add(1)
		if n > conc {
			t.Errorf("%d requests in flight, concurrency is %d", n, conc)
		}
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n == conc {
			once.Do(func() { close(full) })
		}
		// The first wave waits until all conc sessions are in, proving the fan-out, then
		// stays a moment longer: the window in which a client ignoring its bound would
		// send one request too many. A correct client passes whatever the window.
		select {
		case <-full:
			<-time.After(50 * time.Millisecond)
		case <-r.Context().Done():
		}
		defer inFlight.Add(-1)
		e.respond(w, req)
		return true
	}
	rec := &memRecorder{}
	if err := Run(context.Background(), Config{Sessions: 9, Rounds: 1, Concurrency: conc}, e.srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	if peak.Load() != conc {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), conc)
	}
	for s, r := range rec.bySession(t) {
		if r.Status != SessionOK {
			t.Fatalf("session %d: %+v", s, r)
		}
	}
}

func TestRunSessionFailuresAreData(t *testing.T) {
	e := newScriptedEngine(t)
	e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
		switch req.RID {
		case "arb-5-1-0": // stalls after the headers
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return true
		case "arb-5-2-1": // fails on the second turn
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"message":"scheduler crashed","type":"server_error"}}`))
			return true
		}
		return false
	}
	rec := &memRecorder{}
	cfg := Config{Sessions: 4, Rounds: 2, Concurrency: 4, Seed: 5, StallTimeout: time.Second} // generous: a loaded machine must not stall the healthy sessions
	if err := Run(context.Background(), cfg, e.srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	res := rec.bySession(t)
	if r := res[1]; r.Status != SessionTimeout || r.Turns != 1 || !strings.Contains(r.Err, "stalled") {
		t.Fatalf("stalled session: %+v", r)
	}
	if r := res[2]; r.Status != SessionError || r.Turns != 2 || !strings.Contains(r.Err, "scheduler crashed") {
		t.Fatalf("failed session: %+v", r)
	}
	if turns := rec.turnsOf(2); turns[1].StatusCode != 500 || turns[1].Err == "" || !strings.Contains(string(turns[1].Raw), "scheduler crashed") {
		t.Fatalf("HTTP 500 turn not recorded: %+v", turns[1])
	}
	for _, s := range []int{0, 3} {
		if res[s].Status != SessionOK || res[s].Turns != 4 {
			t.Fatalf("healthy session %d: %+v", s, res[s])
		}
	}
}

func TestRunCancelAbortsSessions(t *testing.T) {
	e := newScriptedEngine(t)
	arrived := make(chan string, 16)
	e.hook = func(w http.ResponseWriter, r *http.Request, req openai.ChatRequest) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		arrived <- req.RID
		<-r.Context().Done() // hangs like a wedged engine until the client leaves
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &memRecorder{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, Config{Sessions: 6, Rounds: 3, Concurrency: 2, Model: "m"}, e.srv.URL, rec)
	}()
	<-arrived
	<-arrived
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second): // a guard against a hang, not a timing assertion
		t.Fatal("Run did not return after cancellation")
	}
	res := rec.bySession(t)
	if len(res) != 6 {
		t.Fatalf("%d sessions reported, want 6", len(res))
	}
	for s, r := range res {
		if r.Status != SessionAborted {
			t.Fatalf("session %d: %+v, want aborted", s, r)
		}
	}
	if n := len(e.requests()); n != 2 {
		t.Fatalf("%d requests sent after cancellation, want only the 2 in flight", n)
	}
}

func TestRunCapsToolSteps(t *testing.T) {
	e := newScriptedEngine(t)
	e.alwaysTools = true
	rec := &memRecorder{}
	if err := Run(context.Background(), Config{Sessions: 1, Rounds: 2, MaxToolSteps: 2, NoStream: true}, e.srv.URL, rec); err != nil {
		t.Fatal(err)
	}
	r := rec.bySession(t)[0]
	if r.Status != SessionOK || r.Turns != 6 {
		t.Fatalf("looping engine: %+v, want 2 rounds of 1+2 requests", r)
	}
	// The second round's user message follows answered calls, so the conversation is valid.
	reqs := e.requests()
	msgs := reqs[3].Messages
	if msgs[len(msgs)-1].Role != "user" || msgs[len(msgs)-2].Role != "tool" {
		t.Fatalf("round 2 opens after %q, %q", msgs[len(msgs)-2].Role, msgs[len(msgs)-1].Role)
	}
}

func TestRunRejects(t *testing.T) {
	if err := Run(context.Background(), Config{Kind: "nope"}, "http://127.0.0.1:1", &memRecorder{}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
	if err := Run(context.Background(), Config{Sessions: -1}, "http://127.0.0.1:1", &memRecorder{}); err == nil {
		t.Fatal("negative sessions accepted")
	}
}

func TestToolResult(t *testing.T) {
	var offered []openai.Tool
	for _, tl := range toolSet {
		offered = append(offered, tl.spec())
	}
	call := func(name, args string) string {
		return ToolResult(offered, openai.FunctionCall{Name: name, Arguments: args})
	}
	good := call("get_weather", `{"city":"Oslo","unit":"celsius"}`)
	var out map[string]any
	if err := json.Unmarshal([]byte(good), &out); err != nil || out["city"] != "Oslo" || out["error"] != nil {
		t.Fatalf("valid call answered %s", good)
	}
	if again := call("get_weather", "{ \"unit\": \"celsius\", \"city\": \"Oslo\" }"); again != good {
		t.Fatalf("same arguments, different answer: %s vs %s", again, good)
	}
	if other := call("get_weather", `{"city":"Lima","unit":"celsius"}`); other == good {
		t.Fatal("different cities, same answer")
	}
	for _, c := range []struct{ tool, args, want string }{
		{"get_weather", `{"city":"Oslo"}`, `get_weather: args: missing required field \"unit\"`},
		{"get_weather", `{"city":"Oslo","unit":"kelvin"}`, "is not one of"},
		{"get_weather", `{"city":7,"unit":"celsius"}`, "want string"},
		{"get_weather", `{"city":"Oslo","unit":"celsius","x":1}`, `unexpected field \"x\"`},
		{"get_weather", `{"arguments":{"city":"Oslo"}}`, "missing required field"},
		{"get_weather", `<｜DSML｜invoke name="get_weather">`, "not a JSON object"},
		{"get_weather", `["Oslo"]`, "not a JSON object"},
		{"search_docs", `{"query":"q","top_k":11}`, "search_docs: args.top_k: 11 is above maximum 10"},
		{"search_docs", `{"query":"q","top_k":0}`, "args.top_k: 0 is below minimum 1"},
		{"convert_currency", `{"amount":-5,"from":"USD","to":"XXX"}`, `args.amount: -5 is below minimum 0; args.to: \"XXX\" is not one of`},
		{"search_docs", `{"query":"q","top_k":2.5}`, "want integer"},
		{"run_sql", `{"query":"drop table t","read_only":true}`, "only SELECT"},
	} {
		if got := call(c.tool, c.args); !strings.Contains(got, c.want) || !strings.Contains(got, `"error"`) {
			t.Errorf("%s %s answered %s, want an error containing %s", c.tool, c.args, got, c.want)
		}
	}
	if got := call("launch_missiles", `{}`); !strings.Contains(got, "unknown tool") {
		t.Errorf("unknown tool answered %s", got)
	}
	if got := ToolResult(nil, openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"Oslo","unit":"celsius"}`}); !strings.Contains(got, "unknown tool") {
		t.Errorf("a tool not offered answered %s", got)
	}
	// Every tool answers schema-valid arguments without an error.
	for _, tl := range toolSet {
		spec := tl.spec()
		got := ToolResult([]openai.Tool{spec}, openai.FunctionCall{Name: tl.Name, Arguments: validArgs(t, spec.Function.Parameters)})
		if strings.Contains(got, `"error"`) {
			t.Errorf("%s answered valid arguments with %s", tl.Name, got)
		}
	}
}
