package detectors

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
	"github.com/arbiterlab/arbiter/plugins"
	"github.com/arbiterlab/arbiter/workload"
)

func tool(name, params string) openai.Tool {
	return openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: name, Parameters: json.RawMessage(params)}}
}

// agentTools are shaped like the tools of the toolcall-agent workload.
var agentTools = []openai.Tool{
	tool("get_weather", `{"type": "object", "properties": {
		"city": {"type": "string"},
		"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
		"days": {"type": "integer"}
	}, "required": ["city"], "additionalProperties": false}`),
	tool("search", `{"type": "object", "properties": {
		"query": {"type": "string"},
		"limit": {"type": ["integer", "null"]},
		"filters": {"type": "array", "items": {"type": "object", "properties": {"field": {"type": "string"}, "op": {"const": "eq"}}, "required": ["field"]}},
		"score": {"type": "number"},
		"exact": {"type": "boolean"},
		"mode": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
	}, "required": ["query"]}`),
	tool("list_files", ``),
	tool("wrap", `{"type": "object", "properties": {"arguments": {"type": "object"}}, "required": ["arguments"]}`),
}

// keywordTools exercise the keywords beyond types and enums.
var keywordTools = []openai.Tool{
	tool("k", `{"type": "object", "$defs": {"day": {"type": "integer", "minimum": 1, "maximum": 31}},
		"properties": {
			"top_k": {"type": "integer", "minimum": 1, "maximum": 10},
			"ratio": {"type": "number", "exclusiveMinimum": 0},
			"order_id": {"type": "string", "pattern": "^ORD-[0-9]{5}$", "maxLength": 9},
			"when": {"type": "object", "properties": {"day": {"$ref": "#/$defs/day"}}},
			"id": {"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}]},
			"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": true},
			"odd name": {"type": "string"}
		}, "additionalProperties": false}`),
}

func calls(tools []openai.Tool, cs ...openai.ToolCall) plugins.Response {
	r := reply("")
	r.Tools = tools
	r.Completion.Choices[0].Message.ToolCalls = cs
	r.Completion.Choices[0].FinishReason = "tool_calls"
	return r
}

func call(name, args string) openai.ToolCall {
	return openai.ToolCall{ID: "call_0", Type: "function", Function: openai.FunctionCall{Name: name, Arguments: args}}
}

