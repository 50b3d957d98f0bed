package openai

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseToolChoice(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want ToolChoice
		ok   bool
	}{
		{"", ToolChoice{Mode: ChoiceAuto}, true},
		{"null", ToolChoice{Mode: ChoiceAuto}, true},
		{` "none" `, ToolChoice{Mode: ChoiceNone}, true},
		{`"required"`, ToolChoice{Mode: ChoiceRequired}, true},
		{`{"type":"function","function":{"name":"search"}}`, ToolChoice{Mode: ChoiceFunction, Name: "search"}, true},
		{`{"function":{"name":"search"}}`, ToolChoice{Mode: ChoiceFunction, Name: "search"}, true},
		{`"any"`, ToolChoice{}, false},
		{`{"type":"function"}`, ToolChoice{}, false},
		{`{"type":"tool","function":{"name":"search"}}`, ToolChoice{}, false},
		{`{}`, ToolChoice{}, false},
		{`7`, ToolChoice{}, false},
		{`[`, ToolChoice{}, false},
	} {
		got, err := ParseToolChoice(json.RawMessage(c.raw))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseToolChoice(%s) = %+v, %v; want %+v, ok %v", c.raw, got, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, ErrToolChoice) {
			t.Errorf("ParseToolChoice(%s): %v does not wrap ErrToolChoice", c.raw, err)
		}
	}
}

// What a user types for --tool-choice reads back as the choice it names.
func TestToolChoiceJSONReadsBack(t *testing.T) {
	if ToolChoiceJSON("") != nil {
		t.Error("nothing typed should send no tool_choice")
	}
	for typed, want := range map[string]ToolChoice{"auto": {Mode: ChoiceAuto}, "none": {Mode: ChoiceNone},
		"required": {Mode: ChoiceRequired}, "get_weather": {Mode: ChoiceFunction, Name: "get_weather"}} {
		got, err := ParseToolChoice(ToolChoiceJSON(typed))
		if err != nil || got != want {
			t.Errorf("%q: read back %+v, %v; want %+v", typed, got, err, want)
		}
	}
}

// Whatever a request carries, a choice read is one of the four modes, and a function
// choice names a function; one not read is an error.
func FuzzParseToolChoice(f *testing.F) {
	for _, s := range []string{"", `"auto"`, `"none"`, `{"type":"function","function":{"name":"x"}}`, `{"function":{}}`, `"\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := ParseToolChoice(json.RawMessage(raw))
		if err != nil {
			if c != (ToolChoice{}) {
				t.Fatalf("%q: error %v with a choice %+v", raw, err, c)
			}
			return
		}
		switch c.Mode {
		case ChoiceAuto, ChoiceNone, ChoiceRequired:
			if c.Name != "" {
				t.Fatalf("%q: mode %s with a name", raw, c.Mode)
			}
		case ChoiceFunction:
			if c.Name == "" {
				t.Fatalf("%q: a function choice without a name", raw)
			}
		default:
			t.Fatalf("%q: mode %q", raw, c.Mode)
		}
	})
}
