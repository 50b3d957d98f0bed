package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

func TestSimHazardShape(t *testing.T) {
	for n := 0; n <= simSafeSessions; n++ {
		if h := simHazard(n); h != 0 {
			t.Errorf("hazard at %d sessions = %g; want exactly 0", n, h)
		}
	}
	for n := 33; n <= 64; n++ {
		if h := simHazard(n); h != simHazard64 {
			t.Errorf("hazard at %d sessions = %g; want %g, the hazard of 33-64", n, h, simHazard64)
		}
	}
	// Flat within each power-of-two step, higher at each step, within (0, 1].
	prev := 0.0
	for n := simSafeSessions + 1; n <= 4096; n++ {
		h := simHazard(n)
		stepStart := (n-1)&(n-2) == 0 // n-1 is a power of two: n begins a step
		switch {
		case h <= 0 || h > 1:
			t.Fatalf("hazard at %d sessions = %g; want within (0, 1]", n, h)
		case stepStart && h <= prev && prev < 1:
			t.Fatalf("hazard at %d sessions = %g, not above %g at %d", n, h, prev, n-1)
		case !stepStart && h != prev:
			t.Fatalf("hazard at %d sessions = %g, but %g at %d within the same step", n, h, prev, n-1)
		}
		prev = h
	}
}

// staleSet runs many steps that read restored index-K through a sim backend, at a
// logical load of sessions, and returns which were stale.
func staleSet(t *testing.T, cfg BackendConfig, sessions int) map[[2]int]bool {
	return staleSteps(t, cfg, sessions, true)
}

func staleSteps(t *testing.T, cfg BackendConfig, sessions int, restored bool) map[[2]int]bool {
	t.Helper()
	b, err := newSimBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]int]bool{}
	steps := make([]Step, 0, 1000)
	for s := range 100 {
		steps = steps[:0]
		for p := range 500 {
			// InFlight, the physical batch, is left at its most dangerous: only Load counts.
			steps = append(steps, Step{Session: hashString(fmt.Sprint("session ", s)), Position: p,
				InFlight: 1000, Load: sessions, Restored: restored})
		}
		if err := b.Decode(context.Background(), steps); err != nil {
			t.Fatal(err)
		}
		for p, st := range steps {
			if st.Stale {
				out[[2]int{s, p}] = true
			}
		}
	}
	return out
}

func TestSimBackendFaultModel(t *testing.T) {
	armed := BackendConfig{BF16IndexK: true, HiCache: true, Seed: 3}
	for name, tc := range map[string]struct {
		cfg      BackendConfig
		sessions int
	}{
		"fp8 index-K":      {BackendConfig{HiCache: true, Seed: 3}, 500},
		"HiCache off":      {BackendConfig{BF16IndexK: true, Seed: 3}, 500},
		"4 sessions":       {armed, 4},
		"1 session":        {armed, 1},
		"nothing disabled": {BackendConfig{}, 500},
		"gate on":          {BackendConfig{BF16IndexK: true, HiCache: true, Gate: true, Seed: 3}, 500},
	} {
		if got := staleSet(t, tc.cfg, tc.sessions); len(got) != 0 {
			t.Errorf("%s: %d of 50000 steps stale; want none", name, len(got))
		}
	}
	if got := staleSteps(t, armed, 500, false); len(got) != 0 {
		t.Errorf("steps that read nothing restored: %d of 50000 stale; want none", len(got))
	}

	a, b := staleSet(t, armed, 60), staleSet(t, armed, 60)
	if len(a) == 0 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("same seed and load: %d and %d stale steps, or different ones", len(a), len(b))
	}
	// 50000 steps at hazard h: the count is binomial; allow five standard deviations.
	n, h := 50000.0, simHazard(60)
	if d := math.Abs(float64(len(a)) - n*h); d > 5*math.Sqrt(n*h*(1-h)) {
		t.Errorf("%d stale steps at 60 sessions; want about %.0f", len(a), n*h)
	}
	other := armed
	other.Seed = 4
	if c := staleSet(t, other, 60); fmt.Sprint(c) == fmt.Sprint(a) {
		t.Error("seeds 3 and 4 corrupted the same steps")
	}
	if more := staleSet(t, armed, 200); len(more) <= len(a) {
		t.Errorf("200 sessions gave %d stale steps, 60 gave %d; want more under more load", len(more), len(a))
	}
}

