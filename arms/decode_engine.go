package arms

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The engine description's fields beyond a preset (engine.go): port, endpoints, model
// and attest.

// MaxModelLayers, MaxModelWidth and MaxModelContext bound a random model: it is a test
// model for engines on a CPU or one GPU, not a real one.
const (
	MaxModelLayers  = 64
	MaxModelWidth   = 4096
	MaxModelContext = 1 << 20
)

// modelNameRE is what an engine's model name may look like: ollama's names
// (namespace/name:tag) and served model names alike.
var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

func (d *decoder) decodePort(f entry) {
	var l Listen
	seen := d.fields(f.val, f.path, []string{"flag", "env", "value"}, func(g entry) {
		v, ok := d.str(g)
		if !ok {
			return
		}
		switch g.key {
		case "flag":
			if !IsFlagToken(v) || strings.Contains(v, "=") {
				d.add(g.val, g.path, "%q is not a flag: write the flag the engine takes its port with, e.g. --port", v)
			}
			l.Flag = v
		case "env":
			if !envNameRE.MatchString(v) {
				d.add(g.val, g.path, "%q is not a variable name", v)
			}
			l.Env = v
		case "value":
			if !strings.Contains(v, PortHolder) {
				d.add(g.val, g.path, "the value must write %s where the port goes, e.g. \"{host}:{port}\"", PortHolder)
			}
			l.EnvValue = v
		}
	})
	_, flag := seen["flag"]
	_, env := seen["env"]
	_, value := seen["value"]
	switch {
	case flag && (env || value):
		d.add(f.keyNode, f.path, "give the port either as a flag (flag) or in a variable (env and value), not both")
	case env && !value:
		d.add(f.keyNode, joinPath(f.path, "value"), "missing required field: the variable's value, with {host} and {port} where they go")
	case value && !env:
		d.add(f.keyNode, joinPath(f.path, "env"), "missing required field: the variable that carries the address")
	case !flag && !env:
		d.add(f.keyNode, f.path, "give flag (e.g. --port), or env and value (e.g. OLLAMA_HOST and \"{host}:{port}\")")
	}
	d.spec.Engine.Listen = &l
	d.spec.pos[f.path] = posOf(f.keyNode)
}

func (d *decoder) decodeEndpoints(f entry) {
	ep := &d.spec.Engine.Endpoints
	d.fields(f.val, f.path, []string{"health", "generate_health", "server_info", "metrics", "abort"}, func(g entry) {
		v, ok := d.str(g)
		if !ok {
			return
		}
		if v != "" && (!strings.HasPrefix(v, "/") || strings.ContainsAny(v, " \t\r\n?#")) {
			d.add(g.val, g.path, "%q is not a path: write it from the engine's root, e.g. /health, or \"\" for none", v)
			return
		}
		switch g.key {
		case "health":
			if v == "" {
				d.add(g.val, g.path, "arbiter needs a health endpoint to know when the engine is up")
				return
			}
			ep.Health = &v
		case "generate_health":
			ep.GenerateHealth = &v
		case "server_info":
			ep.ServerInfo = &v
		case "metrics":
			ep.Metrics = &v
		case "abort":
			ep.Abort = &v
		}
	})
}

func (d *decoder) decodeModel(f entry) {
	m := &ModelSpec{}
	seen := d.fields(f.val, f.path, []string{"name", "file", "random", "context", "template", "head_dim"}, func(g entry) {
		switch g.key {
		case "name":
			if v, ok := d.str(g); ok {
				if !modelNameRE.MatchString(v) {
					d.add(g.val, g.path, "%q is not a model name (letters, digits, ., _, :, / and -, at most 128)", v)
				}
				m.Name = v
			}
		case "file":
			if v, ok := d.str(g); ok {
				if v == "" {
					d.add(g.val, g.path, "give the GGUF file's path")
					return
				}
				if !filepath.IsAbs(v) && d.spec.Path != "" {
					v = filepath.Join(filepath.Dir(d.spec.Path), v)
				}
				m.File = v
			}
		case "random":
			m.Random = d.decodeRandomModel(g)
		case "context":
			if v, ok := d.bounded(g, 1, MaxModelContext, "tokens of context"); ok {
				m.Context = v
			}
		case "template":
			if v, ok := d.str(g); ok {
				m.Template = v
			}
		case "head_dim":
			if v, ok := d.bounded(g, 2, 1024, "dimensions a head"); ok {
				if v%2 != 0 {
					d.add(g.val, g.path, "a head's dimensions come in rotated pairs: give an even number, not %d", v)
				}
				m.HeadDim = v
			}
		}
	})
	d.require(seen, f.keyNode, f.path, "name")
	if _, file := seen["file"]; file && m.Random != nil {
		d.add(f.keyNode, f.path, "a model comes from a file or is random, not both")
	}
	if _, pad := seen["head_dim"]; pad && m.Random != nil {
		d.add(f.keyNode, f.path, "head_dim pads a trained model's file; a random model has heads of 64")
	}
	if p := PresetFor(d.spec.Engine.Preset); d.spec.Engine.Preset != "" && p.Models == "" {
		d.add(f.keyNode, f.path, "the %s preset loads the model its command names; engine.model is for presets whose engine keeps models that arbiter can create (ollama)", d.spec.Engine.Preset)
	}
	d.spec.Engine.Model = m
}

