package arms

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBisectExampleChanges(t *testing.T) {
	b, err := LoadBisect("../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range b.Changes {
		got = append(got, c.Label())
	}
	want := []string{
		"SGLANG_HEALTH_CHECK_TIMEOUT: unset → 30", "BF16_INDEX_K: 0 → 1", "--page-size: 1 → 16",
		"--chunked-prefill-size: 8192 → 4096", "--max-running-requests: absent → 128",
		"--enable-hierarchical-cache: absent → set", "--mem-fraction-static: absent → 0.85", "--enable-metrics: absent → set",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes\n%q\nwant\n%q", got, want)
	}
	if b.Search.ErrorBudget != 0.05 || b.Search.Effect != 0.10 || b.Search.Looks != 10 || b.Search.MaxLoss != DefaultMaxLoss ||
		b.Search.LaunchICC != DefaultLaunchICC {
		t.Fatalf("search %+v", b.Search)
	}
}

// A step's spec is an ordinary spec: two arms, good and good with the changes applied,
// the step's alpha and looks, and every shared field where the bisection spec wrote it.
func TestBisectStepSpec(t *testing.T) {
	b, err := LoadBisect("../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	step, err := b.StepSpec(StepOptions{Name: "tuesday-release-b1-s08", Applied: []int{5, 1}, Alpha: 0.05 / 9, Note: "confirm"})
	if err != nil {
		t.Fatal(err)
	}
	armList, err := step.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if len(armList) != 2 || armList[0].Name != "changes=good" || armList[1].Name != "changes=with-2.6" {
		t.Fatalf("arms %v", armList)
	}
	if got := strings.Join(armList[1].Command, " "); got != "refserve --tool-call-parser deepseekv4 --inter-token-delay 1ms --page-size 1 --chunked-prefill-size 8192 --enable-hierarchical-cache" {
		t.Errorf("applied arm runs %q", got)
	}
	if armList[1].Env["BF16_INDEX_K"] != "1" || armList[0].Env["BF16_INDEX_K"] != "0" || len(armList[1].Env) != 1 {
		t.Errorf("env good %v, applied %v", armList[0].Env, armList[1].Env)
	}
	if step.Name != "tuesday-release-b1-s08" || step.Analysis.Alpha != 0.05/9 || step.Analysis.Baseline != "changes=good" ||
		step.Analysis.Sequential.Looks != 10 || step.Blocks != 10 || step.Workload.Sessions != 40 {
		t.Errorf("step spec %+v", step)
	}
	// The shared fields keep their lines: workload is where the bisection spec has it.
	src, _ := os.ReadFile("../examples/bisect/tuesday-release.yaml")
	line := func(text, key string) int {
		for i, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, key) {
				return i + 1
			}
		}
		return 0
	}
	if a, b := line(string(src), "workload:"), line(string(step.Source), "workload:"); a == 0 || a != b {
		t.Errorf("workload at line %d of the bisection spec, %d of the step's", a, b)
	}
	// The same options give the same text: a resumed step finds its experiment's spec.
	again, _ := b.StepSpec(StepOptions{Name: "tuesday-release-b1-s08", Applied: []int{1, 5}, Alpha: 0.05 / 9, Note: "confirm"})
	if string(again.Source) != string(step.Source) {
		t.Error("step spec text is not deterministic")
	}
	if _, err := b.StepSpec(StepOptions{Name: "x", Applied: nil}); err == nil {
		t.Error("a step applying nothing was accepted")
	}
}

const bisectBase = `version: 1
name: b
engine: {preset: refserve, args: [--tool-call-parser, deepseekv4]}
good: {env: {BF16_INDEX_K: "0"}}
bad: {env: {BF16_INDEX_K: "1"}, args: [--enable-hierarchical-cache]}
workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}
search: {effect: 0.1}
`

func TestBisectSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"missing effect", strings.Replace(bisectBase, "search: {effect: 0.1}", "search: {looks: 2}", 1),
			[]string{"spec.yaml:7:1: search.effect: missing required field"}},
		{"arms are built", bisectBase + "arms: {a: {}}\n",
			[]string{"spec.yaml:8:1: arms: a bisection builds the arms of its steps from good and bad"}},
		{"typo", strings.Replace(bisectBase, "search:", "serach:", 1),
			[]string{"spec.yaml:7:1: serach: unknown field (did you mean search?)"}},
		{"repeated flag", strings.Replace(bisectBase, "args: [--enable-hierarchical-cache]", "args: [--page-size, \"1\", --page-size, \"2\"]", 1),
			[]string{"spec.yaml:5:58: bad.args: --page-size is given twice"}},
		{"value before a flag", strings.Replace(bisectBase, "args: [--enable-hierarchical-cache]", "args: [\"16\", --page-size, \"1\"]", 1),
			[]string{`bad.args: "16" comes before any flag`}},
		{"nothing differs", strings.Replace(bisectBase, `bad: {env: {BF16_INDEX_K: "1"}, args: [--enable-hierarchical-cache]}`, `bad: {env: {BF16_INDEX_K: "0"}}`, 1),
			[]string{"spec.yaml:5:1: bad: good and bad set the same env and flags: there is nothing to bisect"}},
		{"engine sets it", strings.Replace(bisectBase, "args: [--tool-call-parser, deepseekv4]}", "args: [--enable-hierarchical-cache], env: {BF16_INDEX_K: \"0\"}}", 1),
			[]string{"good.env.BF16_INDEX_K: BF16_INDEX_K is set in engine.env for every step", "bad.args: --enable-hierarchical-cache is set in engine.args for every step"}},
		{"budget range", strings.Replace(bisectBase, "{effect: 0.1}", "{effect: 0.1, error_budget: 0.7, looks: 0}", 1),
			[]string{"spec.yaml:7:37: search.error_budget: error_budget is the probability", "spec.yaml:7:49: search.looks: value must be at least 1"}},
		{"launch_icc range", strings.Replace(bisectBase, "{effect: 0.1}", "{effect: 0.1, launch_icc: 1.5}", 1),
			[]string{"spec.yaml:7:35: search.launch_icc: launch_icc is an intra-launch correlation"}},
		{"missing server info", strings.Replace(bisectBase, `good: {env: {BF16_INDEX_K: "0"}}`, `good: {server_info: nowhere.json}`, 1),
			[]string{"spec.yaml:4:21: good.server_info: cannot read the server info"}},
		{"server info and args", strings.Replace(bisectBase, `good: {env: {BF16_INDEX_K: "0"}}`, `good: {server_info: x.json, args: [--x]}`, 1),
			[]string{"good.args: the flags come from server_info"}},
		{"block style", "{version: 1, name: b}\n", []string{"write a bisection spec in block style"}},
		{"throughput is not corruption", strings.Replace(bisectBase, "workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}",
			"workload: {kind: throughput, sessions: 10, rounds: 2, concurrency: 4, seed: 1}", 1),
			[]string{"spec.yaml:6:1: workload.kind: a bisection judges corrupted sessions, which workload kind throughput does not measure"}},
		// Caught by the step's own checks, at the line the bisection spec wrote it on.
		{"divergence needs temperature 0", strings.Replace(bisectBase, "seed: 1}", "seed: 1, temperature: 0.7}", 1) + "detectors: [divergence]\n",
			[]string{"spec.yaml:8:13: detectors: divergence compares arms token for token at temperature 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseBisect("spec.yaml", []byte(tc.src))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not say\n%s", err, w)
				}
			}
		})
	}
}

func TestBisectServerInfoNeedsAKnownPreset(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "g.json"), []byte(`{"page_size": 1}`), 0o644)
	os.WriteFile(filepath.Join(dir, "b.json"), []byte(`{"page_size": 16}`), 0o644)
	src := strings.Replace(bisectBase, "preset: refserve", "preset: vllm", 1)
	src = strings.Replace(src, `good: {env: {BF16_INDEX_K: "0"}}`, `good: {server_info: g.json}`, 1)
	src = strings.Replace(src, `bad: {env: {BF16_INDEX_K: "1"}, args: [--enable-hierarchical-cache]}`, `bad: {server_info: b.json}`, 1)
	_, err := ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src))
	if err == nil || !strings.Contains(err.Error(), "the vllm preset serves no get_server_info") {
		t.Fatalf("%v", err)
	}
}