func TestToolcallSchema(t *testing.T) {
	tests := []struct {
		name  string
		tools []openai.Tool
		call  openai.ToolCall
		want  string // substring of the reason; "" means clean
	}{
		{"valid", agentTools, call("get_weather", `{"city": "Paris", "unit": "celsius", "days": 3}`), ""},
		{"integer written 3.0", agentTools, call("get_weather", `{"city": "Paris", "days": 3.0}`), ""},
		{"nullable integer", agentTools, call("search", `{"query": "q", "limit": null}`), ""},
		{"nested array items", agentTools, call("search", `{"query": "q", "filters": [{"field": "a", "op": "eq"}], "score": 0.5, "exact": true, "mode": 2}`), ""},
		{"no schema any object", agentTools, call("list_files", `{"dir": "/"}`), ""},
		{"no schema empty string args", agentTools, call("list_files", ``), ""},
		{"declared arguments property", agentTools, call("wrap", `{"arguments": {"a": 1}}`), ""},
		{"tools unknown valid object", nil, call("anything", `{"a": [1, 2]}`), ""},

		{"unknown tool", agentTools, call("get_wether", `{"city": "Paris"}`), `names a tool that was not offered (offered: get_weather, list_files, search, wrap)`},
		{"no name", agentTools, call("", `{}`), "no function name"},
		{"not json", agentTools, call("get_weather", `{"city": "Par`), "arguments are not JSON"},
		{"trailing garbage", agentTools, call("get_weather", `{"city": "Paris"}}`), "arguments are not JSON"},
		{"two objects", agentTools, call("get_weather", `{"city": "Paris"}{"city": "Rome"}`), "arguments are not JSON"},
		{"array not object", agentTools, call("get_weather", `["Paris"]`), "arguments are a JSON array, not an object"},
		{"json string", nil, call("f", `"{\"city\": \"Paris\"}"`), "arguments are a JSON string, not an object"},
		{"arguments wrapper", agentTools, call("get_weather", `{"arguments": {"city": "Paris"}}`), `spurious "arguments" wrapper`},
		{"name and arguments wrapper", agentTools, call("get_weather", `{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}`), `spurious "arguments" wrapper`},
		{"wrapper with tools unknown", nil, call("f", `{"arguments": {}}`), `spurious "arguments" wrapper`},
		{"empty object but required", agentTools, call("get_weather", `{}`), "empty arguments {} but the tool requires city"},
		{"empty string but required", agentTools, call("search", ``), "empty arguments {} but the tool requires query"},
		{"missing required", agentTools, call("get_weather", `{"unit": "celsius"}`), `args: missing required field "city"`},
		{"wrong type", agentTools, call("get_weather", `{"city": 75001}`), "args.city: is an integer, want string"},
		{"fraction for integer", agentTools, call("get_weather", `{"city": "Paris", "days": 1.5}`), "args.days: is a number, want integer"},
		{"enum", agentTools, call("get_weather", `{"city": "Paris", "unit": "kelvin"}`), `args.unit: "kelvin" is not one of ["celsius","fahrenheit"]`},
		{"extra property", agentTools, call("get_weather", `{"city": "Paris", "country": "FR"}`), `unexpected field "country"`},
		{"nested item type", agentTools, call("search", `{"query": "q", "filters": [{"field": 1}]}`), "args.filters[0].field: is an integer, want string"},
		{"const", agentTools, call("search", `{"query": "q", "filters": [{"field": "a", "op": "ne"}]}`), `args.filters[0].op: "ne" is not the constant "eq"`},
		{"anyOf", agentTools, call("search", `{"query": "q", "mode": true}`), "args.mode: true matches none of the anyOf branches"},

		// Keywords the detector once ignored: bounds, patterns, references, oneOf.
		{"maximum", keywordTools, call("k", `{"top_k": 5000}`), "args.top_k: 5000 is above maximum 10"},
		{"exclusive minimum", keywordTools, call("k", `{"top_k": 2, "ratio": 0}`), "args.ratio: 0 is not above exclusiveMinimum 0"},
		{"pattern", keywordTools, call("k", `{"order_id": "12345"}`), `args.order_id: "12345" does not match pattern "^ORD-[0-9]{5}$"`},
		{"pattern ok", keywordTools, call("k", `{"order_id": "ORD-12345"}`), ""},
		{"ref to defs", keywordTools, call("k", `{"when": {"day": 40}}`), "args.when.day: 40 is above maximum 31"},
		{"ref ok", keywordTools, call("k", `{"when": {"day": 4}}`), ""},
		{"oneOf matches two branches", keywordTools, call("k", `{"id": 7}`), "args.id: 7 matches oneOf branches 0 and 1; want exactly one"},
		{"oneOf matches one branch", keywordTools, call("k", `{"id": "x7"}`), ""},
		{"maxLength", keywordTools, call("k", `{"order_id": "ORD-123456789"}`), "more than maxLength 9"},
		{"minItems", keywordTools, call("k", `{"tags": []}`), "args.tags: has 0 items, fewer than minItems 1"},
		{"uniqueItems", keywordTools, call("k", `{"tags": ["a", "a"]}`), "args.tags: items 0 and 1 are equal (uniqueItems)"},
		{"name with a space", keywordTools, call("k", `{"odd name": 1}`), `args["odd name"]: is an integer, want string`},
		{"replacement char raw", agentTools, call("get_weather", `{"city": "Par�s"}`), "replacement character U+FFFD"},
		{"replacement char escaped", nil, call("f", `{"city": "Par\ufffds"}`), "replacement character U+FFFD"},
		{"invalid utf8", nil, call("f", "{\"city\": \"Par\xffs\"}"), "replacement character U+FFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := toolcallSchema{}.Detect(context.Background(), calls(tt.tools, tt.call))
			if err != nil {
				t.Fatal(err)
			}
			if l.Detector != ToolcallSchemaName {
				t.Errorf("detector = %q", l.Detector)
			}
			if tt.want == "" {
				if l.Corrupted || l.Reason != "" {
					t.Fatalf("want clean, got %+v", l)
				}
				return
			}
			if !l.Corrupted || !strings.Contains(l.Reason, tt.want) {
				t.Fatalf("got %+v, want a reason containing %q", l, tt.want)
			}
		})
	}
}

func TestToolcallSchemaReasonCountsTheRest(t *testing.T) {
	r := calls(agentTools,
		call("nope", `{}`), call("get_weather", `{"x": 1, "y": 2}`), call("search", `[]`))
	l, _ := toolcallSchema{}.Detect(context.Background(), r)
	// nope: 1 problem; get_weather: missing city + 2 unexpected fields; search: 1.
	if !strings.HasPrefix(l.Reason, "tool call 0 (nope): names a tool") || !strings.HasSuffix(l.Reason, "; and 2 more") {
		t.Errorf("reason = %q", l.Reason)
	}
}

