package arms

import (
	"slices"
	"strings"
)

// Preset is what arbiter knows about an engine: how to start it when the spec gives no
// command, how to tell it its port, where it answers health, server-info and abort
// requests, and where it reports the settings arbiter attests. An empty path means the
// engine has no such endpoint. Spec.Preset lays what a spec declares over it.
type Preset struct {
	Name string
	// Command is the default command line when the spec's engine.command is empty;
	// nil for custom, which must give one.
	Command []string
	// Listen is how the runtime tells the engine its address (a port flag by default).
	Listen Listen
	// HealthPath answers 200 once the server is up; it may not prove that a new
	// request gets scheduled (SGLang's /health passes as soon as any output arrives).
	HealthPath string
	// GenerateHealthPath runs a real generation; empty when the engine has none.
	GenerateHealthPath string
	// ServerInfoPath returns the resolved server arguments and version, stored per run;
	// ServerInfoFallback is asked when it answers 404 (an older release's route).
	ServerInfoPath, ServerInfoFallback string
	// FlagsInServerInfo says that the server info holds every flag under its name (- read
	// as _): a flag pin without a rule of its own is attested there. EnvInServerInfo is
	// the key under which it reports the env pins it read, if any.
	FlagsInServerInfo bool
	EnvInServerInfo   string
	// MetricsPath serves the engine's Prometheus metrics, scraped while a run's workload
	// runs (SGLang and refserve serve it with --enable-metrics; vLLM always).
	MetricsPath string
	// AbortPath aborts requests (POST {"rid": ..., "abort_all": bool}); empty when a
	// client disconnect is the only abort (vLLM).
	AbortPath string
	// Grammar is how the engine reads its command line (args.go); the zero Grammar,
	// custom's, knows no flag.
	Grammar Grammar
	// Attest are the rules that read back settings the server info does not report
	// (attest.go); a spec's engine.attest adds to them.
	Attest []AttestRule
	// LabelsHeader is the header in which every chat request tells the engine its
	// experiment, arm, block, session and round (a JSON object of strings): SGLang's
	// custom metric labels header, or DefaultLabelsHeader.
	LabelsHeader string
	// Models says that the engine keeps models that arbiter can create and load through
	// its API before the readiness generation (ModelsOllama), or "" when the engine loads
	// the model its command names.
	Models string
}

// DefaultLabelsHeader carries a request's labels to engines that read none of their own:
// their logs may still show it.
const DefaultLabelsHeader = "X-Arbiter-Labels"

// ModelsOllama is Preset.Models for an engine with ollama's model API (POST
// /api/blobs/sha256:DIGEST, /api/create, /api/show).
const ModelsOllama = "ollama"

// portFlag is the listening form of the presets that take --port.
var portFlag = Listen{Flag: "--port"}

// presets are the engines arbiter drives. refserve mirrors SGLang's endpoints on
// purpose: it stands in for SGLang in tests and demos.
var presets = map[string]Preset{
	"refserve": {
		Name:               "refserve",
		Command:            []string{"refserve"},
		Listen:             portFlag,
		HealthPath:         "/health",
		GenerateHealthPath: "/health_generate",
		ServerInfoPath:     "/get_server_info",
		AbortPath:          "/abort_request",
		MetricsPath:        "/metrics",
		Grammar:            refserveGrammar,
		FlagsInServerInfo:  true,
		EnvInServerInfo:    "env",
		LabelsHeader:       "x-custom-labels",
	},
	"sglang": {
		Name:               "sglang",
		Command:            []string{"python3", "-m", "sglang.launch_server"},
		Listen:             portFlag,
		HealthPath:         "/health",
		GenerateHealthPath: "/health_generate",
		ServerInfoPath:     "/server_info",
		ServerInfoFallback: "/get_server_info",
		AbortPath:          "/abort_request",
		MetricsPath:        "/metrics",
		Grammar:            sglangGrammar,
		FlagsInServerInfo:  true,
		Attest:             sglangAttest,
		LabelsHeader:       "x-custom-labels",
	},
	"vllm": {
		Name:           "vllm",
		Command:        []string{"vllm", "serve"},
		Listen:         portFlag,
		HealthPath:     "/health",
		ServerInfoPath: "/version",
		MetricsPath:    "/metrics",
		Grammar:        vllmGrammar,
		Attest:         vllmAttest,
	},
	"ollama": {
		Name:           "ollama",
		Command:        []string{"ollama", "serve"},
		Listen:         Listen{Env: "OLLAMA_HOST", EnvValue: HostHolder + ":" + PortHolder},
		HealthPath:     "/",
		ServerInfoPath: "/api/version",
		Models:         ModelsOllama,
		Attest:         ollamaAttest,
	},
	"custom": {
		Name:        "custom",
		Listen:      portFlag,
		HealthPath:  "/health",
		MetricsPath: "/metrics",
	},
}

