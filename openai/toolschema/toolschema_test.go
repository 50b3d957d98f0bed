package toolschema

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
)

func tool(name, params string) openai.Tool {
	return openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: name, Parameters: json.RawMessage(params)}}
}

func mustDecode(t testing.TB, s string) any {
	t.Helper()
	v, err := DecodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

func strs(vs []Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func TestValidate(t *testing.T) {
	schema := `{"type": "object", "$defs": {"k": {"type": "integer", "minimum": 1, "maximum": 10}},
		"properties": {
			"query": {"type": "string", "minLength": 1},
			"top_k": {"$ref": "#/$defs/k"},
			"unit": {"enum": ["celsius", "fahrenheit"]},
			"filters": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"}}, "required": ["field"]}}
		},
		"required": ["query"], "additionalProperties": false}`
	tl := Compile("search", json.RawMessage(schema))
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	tests := []struct {
		args string
		want []string
	}{
		{`{"query": "q", "top_k": 3, "unit": "celsius", "filters": [{"field": "a"}]}`, nil},
		{`{"query": "q", "top_k": 3.0}`, nil}, // 3.0 is an integer
		{`{"query": "q", "top_k": 5000}`, []string{"args.top_k: 5000 is above maximum 10"}},
		{`{"query": "q", "top_k": 2.5}`, []string{"args.top_k: is a number, want integer"}},
		{`{"query": ""}`, []string{`args.query: "" has 0 characters, fewer than minLength 1`}},
		{`{"unit": "kelvin", "zz": 1, "aa": 2}`, []string{
			`args: unexpected field "aa" (additionalProperties is false)`,
			`args: unexpected field "zz" (additionalProperties is false)`,
			`args: missing required field "query"`,
			`args.unit: "kelvin" is not one of ["celsius","fahrenheit"]`,
		}},
		{`{"query": "q", "filters": [{"field": "a"}, {"x": 1}]}`, []string{`args.filters[1]: missing required field "field"`}},
		// A number too long for a float64 is still compared exactly.
		{`{"query": "q", "top_k": 10.0000000000000000000001}`, []string{"args.top_k: is a number, want integer"}},
		{`{"query": "q", "top_k": 10.0000000000000000000001e1}`, []string{"args.top_k: is a number, want integer"}},
		{`{"query": "q", "top_k": 1e308}`, []string{"args.top_k: 1e308 is above maximum 10"}},
		{`{"query": "q", "top_k": 1e999999, "filters": [{"field": "a", "w": -0.00001e-999}]}`, []string{
			"args.filters[0].w: -0.00001e-999 is beyond the range of a 64-bit float (exponent -1004)",
			"args.top_k: 1e999999 is beyond the range of a 64-bit float (exponent +999999)",
		}},
	}
	for _, tt := range tests {
		got := strs(tl.Validate(mustDecode(t, tt.args)))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.args, got, tt.want)
		}
	}
}

// TestValidateOrderIsStable: the library walks objects in map order; the violations must
// not depend on it, since a tool's error reply goes back into the conversation and every
// arm must hear the same words.
func TestExponent(t *testing.T) {
	for num, want := range map[string]int{"0": 0, "-0.0": 0, "7": 0, "1234": 3, "0.001": -3, "12.5e3": 4,
		"0.0012E-2": -5, "1e400": 400, "1e99999999999999999999": math.MaxInt32, "1e-99999999999999999999": math.MinInt32} {
		if got := exponent(num); got != want {
			t.Errorf("exponent(%s) = %d, want %d", num, got, want)
		}
	}
}

func TestValidateOrderIsStable(t *testing.T) {
	tl := Compile("f", json.RawMessage(`{"type": "object", "properties": {
		"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}, "d": {"type": "integer"}},
		"additionalProperties": false}`))
	args := mustDecode(t, `{"a": "x", "b": "x", "c": "x", "d": "x", "e": 1, "f": 2, "g": 3}`)
	first := strs(tl.Validate(args))
	for range 50 {
		if got := strs(tl.Validate(args)); !slices.Equal(got, first) {
			t.Fatalf("order changed:\n%q\n%q", first, got)
		}
	}
}