func TestToolcallSchemaNoCalls(t *testing.T) {
	l, err := toolcallSchema{}.Detect(context.Background(), reply("Just text."))
	if err != nil || l.Corrupted {
		t.Fatalf("got %+v, %v", l, err)
	}
}

func TestUnreadableSchemas(t *testing.T) {
	for _, s := range []string{`{`, `[1]`, `{"type": 3}`, `{"properties": {"a": 1}}`, `{"type": ["string", 1]}`} {
		if toolschema.Compile("f", []byte(s)).Err == nil {
			t.Errorf("schema %s compiled", s)
		}
	}
	// An unreadable schema degrades to name and JSON checks rather than flagging.
	l, _ := toolcallSchema{}.Detect(context.Background(), calls([]openai.Tool{tool("f", `{"type": 3}`)}, call("f", `{"a": 1}`)))
	if l.Corrupted {
		t.Errorf("unreadable schema flagged a call: %+v", l)
	}
}

func FuzzToolcallSchema(f *testing.F) {
	f.Add(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`, "get_weather", `{"city":"Paris"}`)
	f.Add(`{"type":"object","properties":{"n":{"type":"integer","enum":[1,2]}}}`, "f", `{"n":1.0}`)
	f.Add(`{"anyOf":[{"type":"string"},{"items":{"const":1}}]}`, "f", `{"arguments":{}}`)
	f.Add(`true`, "f", ``)
	f.Add(`false`, "f", `{"a":"\ufffd"}`)
	f.Add(`{"type":"object","allOf":[{"required":["a"]}]}`, "", `[{]`)
	f.Add(`{"type":"object","properties":{"top_k":{"type":"integer","minimum":1,"maximum":10}}}`, "f", `{"top_k":5000}`)
	f.Add(`{"$defs":{"d":{"pattern":"^ORD-"}},"properties":{"id":{"$ref":"#/$defs/d"}}}`, "f", `{"id":"12"}`)
	f.Add(`{"properties":{"v":{"oneOf":[{"type":"integer"},{"type":"number"}]}}}`, "f", `{"v":1e999}`)
	f.Fuzz(func(t *testing.T, params, name, args string) {
		r := calls([]openai.Tool{tool("f", params), tool("get_weather", params)}, call(name, args))
		l, err := toolcallSchema{}.Detect(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if l.Corrupted == (l.Reason == "") {
			t.Fatalf("corrupted=%v with reason %q", l.Corrupted, l.Reason)
		}
		_, decodeErr := toolschema.DecodeJSON([]byte(args))
		if strings.TrimSpace(args) != "" && decodeErr != nil && !l.Corrupted {
			t.Fatalf("arguments %q are not JSON but were judged clean", args)
		}
		if strings.ContainsRune(args, '\uFFFD') && !l.Corrupted {
			t.Fatalf("replacement character in %q judged clean", args)
		}
		if name != "f" && name != "get_weather" && !l.Corrupted {
			t.Fatalf("call of %q, a tool not offered, judged clean", name)
		}
		// Without tools, an object with a field other than the wrapper's is always clean.
		if name != "" {
			u := calls(nil, call(name, `{"x": 1}`))
			if l, _ := (toolcallSchema{}).Detect(context.Background(), u); l.Corrupted && utf8Clean(name) {
				t.Fatalf("plain call judged corrupted: %q", l.Reason)
			}
		}
	})
}

func utf8Clean(s string) bool {
	return !strings.ContainsRune(s, '\uFFFD') && strings.ToValidUTF8(s, "") == s
}

// TestToolcallSchemaHonoursTheWorkloadsOwnBounds: the toolcall-agent workload offers
// search_docs with top_k in [1, 10]; a call asking for 5000 results breaks that schema.
func TestToolcallSchemaHonoursTheWorkloadsOwnBounds(t *testing.T) {
	tools := workload.ToolSpecs()
	for _, tt := range []struct{ args, want string }{
		{`{"query": "hicache", "top_k": 5000}`, "args.top_k: 5000 is above maximum 10"},
		{`{"query": "hicache", "top_k": 0}`, "args.top_k: 0 is below minimum 1"},
		{`{"query": "hicache", "top_k": 3}`, ""},
	} {
		l, err := toolcallSchema{}.Detect(context.Background(), calls(tools, call("search_docs", tt.args)))
		if err != nil {
			t.Fatal(err)
		}
		if tt.want == "" {
			if l.Corrupted {
				t.Errorf("%s: want clean, got %q", tt.args, l.Reason)
			}
			continue
		}
		if !l.Corrupted || !strings.Contains(l.Reason, tt.want) {
			t.Errorf("%s: got %+v, want a reason containing %q", tt.args, l, tt.want)
		}
	}
}
