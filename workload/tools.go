package workload

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/openai/toolschema"
)

// param is one property of a tool's JSON schema.
type param struct {
	Name string
	Type string   // string | integer | number | boolean
	Enum []string // allowed values of a string, if restricted
	Desc string
	// Min and Max bound a number or integer when Max > Min.
	Min, Max float64
}

// toolDef is one tool of the agent's fixed set: its schema and its deterministic answer.
type toolDef struct {
	Name     string
	Desc     string
	Params   []param // all required
	Optional []param
	answer   func(args map[string]any) any
}

// toolSet is the fixed tool set every session draws its offer from. Its order is part of
// the workload's definition: reordering it changes every session's script.
var toolSet = []toolDef{
	{
		Name: "get_weather", Desc: "Current weather for a city.",
		Params: []param{
			{Name: "city", Type: "string", Desc: "City name, e.g. Lisbon"},
			{Name: "unit", Type: "string", Enum: []string{"celsius", "fahrenheit"}, Desc: "Temperature unit"},
		},
		answer: func(a map[string]any) any {
			h := digest("get_weather", a["city"])
			c := float64(h%400)/10 - 5
			t := c
			if a["unit"] == "fahrenheit" {
				t = c*9/5 + 32
			}
			conds := []string{"clear", "cloudy", "rain", "fog", "wind", "snow"}
			return map[string]any{"city": a["city"], "temperature": math.Round(t*10) / 10, "unit": a["unit"],
				"conditions": conds[(h>>16)%uint64(len(conds))], "humidity": (h >> 24) % 101}
		},
	},
	{
		Name: "search_docs", Desc: "Search the product documentation.",
		Params: []param{
			{Name: "query", Type: "string", Desc: "Search terms"},
			{Name: "top_k", Type: "integer", Desc: "How many results to return", Min: 1, Max: 10},
		},
		answer: func(a map[string]any) any {
			k := int(a["top_k"].(float64))
			hits := make([]map[string]any, 0, k)
			for i := range k {
				h := digest("search_docs", a["query"], i)
				hits = append(hits, map[string]any{
					"doc":   fmt.Sprintf("docs/%s-%03d.md", docTopics[h%uint64(len(docTopics))], h>>8%1000),
					"score": math.Round(float64(1000-i*97-int(h>>20%50))) / 1000,
				})
			}
			return map[string]any{"query": a["query"], "results": hits}
		},
	},
	{
		Name: "get_order_status", Desc: "Status of a customer order.",
		Params: []param{{Name: "order_id", Type: "string", Desc: "Order id, e.g. ORD-12345"}},
		answer: func(a map[string]any) any {
			h := digest("get_order_status", a["order_id"])
			states := []string{"processing", "shipped", "delivered", "delayed", "cancelled"}
			return map[string]any{"order_id": a["order_id"], "status": states[h%uint64(len(states))],
				"eta_days": (h >> 8) % 9, "carrier": []string{"DHL", "UPS", "FedEx"}[(h>>16)%3]}
		},
	},
	{
		Name: "run_sql", Desc: "Run a SQL query against the analytics replica.",
		Params: []param{
			{Name: "query", Type: "string", Desc: "One SQL statement"},
			{Name: "read_only", Type: "boolean", Desc: "Refuse statements that write"},
		},
		answer: func(a map[string]any) any {
			q := strings.ToLower(strings.TrimSpace(a["query"].(string)))
			if a["read_only"] == true && !strings.HasPrefix(q, "select") && !strings.HasPrefix(q, "with") {
				return map[string]any{"error": "read_only: only SELECT or WITH statements may run"}
			}
			h := digest("run_sql", a["query"], a["read_only"])
			rows := int(h % 5)
			out := make([][]any, 0, rows)
			for i := range rows {
				out = append(out, []any{i + 1, (h >> (8 * uint(i))) % 10000})
			}
			return map[string]any{"columns": []string{"id", "value"}, "rows": out, "row_count": rows}
		},
	},
	{
		Name: "convert_currency", Desc: "Convert an amount between currencies.",
		Params: []param{
			{Name: "amount", Type: "number", Desc: "Amount to convert", Min: 0, Max: 1e9},
			{Name: "from", Type: "string", Enum: currencies, Desc: "Source currency"},
			{Name: "to", Type: "string", Enum: currencies, Desc: "Target currency"},
		},
		answer: func(a map[string]any) any {
			rate := 1.0
			if a["from"] != a["to"] {
				rate = 0.5 + float64(digest("convert_currency", a["from"], a["to"])%1500)/1000
			}
			return map[string]any{"amount": a["amount"], "from": a["from"], "to": a["to"], "rate": rate,
				"result": math.Round(a["amount"].(float64)*rate*100) / 100}
		},
	},
	{
		Name: "create_ticket", Desc: "Open a support ticket.",
		Params: []param{
			{Name: "title", Type: "string", Desc: "Short summary"},
			{Name: "priority", Type: "string", Enum: []string{"low", "medium", "high"}, Desc: "Urgency"},
		},
		Optional: []param{{Name: "assignee", Type: "string", Desc: "Team or person"}},
		answer: func(a map[string]any) any {
			h := digest("create_ticket", a["title"], a["priority"], a["assignee"])
			return map[string]any{"ticket": fmt.Sprintf("SUP-%05d", h%100000), "priority": a["priority"], "state": "open"}
		},
	},
}

