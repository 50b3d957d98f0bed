package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/openai"
)

// loadResult is what one run of agent sessions against a server saw.
type loadResult struct {
	sessions, corrupted, turns, corruptedTurns int
	which                                      []bool // which sessions were corrupted
}

// loadShape is how runAgentSessions paces its clients; the zero value starts sessions in
// index order and sends each request as soon as the last reply is read.
type loadShape struct {
	reverse bool // start the last session first
	// think, if set, is how long a client waits before a request: a perturbation of
	// the clients' timing, like a busy machine's, not a synchronization.
	think func(session, turn int) time.Duration
}

// runAgentSessions drives sessions (concurrency at a time) of rounds user messages each
// against base over streaming HTTP, closing the tool loop, and counts the sessions with
// at least one reply that leaked tool-call markup.
func runAgentSessions(t testing.TB, base string, sessions, rounds, concurrency int) loadResult {
	t.Helper()
	return runAgentSessionsShaped(t, base, sessions, rounds, concurrency, loadShape{})
}

func runAgentSessionsShaped(t testing.TB, base string, sessions, rounds, concurrency int, shape loadShape) loadResult {
	t.Helper()
	cities := []string{"Lisbon", "Osaka", "Denver", "Nairobi", "Tallinn", "Quito", "Perth", "Gdansk"}
	var mu sync.Mutex
	res := loadResult{sessions: sessions, which: make([]bool, sessions)}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for n := range sessions {
		i := n
		if shape.reverse {
			i = sessions - 1 - n
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req := openai.ChatRequest{Model: "refserve-agent", Tools: testTools(),
				Messages: []openai.Message{{Role: "system", Content: "You are a travel agent with tools."}}}
			corrupted, turns, bad := false, 0, 0
			for r := range rounds {
				req.Messages = append(req.Messages, openai.Message{Role: "user",
					Content: fmt.Sprintf("Session %d, round %d: what should I know about %s?", i, r, cities[(i+r)%len(cities)])})
				for step := 0; ; step++ {
					if shape.think != nil {
						time.Sleep(shape.think(i, turns))
					}
					s := stream(t, base, req)
					turns++
					if strings.Contains(s.Message.Content, "DSML") {
						corrupted = true
						bad++
					}
					req.Messages = append(req.Messages, s.Message)
					if len(s.Message.ToolCalls) == 0 || step == 4 {
						break
					}
					for _, tc := range s.Message.ToolCalls {
						req.Messages = append(req.Messages, toolResult(tc))
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.turns += turns
			res.corruptedTurns += bad
			res.which[i] = corrupted
			if corrupted {
				res.corrupted++
			}
		}()
	}
	wg.Wait()
	return res
}

// armedConfig is bf16 index-K with HiCache at the default decode step of 2 ms, flat: no
// batch cost and no prefill time, which would only slow the suite down, since the counts
// do not depend on the pace (TestCountsIgnoreTiming runs the default cost model too).
func armedConfig(t testing.TB, seed int64) config {
	cfg := testConfig(t)
	cfg.BF16IndexK, cfg.EnableHierarchicalCache, cfg.Seed = true, true, seed
	cfg.InterTokenDelay = 2 * time.Millisecond // the default
	cfg.DecodeBatchCost, cfg.PrefillDelayPerToken = 0, 0
	return cfg
}

// TestCalibration checks the fault model against the field: 60 concurrent tool-call
// sessions x 4 rounds with bf16 index-K and HiCache on corrupt 12-18% of sessions; fp8
// or HiCache off corrupt none. The counts depend on the seed and the workload only, so
// they are judged under the race detector and at any -cpu as well.
// REFSERVE_CALIBRATION_SEEDS=N runs N seeds and logs each count, to refit simHazard64;
// with N=40 at 2.2e-3 the counts were 9 11 5 8 9 9 11 9 13 6 8 6 12 10 10 8 8 10 12 9 14
// 11 10 11 6 6 6 7 7 9 12 8 9 5 7 11 9 4 10 7, a mean of 8.8 of 60 (14.7%).
func TestCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 60 sessions x 4 rounds per seed over HTTP; skipped with -short")
	}
	seeds := 3
	if v := os.Getenv("REFSERVE_CALIBRATION_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("REFSERVE_CALIBRATION_SEEDS=%q: want a positive count", v)
		}
		seeds = n
	}
	total, counts := 0, []int{}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		_, base := startServer(t, armedConfig(t, seed), nil)
		r := runAgentSessions(t, base, 60, 4, 60)
		t.Logf("seed %d: %d of %d sessions corrupted (%d of %d turns), stale steps %v",
			seed, r.corrupted, r.sessions, r.corruptedTurns, r.turns, metric(t, base, "refserve:stale_index_k_steps_total"))
		// Binomial(60, 0.15) lies in [2, 18] with probability above 0.99.
		if r.corrupted < 2 || r.corrupted > 18 {
			t.Errorf("seed %d: %d of 60 sessions corrupted; the field saw 7-11", seed, r.corrupted)
		}
		total += r.corrupted
		counts = append(counts, r.corrupted)
	}
	mean := float64(total) / float64(seeds)
	t.Logf("hazard with 33-64 sessions %g: corrupted sessions per seed %v, mean %.1f of 60 (%.1f%%)", simHazard64, counts, mean, mean/60*100)
	// Three seeds' mean has a standard error of about 1.6 sessions: 4.5-13 keeps a
	// correct model failing less than 1% of the time.
	if seeds >= 3 && (mean < 4.5 || mean > 13) {
		t.Errorf("mean %.1f corrupted sessions of 60 over %d seeds; want 7.2-10.8 (12-18%%), within sampling error", mean, seeds)
	}

	for name, cfg := range map[string]config{
		"fp8 index-K": func() config { c := armedConfig(t, 1); c.BF16IndexK = false; return c }(),
		"HiCache off": func() config { c := armedConfig(t, 1); c.EnableHierarchicalCache = false; return c }(),
	} {
		s, base := startServer(t, cfg, nil)
		if r := runAgentSessions(t, base, 60, 4, 60); r.corrupted != 0 || s.sched.staleSteps.Load() != 0 {
			t.Errorf("%s: %d of 60 sessions corrupted; want none", name, r.corrupted)
		}
	}
}

