// Command racebench drives arbiter's GPU testbed with multi-turn tool-call traffic and
// prints, for each index-K dtype x HiCache x gate x concurrency cell, how often a decode
// step's top-k selection was corrupted by a stale restore. It also measures the score +
// selection pass's bandwidth against the device's copy bandwidth.
//
//	racebench [-lib PATH] [-json FILE] [-sessions 60] [-rounds 4] [-concurrency 1,60]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/kernels"
)

type options struct {
	lib         string
	jsonOut     string
	sessions    int
	rounds      int
	steps       int
	baseCtx     int
	growth      int
	maxRunning  int
	poolPages   int
	layerWork   int
	seed        uint64
	concurrency []int
	sweep       []int
	bench       bool
}

// cell is one configuration's outcome.
type cell struct {
	Dtype            string  `json:"dtype"`
	HiCache          bool    `json:"hicache"`
	Gate             bool    `json:"gate"`
	Concurrency      int     `json:"concurrency"`
	LayerWorkUS      int     `json:"layer_work_us"`
	RequestSteps     uint64  `json:"request_steps"`
	CorruptedSteps   uint64  `json:"corrupted_steps"`
	StepRate         float64 `json:"corrupted_step_rate"`
	StalePages       uint64  `json:"stale_page_reads"`
	RestoredPages    uint64  `json:"restored_pages"`
	Evictions        uint64  `json:"evictions"`
	Turns            int     `json:"turns"`
	CorruptedTurns   int     `json:"corrupted_turns"`
	Sessions         int     `json:"sessions"`
	CorruptedSession int     `json:"corrupted_sessions"`
	MeanJaccard      float64 `json:"mean_jaccard"`
	MinJaccard       float64 `json:"min_jaccard"`
	Seconds          float64 `json:"seconds"`
}

