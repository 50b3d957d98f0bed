package arms

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// specWith is a valid spec with its arms (or factors) section replaced by body.
func specWith(body string) string {
	return "version: 1\nname: t\nengine:\n  preset: refserve\nworkload: {sessions: 4, rounds: 2}\n" + body
}

const twoArms = "arms:\n  control:   {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}\n"

func mustParse(t *testing.T, src string) *Spec {
	t.Helper()
	s, err := Parse("spec.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\nspec:\n%s", err, src)
	}
	return s
}

func parseErr(t *testing.T, src string) error {
	t.Helper()
	s, err := Parse("spec.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse accepted:\n%s\nas %+v", src, s)
	}
	return err
}

func TestErrorText(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{{
		name: "env value must be a string",
		src: `version: 1
name: t
engine: {preset: refserve}
arms:
  control: {env: {BF16_INDEX_K: "0"}}
  treatment:
    env:
      BF16_INDEX_K: 1
workload: {sessions: 4, rounds: 2}
`,
		want: `spec.yaml:8:21: arms.treatment.env.BF16_INDEX_K: value must be a string (write "1")`,
	}, {
		name: "bool env value",
		src:  specWith("arms:\n  a: {env: {X: \"0\"}}\n  b: {env: {X: true}}\n"),
		want: `spec.yaml:8:16: arms.b.env.X: value must be a string (write "true")`,
	}, {
		name: "unknown field with a suggestion",
		src:  strings.Replace(specWith(twoArms), "rounds: 2", "rounds: 2, concurency: 3", 1),
		want: `spec.yaml:5:36: workload.concurency: unknown field (did you mean concurrency?)`,
	}, {
		name: "extra variable in one arm",
		src:  specWith("arms:\n  control:   {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\", HICACHE: \"1\"}}\n"),
		want: `spec.yaml:8:3: arms.treatment: arm treatment pins HICACHE but arm control does not, so more than the declared pins would vary; pin HICACHE in every arm, or vary it as a factor`,
	}, {
		name: "bad duration",
		src:  specWith(twoArms + "timeouts: {startup: 30 min}\n"),
		want: `spec.yaml:9:21: timeouts.startup: bad duration "30 min": write a positive duration such as 30m or 120s`,
	}, {
		name: "missing top-level field",
		src:  strings.Replace(specWith(twoArms), "name: t\n", "", 1),
		want: `spec.yaml:1:1: name: missing required field`,
	}, {
		name: "empty file",
		src:  "# nothing yet\n",
		want: `spec.yaml:1:1: spec is empty: start with "version: 1"`,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := parseErr(t, c.src)
			if err.Error() != c.want {
				t.Errorf("error\n  %s\nwant\n  %s", err, c.want)
			}
		})
	}
}

func TestSyntaxErrorHasPosition(t *testing.T) {
	err := parseErr(t, "version: 1\nname: [unclosed\nengine: {preset: refserve}\n")
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Line < 2 || errs[0].Col < 1 || !strings.Contains(errs[0].Msg, "YAML syntax") {
		t.Fatalf("got %v", err)
	}
}

func TestAllProblemsSortedByPosition(t *testing.T) {
	src := `version: 1
name: t
engine: {preset: nope}
arms:
  control: {env: {BF16_INDEX_K: 0}}
  "bad name": {}
workload: {sessions: 0, rounds: 2}
detectors: [garble]
analysis: {alpha: 2}
`
	errs := Errors(parseErr(t, src))
	var paths []string
	for i, e := range errs {
		paths = append(paths, e.Path)
		if i > 0 && (e.Line < errs[i-1].Line || e.Line == errs[i-1].Line && e.Col < errs[i-1].Col) {
			t.Errorf("%v before %v", errs[i-1], e)
		}
	}
	want := []string{"engine.preset", "arms.control.env.BF16_INDEX_K", "arms.bad name", "workload.sessions", "detectors.0", "analysis.alpha"}
	if !slices.Equal(paths, want) {
		t.Errorf("paths %q, want %q", paths, want)
	}
}

