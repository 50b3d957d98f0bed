package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// config is refserve's resolved configuration: SGLang's flag names, and the env pins it
// reads. /get_server_info reports it as SGLang reports its server args.
type config struct {
	Host                    string        `json:"host"`
	Port                    int           `json:"port"`
	ServedModelName         string        `json:"served_model_name"`
	ModelPath               string        `json:"model_path"`
	EnableHierarchicalCache bool          `json:"enable_hierarchical_cache"`
	HiCacheRatio            float64       `json:"hicache_ratio"`
	DisableOverlapSchedule  bool          `json:"disable_overlap_schedule"`
	MaxRunningRequests      int           `json:"max_running_requests"`
	ToolCallParser          string        `json:"tool_call_parser"`
	Seed                    int64         `json:"random_seed"`
	InterTokenDelay         time.Duration `json:"-"`
	Backend                 string        `json:"backend"`
	DisaggregationMode      string        `json:"disaggregation_mode"`

	// Accepted so that an SGLang command line runs unchanged; reported, otherwise unused.
	TPSize                        int     `json:"tp_size"`
	DPSize                        int     `json:"dp_size"`
	EnableMetrics                 bool    `json:"enable_metrics"`
	PageSize                      int     `json:"page_size"`
	HiCacheSize                   int     `json:"hicache_size"`
	HiCacheWritePolicy            string  `json:"hicache_write_policy"`
	HiCacheIOBackend              string  `json:"hicache_io_backend"`
	HiCacheMemLayout              string  `json:"hicache_mem_layout"`
	DisaggregationTransferBackend string  `json:"disaggregation_transfer_backend"`
	DisaggregationBootstrapPort   int     `json:"disaggregation_bootstrap_port"`
	MemFractionStatic             float64 `json:"mem_fraction_static"`
	TrustRemoteCode               bool    `json:"trust_remote_code"`
	LogLevel                      string  `json:"log_level"`

	// BF16IndexK is the BF16_INDEX_K env pin: index-K stored in bf16 instead of fp8.
	BF16IndexK bool `json:"bf16_index_k"`
	// IndexKGate is the ARBITER_INDEX_K_GATE env pin, the fix: the indexer read waits
	// for its page's restore to land (cudaStreamWaitEvent), so no read is ever stale.
	IndexKGate bool `json:"index_k_gate"`
	// Env holds the env pins refserve reads, as it read them.
	Env map[string]string `json:"env"`
}

// envPins are the environment variables refserve reads.
var envPins = []string{"BF16_INDEX_K", "ARBITER_INDEX_K_GATE", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"}

var disaggregationModes = []string{"null", "prefill", "decode"}

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
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the scripted agent and of the fault model")
	fs.Int64Var(&c.Seed, "random-seed", 0, "SGLang's name for --seed")
	fs.DurationVar(&c.InterTokenDelay, "inter-token-delay", 2*time.Millisecond, "time between decode iterations")
	fs.StringVar(&c.Backend, "backend", "sim", "what decides stale index-K reads: sim (CPU fault model) or cuda (GPU testbed)")
	fs.StringVar(&c.DisaggregationMode, "disaggregation-mode", "null", "null, prefill or decode")
	fs.IntVar(&c.TPSize, "tp", 1, "tensor parallel size (accepted)")
	fs.IntVar(&c.TPSize, "tp-size", 1, "tensor parallel size (accepted)")
	fs.IntVar(&c.DPSize, "dp", 1, "data parallel size (accepted)")
	fs.IntVar(&c.DPSize, "dp-size", 1, "data parallel size (accepted)")
	fs.BoolVar(&c.EnableMetrics, "enable-metrics", false, "accepted; /metrics is always served")
	fs.IntVar(&c.PageSize, "page-size", 1, "KV page size in tokens (accepted)")
	fs.IntVar(&c.HiCacheSize, "hicache-size", 0, "host pool size in GB (accepted)")
	fs.StringVar(&c.HiCacheWritePolicy, "hicache-write-policy", "write_through", "accepted")
	fs.StringVar(&c.HiCacheIOBackend, "hicache-io-backend", "kernel", "accepted")
	fs.StringVar(&c.HiCacheMemLayout, "hicache-mem-layout", "layer_first", "accepted")
	fs.StringVar(&c.DisaggregationTransferBackend, "disaggregation-transfer-backend", "mooncake", "accepted")
	fs.IntVar(&c.DisaggregationBootstrapPort, "disaggregation-bootstrap-port", 8998, "accepted")
	fs.Float64Var(&c.MemFractionStatic, "mem-fraction-static", 0.9, "accepted")
	fs.BoolVar(&c.TrustRemoteCode, "trust-remote-code", false, "accepted")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warning or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: refserve [flags]  (SGLang's flag names; env BF16_INDEX_K=0|1)")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
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
	check(c.InterTokenDelay >= 0, "--inter-token-delay %s: must not be negative", c.InterTokenDelay)
	check(slices.Contains(knownBackends, c.Backend), "--backend %q: want sim or cuda", c.Backend)
	check(slices.Contains(disaggregationModes, c.DisaggregationMode), "--disaggregation-mode %q: want null, prefill or decode", c.DisaggregationMode)
	check(slices.Contains([]string{"debug", "info", "warning", "error"}, c.LogLevel), "--log-level %q: want debug, info, warning or error", c.LogLevel)

	c.Env = map[string]string{}
	for _, k := range envPins {
		if v := getenv(k); v != "" {
			c.Env[k] = v
		}
	}
	switch v := c.Env["BF16_INDEX_K"]; v {
	case "", "0", "false":
	case "1", "true":
		c.BF16IndexK = true
	default:
		errs = append(errs, fmt.Errorf("BF16_INDEX_K=%q: want 0 or 1", v))
	}
	switch v := c.Env["ARBITER_INDEX_K_GATE"]; v {
	case "", "0", "false":
	case "1", "true":
		c.IndexKGate = true
	default:
		errs = append(errs, fmt.Errorf("ARBITER_INDEX_K_GATE=%q: want 0 or 1", v))
	}
	return c, errors.Join(errs...)
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
	}
}