func TestCompile(t *testing.T) {
	for _, tt := range []struct {
		name, params string
		ok           bool
	}{
		{"absent", ``, true},
		{"null", `null`, true},
		{"empty object", `{}`, true},
		{"boolean", `true`, true},
		{"draft-07 tuple items", `{"type": "object", "properties": {"pair": {"items": [{"type": "string"}, {"type": "integer"}]}}}`, true},
		{"not json", `{"type":`, false},
		{"type is a number", `{"type": 3}`, false},
		{"property not a schema", `{"properties": {"a": 1}}`, false},
		{"bad pattern", `{"properties": {"a": {"pattern": "("}}}`, false},
		{"dangling reference", `{"properties": {"a": {"$ref": "#/$defs/missing"}}}`, false},
	} {
		tl := Compile("f", json.RawMessage(tt.params))
		if (tl.Err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, tl.Err, tt.ok)
		}
		if tl.Err != nil && strings.Contains(tl.Err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", tt.name, tl.Err)
		}
	}
	// Draft-07 tuple items are read as such: the second element must be an integer.
	tl := Compile("f", json.RawMessage(`{"properties": {"pair": {"items": [{"type": "string"}, {"type": "integer"}]}}}`))
	if got := strs(tl.Validate(mustDecode(t, `{"pair": ["a", "b"]}`))); len(got) != 1 || got[0] != "args.pair[1]: is a string, want integer" {
		t.Errorf("tuple items: %q", got)
	}
}

// TestReferencesNeverLeaveTheSchema: schemas come from requests; a $ref to a file must
// not make the reader open it.
func TestReferencesNeverLeaveTheSchema(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s.json")
	if err := os.WriteFile(file, []byte(`{"type": "integer", "maximum": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"file://" + file, file, "http://127.0.0.1:1/s.json"} {
		tl := Compile("f", json.RawMessage(`{"properties": {"a": {"$ref": "`+ref+`"}}}`))
		if tl.Err == nil || !strings.Contains(tl.Err.Error(), "not followed") {
			t.Errorf("$ref %s: err = %v, want it refused", ref, tl.Err)
		}
	}
}

func TestRequiredAndDeclaresFollowTopLevelReferences(t *testing.T) {
	tl := Compile("f", json.RawMessage(`{"$ref": "#/$defs/args", "$defs": {"args": {"type": "object",
		"properties": {"arguments": {"type": "object"}, "city": {"type": "string"}}, "required": ["city", "arguments"]}}}`))
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	if got := tl.Required(); !slices.Equal(got, []string{"city", "arguments"}) {
		t.Errorf("Required = %q", got)
	}
	if !tl.Declares("arguments") || tl.Declares("zip") {
		t.Error("Declares is wrong")
	}
	var none Tool
	if none.Required() != nil || none.Declares("a") || none.Validate(map[string]any{"a": 1}) != nil {
		t.Error("a tool without a schema must accept anything")
	}
}

func TestPropertyOrder(t *testing.T) {
	tl := Compile("f", json.RawMessage(`{"type": "object", "properties": {
		"zeta": {"type": "string"}, "alpha": {"$ref": "#/$defs/pt"}, "mid/dle~x y": {"type": "object",
		"properties": {"b": {}, "a": {}}}}, "$defs": {"pt": {"type": "object", "properties": {"y": {}, "x": {}}}}}`))
	if tl.Err != nil {
		t.Fatal(tl.Err)
	}
	s := tl.Schema
	if got := tl.PropertyOrder(s); !slices.Equal(got, []string{"zeta", "alpha", "mid/dle~x y"}) {
		t.Errorf("top = %q", got)
	}
	if got := tl.PropertyOrder(s.Properties["mid/dle~x y"]); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("escaped = %q", got)
	}
	if got := tl.PropertyOrder(s.Properties["alpha"].Ref); !slices.Equal(got, []string{"y", "x"}) {
		t.Errorf("through $ref = %q", got)
	}
	if got := tl.PropertyOrder(s.Properties["zeta"]); got != nil {
		t.Errorf("no properties = %q", got)
	}
}

func TestOfCachesPerToolSet(t *testing.T) {
	a := []openai.Tool{tool("f", `{"type": "object"}`), tool("g", `{"type": "object", "properties": {"x": {"type": "integer"}}}`)}
	b := []openai.Tool{tool("f", `{"type": "object"}`), tool("g", `{"type": "object", "properties": {"x": {"type": "integer"}}}`)}
	s1, s2 := Of(a), Of(b)
	if s1 != s2 {
		t.Error("equal tool definitions compiled twice")
	}
	if s3 := Of([]openai.Tool{tool("f", `{"type": "object"}`), tool("g", `{"type": "object", "properties": {"x": {"type": "string"}}}`)}); s3 == s1 {
		t.Error("different tool definitions share a compiled set")
	}
	// Name and parameters are length-prefixed in the key: moving bytes between them is
	// another tool set.
	if Of([]openai.Tool{tool("ab", `{}`)}) == Of([]openai.Tool{tool("a", `b{}`)}) {
		t.Error("key is ambiguous")
	}
	if got := s1.Names(); !slices.Equal(got, []string{"f", "g"}) || len(s1.Names()) != 2 {
		t.Errorf("Names = %q", got)
	}
	if _, ok := s1.Lookup("h"); ok {
		t.Error("Lookup found a tool not offered")
	}
	dup := Of([]openai.Tool{tool("f", `{"type": "integer"}`), tool("f", `{"type": "object"}`)})
	if tl, _ := dup.Lookup("f"); tl.Validate(mustDecode(t, `{}`)) == nil || len(dup.Names()) != 1 {
		t.Error("the first of two tools with one name must count")
	}
}

func TestConcurrentUse(t *testing.T) {
	tools := []openai.Tool{tool("k", `{"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}, "s": {"pattern": "^a"}}}`)}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				tl, _ := Of(tools).Lookup("k")
				got := tl.Validate(mustDecode(t, `{"n": 9, "s": "b"}`))
				if len(got) != 2 {
					t.Errorf("goroutine %d, %d: %v", i, j, got)
					return
				}
				tl.PropertyOrder(tl.Schema)
			}
		}()
	}
	wg.Wait()
}