// PresetNames lists the known engine presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// PresetFor returns the named preset; an unknown name (which a validated spec never
// holds) gets custom's settings under that name, so a caller never sees an empty
// port flag.
func PresetFor(name string) Preset {
	p, ok := presets[name]
	if !ok {
		p = presets["custom"]
		p.Name = name
	}
	if p.LabelsHeader == "" {
		p.LabelsHeader = DefaultLabelsHeader
	}
	p.Command = slices.Clone(p.Command)
	p.Attest = slices.Clone(p.Attest)
	p.Grammar = Grammar{Bool: slices.Clone(p.Grammar.Bool), Valued: slices.Clone(p.Grammar.Valued), Argparse: p.Grammar.Argparse}
	return p
}

// refserveGrammar is cmd/refserve/config.go's flag set, read by Go's flag package: a
// valued flag takes the next token whatever it looks like. TestRefserveGrammar keeps it
// in step with config.go.
var refserveGrammar = Grammar{
	Bool: []string{"--enable-hierarchical-cache", "--disable-overlap-schedule", "--disable-radix-cache", "--enable-metrics", "--trust-remote-code"},
	Valued: []string{"--host", "--port", "--served-model-name", "--model-path", "--hicache-ratio", "--max-running-requests",
		"--tool-call-parser", "--seed", "--random-seed", "--inter-token-delay", "--backend", "--prefill-delay-per-token",
		"--decode-batch-cost", "--chunked-prefill-size", "--max-total-tokens", "--context-length", "--disaggregation-mode",
		"--disaggregation-transfer-backend", "--disaggregation-bootstrap-port", "--tp", "--tp-size", "--dp", "--dp-size",
		"--page-size", "--hicache-size", "--hicache-write-policy", "--hicache-io-backend", "--hicache-mem-layout",
		"--mem-fraction-static", "--log-level", "--model-tool-format"},
}

