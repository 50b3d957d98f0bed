package arms

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func armNames(arms []Arm) []string {
	var out []string
	for _, a := range arms {
		out = append(out, a.Name)
	}
	return out
}

func TestExpandExplicit(t *testing.T) {
	s := mustParse(t, `version: 1
name: t
engine:
  preset: sglang
  args: [--model-path, /m]
  env: {SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: "1"}
  secrets: [HF_TOKEN]
arms:
  treatment: {env: {BF16_INDEX_K: "1"}, args: [--page-size, "64"]}
  control:   {env: {BF16_INDEX_K: "0"}, args: [--page-size, "64"]}
workload: {sessions: 4, rounds: 2}
`)
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if got := armNames(arms); !slices.Equal(got, []string{"treatment", "control"}) {
		t.Fatalf("arms keep file order: %q", got)
	}
	tr := arms[0]
	wantCmd := []string{"python3", "-m", "sglang.launch_server", "--model-path", "/m", "--page-size", "64"}
	if !slices.Equal(tr.Command, wantCmd) {
		t.Errorf("command %q, want %q", tr.Command, wantCmd)
	}
	if tr.Env["BF16_INDEX_K"] != "1" || tr.Env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] != "1" || len(tr.Env) != 2 {
		t.Errorf("env %v", tr.Env)
	}
	if tr.Levels != nil || !slices.Equal(tr.Secrets, []string{"HF_TOKEN"}) || tr.Pins.Env["BF16_INDEX_K"] != "1" {
		t.Errorf("arm %+v", tr)
	}
	// Rendering must not alias the spec: changing an arm leaves the spec and the next
	// expansion alone.
	tr.Env["BF16_INDEX_K"] = "x"
	tr.Command[0] = "x"
	tr.Pins.Args[0] = "x"
	again, _ := s.Expand()
	if again[0].Env["BF16_INDEX_K"] != "1" || again[0].Command[0] != "python3" || again[0].Pins.Args[0] != "--page-size" {
		t.Errorf("Expand shares state with its result: %+v", again[0])
	}
}

const twoFactors = `factors:
  bf16_index_k: {env: BF16_INDEX_K, levels: ["0", "1"]}
  hicache:
    off: {}
    on:  {args: [--enable-hierarchical-cache]}
    big: {args: [--enable-hierarchical-cache, --hicache-ratio, "4"]}
`

func TestExpandFullFactorial(t *testing.T) {
	s := mustParse(t, specWith(twoFactors))
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bf16_index_k=0,hicache=off", "bf16_index_k=0,hicache=on", "bf16_index_k=0,hicache=big",
		"bf16_index_k=1,hicache=off", "bf16_index_k=1,hicache=on", "bf16_index_k=1,hicache=big",
	}
	if got := armNames(arms); !slices.Equal(got, want) {
		t.Fatalf("arms %q, want %q", got, want)
	}
	last := arms[5]
	if last.Levels["bf16_index_k"] != "1" || last.Levels["hicache"] != "big" || len(last.Levels) != 2 {
		t.Errorf("levels %v", last.Levels)
	}
	if !slices.Equal(last.Command, []string{"refserve", "--enable-hierarchical-cache", "--hicache-ratio", "4"}) || last.Env["BF16_INDEX_K"] != "1" {
		t.Errorf("rendered %q %v", last.Command, last.Env)
	}
	for _, a := range arms {
		if strings.ContainsAny(a.Name, " /\\'\"") {
			t.Errorf("arm name %q is not filename-safe", a.Name)
		}
	}
}

func TestExpandOneAtATime(t *testing.T) {
	s := mustParse(t, specWith(twoFactors+"design: one-at-a-time\n"))
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bf16_index_k=0,hicache=off",
		"bf16_index_k=1,hicache=off",
		"bf16_index_k=0,hicache=on",
		"bf16_index_k=0,hicache=big",
	}
	if got := armNames(arms); !slices.Equal(got, want) {
		t.Fatalf("arms %q, want %q", got, want)
	}
	if s.Analysis.Baseline != want[0] {
		t.Errorf("baseline %q", s.Analysis.Baseline)
	}
}

func TestExpandHandBuiltSpec(t *testing.T) {
	s := &Spec{
		Engine: Engine{Preset: "vllm"},
		Arms: []ArmSpec{
			{Name: "a", Pins: Pins{Env: map[string]string{"X": "0"}}},
			{Name: "b", Pins: Pins{Env: map[string]string{"X": "1"}}},
		},
	}
	arms, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(arms[1].Command, []string{"vllm", "serve"}) {
		t.Errorf("preset command not used: %q", arms[1].Command)
	}
	if _, err := (&Spec{Engine: Engine{Preset: "vllm"}}).Expand(); err == nil || !strings.Contains(err.Error(), "no arms") {
		t.Errorf("a spec without arms: %v", err)
	}
	s.Arms[1].Pins.Env["X"] = "0"
	_, err = s.Expand()
	if !errors.Is(err, ErrConfounded) {
		t.Errorf("identical hand-built arms: %v", err)
	}
}

