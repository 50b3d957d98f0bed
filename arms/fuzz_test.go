package arms

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
)

// FuzzParse checks that no input makes Parse panic, that every problem it reports
// carries a position a user can open (line and column from 1), and that whatever it
// accepts expands and redacts cleanly.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/specs/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, p := range append(files, examples...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"", "-", "{", "version: 1\nname: x\n", "a: &a [*a]\n", "x: *nope\n", "? [a]\n: b\n",
		"version: 1\nname: x\nengine: {preset: refserve}\narms: {a: &p {env: {K: \"0\"}}, b: *p}\nworkload: {sessions: 1, rounds: 1}\n",
		"version: 1\n---\nversion: 1\n", "version: !!str 1\n", "arms:\n  <<: {a: {}}\n",
		"workload: {sessions: 99999999999999999999, rounds: -1}\n",
		"version: 1\nname: x\nengine:\n  preset: refserve\n  env:\n    A_TOKEN: |\n      line-one\n      line-two\n    B_KEY: \"a\\u00e9b\n      c\"\n    C_PASS:\t!!str >-\n      zz\n" +
			"  args: [--api-key, &k sk-123456, --token=abc]\narms: {a: {env: {K: \"0\"}, args: [--password, *k]}, b: {env: {K: \"1\"}, args: [--password, x]}}\nworkload: {sessions: 1, rounds: 1}\n",
	} {
		f.Add([]byte(seed))
	}
	// Small versions of the shapes checkShape refuses, so that mutations explore its edges.
	for _, seed := range []string{
		"arms: " + strings.Repeat("[", 40) + strings.Repeat("]", 40), "a:\n" + strings.Repeat("- ", 40) + "x\n",
		"a: " + strings.Repeat("{b: ", 40) + "1" + strings.Repeat("}", 40), "a: \"[[[[\"\nb: |\n  [[[[\nc: 'it''s'\n",
		"factors:\n  f: {env: K, levels: [" + strings.Repeat("x, ", 300) + "]}\n", "? - - [a]\n: - {b: [c]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// checkShape bounds the parser's work: whatever it lets through nests no deeper
		// in the parser's tree than it counted.
		if checkShape("fuzz.yaml", data) == nil {
			if file, err := parseYAML(data); err == nil {
				for _, doc := range file.Docs {
					if d := astDepth(doc.Body, false); d > MaxSpecDepth {
						t.Fatalf("checkShape let through a tree %d deep", d)
					}
				}
			}
		}
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("error without a SpecError: %v", err)
			}
			for _, e := range errs {
				if e.Line < 1 || e.Col < 1 || e.File != "fuzz.yaml" {
					t.Fatalf("error without a position: %#v", e)
				}
			}
			return
		}
		arms, err := s.Expand()
		if err != nil {
			t.Fatalf("Parse accepted a spec that Expand refuses: %v", err)
		}
		if len(arms) < 2 || s.Analysis.Baseline == "" {
			t.Fatalf("accepted spec with %d arms, baseline %q", len(arms), s.Analysis.Baseline)
		}
		_ = s.Redactor(nil).Redact(string(data))
		checkRedactedSource(t, s)
	})
}

// checkRedactedSource asserts what the store relies on: the redacted text is still
// YAML, no credential value of an accepted spec is left in it, and read back as a spec
// every credential env value and flag value reads [redacted].
func checkRedactedSource(t *testing.T, s *Spec) {
	t.Helper()
	out := s.RedactedSource()
	if _, err := parseYAML(out); err != nil {
		t.Fatalf("redacted source is not YAML: %v\n%s", err, out)
	}
	var secrets []string
	for _, env := range s.allEnv() {
		for k, v := range env {
			if LooksLikeCredential(k) {
				secrets = append(secrets, v)
			}
		}
	}
	for _, args := range s.allArgs() {
		credentialArgs(args, func(i int) { secrets = append(secrets, args[i]) },
			func(_ int, _, v string) { secrets = append(secrets, v) })
	}
	for _, v := range secrets {
		// Only distinctive values: a short or punctuated one can be rebuilt by the
		// replacement text itself ("dact", "ed]\"").
		if len(v) >= 6 && !strings.Contains(Redacted, v) && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "" &&
			bytes.Contains(out, []byte(v)) {
			t.Fatalf("redacted source holds %q:\n%s", v, out)
		}
	}
	again, err := Parse("redacted.yaml", out)
	if err != nil {
		return // redacting can make arms alike or names invalid; the YAML check above holds
	}
	for _, env := range again.allEnv() {
		for k, v := range env {
			if LooksLikeCredential(k) && v != Redacted {
				t.Fatalf("redacted source sets %s to %q:\n%s", k, v, out)
			}
		}
	}
	for _, args := range again.allArgs() {
		if got := RedactArgs(args); !slices.Equal(got, args) {
			t.Fatalf("redacted source keeps a credential flag value: %q:\n%s", args, out)
		}
	}
}

