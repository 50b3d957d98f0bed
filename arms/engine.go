package arms

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// An engine outside the presets is described in the spec: how it takes its listening
// address (engine.port, or {host} and {port} in its command), where it answers
// (engine.endpoints), the model a preset that manages models prepares (engine.model),
// and where it reports the settings arbiter attests (engine.attest). Spec.Preset merges
// them over the named preset.

// Listen says how a runtime tells the engine where to listen. Exactly one of the three
// forms applies: a flag followed by the port (--port 30000), a variable whose value
// names the address (OLLAMA_HOST=127.0.0.1:30000), or {host} and {port} written in the
// command itself.
type Listen struct {
	// Flag is followed by the port, e.g. --port; the runtime adds it with the host flag
	// where it needs one (in a container, 0.0.0.0).
	Flag string
	// Env is the variable that carries the address, EnvValue its value with {host} and
	// {port} to fill in, e.g. "{host}:{port}".
	Env, EnvValue string
	// Placeholder says that the command's words hold {host} and {port} themselves.
	Placeholder bool
}

// HostHolder and PortHolder, written in an engine's command, are replaced by the
// address the runtime picked for the launch.
const (
	HostHolder = "{host}"
	PortHolder = "{port}"
)

// FillAddress fills {host} and {port} in words.
func FillAddress(words []string, host string, port int) []string {
	out := make([]string, len(words))
	r := strings.NewReplacer(HostHolder, host, PortHolder, fmt.Sprint(port))
	for i, w := range words {
		out[i] = r.Replace(w)
	}
	return out
}

// holdsAddress reports whether a command line writes {host} or {port}.
func holdsAddress(words []string) bool {
	return slices.ContainsFunc(words, func(w string) bool {
		return strings.Contains(w, PortHolder) || strings.Contains(w, HostHolder)
	})
}

// Endpoints are where an engine answers, as paths under its base URL; a field the spec
// leaves out keeps the preset's, and "" says the engine has no such endpoint.
type Endpoints struct {
	Health, GenerateHealth, ServerInfo, Metrics, Abort *string
}

// ModelSpec is the model a preset that manages models (ollama) prepares in every launch
// before its readiness generation: created from a GGUF file, or from a small model of
// random weights that arbiter writes itself, and loaded. With neither, the engine is
// expected to have it already.
type ModelSpec struct {
	// Name is the model's name at the engine; the workload asks for it unless
	// workload.model names another.
	Name string
	// File is a GGUF file (a relative path is read from the spec's folder).
	File string
	// Random, when set, describes the random-weight model arbiter writes instead.
	Random *RandomModel
	// Context is the engine's context window for the model (ollama's num_ctx); 0 keeps
	// the engine's default.
	Context int
	// Template is the chat template the engine renders messages with (ollama's Go
	// template); empty for DefaultChatTemplate.
	Template string
	// HeadDim, when set, serves File with its attention heads padded to this many
	// dimensions: the same model (gguf.Trained's HeadDim), for kernels that exist only for
	// some head sizes; 0 serves the file as it is.
	HeadDim int
}

// Describe is the model in a line, as validate shows it: "toolcall from
// models/toolcall.gguf, heads padded to 128, context 4096".
func (m *ModelSpec) Describe() string {
	if m == nil {
		return ""
	}
	parts := []string{m.Name}
	switch {
	case m.File != "":
		parts[0] += " from " + m.File
	case m.Random != nil:
		parts[0] += fmt.Sprintf(" of random weights (%d layers, width %d, seed %d)", m.Random.Layers, m.Random.Width, m.Random.Seed)
	default:
		parts[0] += ", kept by the engine"
	}
	if m.HeadDim > 0 {
		parts = append(parts, fmt.Sprintf("heads padded to %d", m.HeadDim))
	}
	if m.Context > 0 {
		parts = append(parts, fmt.Sprintf("context %d", m.Context))
	}
	return strings.Join(parts, ", ")
}

// RandomModel is a llama-architecture model of random weights: the same fields and seed
// give the same file, so every launch of every arm serves the same model.
type RandomModel struct {
	Layers, Width, Context int
	Seed                   int64
}

// DefaultChatTemplate is the chat template a prepared model gets when the spec gives
// none: the tools' names when a request has tools (ollama refuses tools to a model
// whose template has no place for them), each message as <|role|>content on its own
// line, then <|assistant|>.
const DefaultChatTemplate = "{{- if .Tools }}<|tools|>{{ range .Tools }}{{ .Function.Name }} {{ end }}\n{{ end }}" +
	"{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}\n{{ end }}<|assistant|>"

// AttestRule says where an engine reports a setting, so that arbiter can read back
// whether a pin took effect. Exactly one source is set.
type AttestRule struct {
	// Pin is the setting: an env variable (OLLAMA_KV_CACHE_TYPE) or a flag as the
	// engine reads it (--kv-cache-dtype).
	Pin string
	// ServerInfo is a key of the engine's server info; a dotted key reads into nested
	// objects (env.BF16_INDEX_K).
	ServerInfo string
	// Log is matched against the engine's log: the value is the last match's group
	// named value, or its first group.
	Log *regexp.Regexp
	// Metric is a metric of the engine's /metrics: the value is its Label's value on
	// its first series, or the sample's value when Label is empty.
	Metric, Label string
	// Bool compares the pinned and the reported value as on or off (1, true, yes, on
	// against 0, false, no, off) instead of as text or numbers.
	Bool bool
	// Note says why an engine may not hold the pin; the verdict quotes it when one did not.
	Note string
}

// Source names where the rule reads, for messages and the store: "server_info KEY",
// "log /RE/" or "metric NAME{LABEL}".
func (r AttestRule) Source() string {
	switch {
	case r.ServerInfo != "":
		return "server_info " + r.ServerInfo
	case r.Log != nil:
		return "log /" + r.Log.String() + "/"
	case r.Label != "":
		return "metric " + r.Metric + "{" + r.Label + "}"
	case r.Metric != "":
		return "metric " + r.Metric
	}
	return "nowhere"
}

// Preset is the spec's engine preset with what the spec declares about the engine laid
// over it: its listening form, endpoints and attestation rules (the spec's rule for a
// pin replaces the preset's).
func (s *Spec) Preset() Preset {
	p := PresetFor(s.Engine.Preset)
	en := s.Engine
	switch {
	case holdsAddress(en.Command) || holdsAddress(en.Args):
		p.Listen = Listen{Placeholder: true}
	case en.Listen != nil:
		p.Listen = *en.Listen
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.HealthPath, en.Endpoints.Health)
	set(&p.GenerateHealthPath, en.Endpoints.GenerateHealth)
	set(&p.MetricsPath, en.Endpoints.Metrics)
	set(&p.AbortPath, en.Endpoints.Abort)
	if en.Endpoints.ServerInfo != nil {
		p.ServerInfoPath, p.ServerInfoFallback = *en.Endpoints.ServerInfo, ""
	}
	for _, r := range en.Attest {
		p.Attest = slices.DeleteFunc(p.Attest, func(o AttestRule) bool { return o.Pin == r.Pin })
		p.Attest = append(p.Attest, r)
	}
	return p
}

// Rule is the preset's attestation rule for pin, if it has one.
func (p Preset) Rule(pin string) (AttestRule, bool) {
	i := slices.IndexFunc(p.Attest, func(r AttestRule) bool { return r.Pin == pin })
	if i < 0 {
		return AttestRule{}, false
	}
	return p.Attest[i], true
}
