package arms

import (
	"slices"
	"strings"
	"testing"
)

// engineSpec is a valid two-arm spec whose engine section is engine.
func engineSpec(engine string) string {
	return "version: 1\nname: t\nengine:\n" + engine + "workload: {sessions: 4, rounds: 2}\n" + twoArms
}

func TestEngineDescription(t *testing.T) {
	s := mustParse(t, engineSpec("  preset: custom\n  command: [myserver, --listen, \"{host}:{port}\"]\n"+
		"  endpoints: {health: /ping, server_info: /config, metrics: \"\", abort: /cancel}\n"+
		"  attest:\n    BF16_INDEX_K: {log: \"index_k dtype: (?P<value>\\\\w+)\"}\n    --page-size: {server_info: cache.page_size}\n"+
		"    --prefix: {metric: \"x:cache_info\", label: prefix, bool: true, note: \"why\"}\n"))
	p := s.Preset()
	if !p.Listen.Placeholder || p.HealthPath != "/ping" || p.ServerInfoPath != "/config" || p.MetricsPath != "" || p.AbortPath != "/cancel" || p.GenerateHealthPath != "" {
		t.Errorf("preset %+v", p)
	}
	r, ok := p.Rule("BF16_INDEX_K")
	if !ok || r.Log == nil || r.Source() != `log /index_k dtype: (?P<value>\w+)/` {
		t.Errorf("log rule %+v", r)
	}
	if r, _ := p.Rule("--page-size"); r.Source() != "server_info cache.page_size" {
		t.Errorf("server info rule %+v", r)
	}
	if r, _ := p.Rule("--prefix"); !r.Bool || r.Note != "why" || r.Source() != "metric x:cache_info{prefix}" {
		t.Errorf("metric rule %+v", r)
	}
	if got := FillAddress(s.Engine.Command, "127.0.0.1", 4000); !slices.Equal(got, []string{"myserver", "--listen", "127.0.0.1:4000"}) {
		t.Errorf("filled %q", got)
	}

	// A variable that carries the address; a spec rule replaces the preset's.
	s = mustParse(t, engineSpec("  preset: ollama\n  port: {env: OLLAMA_HOST, value: \"{host}:{port}\"}\n"+
		"  attest:\n    OLLAMA_KV_CACHE_TYPE: {log: \"type_v = '([^']+)'\"}\n  model: {name: tiny, random: {layers: 1, width: 128, seed: 4}, context: 8192}\n"))
	p = s.Preset()
	if p.Listen != (Listen{Env: "OLLAMA_HOST", EnvValue: "{host}:{port}"}) || p.Models != ModelsOllama {
		t.Errorf("ollama preset %+v", p)
	}
	if r, _ := p.Rule("OLLAMA_KV_CACHE_TYPE"); r.Log.String() != "type_v = '([^']+)'" {
		t.Errorf("the spec's rule did not replace the preset's: %v", r.Source())
	}
	if r, ok := p.Rule("OLLAMA_FLASH_ATTENTION"); !ok || !r.Bool {
		t.Errorf("the preset's other rules are lost: %+v", r)
	}
	m := s.Engine.Model
	if m == nil || m.Name != "tiny" || m.Context != 8192 || *m.Random != (RandomModel{Layers: 1, Width: 128, Context: 32768, Seed: 4}) {
		t.Errorf("model %+v", m)
	}
	if s.Workload.Model != "tiny" {
		t.Errorf("workload.model = %q, want the engine's model", s.Workload.Model)
	}
	if m := mustParse(t, engineSpec("  preset: ollama\n  model: {name: t, file: a.gguf, head_dim: 128}\n")).Engine.Model; m.HeadDim != 128 || !strings.HasSuffix(m.File, "a.gguf") {
		t.Errorf("a padded model file: %+v", m)
	}
	// A flag form, and the presets' defaults.
	if p := mustParse(t, engineSpec("  preset: custom\n  command: [srv]\n  port: {flag: --listen-port}\n")).Preset(); p.Listen != (Listen{Flag: "--listen-port"}) {
		t.Errorf("flag form %+v", p.Listen)
	}
	if p := PresetFor("ollama"); p.Listen.Env != "OLLAMA_HOST" || p.HealthPath != "/" || len(p.Attest) != 3 {
		t.Errorf("ollama preset %+v", p)
	}
}