func (d *decoder) decodeRandomModel(f entry) *RandomModel {
	r := &RandomModel{Layers: 2, Width: 256, Context: 32768, Seed: 1}
	d.fields(f.val, f.path, []string{"layers", "width", "context", "seed"}, func(g entry) {
		switch g.key {
		case "layers":
			if v, ok := d.bounded(g, 1, MaxModelLayers, "layers"); ok {
				r.Layers = v
			}
		case "width":
			if v, ok := d.bounded(g, 64, MaxModelWidth, "the embedding width"); ok {
				if v%64 != 0 {
					d.add(g.val, g.path, "the width must be a multiple of 64 (heads of 64), not %d", v)
				}
				r.Width = v
			}
		case "context":
			if v, ok := d.bounded(g, 256, MaxModelContext, "tokens of context"); ok {
				r.Context = v
			}
		case "seed":
			if v, ok := d.integer(g, 0); ok {
				r.Seed = v
			}
		}
	})
	return r
}

func (d *decoder) decodeAttest(f entry) {
	entries, _ := d.mapping(f.val, f.path)
	for _, it := range entries {
		pin := it.key
		if !envNameRE.MatchString(pin) && (!IsFlagToken(pin) || strings.Contains(pin, "=")) {
			d.add(it.keyNode, it.path, "%q names no pin: write an env variable (OLLAMA_KV_CACHE_TYPE) or a flag as the engine reads it (--kv-cache-dtype)", pin)
			continue
		}
		r := AttestRule{Pin: pin}
		seen := d.fields(it.val, it.path, []string{"server_info", "log", "metric", "label", "bool", "note"}, func(g entry) {
			switch g.key {
			case "bool":
				if v, ok := d.boolean(g); ok {
					r.Bool = v
				}
				return
			}
			v, ok := d.str(g)
			if !ok {
				return
			}
			switch g.key {
			case "server_info":
				r.ServerInfo = v
			case "log":
				re, err := regexp.Compile(v)
				switch {
				case err != nil:
					d.add(g.val, g.path, "not a regular expression: %v", err)
				case re.NumSubexp() == 0:
					d.add(g.val, g.path, "the expression needs a group around the value, e.g. type_k = '([^']+)'")
				default:
					r.Log = re
				}
			case "metric":
				r.Metric = v
			case "label":
				r.Label = v
			case "note":
				r.Note = v
			}
		})
		sources := 0
		for _, k := range []string{"server_info", "log", "metric"} {
			if _, ok := seen[k]; ok {
				sources++
			}
		}
		if _, ok := seen["label"]; ok && r.Metric == "" {
			d.add(it.keyNode, joinPath(it.path, "label"), "a label belongs to a metric: give metric too")
		}
		if sources != 1 {
			d.add(it.keyNode, it.path, "give one place the engine reports %s: server_info (a key), log (an expression) or metric (a name, with label)", pin)
			continue
		}
		d.spec.pos[it.path] = posOf(it.keyNode)
		d.spec.Engine.Attest = append(d.spec.Engine.Attest, r)
	}
}

// checkEngineAddress checks that an engine takes its address one way only.
func (d *decoder) checkEngineAddress() {
	en := d.spec.Engine
	held := holdsAddress(en.Command) || holdsAddress(en.Args)
	if held && en.Listen != nil {
		d.addAt(d.spec.pos["engine.port"], "engine.port", "the command already writes %s; leave engine.port out", PortHolder)
	}
	if held && !strings.Contains(strings.Join(append(append([]string{}, en.Command...), en.Args...), " "), PortHolder) {
		d.addAt(d.spec.pos["engine.command"], "engine.command", "the command writes %s but not %s: the engine would not learn its port", HostHolder, PortHolder)
	}
	if en.Model != nil && d.spec.Workload.Model == "" {
		d.spec.Workload.Model = en.Model.Name
	}
}

// checkDivergenceFloor checks analysis.divergence_floor: an explicit arm other than the
// baseline, in an experiment whose divergence pass runs (temperature 0). That it repeats
// the baseline's pins is the confound check's (expand.go).
func (d *decoder) checkDivergenceFloor(hasFactors bool) {
	s := d.spec
	floor := s.Analysis.DivergenceFloor
	if floor == "" {
		return
	}
	at := s.pos["analysis.divergence_floor"]
	switch {
	case hasFactors:
		d.addAt(at, "analysis.divergence_floor", "the divergence floor is an explicit arm that repeats the baseline; factors have none")
	case s.Analysis.AA:
		d.addAt(at, "analysis.divergence_floor", "an A/A check compares identical arms already; the divergence floor is for an A/B that keeps one replicate of the baseline")
	case s.Workload.Temperature != 0:
		d.addAt(at, "analysis.divergence_floor", "divergence is measured at temperature 0 only, but workload.temperature is %g", s.Workload.Temperature)
	case !slices.ContainsFunc(s.Arms, func(a ArmSpec) bool { return a.Name == floor }):
		d.addAt(at, "analysis.divergence_floor", "%q names no arm", floor)
	case floor == s.baselineName():
		d.addAt(at, "analysis.divergence_floor", "the floor is measured against the baseline, so it cannot be the baseline: add an arm with the baseline's pins")
	case len(s.Arms) < 3:
		d.addAt(at, "analysis.divergence_floor", "a floor needs the baseline, its replicate and at least one arm to judge against them")
	}
}

// baselineName is the baseline arm's name: analysis.baseline, or the first arm.
func (s *Spec) baselineName() string {
	if s.Analysis.Baseline != "" || len(s.Arms) == 0 {
		return s.Analysis.Baseline
	}
	return s.Arms[0].Name
}
