package arms

import "slices"

// Preset is what arbiter knows about an engine: how to start it when the spec gives no
// command, how to tell it its port, and where it answers health, server-info and abort
// requests. An empty path means the engine has no such endpoint.
type Preset struct {
	Name string
	// Command is the default command line when the spec's engine.command is empty;
	// nil for custom, which must give one.
	Command []string
	// PortFlag is the flag the runtime appends with the arm's port, e.g. --port.
	PortFlag string
	// HealthPath answers 200 once the server is up; it may not prove that a new
	// request gets scheduled (SGLang's /health passes as soon as any output arrives).
	HealthPath string
	// GenerateHealthPath runs a real generation; empty when the engine has none.
	GenerateHealthPath string
	// ServerInfoPath returns the resolved server arguments and version, stored per run.
	ServerInfoPath string
	// MetricsPath serves the engine's Prometheus metrics, scraped while a run's workload
	// runs (SGLang and refserve serve it with --enable-metrics; vLLM always).
	MetricsPath string
	// AbortPath aborts requests (POST {"rid": ..., "abort_all": bool}); empty when a
	// client disconnect is the only abort (vLLM).
	AbortPath string
}

// presets are the engines arbiter drives. refserve mirrors SGLang's endpoints on
// purpose: it stands in for SGLang in tests and demos.
var presets = map[string]Preset{
	"refserve": {
		Name:               "refserve",
		Command:            []string{"refserve"},
		PortFlag:           "--port",
		HealthPath:         "/health",
		GenerateHealthPath: "/health_generate",
		ServerInfoPath:     "/get_server_info",
		AbortPath:          "/abort_request",
		MetricsPath:        "/metrics",
	},
	"sglang": {
		Name:               "sglang",
		Command:            []string{"python3", "-m", "sglang.launch_server"},
		PortFlag:           "--port",
		HealthPath:         "/health",
		GenerateHealthPath: "/health_generate",
		ServerInfoPath:     "/get_server_info",
		AbortPath:          "/abort_request",
		MetricsPath:        "/metrics",
	},
	"vllm": {
		Name:        "vllm",
		Command:     []string{"vllm", "serve"},
		PortFlag:    "--port",
		HealthPath:  "/health",
		MetricsPath: "/metrics",
	},
	"custom": {
		Name:        "custom",
		PortFlag:    "--port",
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
	p.Command = slices.Clone(p.Command)
	return p
}