func TestDefaults(t *testing.T) {
	s := mustParse(t, specWith(twoArms))
	if s.Version != 1 || s.Runtime.Kind != "process" || s.Design != "explicit" || s.Blocks != 1 {
		t.Errorf("runtime %q design %q blocks %d", s.Runtime.Kind, s.Design, s.Blocks)
	}
	if s.Analysis.Alpha != 0.05 || s.Analysis.Unit != "session" || s.Analysis.Baseline != "control" {
		t.Errorf("analysis %+v", s.Analysis)
	}
	if s.Timeouts != (Timeouts{Startup: 30 * time.Minute, Request: 10 * time.Minute, Stall: 120 * time.Second, Detector: 60 * time.Second}) {
		t.Errorf("timeouts %+v", s.Timeouts)
	}
	if s.Workload.Kind != "toolcall-agent" || s.Workload.Concurrency != 4 {
		t.Errorf("workload %+v", s.Workload)
	}
	if !slices.Equal(s.Detectors, []string{"dsml-leak", "toolcall-schema"}) {
		t.Errorf("detectors %q", s.Detectors)
	}
	if !slices.Equal(s.Engine.Command, []string{"refserve"}) {
		t.Errorf("command %q", s.Engine.Command)
	}
	if s.Analysis.MaxLoss != DefaultMaxLoss {
		t.Errorf("max_loss %g, want the default %g", s.Analysis.MaxLoss, DefaultMaxLoss)
	}
	// 0 is a setting of its own (any lost session makes the decision inconclusive), not
	// "use the default".
	if z := mustParse(t, specWith(twoArms+"analysis: {max_loss: 0}\n")); z.Analysis.MaxLoss != 0 {
		t.Errorf("max_loss: 0 read as %g", z.Analysis.MaxLoss)
	}
	if q := mustParse(t, specWith(twoArms+"analysis: {max_loss: 0.25}\n")); q.Analysis.MaxLoss != 0.25 {
		t.Errorf("max_loss: 0.25 read as %g", q.Analysis.MaxLoss)
	}
	f := mustParse(t, specWith("factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\n"))
	if f.Design != "full-factorial" || f.Analysis.Baseline != "k=0" {
		t.Errorf("factor spec design %q baseline %q", f.Design, f.Analysis.Baseline)
	}
}

func TestCrossArmAndFinishDetectorsAreKnown(t *testing.T) {
	s := mustParse(t, specWith(twoArms+"detectors: [dsml-leak, finish-anomaly, divergence]\n"))
	if strings.Join(s.Detectors, ",") != "dsml-leak,finish-anomaly,divergence" {
		t.Errorf("detectors = %v", s.Detectors)
	}
}

