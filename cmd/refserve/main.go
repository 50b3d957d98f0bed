// Command refserve is arbiter's reference serving engine: an OpenAI-compatible server
// that behaves on the wire like SGLang serving a DeepSeek-class model with tool calling,
// whose model is a deterministic scripted agent and whose faults are switched by the
// same flags and env pins as the real engine. arbiter's demo, tests and CI run
// experiments against it.
//
// Faults, as seen in the field; each is decided by logical events (which requests, in
// which state), never by timing, so a seeded experiment gives the same outcome on any
// machine:
//   - BF16_INDEX_K=1 with --enable-hierarchical-cache: under load, decode steps read stale
//     index-K and replies degenerate into tool-call markup in content (backend sim or
//     cuda decides which steps). The sim backend's load is logical: the conversations
//     refserve serves at once, counted from the requests themselves (cohort.go), so a
//     seeded workload corrupts the same sessions on any machine, however busy; only the
//     requests that reopen a conversation for a later round read restored pages.
//     ARBITER_INDEX_K_GATE=1 is the fix.
//   - The overlap scheduler (on unless --disable-overlap-schedule) with --tp above 1: a
//     mass abort, 16 requests of the running batch that ran together all aborted (by
//     /abort_request or by their clients hanging up), wedges the scheduler for good while
//     /health still answers; /health_generate fails (faults.go).
//   - --disaggregation-mode prefill or decode with --disaggregation-transfer-backend nixl:
//     an abort of a request whose KV transfer is in flight (no first token yet, or none
//     when an earlier abort of the same cascade struck) kills the transfer loop, and every request still queued or sent later waits forever while
//     /health and /health_generate answer. SGLANG_NIXL_ABORT_HANDLER=1 stands in for the
//     patched build that handles the abort (faults.go).
//
// Tokens and timings follow the requests (timing.go): a prompt counts a token per four
// bytes, a reply a token per word of text; replies follow the agent's plan, max_tokens,
// and SGLang's ignore_eos and min_tokens; each pass of the scheduler prefills a chunk of
// prompts and decodes a token of every running request, in a time that grows with the
// batch and with the context; a prefix cache spares what a conversation resends. /metrics
// serves SGLang's metric names through the Prometheus client library, with --enable-metrics
// as SGLang asks (metrics.go).
//
// Launches of one configuration are replicas unless asked otherwise (launch.go):
// --launch-fault-cv and --launch-speed-cv make each launch draw, from --launch-seed, a
// multiplier of every fault probability and a factor of every pacing delay, as a real
// engine's launches differ in their GPU clocks and memory layout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// readyLine is the log line SGLang prints once it serves; launchers wait for it.
const readyLine = "The server is fired up and ready to roll!"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is refserve's whole life: parse, listen, serve until ctx ends. It returns the
// exit code: 0 after a clean shutdown, 1 on a failure, 2 on bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	_ = stdout // refserve prints no results; everything it says is a log line
	cfg, err := parseConfig(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "refserve: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	b, err := newBackend(cfg.Backend, cfg.backendConfig())
	if err != nil {
		log.Error("refserve cannot start", "err", err)
		return 1
	}
	defer b.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		log.Error("refserve cannot listen", "err", err)
		return 1
	}
	if err := newServer(cfg, b, log).serve(ctx, ln); err != nil {
		log.Error("refserve stopped", "err", err)
		return 1
	}
	return 0
}

func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// serve runs the server on ln until ctx ends, then aborts what is in flight and shuts
// down. The listener is already bound, so a client may connect as soon as serve is
// called.
func (s *server) serve(ctx context.Context, ln net.Listener) error {
	cfg, log := &s.cfg, s.log
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		cfg.Port = a.Port
	}
	schedCtx, stopSched := context.WithCancel(context.Background())
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		s.sched.run(schedCtx)
	}()
	hs := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 30 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("refserve listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String(),
		"model", cfg.ServedModelName, "backend", cfg.Backend, "tool_call_parser", cfg.ToolCallParser,
		"hicache", cfg.EnableHierarchicalCache, "bf16_index_k", cfg.BF16IndexK, "seed", cfg.Seed,
		"tp", cfg.TPSize, "overlap_schedule", !cfg.DisableOverlapSchedule, "disaggregation_mode", cfg.DisaggregationMode,
		"transfer_backend", cfg.DisaggregationTransferBackend, "mass_abort_wedge_armed", cfg.massAbortArmed(),
		"nixl_abort_wedge_armed", cfg.nixlAbortArmed())
	if v := cfg.Launch; v.varies() {
		log.Info("launch variation drawn", "launch_seed", v.Seed, "fault_cv", v.FaultCV, "fault_multiplier", v.FaultMultiplier,
			"speed_cv", v.SpeedCV, "speed_factor", v.SpeedFactor)
	}
	log.Info(readyLine)

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	s.sched.close() // in-flight streams end with finish_reason "abort"
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := hs.Shutdown(shutCtx); serr != nil {
		// A client's spare connection that never carried a request counts as active for
		// its first seconds; it holds no work, so closing it is not a failure.
		log.Warn("connections still open at shutdown; closing them", "err", serr)
		hs.Close()
	}
	stopSched()
	<-schedDone
	return err
}
