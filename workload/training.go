package workload

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/openai"
)

// Conversation is one whole conversation as a faithful model holds it: the tools offered
// and every message, the model's calls and answers included.
type Conversation struct {
	Tools    []openai.Tool
	Messages []openai.Message
}

// FaithfulSession is session i of the tool-call agent (seed, rounds), held by a model
// that does what each request asks: it calls the asked-for tool with the request's own
// words as arguments, reads the tool's answer, and answers in one sentence from it. With
// lc set it is a long-context session, each request padded by the case file as the
// long-context kind pads it. Such conversations teach a small model the workload's
// conversations; they are pure functions of their arguments.
func FaithfulSession(seed int64, session, rounds int, lc *LongContextConfig) Conversation {
	script := NewScript(seed, session, rounds)
	var file *scriptRand
	if lc != nil {
		if shared := sharedPrefix(seed, sharedTokens(*lc)); shared != "" {
			script.System = shared + "\n\n" + script.System
		}
		file = newScriptRand(seed, session, -5)
	}
	c := Conversation{Tools: script.Tools}
	c.Messages = append(c.Messages, openai.Message{Role: "system", Content: script.System})
	for round, ask := range script.Users {
		user := openai.Message{Role: "user", Content: ask}
		if lc != nil {
			user = growingUser(c.Messages, c.Tools, *lc, round, rounds, file, ask)
		}
		call := script.Calls[round]
		call.Arguments = canonicalArguments(call.Arguments)
		id := fmt.Sprintf("call_%d_%d", session, round)
		result := ToolResult(c.Tools, call)
		c.Messages = append(c.Messages, user,
			openai.Message{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: id, Type: "function", Function: call}}},
			openai.Message{Role: "tool", ToolCallID: id, Name: call.Name, Content: result},
			openai.Message{Role: "assistant", Content: Answer(call.Name, result)})
	}
	return c
}

// canonicalArguments is a call's arguments as an engine that decodes and re-encodes
// them writes them back (ollama does): keys sorted, compact.
func canonicalArguments(args string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		return args
	}
	b, err := json.Marshal(m)
	if err != nil {
		return args
	}
	return string(b)
}

// Answer is the one-sentence reply a faithful model writes from a tool's result.
func Answer(tool, result string) string {
	var r map[string]any
	if err := json.Unmarshal([]byte(result), &r); err != nil {
		return "The tool's answer could not be read."
	}
	if e, ok := r["error"]; ok {
		return fmt.Sprintf("The tool refused: %v.", e)
	}
	num := func(k string) string {
		b, _ := json.Marshal(r[k]) // decoded JSON always encodes
		return string(b)
	}
	switch tool {
	case "get_weather":
		return fmt.Sprintf("In %v it is %s degrees %v and %v, humidity %s%%.", r["city"], num("temperature"), r["unit"], r["conditions"], num("humidity"))
	case "search_docs":
		var docs []string
		if hits, ok := r["results"].([]any); ok {
			for _, h := range hits {
				if m, ok := h.(map[string]any); ok {
					docs = append(docs, fmt.Sprint(m["doc"]))
				}
			}
		}
		return fmt.Sprintf("The best pages about %v: %s.", r["query"], strings.Join(docs, ", "))
	case "get_order_status":
		return fmt.Sprintf("Order %v is %v; %v expects it in %s days.", r["order_id"], r["status"], r["carrier"], num("eta_days"))
	case "run_sql":
		return fmt.Sprintf("The query returned %s rows.", num("row_count"))
	case "convert_currency":
		return fmt.Sprintf("%s %v is %s %v at a rate of %s.", num("amount"), r["from"], num("result"), r["to"], num("rate"))
	case "create_ticket":
		return fmt.Sprintf("I opened %v with %v priority.", r["ticket"], r["priority"])
	}
	return "Done."
}