// Pins derived from two get_server_info files recorded from real refserve processes:
// good ran BF16_INDEX_K=0 refserve --tool-call-parser deepseekv4 --page-size 1; bad ran
// BF16_INDEX_K=1 SGLANG_HEALTH_CHECK_TIMEOUT=30 refserve --tool-call-parser deepseekv4
// --page-size 16 --chunked-prefill-size 4096 --max-running-requests 128
// --enable-hierarchical-cache --mem-fraction-static 0.85 --enable-metrics.
func TestBisectFromRecordedRefserveServerInfo(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"refserve-good.json", "refserve-bad.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "serverinfo", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	src := `version: 1
name: from-server-info
engine: {preset: refserve, args: [--tool-call-parser, deepseekv4]}
good: {server_info: refserve-good.json}
bad: {server_info: refserve-bad.json}
workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}
search: {effect: 0.1}
`
	b, err := ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range b.Changes {
		got = append(got, c.Label())
	}
	want := []string{
		"BF16_INDEX_K: 0 → 1", "SGLANG_HEALTH_CHECK_TIMEOUT: unset → 30",
		"--chunked-prefill-size: 8192 → 4096", "--enable-hierarchical-cache: absent → set", "--enable-metrics: absent → set",
		"--max-running-requests: 0 → 128", "--mem-fraction-static: 0.9 → 0.85", "--page-size: 1 → 16",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes from the server info\n%q\nwant\n%q", got, want)
	}
	// Good pins the settings it differs in at its own values; bad at bad's.
	good := b.render(nil)
	if good.Env["BF16_INDEX_K"] != "0" || strings.Join(good.Args, " ") != "--chunked-prefill-size 8192 --max-running-requests 0 --mem-fraction-static 0.9 --page-size 1" {
		t.Errorf("good pins %+v", good)
	}
	bad := b.render([]int{0, 1, 2, 3, 4, 5, 6, 7})
	if strings.Join(bad.Args, " ") != "--chunked-prefill-size 4096 --max-running-requests 128 --mem-fraction-static 0.85 --page-size 16 --enable-hierarchical-cache --enable-metrics" ||
		bad.Env["SGLANG_HEALTH_CHECK_TIMEOUT"] != "30" {
		t.Errorf("bad pins %+v", bad)
	}
	// An ignored key is no change.
	src2 := strings.Replace(src, "search: {effect: 0.1}", "search: {effect: 0.1, ignore: [mem_fraction_static, page_size]}", 1)
	b2, err := ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src2))
	if err != nil {
		t.Fatal(err)
	}
	if len(b2.Changes) != 6 {
		t.Errorf("%d changes with two keys ignored, want 6", len(b2.Changes))
	}
}

// SGLang's server info is its server arguments plus keys of its own; a list is a flag
// followed by its items, null and false are no flag, an object its JSON text.
func TestServerInfoSettingsSGLangShape(t *testing.T) {
	info := `{"model_path": "/models/ds", "tp_size": 8, "enable_hierarchical_cache": true, "disable_overlap_schedule": false,
		"cuda_graph_bs": [1, 2, 4], "lora_paths": null, "json_model_override_args": "{}", "hicache_ratio": 2.0,
		"host": "0.0.0.0", "port": 30000, "version": "0.5.4", "internal_states": [{"dp_rank": 0}],
		"max_total_num_tokens": 131072, "max_req_input_len": 4096, "speculative_config": {"steps": 3}}`
	got, err := ServerInfoSettings("sglang", []byte(info), nil)
	if err != nil {
		t.Fatal(err)
	}
	var flat []string
	for _, s := range got {
		flat = append(flat, strings.Join(s.Tokens, " "))
	}
	want := []string{"--cuda-graph-bs 1 2 4", "--enable-hierarchical-cache", "--hicache-ratio 2.0", "--json-model-override-args {}",
		"--model-path /models/ds", `--speculative-config {"steps":3}`, "--tp-size 8"}
	if !slices.Equal(flat, want) {
		t.Fatalf("settings\n%q\nwant\n%q", flat, want)
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"Bad-Key": 1}`, `{"a": [{"b": 1}]}`} {
		if _, err := ServerInfoSettings("sglang", []byte(bad), nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// Credentials in a configuration are never shown or stored in clear.
func TestBisectCredentialsAreHidden(t *testing.T) {
	src := strings.Replace(bisectBase, `good: {env: {BF16_INDEX_K: "0"}}`, `good: {env: {BF16_INDEX_K: "0", HF_TOKEN: "hf_goodSecretValue1"}}`, 1)
	src = strings.Replace(src, `bad: {env: {BF16_INDEX_K: "1"},`, `bad: {env: {BF16_INDEX_K: "1", HF_TOKEN: "hf_badSecretValue22"},`, 1)
	b, err := ParseBisect("spec.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b.Changes {
		if strings.Contains(c.Label(), "SecretValue") {
			t.Errorf("label %q shows a credential", c.Label())
		}
	}
	if red := string(b.RedactedSource()); strings.Contains(red, "SecretValue") {
		t.Errorf("stored source shows a credential:\n%s", red)
	}
	if r := b.Base.Redactor(nil).Redact("x hf_badSecretValue22 y"); strings.Contains(r, "SecretValue") {
		t.Errorf("redactor leaves %q", r)
	}
}

// FuzzParseBisect checks that no input makes ParseBisect panic, that every problem it
// reports names a position, and that every step of a spec it accepts is a valid spec.
func FuzzParseBisect(f *testing.F) {
	if data, err := os.ReadFile("../examples/bisect/tuesday-release.yaml"); err == nil {
		f.Add(data)
	}
	for _, seed := range []string{bisectBase, "", "good: {}\nbad: {}\n", bisectBase + "...\n", "---\n" + bisectBase,
		strings.Replace(bisectBase, "search:", "search: &s", 1) + "x: *s\n",
		strings.Replace(bisectBase, `args: [--enable-hierarchical-cache]`, `args: [--a=1, --b, "2", "3", --c]`, 1)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBisect("fuzz.yaml", data)
		if err != nil {
			for _, e := range Errors(err) {
				if e.Line < 1 || e.Col < 1 {
					t.Fatalf("problem without a position: %v", e)
				}
			}
			return
		}
		if len(b.Changes) == 0 {
			t.Fatal("accepted a spec without changes")
		}
		for i := range b.Changes {
			if _, err := b.StepSpec(StepOptions{Name: "fuzz-b1-s01", Applied: []int{i}, Alpha: 0.01}); err != nil {
				t.Fatalf("step applying change %d: %v\n%s", i+1, err, b.stepText(StepOptions{Name: "fuzz-b1-s01", Applied: []int{i}, Alpha: 0.01}))
			}
		}
	})
}

// FuzzServerInfoSettings checks that no server info makes the mapping panic, and that
// every setting it derives is a flag or env variable a command line can carry.
func FuzzServerInfoSettings(f *testing.F) {
	for _, name := range []string{"refserve-good.json", "refserve-bad.json"} {
		if data, err := os.ReadFile(filepath.Join("testdata", "serverinfo", name)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"a": [1, "x", true], "b": {"c": null}, "env": {"K": "v"}, "d": null, "e": false}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, preset := range []string{"refserve", "sglang"} {
			settings, err := ServerInfoSettings(preset, data, nil)
			if err != nil {
				continue
			}
			for _, s := range settings {
				switch s.Kind {
				case SettingFlag:
					if len(s.Tokens) == 0 || (s.Tokens[0] != s.Name && !strings.HasPrefix(s.Tokens[0], s.Name+"=")) || !IsFlagToken(s.Name) {
						t.Fatalf("flag %+v", s)
					}
					// Its tokens read back as the setting, by the engine's grammar.
					read, err := PresetFor(preset).Grammar.Parse(s.Tokens)
					if err == nil && (len(read) != 1 || read[0].Name != s.Name || read[0].Value != s.Value) {
						t.Fatalf("flag %+v reads back as %+v", s, read)
					}
				case SettingEnv:
					if !envNameRE.MatchString(s.Name) {
						t.Fatalf("env %+v", s)
					}
				default:
					t.Fatalf("setting %+v", s)
				}
			}
		}
	})
}