func TestEngineDescriptionRejections(t *testing.T) {
	for _, tc := range []struct {
		name, engine, path, msg string
	}{
		{"port twice", "  preset: custom\n  command: [s, \"--port={port}\"]\n  port: {flag: --port}\n", "engine.port", "already writes {port}"},
		{"host without port", "  preset: custom\n  command: [s, \"--host={host}\"]\n", "engine.command", "but not {port}"},
		{"flag and env", "  preset: custom\n  command: [s]\n  port: {flag: --port, env: P, value: \"{port}\"}\n", "engine.port", "not both"},
		{"env without value", "  preset: custom\n  command: [s]\n  port: {env: P}\n", "engine.port.value", "missing required field"},
		{"value without port", "  preset: custom\n  command: [s]\n  port: {env: P, value: \"{host}\"}\n", "engine.port.value", "where the port goes"},
		{"not a flag", "  preset: custom\n  command: [s]\n  port: {flag: port}\n", "engine.port.flag", "not a flag"},
		{"no port at all", "  preset: custom\n  command: [s]\n  port: {}\n", "engine.port", "give flag"},
		{"endpoint not a path", "  preset: custom\n  command: [s]\n  endpoints: {health: health}\n", "engine.endpoints.health", "not a path"},
		{"no health", "  preset: custom\n  command: [s]\n  endpoints: {health: \"\"}\n", "engine.endpoints.health", "needs a health endpoint"},
		{"unknown endpoint", "  preset: custom\n  command: [s]\n  endpoints: {ready: /r}\n", "engine.endpoints.ready", "unknown field"},
		{"model on a preset without models", "  preset: vllm\n  model: {name: tiny, random: {}}\n", "engine.model", "loads the model its command names"},
		{"model file and random", "  preset: ollama\n  model: {name: tiny, file: a.gguf, random: {}}\n", "engine.model", "not both"},
		{"model without name", "  preset: ollama\n  model: {random: {}}\n", "engine.model.name", "missing required field"},
		{"model name with a space", "  preset: ollama\n  model: {name: \"a b\"}\n", "engine.model.name", "not a model name"},
		{"width not of 64", "  preset: ollama\n  model: {name: t, random: {width: 100}}\n", "engine.model.random.width", "multiple of 64"},
		{"odd head_dim", "  preset: ollama\n  model: {name: t, file: a.gguf, head_dim: 127}\n", "engine.model.head_dim", "even number"},
		{"head_dim too large", "  preset: ollama\n  model: {name: t, file: a.gguf, head_dim: 4096}\n", "engine.model.head_dim", "more than 1024"},
		{"head_dim of a random model", "  preset: ollama\n  model: {name: t, random: {}, head_dim: 128}\n", "engine.model", "pads a trained model's file"},
		{"attest with two sources", "  preset: custom\n  command: [s]\n  attest: {X: {log: \"(a)\", server_info: x}}\n", "engine.attest.X", "give one place"},
		{"attest without a group", "  preset: custom\n  command: [s]\n  attest: {X: {log: \"a\"}}\n", "engine.attest.X.log", "needs a group"},
		{"attest bad expression", "  preset: custom\n  command: [s]\n  attest: {X: {log: \"(a\"}}\n", "engine.attest.X.log", "not a regular expression"},
		{"attest label without metric", "  preset: custom\n  command: [s]\n  attest: {X: {label: l, server_info: x}}\n", "engine.attest.X.label", "belongs to a metric"},
		{"attest names no pin", "  preset: custom\n  command: [s]\n  attest: {\"a b\": {server_info: x}}\n", "engine.attest.a b", "names no pin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseErr(t, engineSpec(tc.engine))
			for _, e := range Errors(err) {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) {
					if e.Line < 1 {
						t.Errorf("no position: %v", e)
					}
					return
				}
			}
			t.Errorf("no error at %q containing %q in:\n%v", tc.path, tc.msg, err)
		})
	}
}