func BenchmarkOfCached(b *testing.B) {
	tools := []openai.Tool{tool("k", `{"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}`)}
	Of(tools)
	for b.Loop() {
		Of(tools)
	}
}

func BenchmarkValidate(b *testing.B) {
	tl := Compile("k", json.RawMessage(`{"type": "object", "properties": {"query": {"type": "string"},
		"top_k": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["query"], "additionalProperties": false}`))
	args := mustDecode(b, `{"query": "hicache restore", "top_k": 5}`)
	for b.Loop() {
		if tl.Validate(args) != nil {
			b.Fatal("valid arguments rejected")
		}
	}
}

func FuzzValidate(f *testing.F) {
	f.Add(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":10}},"required":["n"]}`, `{"n":5000}`)
	f.Add(`{"$defs":{"a":{"pattern":"^x"}},"properties":{"s":{"$ref":"#/$defs/a"}}}`, `{"s":"y"}`)
	f.Add(`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, `7`)
	f.Add(`{"items":[{"type":"string"}]}`, `[1]`)
	f.Add(`{"properties":{"a b":{"not":{}}}}`, `{"a b":null}`)
	f.Add(`{"$ref":"#"}`, `{}`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		tl := Compile("f", json.RawMessage(schema))
		v, err := DecodeJSON([]byte(args))
		if err != nil {
			return
		}
		got := tl.Validate(v)
		if tl.Schema == nil && got != nil {
			t.Fatalf("no schema, yet violations %v", got)
		}
		for _, vi := range got {
			if !strings.HasPrefix(vi.Path, "args") || vi.Message == "" || strings.Contains(vi.String(), "\n") {
				t.Fatalf("malformed violation %+v", vi)
			}
		}
		if again := tl.Validate(v); !slices.Equal(strs(again), strs(got)) {
			t.Fatalf("unstable: %q then %q", strs(got), strs(again))
		}
		if tl.Schema != nil && (tl.Schema.Validate(v) == nil) != (len(got) == 0) {
			t.Fatalf("violations %q disagree with the library", strs(got))
		}
	})
}