// TestCountsIgnoreTiming: the same seed corrupts the same sessions whatever the clients'
// and the engine's timing. The second run starts the sessions in reverse order and has
// every client wait a seeded 0-15 ms before each request, as on a machine whose cores
// are busy, and paces the engine by the default cost model (batch cost and prefill time),
// which makes its decode steps some five times as long at 60 sessions.
func TestCountsIgnoreTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 60 sessions x 4 rounds twice over HTTP; skipped with -short")
	}
	s1, base1 := startServer(t, armedConfig(t, 2), nil)
	plain := runAgentSessions(t, base1, 60, 4, 60)
	paced := armedConfig(t, 2)
	paced.DecodeBatchCost, paced.PrefillDelayPerToken = defaultDecodeBatchCost, defaultPrefillDelayPerToken
	s2, base2 := startServer(t, paced, nil)
	jittered := runAgentSessionsShaped(t, base2, 60, 4, 60, loadShape{reverse: true,
		think: func(session, turn int) time.Duration {
			return time.Duration(mix64(uint64(session)<<20|uint64(turn))%16) * time.Millisecond
		}})
	t.Logf("in order: %d of 60 sessions corrupted (%d turns); reversed and jittered: %d (%d turns)",
		plain.corrupted, plain.turns, jittered.corrupted, jittered.turns)
	if plain.corrupted == 0 {
		t.Fatal("no session corrupted at 60 concurrent sessions: nothing to compare")
	}
	if fmt.Sprint(plain.which) != fmt.Sprint(jittered.which) || plain.turns != jittered.turns {
		t.Errorf("the same seed corrupted different sessions under different client timing:\n in order %v\n jittered %v",
			plain.which, jittered.which)
	}
	if a, b := s1.sched.staleSteps.Load(), s2.sched.staleSteps.Load(); a != b {
		t.Errorf("%d stale steps in order, %d jittered; want the same", a, b)
	}
}

// TestNoCorruptionAtLowLoad: with bf16 index-K and HiCache on, one session at a time,
// or four, never corrupts: the cohort never holds more sessions than run at once, and
// the hazard is exactly zero at four or fewer.
func TestNoCorruptionAtLowLoad(t *testing.T) {
	for _, conc := range []int{1, 4} {
		cfg := armedConfig(t, 1)
		cfg.InterTokenDelay = 0
		s, base := startServer(t, cfg, nil)
		if r := runAgentSessions(t, base, 8, 4, conc); r.corrupted != 0 || r.turns < 8*4*2 {
			t.Errorf("concurrency %d: %d of 8 sessions corrupted over %d turns; want none", conc, r.corrupted, r.turns)
		}
		if n := s.sched.staleSteps.Load(); n != 0 {
			t.Errorf("concurrency %d: %d stale steps", conc, n)
		}
		if n := metric(t, base, "refserve:cohort_sessions"); n != float64(conc) {
			t.Errorf("concurrency %d: %v sessions in the cohort at the end; want %d", conc, n, conc)
		}
	}
}