// sglangGrammar is a part of SGLang's launch_server arguments (python/sglang/srt/
// server_args.py, argparse): the flags arbiter's specs and examples name, and the
// common ones of the same kind. A flag it does not list is read by the rule for unknown flags.
var sglangGrammar = Grammar{
	Argparse: true,
	Bool: []string{"--enable-hierarchical-cache", "--disable-overlap-schedule", "--enable-metrics", "--enable-metrics-for-all-schedulers",
		"--trust-remote-code", "--disable-radix-cache", "--skip-tokenizer-init", "--disable-cuda-graph", "--disable-cuda-graph-padding",
		"--enable-torch-compile", "--enable-dp-attention", "--enable-dp-lm-head", "--enable-mixed-chunk", "--enable-p2p-check",
		"--disable-custom-all-reduce", "--enable-nccl-nvls", "--enable-two-batch-overlap", "--enable-cache-report",
		"--enable-deterministic-inference", "--disable-chunked-prefix-cache", "--log-requests", "--show-time-cost", "--enable-lora",
		"--enable-memory-saver", "--allow-auto-truncate", "--enable-custom-logit-processor", "--enable-return-hidden-states",
		"--enable-eplb", "--disable-shared-experts-fusion", "--disable-outlines-disk-cache", "--enable-nan-detection",
		"--delete-ckpt-after-loading", "--enable-priority-scheduling", "--is-embedding", "--enable-multimodal"},
	Valued: []string{"--model-path", "--tokenizer-path", "--tokenizer-mode", "--load-format", "--host", "--port", "--tp", "--tp-size",
		"--dp", "--dp-size", "--pp-size", "--ep-size", "--nnodes", "--node-rank", "--dist-init-addr", "--page-size",
		"--chunked-prefill-size", "--max-running-requests", "--max-total-tokens", "--max-prefill-tokens", "--mem-fraction-static",
		"--context-length", "--served-model-name", "--tool-call-parser", "--reasoning-parser", "--chat-template", "--hicache-ratio",
		"--hicache-size", "--hicache-write-policy", "--hicache-io-backend", "--hicache-mem-layout", "--hicache-storage-backend",
		"--disaggregation-mode", "--disaggregation-transfer-backend", "--disaggregation-bootstrap-port", "--disaggregation-ib-device",
		"--attention-backend", "--sampling-backend", "--grammar-backend", "--quantization", "--kv-cache-dtype", "--dtype",
		"--random-seed", "--log-level", "--schedule-policy", "--schedule-conservativeness", "--cuda-graph-max-bs", "--cuda-graph-bs",
		"--api-key", "--watchdog-timeout", "--stream-interval", "--speculative-algorithm", "--speculative-draft-model-path",
		"--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--moe-a2a-backend",
		"--moe-runner-backend", "--json-model-override-args", "--revision", "--device", "--base-gpu-id", "--max-queued-requests",
		"--download-dir"},
}

// vllmGrammar is a part of vLLM's serve arguments (argparse); its boolean flags take the
// --no- form too.
var vllmGrammar = Grammar{
	Argparse: true,
	Bool: withNegations("--enforce-eager", "--enable-prefix-caching", "--enable-chunked-prefill", "--trust-remote-code",
		"--enable-log-requests", "--enable-auto-tool-choice", "--enable-lora", "--enable-expert-parallel", "--async-scheduling",
		"--enable-sleep-mode", "--skip-tokenizer-init", "--enable-eplb", "--enable-prompt-tokens-details",
		"--enable-server-load-tracking", "--enable-force-include-usage", "--disable-log-stats", "--disable-log-requests",
		"--disable-custom-all-reduce", "--disable-sliding-window", "--disable-frontend-multiprocessing", "--disable-cascade-attn"),
	Valued: []string{"--model", "--host", "--port", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
		"--data-parallel-size", "-dp", "--max-model-len", "--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens",
		"--block-size", "--kv-cache-dtype", "--dtype", "--quantization", "-q", "--served-model-name", "--tool-call-parser",
		"--reasoning-parser", "--seed", "--swap-space", "--download-dir", "--load-format", "--tokenizer", "--tokenizer-mode",
		"--revision", "--chat-template", "--api-key", "--compilation-config", "-O", "--speculative-config", "--max-logprobs",
		"--uvicorn-log-level", "--distributed-executor-backend", "--cpu-offload-gb", "--kv-transfer-config", "--hf-overrides",
		"--limit-mm-per-prompt", "--long-prefill-token-threshold", "--scheduling-policy", "--generation-config"},
}

// withNegations lists boolean flags with their --no- forms (argparse's
// BooleanOptionalAction); a --disable- flag has none.
func withNegations(flags ...string) []string {
	out := slices.Clone(flags)
	for _, f := range flags {
		if !strings.HasPrefix(f, "--disable-") {
			out = append(out, "--no-"+strings.TrimPrefix(f, "--"))
		}
	}
	return out
}