func TestRejections(t *testing.T) {
	cases := []struct {
		name, src, path, msg string
	}{
		{"both arms and factors", specWith(twoArms + "factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\n"), "factors", "either arms or factors"},
		{"neither arms nor factors", specWith(""), "arms", "missing"},
		{"one arm", specWith("arms:\n  only: {}\n"), "arms", "at least two arms"},
		{"arm name starts with digit", specWith("arms:\n  1a: {}\n  b: {env: {X: \"1\"}}\n"), "arms.1a", "identifier"},
		{"factor with one level", specWith("factors:\n  k: {env: K, levels: [\"0\"]}\n"), "factors.k.levels", "two levels"},
		{"level name with a slash", specWith("factors:\n  k:\n    a/b: {}\n    c: {args: [--c]}\n"), "factors.k.a/b", "level name"},
		{"shorthand level with a space", specWith("factors:\n  k: {env: K, levels: [\"a b\", c]}\n"), "factors.k.levels.0", "cannot name an arm"},
		{"explicit design with factors", specWith("factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\ndesign: explicit\n"), "design", "needs arms"},
		{"factorial design with arms", specWith(twoArms + "design: one-at-a-time\n"), "design", "explicit arms"},
		{"plugin detector accepted, bad plugin name refused", specWith(twoArms + "detectors: [\"plugin:ok\", \"plugin:\"]\n"), "detectors.1", "unknown detector"},
		{"duplicate detector", specWith(twoArms + "detectors: [repetition, repetition]\n"), "detectors.1", "twice"},
		{"empty detectors", specWith(twoArms + "detectors: []\n"), "detectors", "at least one detector"},
		{"alpha zero", specWith(twoArms + "analysis: {alpha: 0}\n"), "analysis.alpha", "between 0 and 1"},
		{"max_loss of one", specWith(twoArms + "analysis: {max_loss: 1}\n"), "analysis.max_loss", "below 1"},
		{"max_loss negative", specWith(twoArms + "analysis: {max_loss: -0.1}\n"), "analysis.max_loss", "0 or more"},
		{"max_loss as percent text", specWith(twoArms + "analysis: {max_loss: \"10%\"}\n"), "analysis.max_loss", "must be a number"},
		{"alpha as string", specWith(twoArms + "analysis: {alpha: \"0.05\"}\n"), "analysis.alpha", "must be a number"},
		{"baseline names no arm", specWith(twoArms + "analysis: {baseline: treatmnt}\n"), "analysis.baseline", "did you mean treatment?"},
		{"factor baseline names no arm", specWith("factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\nanalysis: {baseline: control}\n"), "analysis.baseline", "names no arm"},
		{"env name invalid", specWith("arms:\n  a: {env: {\"1X\": \"0\"}}\n  b: {env: {\"1X\": \"1\"}}\n"), "arms.a.env.1X", "not a variable name"},
		{"env null value", specWith("arms:\n  a: {env: {X: }}\n  b: {env: {X: \"1\"}}\n"), "arms.a.env.X", "must be a string"},
		{"arg as number", strings.Replace(specWith(twoArms), "preset: refserve", "preset: refserve\n  args: [--tp, 8]", 1), "engine.args.1", `write "8"`},
		{"duration as number", specWith(twoArms + "timeouts: {stall: 120}\n"), "timeouts.stall", "duration such as"},
		{"negative duration", specWith(twoArms + "timeouts: {stall: -5s}\n"), "timeouts.stall", "positive duration"},
		{"negative detector timeout", specWith(twoArms + "timeouts: {detector: -1s}\n"), "timeouts.detector", "positive duration"},
		{"version 2", strings.Replace(specWith(twoArms), "version: 1", "version: 2", 1), "version", "version 1"},
		{"version string", strings.Replace(specWith(twoArms), "version: 1", "version: \"1\"", 1), "version", "must be 1"},
		{"custom without command", strings.Replace(specWith(twoArms), "refserve", "custom", 1), "engine.command", "needs a command"},
		{"secret also in env", strings.Replace(specWith(twoArms), "preset: refserve", "preset: refserve\n  env: {HF_TOKEN: \"abcd\"}\n  secrets: [HF_TOKEN]", 1), "engine.env.HF_TOKEN", "both a secret"},
		{"bad gpu list", specWith(twoArms + "runtime: {kind: process, nodes: [{name: a, gpus: \"0-\"}]}\n"), "runtime.nodes.0.gpus", "range"},
		{"slots of 2 GPUs on 3", strings.Replace(specWith(twoArms+"runtime:\n  nodes:\n    - {name: a, gpus: \"0-2\", slots: 2}\n"), "preset: refserve", "preset: refserve\n  gpus: 2", 1), "runtime.nodes.0.slots", "need 4 GPUs"},
		{"more GPUs per arm than the node has", strings.Replace(specWith(twoArms+"runtime:\n  nodes:\n    - {name: a, gpus: \"0\"}\n"), "preset: refserve", "preset: refserve\n  gpus: 2", 1), "runtime.nodes.0.gpus", "the node has 1"},
		{"slots without a GPU list", strings.Replace(specWith(twoArms+"runtime:\n  nodes:\n    - {name: a, slots: 2}\n"), "preset: refserve", "preset: refserve\n  gpus: 1", 1), "runtime.nodes.0.slots", "need the node's gpus listed"},
		{"zero slots", specWith(twoArms + "runtime:\n  nodes:\n    - {name: a, slots: 0}\n"), "runtime.nodes.0.slots", "at least 1"},
		{"shared GPU", specWith(twoArms + "runtime:\n  nodes:\n    - {name: a, gpus: \"0-1\"}\n    - {name: b, gpus: \"1\"}\n"), "runtime.nodes.1.gpus", "GPU 1 of node b is also node a's"},
		{"process node elsewhere", specWith(twoArms + "runtime:\n  nodes:\n    - {name: a, host: \"tcp://10.0.0.2:2375\"}\n"), "runtime.nodes.0.host", "process runtime runs engines on this machine"},
		{"two documents", specWith(twoArms) + "---\nversion: 1\n", "", "one YAML document"},
		{"merge key", specWith(twoArms + "analysis:\n  <<: {unit: session}\n"), "analysis", "merge keys"},
		{"top level list", "- version: 1\n", "", "must be a mapping"},
		{"aa with factors", specWith("factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\nanalysis: {aa: true}\n"), "analysis.aa", "explicit arms"},
		{"temperature negative", strings.Replace(specWith(twoArms), "rounds: 2", "rounds: 2, temperature: -1", 1), "workload.temperature", "0 or more"},
		{"divergence above temperature 0", strings.Replace(specWith(twoArms+"detectors: [dsml-leak, divergence]\n"), "rounds: 2", "rounds: 2, temperature: 0.7", 1), "detectors", "divergence compares arms token for token at temperature 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := parseErr(t, c.src)
			for _, e := range Errors(err) {
				if e.Path == c.path && strings.Contains(e.Msg, c.msg) {
					if e.Line < 1 || e.Col < 1 {
						t.Errorf("no position: %v", e)
					}
					return
				}
			}
			t.Errorf("no error at %q containing %q in:\n%v", c.path, c.msg, err)
		})
	}
}