type benchResult struct {
	Device      string  `json:"device"`
	CopyTBps    float64 `json:"copy_tbps"`
	Dtype       string  `json:"dtype"`
	Requests    int     `json:"requests"`
	Context     int     `json:"context"`
	Heads       int     `json:"heads"`
	MedianMS    float64 `json:"median_ms"`
	ScoreMS     float64 `json:"score_ms"`
	SelectMS    float64 `json:"select_ms"`
	IndexKTBps  float64 `json:"index_k_tbps"`
	TotalTBps   float64 `json:"total_tbps"`
	IndexKBytes float64 `json:"index_k_bytes"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "racebench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	var o options
	var conc, sweep string
	fs := flag.NewFlagSet("racebench", flag.ContinueOnError)
	fs.StringVar(&o.lib, "lib", "", "library path (default: the kernels search order)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.IntVar(&o.sessions, "sessions", 60, "sessions per cell")
	fs.IntVar(&o.rounds, "rounds", 4, "turns per session")
	fs.IntVar(&o.steps, "steps", 32, "mean decode steps per turn (uniform in [steps/2, 3*steps/2])")
	fs.IntVar(&o.baseCtx, "context", 2048, "context of a session's first turn, tokens")
	fs.IntVar(&o.growth, "growth", 512, "tokens a session's context grows between turns (tool result, next message)")
	fs.IntVar(&o.maxRunning, "max-running", 32, "largest decode batch; more sessions wait, as in the field (batch <= 32)")
	fs.IntVar(&o.poolPages, "pool-pages", 2048, "device pool in pages of 64 tokens (holds the running batch, not every session)")
	fs.IntVar(&o.layerWork, "layer-work-us", 40, "other work of a layer ahead of its indexer read, uniform in [0, this] us")
	fs.Uint64Var(&o.seed, "seed", 42, "seed of content, queries and tool delays")
	fs.StringVar(&conc, "concurrency", "1,60", "comma-separated concurrencies")
	fs.StringVar(&sweep, "sweep", "5,10,20,80,160", "layer work bounds (us) for the ungated HiCache cells at the highest concurrency; empty: none")
	fs.BoolVar(&o.bench, "bench", true, "also measure copy and pass bandwidth")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.concurrency, err = ints(conc, 1); err != nil || len(o.concurrency) == 0 {
		return fmt.Errorf("-concurrency %q: want positive integers", conc)
	}
	if o.sweep, err = ints(sweep, 0); err != nil {
		return fmt.Errorf("-sweep %q: want non-negative integers", sweep)
	}
	lib, err := kernels.Open(o.lib)
	if err != nil {
		return err
	}
	name, err := lib.DeviceName(0)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device: %s (library %s)\n", name, lib.Path())
	report := struct {
		Device  string         `json:"device"`
		Options map[string]any `json:"options"`
		Bench   []benchResult  `json:"bench,omitempty"`
		Cells   []cell         `json:"cells"`
		Sweep   []cell         `json:"sweep,omitempty"`
	}{Device: name, Options: map[string]any{
		"sessions": o.sessions, "rounds": o.rounds, "steps_per_turn": o.steps, "context": o.baseCtx,
		"growth": o.growth, "max_running": o.maxRunning, "pool_pages": o.poolPages,
		"layer_work_us": o.layerWork, "seed": o.seed, "layers": 4, "heads": 4,
	}}
	if o.bench {
		b, err := bench(lib, name)
		if err != nil {
			return err
		}
		report.Bench = b
		fmt.Fprintln(stdout, "\n| dtype | requests x context | heads | pass median (ms) | score alone | top-512 alone | index-K TB/s | counted TB/s | D2D copy TB/s |")
		fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|")
		for _, r := range b {
			fmt.Fprintf(stdout, "| %s | %d x %d | %d | %.4f | %.4f | %.4f | %.2f | %.2f | %.2f |\n", r.Dtype, r.Requests, r.Context,
				r.Heads, r.MedianMS, r.ScoreMS, r.SelectMS, r.IndexKTBps, r.TotalTBps, r.CopyTBps)
		}
	}
	fmt.Fprintln(stdout, "\n| index-K | HiCache | gate | concurrency | corrupted steps | step rate | stale page reads | pages restored | corrupted turns | corrupted sessions | min Jaccard |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range o.concurrency {
		for _, hicache := range []bool{true, false} {
			for _, gate := range []bool{false, true} {
				for _, d := range []kernels.Dtype{kernels.FP8, kernels.BF16} {
					res, err := runCell(lib, o, d, hicache, gate, c)
					if err != nil {
						return err
					}
					res.LayerWorkUS = o.layerWork
					report.Cells = append(report.Cells, res)
					fmt.Fprintf(stdout, "| %s | %s | %s | %d | %d / %d | %.4f | %d | %d | %d / %d | %d / %d | %.3f |\n",
						res.Dtype, onOff(res.HiCache), onOff(res.Gate), res.Concurrency, res.CorruptedSteps, res.RequestSteps,
						res.StepRate, res.StalePages, res.RestoredPages, res.CorruptedTurns, res.Turns,
						res.CorruptedSession, res.Sessions, res.MinJaccard)
				}
			}
		}
	}
	if len(o.sweep) > 0 {
		top := slices.Max(o.concurrency)
		fmt.Fprintf(stdout, "\n| layer work ahead of the read (us, uniform up to) | index-K | concurrency | corrupted steps | step rate | stale page reads | corrupted turns | corrupted sessions |\n")
		fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
		for _, us := range o.sweep {
			for _, d := range []kernels.Dtype{kernels.FP8, kernels.BF16} {
				so := o
				so.layerWork = us
				if us == 0 {
					so.layerWork = -1 // the kernels' convention for none
				}
				res, err := runCell(lib, so, d, true, false, top)
				if err != nil {
					return err
				}
				res.LayerWorkUS = us
				report.Sweep = append(report.Sweep, res)
				fmt.Fprintf(stdout, "| %d | %s | %d | %d / %d | %.4f | %d | %d / %d | %d / %d |\n", us, res.Dtype, top,
					res.CorruptedSteps, res.RequestSteps, res.StepRate, res.StalePages, res.CorruptedTurns, res.Turns,
					res.CorruptedSession, res.Sessions)
			}
		}
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.jsonOut, err)
		}
	}
	return nil
}

func ints(list string, lo int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < lo {
			return nil, fmt.Errorf("%q: want an integer of at least %d", f, lo)
		}
		out = append(out, n)
	}
	return out, nil
}

// turnSteps draws a turn's length, so that sessions drift apart as real ones do instead of
// finishing and returning in lockstep.
func turnSteps(rng *rand.Rand, mean int) int {
	return max(1, mean/2+rng.IntN(mean+1))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func bench(lib *kernels.Lib, device string) ([]benchResult, error) {
	bw, err := lib.BenchCopy(1<<30, 20)
	if err != nil {
		return nil, err
	}
	var out []benchResult
	for _, d := range []kernels.Dtype{kernels.FP8, kernels.BF16} {
		for _, heads := range []int{1, 4} {
			const reqs, ctx = 128, 16384
			tb, err := lib.NewTestbed(kernels.Config{Dtype: d, PoolPages: reqs * ctx / kernels.TokensPerPage, ContextLen: ctx,
				Layers: 1, Heads: heads, MaxSessions: reqs, MaxBatch: reqs})
			if err != nil {
				return nil, err
			}
			p, err := tb.BenchPass(reqs, 50)
			tb.Close()
			if err != nil {
				return nil, err
			}
			s := p.MedianMS * 1e-3
			out = append(out, benchResult{Device: device, CopyTBps: bw, Dtype: d.String(), Requests: reqs, Context: ctx, Heads: heads,
				MedianMS: p.MedianMS, ScoreMS: p.ScoreMS, SelectMS: p.SelectMS, IndexKTBps: p.IndexKBytes / s / 1e12, TotalTBps: p.TotalBytes / s / 1e12, IndexKBytes: p.IndexKBytes})
		}
	}
	return out, nil
}

type session struct {
	id      uint64
	round   int
	ctx     int
	left    int // decode steps left in this turn
	idle    int // ticks until the next turn is sent (tool execution)
	badTurn bool
	bad     bool
	done    bool
	started bool
	queued  bool
}

// runCell runs sessions x rounds tool-call turns with at most concurrency sessions in
// progress and at most maxRunning decoding at once; a turn is corrupted if any of its
// steps is.
func runCell(lib *kernels.Lib, o options, d kernels.Dtype, hicache, gate bool, concurrency int) (cell, error) {
	start := time.Now()
	maxCtx := o.baseCtx + o.growth*o.rounds + 2*o.steps*o.rounds
	maxCtx = (maxCtx + kernels.TokensPerPage - 1) / kernels.TokensPerPage * kernels.TokensPerPage
	tb, err := lib.NewTestbed(kernels.Config{Seed: o.seed, Dtype: d, HiCache: hicache, Gate: gate, PoolPages: o.poolPages,
		ContextLen: maxCtx, MaxSessions: max(128, o.sessions), MaxBatch: o.maxRunning, LayerWorkUS: o.layerWork})
	if err != nil {
		return cell{}, err
	}
	defer tb.Close()
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	ss := make([]*session, o.sessions)
	for i := range ss {
		ss[i] = &session{id: 0xA1B1000000000000 + uint64(i)*0x9E3779B97F4A7C15, ctx: o.baseCtx}
	}
	c := cell{Dtype: d.String(), HiCache: hicache, Gate: gate, Concurrency: concurrency, Sessions: o.sessions, MinJaccard: 1}
	var queue []*session // ready to decode, FIFO
	active, next, finished := 0, 0, 0
	for tick := 0; finished < o.sessions; tick++ {
		if tick > 10_000_000 {
			return c, errors.New("simulation did not finish")
		}
		for active < concurrency && next < o.sessions {
			s := ss[next]
			next++
			active++
			s.started, s.left = true, turnSteps(rng, o.steps)
			queue = append(queue, s)
		}
		for _, s := range ss {
			if s.started && !s.done && !s.queued && s.left == 0 {
				if s.idle--; s.idle <= 0 {
					s.left = turnSteps(rng, o.steps)
					queue = append(queue, s)
				}
			}
		}
		for _, s := range queue {
			s.queued = true
		}
		n := min(len(queue), o.maxRunning)
		batch := queue[:n]
		reqs := make([]kernels.Request, n)
		for i, s := range batch {
			reqs[i] = kernels.Request{Session: s.id, ContextTokens: s.ctx}
		}
		res, err := tb.Step(reqs)
		if err != nil {
			return c, err
		}
		var rest []*session
		for i, s := range batch {
			r := res[i]
			if r.Corrupted {
				s.badTurn = true
			}
			c.MinJaccard = min(c.MinJaccard, r.Jaccard)
			s.ctx++
			if s.left--; s.left > 0 {
				rest = append(rest, s)
				continue
			}
			s.queued = false
			c.Turns++
			if s.badTurn {
				c.CorruptedTurns++
				s.bad = true
			}
			s.badTurn = false
			s.round++
			if s.round == o.rounds {
				s.done = true
				finished++
				active--
				if s.bad {
					c.CorruptedSession++
				}
				continue
			}
			s.ctx += o.growth
			s.idle = 1 + rng.IntN(16)
		}
		queue = append(rest, queue[n:]...)
	}
	st, err := tb.Stats()
	if err != nil {
		return c, err
	}
	c.RequestSteps, c.CorruptedSteps, c.StalePages = st.RequestSteps, st.CorruptedSteps, st.StalePages
	c.RestoredPages, c.Evictions = st.RestoredPages, st.Evictions
	if st.RequestSteps > 0 {
		c.StepRate = float64(st.CorruptedSteps) / float64(st.RequestSteps)
		c.MeanJaccard = st.JaccardSum / float64(st.RequestSteps)
	}
	c.Seconds = time.Since(start).Seconds()
	return c, nil
}