// staleAfter is a backend that corrupts the k-th step of every reply. It tells replies
// apart by their positions: a reply's steps have consecutive positions.
type staleAfter struct {
	mu   sync.Mutex
	k    int
	last map[uint64]int // session -> position of its last step
	seen map[uint64]int // session -> steps seen in the current reply
}

func (b *staleAfter) Decode(_ context.Context, steps []Step) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range steps {
		s := &steps[i]
		if last, ok := b.last[s.Session]; !ok || s.Position != last+1 {
			b.seen[s.Session] = 0
		}
		b.last[s.Session] = s.Position
		s.Stale = b.seen[s.Session] == b.k
		b.seen[s.Session]++
	}
	return nil
}

func (b *staleAfter) Close() error { return nil }

// leakMarkers are strings every leak of a parser's markup contains, whatever the variant.
var leakMarkers = map[string]string{
	"deepseekv4": "DSML", "deepseekv32": "DSML", "deepseekv3": "tool▁call", "qwen25": "tool_call",
	"hermes": "tool_call", "kimi_k2": "tool_call", "llama3": "python_tag",
}

func TestCorruptedReplyLeaksMarkup(t *testing.T) {
	for _, parser := range toolCallParsers {
		for _, k := range []int{0, 3, 12} {
			t.Run(fmt.Sprintf("%s/step%d", parser, k), func(t *testing.T) {
				cfg := testConfig(t)
				cfg.ToolCallParser = parser
				_, base := startServer(t, cfg, &staleAfter{k: k, last: map[uint64]int{}, seen: map[uint64]int{}})
				for _, tools := range [][]openai.Tool{testTools(), nil} {
					req := userRequest(fmt.Sprintf("Book a table in Vienna (%s %d)", parser, k), tools)
					var msgs []openai.Message
					var finishes []string
					c := chat(t, base, req)
					msgs, finishes = append(msgs, c.Choices[0].Message), append(finishes, c.Choices[0].FinishReason)
					s := stream(t, base, req)
					msgs, finishes = append(msgs, s.Message), append(finishes, s.Finish)
					for i, m := range msgs {
						if finishes[i] != "stop" || len(m.ToolCalls) != 0 || !strings.Contains(m.Content, leakMarkers[parser]) {
							t.Errorf("tools %v, reply %d: finish %q, %d tool calls, content %q; want leaked %s markup and stop",
								tools != nil, i, finishes[i], len(m.ToolCalls), m.Content, leakMarkers[parser])
						}
					}
				}
			})
		}
	}
}

func TestCorruptionVariants(t *testing.T) {
	seen := map[string]bool{}
	for i := range 60 {
		c := call{Name: "get_weather", Params: []param{{Name: "city", Value: "Paris"}}}
		g := newGeneration("deepseekv4", reply{Call: &c, Lure: c}, 0, 1, uint64(i))
		var b strings.Builder
		for n := 0; ; n++ {
			content, finish := g.step(n == 2, 100+n)
			b.WriteString(content)
			if finish != "" {
				if finish != "stop" {
					t.Fatalf("corrupted reply finished %q", finish)
				}
				break
			}
		}
		out := b.String()
		if !strings.HasPrefix(out, "<｜DSML｜tool_calls>\n") {
			t.Fatalf("corrupted call lost its decoded prefix: %q", out)
		}
		switch {
		case strings.Contains(out, "｜｜DSML｜｜"):
			seen["doubled"] = true
		case strings.Contains(out, "DSML｜ "):
			seen["spaced"] = true
		default:
			seen["plain"] = true
		}
	}
	for _, v := range []string{"plain", "doubled", "spaced"} {
		if !seen[v] {
			t.Errorf("60 corrupted replies never showed the %s variant", v)
		}
	}
}

func TestLengthFlushesHeldMarkup(t *testing.T) {
	c := call{Name: "get_weather", Params: []param{{Name: "city", Value: "Paris"}}}
	g := newGeneration("qwen25", reply{Call: &c, Lure: c}, 4, 1, 1)
	var b strings.Builder
	var finish string
	for n := 0; finish == ""; n++ {
		var content string
		content, finish = g.step(false, n)
		b.WriteString(content)
	}
	if finish != "length" || b.String() != "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci" {
		t.Errorf("truncated call: finish %q, content %q", finish, b.String())
	}
}