func TestFactorForms(t *testing.T) {
	s := mustParse(t, specWith(`factors:
  bf16_index_k: {env: BF16_INDEX_K, levels: ["1", "0"]}
  hicache:
    on: {args: [--enable-hierarchical-cache, --hicache-ratio, "2"]}
    off:
  env:
    a: {env: {OTHER: "a"}}
    b: {env: {OTHER: "b"}}
`))
	if len(s.Factors) != 3 {
		t.Fatalf("factors %+v", s.Factors)
	}
	k := s.Factors[0]
	if k.Name != "bf16_index_k" || k.Levels[0].Name != "1" || k.Levels[1].Name != "0" {
		t.Errorf("shorthand factor %+v", k)
	}
	if k.Levels[0].Pins.Env["BF16_INDEX_K"] != "1" || len(k.Levels[0].Pins.Args) != 0 {
		t.Errorf("shorthand pins %+v", k.Levels[0].Pins)
	}
	h := s.Factors[1]
	if h.Levels[0].Name != "on" || h.Levels[1].Name != "off" || len(h.Levels[1].Pins.Args) != 0 {
		t.Errorf("mapping factor keeps file order, null level is empty: %+v", h)
	}
	// A factor named env whose values are mappings is the mapping form, not the shorthand.
	if e := s.Factors[2]; e.Name != "env" || e.Levels[1].Pins.Env["OTHER"] != "b" {
		t.Errorf("factor named env: %+v", e)
	}
	if s.Analysis.Baseline != "bf16_index_k=1,hicache=on,env=a" {
		t.Errorf("baseline %q", s.Analysis.Baseline)
	}
}

func TestAliasesAndTags(t *testing.T) {
	s := mustParse(t, `version: 1
name: t
engine:
  preset: refserve
  args: &shared [--tool-call-parser, deepseekv4]
arms:
  control:   {env: {BF16_INDEX_K: !!str 0}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {sessions: &n 4, rounds: *n}
`)
	if s.Workload.Rounds != 4 || s.Arms[0].Pins.Env["BF16_INDEX_K"] != "0" {
		t.Errorf("rounds %d control %v", s.Workload.Rounds, s.Arms[0].Pins.Env)
	}
}

func TestDuplicateKeysAllReported(t *testing.T) {
	err := parseErr(t, specWith(twoArms+"blocks: 2\nblocks: 3\nblocks: 4\n"))
	if n := len(Errors(err)); n != 2 {
		t.Errorf("want 2 duplicate-key errors, got %d: %v", n, err)
	}
}

func TestSpecErrorFormat(t *testing.T) {
	e := &SpecError{File: "spec.yaml", Line: 14, Col: 3, Path: "arms.treatment.env.BF16_INDEX_K", Msg: "value must be a string"}
	if got := e.Error(); got != "spec.yaml:14:3: arms.treatment.env.BF16_INDEX_K: value must be a string" {
		t.Errorf("got %q", got)
	}
	e = &SpecError{File: "spec.yaml", Path: "arms.x", Msg: "m", Err: ErrConfounded}
	if got := e.Error(); got != "spec.yaml: arms.x: m" || !errors.Is(e, ErrConfounded) {
		t.Errorf("got %q", got)
	}
}

func TestPresetFor(t *testing.T) {
	sg := PresetFor("sglang")
	if !slices.Equal(sg.Command, []string{"python3", "-m", "sglang.launch_server"}) || sg.Listen.Flag != "--port" ||
		sg.HealthPath != "/health" || sg.GenerateHealthPath != "/health_generate" || sg.ServerInfoPath != "/server_info" || sg.ServerInfoFallback != "/get_server_info" || sg.AbortPath != "/abort_request" {
		t.Errorf("sglang %+v", sg)
	}
	v := PresetFor("vllm")
	if !slices.Equal(v.Command, []string{"vllm", "serve"}) || v.GenerateHealthPath != "" || v.ServerInfoPath != "/version" || v.AbortPath != "" || v.HealthPath != "/health" {
		t.Errorf("vllm %+v", v)
	}
	r := PresetFor("refserve")
	if !slices.Equal(r.Command, []string{"refserve"}) || r.GenerateHealthPath != "/health_generate" {
		t.Errorf("refserve %+v", r)
	}
	if c := PresetFor("custom"); c.Command != nil || c.Listen.Flag != "--port" {
		t.Errorf("custom %+v", c)
	}
	// The returned command is a copy: changing it must not change the preset.
	r.Command[0] = "changed"
	if PresetFor("refserve").Command[0] != "refserve" {
		t.Error("PresetFor shares its command slice")
	}
}

func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("../testdata/specs/valid-docker.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Parse("spec.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDetectorTimeout(t *testing.T) {
	s, err := Parse("spec.yaml", []byte(specWith(twoArms+"timeouts: {detector: 5s}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Timeouts.Detector != 5*time.Second {
		t.Errorf("timeouts.detector = %v, want 5s", s.Timeouts.Detector)
	}
}