var (
	currencies = []string{"USD", "EUR", "GBP", "JPY", "CHF"}
	docTopics  = []string{"install", "hicache", "scheduler", "abort", "metrics", "tool-calls", "disagg"}
)

// digest is a stable hash of values (as JSON), from which fake tools derive answers
// that depend on their arguments alone.
func digest(vals ...any) uint64 {
	h := fnv.New64a()
	enc := json.NewEncoder(h)
	for _, v := range vals {
		_ = enc.Encode(v) // encoding JSON-decoded values cannot fail
	}
	return h.Sum64()
}

// ToolSpecs returns every tool of the agent's fixed set as a request offers it, in the
// set's order; each session offers a seeded subset of them. Detector tests and
// `arbiter classify --tools` read the workload's own schemas from here.
func ToolSpecs() []openai.Tool {
	return append([]openai.Tool(nil), toolSpecs()...)
}

// toolSpecs are the rendered tools, encoded once per process: every session's offer
// shares their (never modified) parameter bytes instead of encoding its own.
var toolSpecs = sync.OnceValue(func() []openai.Tool {
	out := make([]openai.Tool, len(toolSet))
	for i, t := range toolSet {
		out[i] = t.spec()
	}
	return out
})

func toolByName(name string) (toolDef, bool) {
	for _, t := range toolSet {
		if t.Name == name {
			return t, true
		}
	}
	return toolDef{}, false
}

// spec renders the tool as the request offers it.
func (t toolDef) spec() openai.Tool {
	props := make(map[string]any, len(t.Params)+len(t.Optional))
	required := make([]string, 0, len(t.Params))
	for _, p := range append(append([]param(nil), t.Params...), t.Optional...) {
		s := map[string]any{"type": p.Type, "description": p.Desc}
		if len(p.Enum) > 0 {
			s["enum"] = p.Enum
		}
		if p.Max > p.Min {
			s["minimum"], s["maximum"] = p.Min, p.Max
		}
		props[p.Name] = s
	}
	for _, p := range t.Params {
		required = append(required, p.Name)
	}
	schema, _ := json.Marshal(map[string]any{ // maps of strings and slices always encode
		"type": "object", "properties": props, "required": required, "additionalProperties": false,
	})
	return openai.Tool{Type: "function", Function: openai.FunctionSpec{Name: t.Name, Description: t.Desc, Parameters: schema}}
}

// maxReported bounds the schema violations one error reply spells out.
const maxReported = 3

// ToolResult is what the session's fake tool answers to one call: JSON text, a pure
// function of the offered tools, the tool's name and its arguments. Like a strict harness
// it validates the arguments against the offered schema (with openai/toolschema, the
// reader the toolcall-schema detector uses, so the tool and the detector never disagree)
// and answers a call it cannot run (a tool not offered, arguments that are not JSON or
// break the schema) with an error object instead of failing the session, so the engine
// sees its mistake.
func ToolResult(offered []openai.Tool, call openai.FunctionCall) string {
	schema, isOffered := toolschema.Of(offered).Lookup(call.Name)
	def, known := toolByName(call.Name)
	if !isOffered || !known {
		return errorResult(fmt.Sprintf("unknown tool %q", call.Name))
	}
	argText := strings.TrimSpace(call.Arguments)
	if argText == "" {
		argText = "{}"
	}
	exact, err := toolschema.DecodeJSON([]byte(argText))
	if _, isObj := exact.(map[string]any); err != nil || !isObj {
		msg := "arguments are not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return errorResult(msg)
	}
	if vs := schema.Validate(exact); len(vs) > 0 {
		parts := make([]string, 0, maxReported+1)
		for i, v := range vs {
			if i == maxReported {
				parts = append(parts, fmt.Sprintf("and %d more", len(vs)-maxReported))
				break
			}
			parts = append(parts, v.String())
		}
		return errorResult(call.Name + ": " + strings.Join(parts, "; "))
	}
	var args map[string]any // the answers compute with float64, as a Python tool would
	if err := json.Unmarshal([]byte(argText), &args); err != nil {
		return errorResult("arguments are not a JSON object: " + err.Error())
	}
	out, err := json.Marshal(def.answer(args))
	if err != nil {
		return errorResult(call.Name + ": " + err.Error())
	}
	return string(out)
}

func errorResult(msg string) string {
	out, _ := json.Marshal(map[string]string{"error": msg}) // a string map always encodes
	return string(out)
}