func TestConfoundCheck(t *testing.T) {
	cases := []struct {
		name, body string
		engine     string // extra engine lines
		path, msg  string // empty path: must pass
	}{
		{name: "one env var varied", body: twoArms},
		{name: "flag toggled alone", body: "arms:\n  off: {}\n  on: {args: [--enable-hierarchical-cache]}\n"},
		{name: "same pins, values differ in two vars", body: "arms:\n  a: {env: {X: \"0\", Y: \"0\"}}\n  b: {env: {X: \"1\", Y: \"1\"}}\n"},
		{name: "engine flag repeated with the same value", engine: "  args: [--page-size, \"64\"]\n",
			body: "arms:\n  a: {env: {X: \"0\"}, args: [--page-size, \"64\"]}\n  b: {env: {X: \"1\"}, args: [--page-size, \"64\"]}\n"},
		{name: "extra env var", body: "arms:\n  control: {env: {K: \"0\"}}\n  treatment: {env: {K: \"1\", HICACHE: \"1\"}}\n",
			path: "arms.treatment", msg: "pins HICACHE but arm control does not"},
		{name: "env var in one arm only", body: "arms:\n  control: {}\n  treatment: {env: {K: \"1\"}}\n",
			path: "arms.treatment", msg: "pins K but arm control does not"},
		{name: "flag toggled together with an env change", body: "arms:\n  control: {env: {K: \"0\"}}\n  treatment: {env: {K: \"1\"}, args: [--enable-hierarchical-cache]}\n",
			path: "arms.treatment", msg: "pins --enable-hierarchical-cache but arm control does not"},
		{name: "two flags toggled", body: "arms:\n  a: {}\n  b: {args: [--enable-metrics, --disable-radix-cache]}\n",
			path: "arms.b", msg: "pins --enable-metrics"},
		{name: "extra variable in two of three arms", body: "arms:\n  a: {env: {K: \"0\"}}\n  b: {env: {K: \"1\", H: \"1\"}}\n  c: {env: {K: \"2\", H: \"1\"}}\n",
			path: "arms.b", msg: "pins H but arm a does not"},
		{name: "identical arms", body: "arms:\n  a: {env: {K: \"0\"}}\n  b: {env: {K: \"0\"}}\n",
			path: "arms.b", msg: "arms a and b are identical"},
		{name: "arm overrides engine env", engine: "  env: {K: \"0\"}\n", body: "arms:\n  a: {}\n  b: {env: {K: \"1\"}}\n",
			path: "arms.b", msg: "pins K, which engine.env sets for every arm"},
		{name: "arm changes engine flag", engine: "  args: [--hicache-ratio, \"2\"]\n",
			body: "arms:\n  a: {env: {K: \"0\"}, args: [--hicache-ratio, \"2\"]}\n  b: {env: {K: \"1\"}, args: [--hicache-ratio=4]}\n",
			path: "arms.b", msg: `sets --hicache-ratio 4, which engine.args sets to "2"`},
		{name: "factors share an env var", body: "factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\n  dtype:\n    fp8: {}\n    bf16: {env: {K: \"1\"}}\n",
			path: "factors.dtype.bf16", msg: "factors k and dtype both set K"},
		{name: "factors share a flag", body: "factors:\n  hicache:\n    off: {}\n    on: {args: [--enable-hierarchical-cache]}\n  ratio:\n    low: {args: [--hicache-ratio, \"1\"]}\n    high: {args: [--enable-hierarchical-cache, --hicache-ratio, \"4\"]}\n",
			path: "factors.ratio.high", msg: "factors hicache and ratio both set --enable-hierarchical-cache"},
		{name: "two levels with the same pins", body: "factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\n  h:\n    off: {}\n    none: {}\n",
			path: "factors.h.none", msg: "levels off and none of factor h set the same pins"},
		{name: "level overrides engine env", engine: "  env: {K: \"0\"}\n", body: "factors:\n  k: {env: K, levels: [\"0\", \"1\"]}\n",
			path: "factors.k.0", msg: "level 0 of factor k pins K, which engine.env sets"},
		{name: "aa with differing arms", body: twoArms + "analysis: {aa: true}\n",
			path: "arms.treatment", msg: "needs identical arms"},
		{name: "aa with identical arms", body: "arms:\n  a1: {env: {K: \"0\"}}\n  a2: {env: {K: \"0\"}}\nanalysis: {aa: true}\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(specWith(c.body), "  preset: refserve\n", "  preset: refserve\n"+c.engine, 1)
			s, err := Parse("spec.yaml", []byte(src))
			if c.path == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if _, err := s.Expand(); err != nil {
					t.Fatalf("Expand: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted:\n%s", src)
			}
			for _, e := range Errors(err) {
				if e.Path == c.path && strings.Contains(e.Msg, c.msg) {
					if e.Line < 1 || strings.Contains(e.Error(), "\n") {
						t.Errorf("want one line with a position: %q", e.Error())
					}
					if !strings.Contains(c.name, "aa with") && !errors.Is(e, ErrConfounded) {
						t.Errorf("not marked ErrConfounded: %v", e)
					}
					return
				}
			}
			t.Errorf("no refusal at %s containing %q; got:\n%v", c.path, c.msg, err)
		})
	}
}

func TestParseFlags(t *testing.T) {
	got := parseFlags(Grammar{}, []string{"serve", "--tp", "8", "--x=1", "--bool", "--neg", "-1", "--list", "a", "b"})
	want := []flag{{"serve", ""}, {"--tp", "8"}, {"--x", "1"}, {"--bool", ""}, {"--neg", "-1"}, {"--list", "a b"}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
