package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
	"github.com/arbiterlab/arbiter/workload"
)

// schemaCorpus are parameter schemas shaped like those of real agents: what refserve's
// clean calls must satisfy, judged by the reader the detectors use.
var schemaCorpus = map[string]string{
	"bounded integer": `{"type":"object","properties":{"query":{"type":"string"},"top_k":{"type":"integer","minimum":1,"maximum":10}},"required":["query","top_k"],"additionalProperties":false}`,
	"exclusive bounds": `{"type":"object","properties":{"ratio":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1},
		"n":{"type":"integer","exclusiveMinimum":3,"exclusiveMaximum":6}},"required":["ratio","n"]}`,
	"multiples": `{"type":"object","properties":{"step":{"type":"number","multipleOf":0.1,"minimum":0.25,"maximum":2},
		"batch":{"type":"integer","multipleOf":8,"minimum":1,"maximum":64}},"required":["step","batch"]}`,
	"patterns": `{"type":"object","properties":{"order_id":{"type":"string","pattern":"^ORD-[0-9]{5}$"},
		"sku":{"type":"string","pattern":"^[A-Z]{3}-(red|blue)_\\d+$"},"ticket":{"type":"string","pattern":"SUP-\\d{4,6}"}},
		"required":["order_id","sku","ticket"]}`,
	"lengths": `{"type":"object","properties":{"code":{"type":"string","minLength":12,"maxLength":16},"tag":{"type":"string","maxLength":2}},"required":["code","tag"]}`,
	"references": `{"type":"object","$defs":{"day":{"type":"integer","minimum":1,"maximum":31},
		"date":{"type":"object","properties":{"day":{"$ref":"#/$defs/day"},"month":{"enum":[1,2,3]}},"required":["day","month"]}},
		"properties":{"from":{"$ref":"#/$defs/date"},"to":{"allOf":[{"$ref":"#/$defs/date"}]}},"required":["from","to"]}`,
	"top-level reference": `{"$ref":"#/$defs/args","$defs":{"args":{"type":"object","properties":{"city":{"type":"string","minLength":2}},"required":["city"]}}}`,
	"const and nullable":  `{"type":"object","properties":{"version":{"const":2},"mode":{"type":["string","null"],"enum":["fast","safe",null]}},"required":["version","mode"]}`,
	"tuples":              `{"type":"object","properties":{"point":{"type":"array","prefixItems":[{"type":"number","minimum":-90,"maximum":90},{"type":"string","pattern":"^[NS]$"}],"minItems":2,"maxItems":2}},"required":["point"]}`,
	"draft-07 tuples":     `{"type":"object","properties":{"pair":{"type":"array","items":[{"type":"string"},{"type":"integer","minimum":100}],"minItems":2,"maxItems":2}},"required":["pair"]}`,
	"nested arrays": `{"type":"object","properties":{"filters":{"type":"array","minItems":1,"items":{"type":"object",
		"properties":{"field":{"type":"string","pattern":"^[a-z_]+$"},"op":{"enum":["eq","ne","lt"]},"value":{"anyOf":[{"type":"integer","maximum":0},{"type":"string"}]}},
		"required":["field","op","value"],"additionalProperties":false}}},"required":["filters"]}`,
	"oneOf without overlap": `{"type":"object","properties":{"target":{"oneOf":[{"type":"string","pattern":"^host-\\d$"},{"type":"integer"}]}},"required":["target"]}`,
}

// TestArgumentsValidateUnderTheSharedReader: for every schema of the corpus and the
// workload's own tools, the agent's arguments are valid by the rules that judge them.
func TestArgumentsValidateUnderTheSharedReader(t *testing.T) {
	var tools []openai.Tool
	for name, s := range schemaCorpus {
		tools = append(tools, openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: name, Parameters: json.RawMessage(s)}})
	}
	tools = append(tools, workload.ToolSpecs()...)
	set := toolschema.Of(tools)
	for _, tl := range tools {
		ts, _ := set.Lookup(tl.Function.Name)
		if ts.Err != nil {
			t.Fatalf("%s: %v", tl.Function.Name, ts.Err)
		}
		for seed := range uint64(200) {
			args := call{Params: argumentsFor(ts, newRNG(seed), "Check order ORD-12345 for Lisbon")}.Arguments()
			v, err := toolschema.DecodeJSON([]byte(args))
			if err != nil {
				t.Fatalf("%s seed %d: %s is not JSON: %v", tl.Function.Name, seed, args, err)
			}
			if vs := ts.Validate(v); len(vs) > 0 {
				t.Fatalf("%s seed %d: %s breaks its schema: %v", tl.Function.Name, seed, args, vs)
			}
		}
	}
}

func TestArgumentsKeepTheSchemasPropertyOrder(t *testing.T) {
	ts := toolschema.Compile("f", json.RawMessage(`{"type":"object","properties":{"zulu":{"type":"string"},"alpha":{"type":"integer"},"mike":{"type":"boolean"}},"required":["zulu","alpha","mike"]}`))
	args := call{Params: argumentsFor(ts, newRNG(7), "hi")}.Arguments()
	if m := regexp.MustCompile(`^\{"zulu": "[^"]*", "alpha": \d+, "mike": (true|false)\}$`); !m.MatchString(args) {
		t.Errorf("arguments %s are not in the schema's order", args)
	}
}

func TestFromPattern(t *testing.T) {
	for _, p := range []string{`^ORD-[0-9]{5}$`, `[^a-z]{3}`, `(?i)^yes|no$`, `^\w+@\w+\.com$`, `a{0}b`, `^(ab)+c?$`} {
		for seed := range uint64(20) {
			s, ok := fromPattern(p, newRNG(seed))
			if !ok || !regexp.MustCompile(p).MatchString(s) {
				t.Errorf("pattern %s seed %d: %q, %v", p, seed, s, ok)
			}
		}
	}
	for _, p := range []string{`(`, `^$`, `a{1000}`} {
		if s, ok := fromPattern(p, newRNG(1)); ok {
			t.Errorf("pattern %s gave %q", p, s)
		}
	}
}

// TestForcedCallsNeedReadableSchemas: a forced call (tool_choice required or a named
// function) decodes under a grammar built from the schemas, so refserve, like the engines
// it stands in for, refuses a schema it cannot read; with auto it answers anyway.
func TestForcedCallsNeedReadableSchemas(t *testing.T) {
	_, base := startServer(t, testConfig(t), nil)
	tools := append(testTools(), openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: "broken",
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","pattern":"("}}}`)}})
	for _, tc := range []struct {
		choice string
		want   int
	}{
		{`"auto"`, http.StatusOK},
		{`"required"`, http.StatusBadRequest},
		{`{"type":"function","function":{"name":"broken"}}`, http.StatusBadRequest},
		{`{"type":"function","function":{"name":"get_weather"}}`, http.StatusOK},
	} {
		req := userRequest("What is the weather in Oslo?", tools)
		req.ToolChoice = json.RawMessage(tc.choice)
		code, body := postJSON(t, base+"/v1/chat/completions", req)
		if code != tc.want {
			t.Errorf("tool_choice %s: HTTP %d, want %d: %s", tc.choice, code, tc.want, body)
		}
		if code == http.StatusBadRequest && !strings.Contains(string(body), "broken: parameters are not a valid JSON Schema") {
			t.Errorf("tool_choice %s: error does not name the tool and why: %s", tc.choice, body)
		}
	}
}
