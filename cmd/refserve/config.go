package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is refserve's resolved configuration: SGLang's flag names, and the env pins it
// reads. /get_server_info reports it as SGLang reports its server args.
type config struct {
	Host                    string  `json:"host"`
	Port                    int     `json:"port"`
	ServedModelName         string  `json:"served_model_name"`
	ModelPath               string  `json:"model_path"`
	EnableHierarchicalCache bool    `json:"enable_hierarchical_cache"`
	HiCacheRatio            float64 `json:"hicache_ratio"`
	DisableOverlapSchedule  bool    `json:"disable_overlap_schedule"`
	MaxRunningRequests      int     `json:"max_running_requests"`
	ToolCallParser          string  `json:"tool_call_parser"`
	// ModelToolFormat is the markup the scripted model writes its calls in (refserve's
	// own); empty is the parser's. Another than the parser's is the field's mismatched
	// parser: no call parses, and each reaches the client as content.
	ModelToolFormat string        `json:"model_tool_format"`
	Seed            int64         `json:"random_seed"`
	InterTokenDelay time.Duration `json:"-"`
	Backend         string        `json:"backend"`

	// The cost model (timing.go): refserve's own flags, as SGLang's pace is its hardware's.
	// PrefillDelayPerToken is the time to prefill one prompt token at the start of a
	// context; DecodeBatchCost is the share of a one-request decode step that each further
	// request of the batch adds.
	PrefillDelayPerToken time.Duration `json:"-"`
	DecodeBatchCost      float64       `json:"decode_batch_cost"`
	// SGLang's memory and batching flags, which the cost model and the prefix cache use.
	ChunkedPrefillSize int  `json:"chunked_prefill_size"`
	DisableRadixCache  bool `json:"disable_radix_cache"`
	MaxTotalTokens     int  `json:"max_total_tokens"`
	ContextLength      int  `json:"context_length"`

	// Prefill/decode disaggregation. refserve stands in for the prefill and decode pair
	// behind a router, whichever mode it is given; with the nixl transfer backend an
	// abort of a request whose KV transfer is in flight kills the transfer loop
	// (faults.go) unless NixlAbortHandler is set.
	DisaggregationMode            string `json:"disaggregation_mode"`
	DisaggregationTransferBackend string `json:"disaggregation_transfer_backend"`
	DisaggregationBootstrapPort   int    `json:"disaggregation_bootstrap_port"`

	// Accepted so that an SGLang command line runs unchanged; reported, otherwise unused.
	TPSize             int     `json:"tp_size"`
	DPSize             int     `json:"dp_size"`
	EnableMetrics      bool    `json:"enable_metrics"`
	PageSize           int     `json:"page_size"`
	HiCacheSize        int     `json:"hicache_size"`
	HiCacheWritePolicy string  `json:"hicache_write_policy"`
	HiCacheIOBackend   string  `json:"hicache_io_backend"`
	HiCacheMemLayout   string  `json:"hicache_mem_layout"`
	MemFractionStatic  float64 `json:"mem_fraction_static"`
	TrustRemoteCode    bool    `json:"trust_remote_code"`
	LogLevel           string  `json:"log_level"`

	// BF16IndexK is the BF16_INDEX_K env pin: index-K stored in bf16 instead of fp8.
	BF16IndexK bool `json:"bf16_index_k"`
	// IndexKGate is the ARBITER_INDEX_K_GATE env pin, the fix: the indexer read waits
	// for its page's restore to land (cudaStreamWaitEvent), so no read is ever stale.
	IndexKGate bool `json:"index_k_gate"`
	// NixlAbortHandler is the SGLANG_NIXL_ABORT_HANDLER env pin, refserve's stand-in for
	// the patched build whose NIXL bootstrap thread handles ABORT messages: an abort of
	// an in-flight transfer fails that transfer alone.
	NixlAbortHandler bool `json:"nixl_abort_handler"`
	// HealthCheckTimeout is SGLANG_HEALTH_CHECK_TIMEOUT (seconds, default 20): how long
	// /health_generate waits for output before it answers 503.
	HealthCheckTimeout time.Duration `json:"-"`
	// Env holds the env pins refserve reads, as it read them.
	Env map[string]string `json:"env"`

	// Launch is refserve's own per-launch variation (launch.go): --launch-fault-cv,
	// --launch-speed-cv and --launch-seed, and what the launch drew from them. It is left
	// out of the settings' JSON so that an ordinary launch reports what it always did;
	// /get_server_info adds it under launch_variation when a CV is non-zero.
	Launch launchVariation `json:"-"`
}

// envPins are the environment variables refserve reads.
var envPins = []string{"BF16_INDEX_K", "ARBITER_INDEX_K_GATE", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION",
	"SGLANG_NIXL_ABORT_HANDLER", "SGLANG_HEALTH_CHECK_TIMEOUT"}

