package arms

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readFlags is a reading as text: each flag as name=value, [bare] for a bare flag.
func readFlags(flags []Flag) string {
	var out []string
	for _, f := range flags {
		switch {
		case f.Bare():
			out = append(out, f.Name+"[bare]")
		default:
			out = append(out, f.Name+"="+f.Value)
		}
	}
	return strings.Join(out, " ")
}

func TestGrammarParse(t *testing.T) {
	refserve := PresetFor("refserve").Grammar
	sglang := PresetFor("sglang").Grammar
	custom := PresetFor("custom").Grammar
	for _, tc := range []struct {
		name string
		g    Grammar
		args []string
		want string // the reading, when accepted
		err  string // the refusal, when refused
	}{
		{"a valued flag takes a value that starts with -", refserve,
			[]string{"--model-path", "--enable-hierarchical-cache", "--page-size", "1"}, "--model-path=--enable-hierarchical-cache --page-size=1", ""},
		{"-1 is a value", refserve, []string{"--chunked-prefill-size", "-1", "--enable-metrics"}, "--chunked-prefill-size=-1 --enable-metrics[bare]", ""},
		{"-1 is a value under argparse", sglang, []string{"--chunked-prefill-size", "-1"}, "--chunked-prefill-size=-1", ""},
		{"= binds", custom, []string{"--x=--y", "--z"}, "--x=--y --z[bare]", ""},
		{"= binds an empty value", custom, []string{"--x="}, "--x=", ""},
		{"unknown flag with a number", custom, []string{"--x", "-5", "--y", "-0.5"}, "--x=-5 --y=-0.5", ""},
		{"unknown flag with a list", custom, []string{"serve", "--x", "a", "b"}, "=serve --x=a b", ""},
		{"a known bool flag is followed by the next flag", sglang,
			[]string{"--enable-hierarchical-cache", "--disable-overlap-schedule", "--page-size", "16"},
			"--enable-hierarchical-cache[bare] --disable-overlap-schedule[bare] --page-size=16", ""},
		{"vLLM's --no- form", PresetFor("vllm").Grammar, []string{"--no-enable-prefix-caching", "--enforce-eager", "--max-model-len", "8192"},
			"--no-enable-prefix-caching[bare] --enforce-eager[bare] --max-model-len=8192", ""},

		{"unknown flag before a flag", custom, []string{"--x", "--y"}, "",
			`--x is followed by "--y", which the engine may read as the value of --x or as the next flag: write --x=--y if it is the value, or list --x in engine.bool_flags if it takes none`},
		{"unknown flag before a known one", refserve, []string{"--deploy-note", "--enable-hierarchical-cache"}, "", `write --deploy-note=--enable-hierarchical-cache if it is the value`},
		{"argparse does not take a flag as a value", sglang, []string{"--model-path", "--enable-hierarchical-cache"}, "",
			`--model-path needs a value, and the engine reads "--enable-hierarchical-cache" after it as a flag, not as its value: write --model-path=--enable-hierarchical-cache if it is the value`},
		{"a valued flag at the end", refserve, []string{"--page-size"}, "", "--page-size needs a value: write --page-size=VALUE"},
		{"a value after a bool flag", refserve, []string{"--enable-metrics", "true"}, "", `"true" follows --enable-metrics, which takes no value`},
		{"a value after a bound flag", custom, []string{"--x=1", "2"}, "", `"2" follows --x=1, which already has its value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags, err := tc.g.Parse(tc.args)
			if tc.err != "" {
				var ae *ArgError
				if !errors.As(err, &ae) || !strings.Contains(ae.Msg, tc.err) {
					t.Fatalf("err = %v, want one saying %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readFlags(flags); got != tc.want {
				t.Errorf("read %s\nwant %s", got, tc.want)
			}
		})
	}
}

// An ambiguous command line is refused where the spec wrote it, naming the flag (here a
// bare flag at the end of engine.args, read with the pins after it, as it is launched);
// a boolean flag the preset does not know can be declared in engine.bool_flags.
func TestSpecRefusesAmbiguousArgs(t *testing.T) {
	src := "version: 1\nname: t\nengine:\n  preset: custom\n  command: [server]\n  args: [--model, m, --fast-path]\n" +
		"arms:\n  control:   {args: [--mode, \"1\"]}\n  treatment: {args: [--mode, \"2\"]}\nworkload: {sessions: 4, rounds: 2}\n"
	_, err := Parse("spec.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `spec.yaml:6:22: engine.args: --fast-path is followed by "--mode"`) ||
		!strings.Contains(err.Error(), "write --fast-path=--mode if it is the value") {
		t.Fatalf("err = %v, want a refusal at engine.args naming --fast-path", err)
	}
	declared := strings.Replace(src, "  command: [server]\n", "  command: [server]\n  bool_flags: [--fast-path]\n", 1)
	s, err := Parse("spec.yaml", []byte(declared))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Grammar().Bool, "--fast-path") {
		t.Errorf("grammar %+v", s.Grammar())
	}
	for _, tc := range []struct{ bool, want string }{
		{"[fast]", `"fast" is not a flag`},
		{"[--x=1]", `"--x=1" is not a flag`},
		{"[--x, --x]", "--x is listed twice"},
	} {
		bad := strings.Replace(src, "  command: [server]\n", "  command: [server]\n  bool_flags: "+tc.bool+"\n", 1)
		_, err := Parse("spec.yaml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bool_flags %s: err = %v, want %s", tc.bool, err, tc.want)
		}
	}
	sg := "version: 1\nname: t\nengine:\n  preset: sglang\n  bool_flags: [--model-path]\narms:\n  a: {args: [--page-size, \"1\"]}\n  b: {args: [--page-size, \"2\"]}\nworkload: {sessions: 4, rounds: 2}\n"
	if _, err := Parse("spec.yaml", []byte(sg)); err == nil || !strings.Contains(err.Error(), "spec.yaml:5:16: engine.bool_flags: the sglang preset reads --model-path with a value") {
		t.Errorf("a valued flag declared boolean: %v", err)
	}
}

// refserve's grammar is cmd/refserve/config.go's flag set: every flag it defines, a bool
// flag as a bool.
func TestRefserveGrammar(t *testing.T) {
	src, err := os.ReadFile("../cmd/refserve/config.go")
	if err != nil {
		t.Fatal(err)
	}
	g := PresetFor("refserve").Grammar
	var bools, valued []string
	for _, m := range regexp.MustCompile(`fs\.(\w+)Var\(&c\.\w+, "([a-z0-9-]+)"`).FindAllStringSubmatch(string(src), -1) {
		if m[1] == "Bool" {
			bools = append(bools, "--"+m[2])
		} else {
			valued = append(valued, "--"+m[2])
		}
	}
	slices.Sort(bools)
	slices.Sort(valued)
	if got := slices.Sorted(slices.Values(g.Bool)); !slices.Equal(got, bools) {
		t.Errorf("refserve's bool flags %v, config.go defines %v", got, bools)
	}
	if got := slices.Sorted(slices.Values(g.Valued)); !slices.Equal(got, valued) {
		t.Errorf("refserve's valued flags %v, config.go defines %v", got, valued)
	}
	if g.Argparse {
		t.Error("refserve reads its flags with Go's flag package, not argparse")
	}
}

// FuzzGrammarParse: every token is read exactly once, in order, whatever the grammar
// says of it; a reading that is accepted reads the same again from its own tokens, and
// every flag of it starts with -.
func FuzzGrammarParse(f *testing.F) {
	f.Add("--model-path --enable-hierarchical-cache --page-size 16", "--enable-hierarchical-cache", "--model-path --page-size", true)
	f.Add("--chunked-prefill-size -1 --x=--y --z -5", "", "--chunked-prefill-size", false)
	f.Add("serve --x a b --y= c", "--x", "--y", false)
	f.Fuzz(func(t *testing.T, line, bools, valued string, argparse bool) {
		g := Grammar{Bool: strings.Fields(bools), Valued: strings.Fields(valued), Argparse: argparse}
		args := strings.Fields(line)
		flags, err := g.Parse(args)
		var back []string
		for i, fl := range flags {
			if len(fl.Tokens) == 0 || fl.Index != len(back) {
				t.Fatalf("flag %d %+v at token %d", i, fl, len(back))
			}
			back = append(back, fl.Tokens...)
			if fl.Name != "" && !strings.HasPrefix(fl.Tokens[0], fl.Name) {
				t.Fatalf("flag %+v is not named by its first token", fl)
			}
			if fl.Name == "" && i > 0 {
				t.Fatalf("words before any flag at flag %d: %+v", i, fl)
			}
		}
		if !slices.Equal(back, args) {
			t.Fatalf("tokens %q read back as %q", args, back)
		}
		if err != nil {
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Index < 0 || ae.Index >= len(args) || ae.Msg == "" {
				t.Fatalf("error %v (%T) names no token", err, err)
			}
			return
		}
		for _, fl := range flags {
			if fl.Name != "" && !IsFlagToken(fl.Name) {
				t.Fatalf("flag %q is not a flag", fl.Name)
			}
			if g.isBool(fl.Name) && !fl.Bound() && len(fl.Tokens) > 1 {
				t.Fatalf("bool flag %s took %q", fl.Name, fl.Tokens[1:])
			}
		}
		again, err := g.Parse(back)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(flags) {
			t.Fatalf("read again: %v, %v; first %v", again, err, flags)
		}
	})
}
