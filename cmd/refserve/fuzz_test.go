package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
)

// FuzzArgumentsForSchema: whatever schema a client offers, the agent's arguments are a
// JSON object, and every required property of an object schema is present.
func FuzzArgumentsForSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}`,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":5,"maximum":3}},"required":["n","ghost"]}`,
		`{"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"a":{"type":["number","null"]}}},"minItems":3}}}`,
		`{"properties":{"deep":{"properties":{"deeper":{"properties":{"deepest":{"type":"boolean"}}}}}}}`,
		`{"type":"object","properties":{"v":{"anyOf":[{"type":"integer"},{"type":"string"}]},"e":{"enum":[1.5,2,"x",true,null]}}}`,
		`{"type":"number","minimum":1e308,"maximum":-1e308}`,
		`{"$ref":"#/$defs/a","$defs":{"a":{"type":"object","properties":{"id":{"type":"string","pattern":"^ORD-\\d{5}$"}},"required":["id"]}}}`,
		`{"type":"object","properties":{"n":{"type":"number","multipleOf":0.1,"exclusiveMinimum":0}},"required":["n"]}`,
		`{"type":"object","properties":{"p":{"prefixItems":[{"const":1},{"type":"string","maxLength":1}],"minItems":2}}}`,
		`{"$ref":"#"}`, `{"properties":{"a":{"$ref":"#"}},"required":["a"]}`,
		`[]`, `null`, ``, `{"type":"object","properties":[1,2]}`,
	} {
		f.Add([]byte(s), "What's the weather in Paris?")
	}
	f.Fuzz(func(t *testing.T, schemaJSON []byte, userText string) {
		ps := argumentsFor(toolschema.Compile("f", schemaJSON), newRNG(1), userText)
		args := call{Params: ps}.Arguments()
		var got map[string]any
		if err := json.Unmarshal([]byte(args), &got); err != nil {
			t.Fatalf("arguments %q for schema %q are not a JSON object: %v", args, schemaJSON, err)
		}
		var sch struct {
			Type     any      `json:"type"`
			Required []string `json:"required"`
		}
		if json.Unmarshal(schemaJSON, &sch) == nil && sch.Type == "object" {
			for _, r := range sch.Required {
				if _, ok := got[r]; !ok {
					t.Errorf("required %q missing from %s (schema %s)", r, args, schemaJSON)
				}
			}
		}
	})
}

// FuzzChatRequest: any body either is refused as a client error or yields a reply whose
// clean decoding and whose corrupted decoding both finish within their bounds, in every
// parser's format.
func FuzzChatRequest(f *testing.F) {
	tools, _ := json.Marshal(testTools())
	for _, s := range []string{
		`{"model":"refserve-agent","messages":[{"role":"user","content":"weather in Oslo?"}],"tools":` + string(tools) + `}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + string(tools) + `,"tool_choice":"required","max_tokens":3}`,
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}],"tools":` + string(tools) + `}`,
		`{"messages":[{"role":"system","content":""}],"tool_choice":{"type":"function","function":{"name":"x"}}}`,
		`{"messages":[{"role":"user","content":null}]}`,
		`{"messages":[]}`, `not json`,
		`{"messages":[{"role":"user","content":"a long one"}],"max_tokens":40,"ignore_eos":true,"min_tokens":20}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	cfg := config{ServedModelName: "refserve-agent"}
	s := &server{cfg: cfg, agent: agent{seed: 9}}
	f.Fuzz(func(t *testing.T, body []byte, staleAt uint8) {
		req, extra, err := s.decodeChatRequest(bytes.NewReader(body))
		if err != nil {
			return
		}
		if keys, n := promptPrefixes(req); n/4+1 != promptTokens(req) || keys[len(keys)-1].tokens != promptTokens(req)-1 {
			t.Fatalf("the prefix cache counts %d bytes (%d tokens), the tokenizer %d tokens", n, keys[len(keys)-1].tokens, promptTokens(req))
		}
		rep, session, err := s.agent.next(req)
		if err != nil {
			return
		}
		if rep.Call != nil && !json.Valid([]byte(rep.Call.Arguments())) {
			t.Fatalf("call arguments %q are not JSON", rep.Call.Arguments())
		}
		prompt := promptTokens(req)
		for _, parser := range toolCallParsers {
			for _, stale := range []int{-1, int(staleAt)} {
				g := newGeneration(parser, rep, req.MaxTokens, 9, session).withMinTokens(min(extra.MinTokens, 300))
				var content strings.Builder
				finish := ""
				for n := 0; finish == ""; n++ {
					if n >= g.maxSteps() {
						t.Fatalf("%s: no finish after %d steps", parser, n)
					}
					var c string
					c, finish = g.step(n == stale, prompt+n)
					content.WriteString(c)
				}
				if g.corrupted() && finish == "tool_calls" {
					t.Errorf("%s: a corrupted reply finished with a structured call", parser)
				}
				if g.corrupted() && finish == "stop" && !strings.Contains(content.String(), leakMarkers[parser]) {
					t.Errorf("%s: corrupted reply without leaked markup: %q", parser, content.String())
				}
			}
		}
	})
}

// FuzzToolCallFragments: a call streamed in fragments reassembles byte for byte to the
// call a non-streaming response carries, whatever its strings hold.
func FuzzToolCallFragments(f *testing.F) {
	f.Add("get_weather", "Paris", int64(3))
	f.Add("", "", int64(0))
	f.Add("f\"n", "ünïcödé \\ \"quoted\"", int64(-7))
	f.Fuzz(func(t *testing.T, name, value string, n int64) {
		c := call{ID: "call_1", Name: name, Params: []param{{Name: "s", Value: value}, {Name: "n", Value: n}, {Name: "xs", Value: []any{value, true}}}}
		var got openai.ToolCall
		first := true
		sendToolCall(c, func(tc openai.ToolCall) bool {
			if first {
				got = tc
				first = false
				return true
			}
			got.Function.Arguments += tc.Function.Arguments
			return true
		})
		if got.Function.Arguments != c.Arguments() || got.ID != c.ID || got.Function.Name != name {
			t.Errorf("fragments reassemble to %+v; want %q", got, c.Arguments())
		}
	})
}
