package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Tool-choice modes.
const (
	ChoiceAuto     = "auto"
	ChoiceNone     = "none"
	ChoiceRequired = "required"
	// ChoiceFunction is tool_choice naming one function: {"type": "function",
	// "function": {"name": ...}}.
	ChoiceFunction = "function"
)

// ToolChoice is a request's tool_choice, read.
type ToolChoice struct {
	Mode string // ChoiceAuto, ChoiceNone, ChoiceRequired or ChoiceFunction
	Name string // the named function, when Mode is ChoiceFunction
}

// Forces reports whether the choice obliges the reply to call a tool.
func (c ToolChoice) Forces() bool { return c.Mode == ChoiceRequired || c.Mode == ChoiceFunction }

func (c ToolChoice) String() string {
	if c.Mode == ChoiceFunction {
		return fmt.Sprintf("names %q", c.Name)
	}
	return fmt.Sprintf("%q", c.Mode)
}

// ErrToolChoice is what ParseToolChoice wraps for a tool_choice it cannot read.
var ErrToolChoice = errors.New(`tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}`)

// ParseToolChoice reads tool_choice as a request carries it; absent or null means auto.
// Anything else is an error wrapping ErrToolChoice.
func ParseToolChoice(raw json.RawMessage) (ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ToolChoice{Mode: ChoiceAuto}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case ChoiceAuto, ChoiceNone, ChoiceRequired:
			return ToolChoice{Mode: s}, nil
		}
		return ToolChoice{}, fmt.Errorf("%w, not %q", ErrToolChoice, s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Function.Name == "" || (obj.Type != "" && obj.Type != ChoiceFunction) {
		return ToolChoice{}, ErrToolChoice
	}
	return ToolChoice{Mode: ChoiceFunction, Name: obj.Function.Name}, nil
}

// ToolChoiceJSON is the tool_choice a request carries for what a user typed: a mode, or
// else the name of the function to call; none for nothing typed.
func ToolChoiceJSON(v string) json.RawMessage {
	switch v {
	case "":
		return nil
	case ChoiceAuto, ChoiceNone, ChoiceRequired:
		b, _ := json.Marshal(v)
		return b
	}
	b, _ := json.Marshal(map[string]any{"type": ChoiceFunction, "function": map[string]string{"name": v}})
	return b
}