// FuzzRedactedSource writes arbitrary text as the value of a credential-named env entry
// (in block and in flow style) and as a credential flag's value, and checks every spec that parses with
// checkRedactedSource: whatever style the value is written in, none of it is stored.
func FuzzRedactedSource(f *testing.F) {
	for _, seed := range [][2]string{
		{"|\n      -----BEGIN KEY-----\n      abcdef\n", "sk-live-1"},
		{`"p\u00e9ssword1"`, `"--x"`}, {"\"wrapped\n      value\"", "'a''b'"}, {">-\n      k9x", "!!str q7z"},
		{"!!str q7z  # note", "&a tok"}, {"'it''s'", "\"a,b\""}, {"plain\n      continued", "x # c"},
		{"!!str |+\n      keep\n\n", "|\n  x"}, {"\t\"tab\"", "[a]"}, {"&s secret-value", "*s"},
	} {
		f.Add(seed[0], seed[1], "")
	}
	f.Add("x", "y", "\"wrapped\n    flow\"")
	f.Add("x", "y", "!!str 'q'")
	f.Add("x", "y", "plain # c\n ")
	f.Fuzz(func(t *testing.T, value, flagValue, flowValue string) {
		if flowValue == "" {
			flowValue = "fv"
		}
		src := "version: 1\nname: t\nengine:\n  preset: refserve\n  env:\n    LOG_LEVEL: info\n    X_TOKEN: " + value +
			"\n    AFTER: kept\n  args: [--served-model-name, m, --api-key, " + flagValue + "]\n" +
			"workload: {sessions: 1, rounds: 1}\narms:\n  a: {env: {K: \"0\", Y_TOKEN: " + flowValue + "}}\n  b: {env: {K: \"1\"}}\n"
		s, err := Parse("fuzz.yaml", []byte(src))
		if err != nil {
			return
		}
		checkRedactedSource(t, s)
		again, err := Parse("redacted.yaml", s.RedactedSource())
		if err != nil {
			t.Fatalf("redacted source no longer parses: %v\n%s", err, s.RedactedSource())
		}
		if again.Engine.Env["AFTER"] != s.Engine.Env["AFTER"] && s.Redactor(nil).Redact(s.Engine.Env["AFTER"]) == s.Engine.Env["AFTER"] {
			t.Fatalf("AFTER changed from %q to %q", s.Engine.Env["AFTER"], again.Engine.Env["AFTER"])
		}
	})
}

// astDepth is how deeply mappings and lists nest in the parser's tree under n; inMap says
// n's parent is a mapping, whose entries do not nest again.
func astDepth(n ast.Node, inMap bool) int {
	switch v := n.(type) {
	case *ast.MappingNode:
		d := 0
		for _, mv := range v.Values {
			d = max(d, astDepth(mv, true))
		}
		return d + 1
	case *ast.MappingValueNode:
		d := max(astDepth(v.Key, false), astDepth(v.Value, false))
		if !inMap {
			d++ // a mapping of one entry, written without its mapping node
		}
		return d
	case *ast.SequenceNode:
		d := 0
		for _, e := range v.Values {
			d = max(d, astDepth(e, false))
		}
		return d + 1
	case *ast.AnchorNode:
		return astDepth(v.Value, inMap)
	case *ast.TagNode:
		return astDepth(v.Value, inMap)
	case *ast.MappingKeyNode:
		return astDepth(v.Value, false)
	}
	return 0
}
