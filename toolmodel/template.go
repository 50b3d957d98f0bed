// Package toolmodel is arbiter's own small tool-calling model: the chat format it
// speaks (an ollama template and the special tokens it is written in), its vocabulary,
// the conversations it is trained on (the tool-call agent's and the long-context
// workload's, held by a faithful model), their tokenization as the engine tokenizes
// prompts, and the GGUF file made from a trained checkpoint. train.py beside it trains
// the model on a GPU.
package toolmodel

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/template"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/workload"
)

// Template is the model's chat template in ollama's dialect (a Go template over
// .Messages and .Tools). The tools are listed by name and required arguments; every
// message is its role's marker and its content; an assistant's calls are Hermes-style
// <tool_call>{"name":…,"arguments":{…}}</tool_call>, which is also how ollama learns,
// from the range over .ToolCalls, where a reply's calls are; an assistant's message ends
// with </s>. The prompt ends with the assistant's marker.
const Template = `{{- if .Tools }}<|tools|>{{ range .Tools }}{{ .Function.Name }}({{ range $i, $p := .Function.Parameters.Required }}{{ if $i }}, {{ end }}{{ $p }}{{ end }}) {{ end }}
{{ end }}
{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}
{{- range .ToolCalls }}<tool_call>{"name":"{{ .Function.Name }}","arguments":{{ json .Function.Arguments }}}</tool_call>{{ end }}
{{- if eq .Role "assistant" }}</s>{{ end }}
{{ end }}<|assistant|>`

// Markers of the chat format: role markers are control tokens, the call markers
// user-defined ones (printed in replies, as a model's own markup is).
const (
	AssistantMarker = "<|assistant|>"
	CallOpen        = "<tool_call>"
	CallClose       = "</tool_call>"
	EndOfTurn       = "</s>"
)

// roles are the roles a conversation has, each a marker <|role|>.
var roles = []string{"system", "tools", "user", "assistant", "tool"}

var chatTemplate = template.Must(template.New("chat").Option("missingkey=zero").Funcs(template.FuncMap{
	"json": func(v any) string {
		b, _ := json.Marshal(v) // decoded JSON values always encode
		return string(b)
	},
}).Parse(Template))

// The values the template reads, shaped as ollama's (api.Message, api.Tool) so that the
// same template renders the same text here and there.
type (
	tmplCall struct {
		Function struct {
			Name      string
			Arguments map[string]any
		}
	}
	tmplMessage struct {
		Role, Content string
		ToolCalls     []tmplCall
	}
	tmplTool struct {
		Type     string
		Function struct {
			Name, Description string
			Parameters        struct {
				Type     string
				Required []string
			}
		}
	}
)

// Render is the prompt an engine renders from a conversation with Template, ending
// with the assistant's marker: consecutive messages of one role are joined (their
// contents by a blank line, the first one's calls kept), as ollama collates them, and a
// call's arguments are re-encoded from their decoded value (keys sorted, compact).
func Render(tools []openai.Tool, msgs []openai.Message) (string, error) {
	var tt []tmplTool
	for _, t := range tools {
		var x tmplTool
		x.Type, x.Function.Name, x.Function.Description = t.Type, t.Function.Name, t.Function.Description
		if len(t.Function.Parameters) > 0 {
			if err := json.Unmarshal(t.Function.Parameters, &x.Function.Parameters); err != nil {
				return "", fmt.Errorf("toolmodel: tool %s: %w", t.Function.Name, err)
			}
		}
		tt = append(tt, x)
	}
	var mm []*tmplMessage
	for _, m := range msgs {
		if n := len(mm); n > 0 && mm[n-1].Role == m.Role {
			mm[n-1].Content += "\n\n" + m.Content
			continue
		}
		x := &tmplMessage{Role: m.Role, Content: m.Content}
		for _, c := range m.ToolCalls {
			var call tmplCall
			call.Function.Name = c.Function.Name
			if err := json.Unmarshal([]byte(c.Function.Arguments), &call.Function.Arguments); err != nil {
				return "", fmt.Errorf("toolmodel: call of %s: arguments: %w", c.Function.Name, err)
			}
			x.ToolCalls = append(x.ToolCalls, call)
		}
		mm = append(mm, x)
	}
	values := map[string]any{"Messages": mm, "Response": ""}
	if len(tt) > 0 {
		values["Tools"] = tt
	}
	var b strings.Builder
	if err := chatTemplate.Execute(&b, values); err != nil {
		return "", fmt.Errorf("toolmodel: render: %w", err)
	}
	return b.String(), nil
}

// RenderConversation is a whole conversation as training text: Render without the
// closing assistant's marker, which asks for a reply the conversation does not have.
func RenderConversation(c workload.Conversation) (string, error) {
	s, err := Render(c.Tools, c.Messages)
	return strings.TrimSuffix(s, AssistantMarker), err
}