var (
	disaggregationModes = []string{"null", "prefill", "decode"}
	// transferBackends are SGLang's --disaggregation-transfer-backend values.
	transferBackends = []string{"mooncake", "nixl", "ascend", "mori", "fake"}
)

// usage is the first line of refserve -h; the faults and how to switch them follow the
// flag list (faultHelp).
const usage = "usage: refserve [flags]  (SGLang's flag names and env pins; refserve's own flags are marked so)"

const faultHelp = `
Faults, switched as on the real engine:
  BF16_INDEX_K=1 with --enable-hierarchical-cache
      decode steps that reopen a conversation read stale index-K, more often the more
      sessions refserve serves at once; replies leak tool-call markup into content.
      ARBITER_INDEX_K_GATE=1 is the fix.
  the overlap scheduler (no --disable-overlap-schedule) with --tp above 1
      a mass abort (16 or more requests of the running batch aborted, all of which were
      running together at one moment, by /abort_request or client disconnects) wedges the
      scheduler for good; /health still answers 200, /health_generate fails.
  --disaggregation-mode prefill|decode with --disaggregation-transfer-backend nixl
      an abort of a request whose KV transfer is in flight (no first token yet, queued
      or prefilling, or so when an earlier abort of the same cascade struck) kills the
      transfer loop: every request that was still queued, and every later one, waits
      forever; /health and /health_generate still answer 200.
      SGLANG_NIXL_ABORT_HANDLER=1 stands in for the patched build: the abort fails that
      transfer alone.
Env: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=1 makes /health run a generation;
SGLANG_HEALTH_CHECK_TIMEOUT (seconds, default 20) bounds /health_generate.
Launch variation (refserve's own), as between two launches of a real engine:
  --launch-fault-cv C multiplies every fault probability of the sim backend by one
  draw M ~ Gamma (mean 1, CV C), --launch-speed-cv C every pacing delay by one draw
  S = exp(N(0, C²)); --launch-seed seeds both (0: a fresh seed at every launch).
  /get_server_info reports the draws under launch_variation.
`