// A change read from server info is written on the steps' command lines as the engine
// reads it: a value that looks like a flag binds with =, and a flag that server info
// reports true, and that the preset does not know as one without a value, is refused
// until engine.bool_flags declares it (else a step's command line could be read two ways).
func TestBisectServerInfoFlagsReadOneWay(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "g.json"), []byte(`{"model_path": "--weird", "enable_foo_bar": false, "page_size": 1}`), 0o644)
	os.WriteFile(filepath.Join(dir, "b.json"), []byte(`{"model_path": "/models/x", "enable_foo_bar": true, "page_size": 16}`), 0o644)
	src := `version: 1
name: si
engine: {preset: sglang}
good: {server_info: g.json}
bad: {server_info: b.json}
workload: {kind: toolcall-agent, sessions: 10, rounds: 2, seed: 1}
search: {effect: 0.1}
`
	_, err := ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src))
	if err == nil || !strings.Contains(err.Error(), "spec.yaml:5:20: bad.server_info: b.json: enable_foo_bar is true, the flag --enable-foo-bar without a value, which the sglang preset does not know: list --enable-foo-bar in engine.bool_flags") {
		t.Fatalf("err = %v, want a refusal asking for engine.bool_flags", err)
	}
	src = strings.Replace(src, "engine: {preset: sglang}", "engine: {preset: sglang, bool_flags: [--enable-foo-bar]}", 1)
	b, err := ParseBisect(filepath.Join(dir, "spec.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(b.render(nil).Args, " "); got != "--model-path=--weird --page-size 1" {
		t.Errorf("good pins %q", got)
	}
	step, err := b.StepSpec(StepOptions{Name: "si-b1-s01", Applied: allChanges(len(b.Changes)), Alpha: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	armList, err := step.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(armList[1].Command, " "); got != "python3 -m sglang.launch_server --model-path /models/x --page-size 16 --enable-foo-bar" {
		t.Errorf("applied arm runs %q", got)
	}
}