// parseConfig reads the command line and the environment. Errors are usage errors.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("refserve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the one error line itself
	fs.StringVar(&c.Host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&c.Port, "port", 30000, "port to listen on; 0 picks a free one")
	fs.StringVar(&c.ServedModelName, "served-model-name", "refserve-agent", "model name served at /v1/models")
	fs.StringVar(&c.ModelPath, "model-path", "", "accepted and reported; refserve's model is scripted")
	fs.BoolVar(&c.EnableHierarchicalCache, "enable-hierarchical-cache", false, "HiCache: back KV pages up to host memory and restore them on demand")
	fs.Float64Var(&c.HiCacheRatio, "hicache-ratio", 2, "host pool size relative to the device pool")
	fs.BoolVar(&c.DisableOverlapSchedule, "disable-overlap-schedule", false, "turn the overlap scheduler off")
	fs.IntVar(&c.MaxRunningRequests, "max-running-requests", 0, "largest decode batch; 0 is unlimited, beyond it requests queue")
	fs.StringVar(&c.ToolCallParser, "tool-call-parser", "deepseekv4", "tool-call markup format: "+strings.Join(toolCallParsers, ", "))
	fs.StringVar(&c.ModelToolFormat, "model-tool-format", "", "(refserve's own) the markup the model writes its tool calls in; empty: the --tool-call-parser's. Another makes every call reach the client as content, as a mismatched parser does")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the scripted agent and of the fault model")
	fs.Int64Var(&c.Seed, "random-seed", 0, "SGLang's name for --seed")
	fs.DurationVar(&c.InterTokenDelay, "inter-token-delay", 2*time.Millisecond,
		"refserve's own: one decode step of a lone request; 18.5ms gives the field's 54 tok/s (timing.go)")
	fs.StringVar(&c.Backend, "backend", "sim", "what decides stale index-K reads: sim (CPU fault model) or cuda (GPU testbed)")
	fs.DurationVar(&c.PrefillDelayPerToken, "prefill-delay-per-token", defaultPrefillDelayPerToken,
		"refserve's own: time to prefill one uncached prompt token at the start of a context; later tokens cost more (timing.go)")
	fs.Float64Var(&c.DecodeBatchCost, "decode-batch-cost", defaultDecodeBatchCost,
		"refserve's own: share of a one-request decode step that each further running request adds; 0 makes steps cost the same at any batch")
	fs.IntVar(&c.ChunkedPrefillSize, "chunked-prefill-size", 8192, "most prompt tokens prefilled in one iteration; -1 prefills whole prompts")
	fs.BoolVar(&c.DisableRadixCache, "disable-radix-cache", false, "turn the prefix cache off: every prompt is prefilled in full")
	fs.IntVar(&c.MaxTotalTokens, "max-total-tokens", 1<<20, "KV cache capacity in tokens: running requests and the prefix cache share it")
	fs.IntVar(&c.ContextLength, "context-length", 163840, "longest prompt plus completion, in tokens")
	fs.StringVar(&c.DisaggregationMode, "disaggregation-mode", "null", "null, prefill or decode; refserve stands in for the prefill and decode pair in either mode")
	fs.StringVar(&c.DisaggregationTransferBackend, "disaggregation-transfer-backend", "mooncake", "KV transfer backend: "+strings.Join(transferBackends, ", "))
	fs.IntVar(&c.DisaggregationBootstrapPort, "disaggregation-bootstrap-port", 8998, "bootstrap port of the prefill side (reported)")
	fs.IntVar(&c.TPSize, "tp", 1, "tensor parallel size (accepted)")
	fs.IntVar(&c.TPSize, "tp-size", 1, "tensor parallel size (accepted)")
	fs.IntVar(&c.DPSize, "dp", 1, "data parallel size (accepted)")
	fs.IntVar(&c.DPSize, "dp-size", 1, "data parallel size (accepted)")
	fs.BoolVar(&c.EnableMetrics, "enable-metrics", false, "serve Prometheus metrics at /metrics (SGLang's names and refserve's own), as SGLang does with this flag")
	fs.IntVar(&c.PageSize, "page-size", 1, "KV page size in tokens (accepted)")
	fs.IntVar(&c.HiCacheSize, "hicache-size", 0, "host pool size in GB (accepted)")
	fs.StringVar(&c.HiCacheWritePolicy, "hicache-write-policy", "write_through", "accepted")
	fs.StringVar(&c.HiCacheIOBackend, "hicache-io-backend", "kernel", "accepted")
	fs.StringVar(&c.HiCacheMemLayout, "hicache-mem-layout", "layer_first", "accepted")
	fs.Float64Var(&c.MemFractionStatic, "mem-fraction-static", 0.9, "accepted")
	fs.BoolVar(&c.TrustRemoteCode, "trust-remote-code", false, "accepted")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warning or error")
	fs.Float64Var(&c.Launch.FaultCV, "launch-fault-cv", 0,
		"refserve's own: the launch multiplies every fault probability of the sim backend by M ~ Gamma with mean 1 and this CV (0 to 2; 0: M = 1)")
	fs.Float64Var(&c.Launch.SpeedCV, "launch-speed-cv", 0,
		"refserve's own: the launch multiplies every pacing delay by S = exp(N(0, this²)), median 1, CV about this when small (0 to 2; 0: S = 1)")
	fs.Uint64Var(&c.Launch.Seed, "launch-seed", 0,
		"refserve's own: seed of the launch's draws, independent of --seed; 0 draws one from crypto/rand, so that every launch differs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			fmt.Fprint(stderr, faultHelp)
			return c, err
		}
		return c, fmt.Errorf("%w (refserve -h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(c.Port >= 0 && c.Port <= 65535, "--port %d: not a port", c.Port)
	check(c.ServedModelName != "", "--served-model-name: empty")
	check(c.HiCacheRatio > 0, "--hicache-ratio %g: must be positive", c.HiCacheRatio)
	check(c.MaxRunningRequests >= 0, "--max-running-requests %d: must be 0 (unlimited) or more", c.MaxRunningRequests)
	check(slices.Contains(toolCallParsers, c.ToolCallParser), "--tool-call-parser %q: want one of %s", c.ToolCallParser, strings.Join(toolCallParsers, ", "))
	check(c.ModelToolFormat == "" || slices.Contains(toolCallParsers, c.ModelToolFormat), "--model-tool-format %q: want one of %s", c.ModelToolFormat, strings.Join(toolCallParsers, ", "))
	check(c.InterTokenDelay >= 0, "--inter-token-delay %s: must not be negative", c.InterTokenDelay)
	check(slices.Contains(knownBackends, c.Backend), "--backend %q: want sim or cuda", c.Backend)
	check(slices.Contains(disaggregationModes, c.DisaggregationMode), "--disaggregation-mode %q: want null, prefill or decode", c.DisaggregationMode)
	check(slices.Contains(transferBackends, c.DisaggregationTransferBackend), "--disaggregation-transfer-backend %q: want one of %s",
		c.DisaggregationTransferBackend, strings.Join(transferBackends, ", "))
	check(c.DisaggregationBootstrapPort > 0 && c.DisaggregationBootstrapPort <= 65535, "--disaggregation-bootstrap-port %d: not a port", c.DisaggregationBootstrapPort)
	check(c.PrefillDelayPerToken >= 0, "--prefill-delay-per-token %s: must not be negative", c.PrefillDelayPerToken)
	check(c.DecodeBatchCost >= 0 && !math.IsInf(c.DecodeBatchCost, 0), "--decode-batch-cost %g: must be 0 or more", c.DecodeBatchCost)
	check(c.ChunkedPrefillSize == -1 || c.ChunkedPrefillSize > 0, "--chunked-prefill-size %d: must be positive, or -1 for no chunking", c.ChunkedPrefillSize)
	check(c.MaxTotalTokens > 0, "--max-total-tokens %d: must be positive", c.MaxTotalTokens)
	check(c.ContextLength > 1, "--context-length %d: must be at least 2", c.ContextLength)
	check(slices.Contains([]string{"debug", "info", "warning", "error"}, c.LogLevel), "--log-level %q: want debug, info, warning or error", c.LogLevel)
	check(validLaunchCV(c.Launch.FaultCV), "--launch-fault-cv %g: want a coefficient of variation from 0 to %d", c.Launch.FaultCV, maxLaunchCV)
	check(validLaunchCV(c.Launch.SpeedCV), "--launch-speed-cv %g: want a coefficient of variation from 0 to %d", c.Launch.SpeedCV, maxLaunchCV)
	check(c.Launch.Seed <= maxLaunchSeed, "--launch-seed %d: must be below 2^53, so that /get_server_info reports it exactly", c.Launch.Seed)
	check(c.Launch.FaultCV == 0 || c.Backend == "sim",
		"--launch-fault-cv %g with --backend %s: only the sim backend's faults are drawn, the GPU testbed's race is physical", c.Launch.FaultCV, c.Backend)

	c.Env = map[string]string{}
	for _, k := range envPins {
		if v := getenv(k); v != "" {
			c.Env[k] = v
		}
	}
	c.BF16IndexK = envFlag(c.Env, "BF16_INDEX_K", &errs)
	c.IndexKGate = envFlag(c.Env, "ARBITER_INDEX_K_GATE", &errs)
	c.NixlAbortHandler = envFlag(c.Env, "SGLANG_NIXL_ABORT_HANDLER", &errs)
	c.HealthCheckTimeout = 20 * time.Second // SGLang's default
	if v := c.Env["SGLANG_HEALTH_CHECK_TIMEOUT"]; v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || !(secs > 0) || secs > 1e6 {
			errs = append(errs, fmt.Errorf("SGLANG_HEALTH_CHECK_TIMEOUT=%q: want a positive number of seconds", v))
		} else {
			c.HealthCheckTimeout = time.Duration(secs * float64(time.Second))
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	if c.Launch.varies() && c.Launch.Seed == 0 {
		c.Launch.Seed = newLaunchSeed()
	}
	c.Launch = drawLaunch(c.Launch.Seed, c.Launch.FaultCV, c.Launch.SpeedCV)
	return c, nil
}

// costModel is the pace the configuration sets, at the launch's speed.
func (c config) costModel() costModel {
	return costModel{interToken: c.InterTokenDelay, batchCost: c.DecodeBatchCost, prefillPerToken: c.PrefillDelayPerToken,
		speed: c.Launch.speedFactor()}
}

// massAbortArmed says whether a mass abort wedges the scheduler: the overlap scheduler
// with more than one tensor-parallel rank, as in the field.
func (c config) massAbortArmed() bool { return !c.DisableOverlapSchedule && c.TPSize > 1 }

// nixlAbortArmed says whether an abort of an in-flight KV transfer kills the transfer
// loop: disaggregated over NIXL without the patched handler.
func (c config) nixlAbortArmed() bool {
	return c.DisaggregationMode != "null" && c.DisaggregationTransferBackend == "nixl" && !c.NixlAbortHandler
}

// backendConfig is what the backend needs of the configuration.
func (c config) backendConfig() BackendConfig {
	return BackendConfig{
		BF16IndexK:   c.BF16IndexK,
		HiCache:      c.EnableHierarchicalCache,
		Gate:         c.IndexKGate,
		HiCacheRatio: c.HiCacheRatio,
		Seed:         c.Seed,
		MaxRunning:   c.MaxRunningRequests,

		FaultMultiplier: c.Launch.faultMultiplier(),
	}
}

// envFlag reads the boolean env setting name: unset, 0 or false is off, 1 or true on;
// anything else is an error added to errs.
func envFlag(env map[string]string, name string, errs *[]error) bool {
	switch v := env[name]; v {
	case "", "0", "false":
		return false
	case "1", "true":
		return true
	default:
		*errs = append(*errs, fmt.Errorf("%s=%q: want 0 or 1", name, v))
		return false
	}
}
