package detectors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

func text(content, finish string) TurnOutput {
	return TurnOutput{Content: content, FinishReason: finish}
}

func calling(finish string, cs ...openai.ToolCall) TurnOutput {
	return TurnOutput{ToolCalls: cs, FinishReason: finish}
}

func TestFirstDivergence(t *testing.T) {
	weather := call("get_weather", `{"city": "Paris", "unit": "celsius"}`)
	base := []TurnOutput{calling("tool_calls", weather), text("Paris is 21 degrees and sunny.", "stop")}
	tests := []struct {
		name string
		arm  []TurnOutput
		want *Divergence
	}{
		{"identical", base, nil},
		{"call ids differ only", []TurnOutput{calling("tool_calls", openai.ToolCall{ID: "call_other", Function: weather.Function}), base[1]}, nil},
		{"arm ended early", base[:1], nil},
		{"arm went on longer", append(append([]TurnOutput{}, base...), text("more", "stop")), nil},
		{"content", []TurnOutput{base[0], text("Paris is 21 degrees and rainy.", "stop")},
			&Divergence{Turn: 1, Field: "content", Rune: 24, Baseline: "degrees and sunny.", Arm: "degrees and rainy."}},
		{"garbled markup instead of a call", []TurnOutput{text("<｜DSML｜tool_calls>\n<｜DSML｜inv", "stop"), base[1]},
			&Divergence{Turn: 0, Field: "content", Rune: 0, Baseline: "", Arm: "<｜DSML｜tool_calls>\n<｜DSML｜inv"}},
		{"arguments", []TurnOutput{calling("tool_calls", call("get_weather", `{"city": "Paris", "unit": "fahrenheit"}`)), base[1]},
			&Divergence{Turn: 0, Field: "tool call 0 arguments", Rune: 27, Baseline: `", "unit": "celsius"}`, Arm: `", "unit": "fahrenheit"}`}},
		{"name", []TurnOutput{calling("tool_calls", call("get_weathr", weather.Function.Arguments)), base[1]},
			&Divergence{Turn: 0, Field: "tool call 0 name", Rune: 9, Baseline: "get_weather", Arm: "get_weathr"}},
		{"one call more", []TurnOutput{calling("tool_calls", weather, weather), base[1]},
			&Divergence{Turn: 0, Field: "tool calls", Baseline: "1 calls", Arm: "2 calls"}},
		{"finish reason", []TurnOutput{calling("stop", weather), base[1]},
			&Divergence{Turn: 0, Field: "finish_reason", Baseline: "tool_calls", Arm: "stop"}},
		{"wide runes", []TurnOutput{base[0], text("Paris is 21 degrees and sunny。", "stop")},
			&Divergence{Turn: 1, Field: "content", Rune: 29, Baseline: "es and sunny.", Arm: "es and sunny。"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := FirstDivergence(base, tt.arm)
			if tt.want == nil {
				if ok {
					t.Fatalf("want none, got %+v", d)
				}
				return
			}
			if !ok || d != *tt.want {
				t.Fatalf("got %+v (%v), want %+v", d, ok, *tt.want)
			}
		})
	}
}

func TestDivergenceString(t *testing.T) {
	d, _ := FirstDivergence([]TurnOutput{text("abc", "stop")}, []TurnOutput{text("abd", "stop")})
	if got, want := d.String(), `turn 0 content differs at rune 2: baseline "abc", this arm "abd"`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestDivergenceJudgesNoSingleResponse(t *testing.T) {
	d, _ := Builtin(DivergenceName)
	if _, err := d.Detect(context.Background(), reply("x")); !errors.Is(err, ErrCrossArm) {
		t.Errorf("err = %v, want ErrCrossArm", err)
	}
	// Label leaves it out: no label, no error for every turn of a run.
	labels, corrupted, err := Label(context.Background(), []plugins.Detector{d}, reply("x"))
	if err != nil || corrupted || len(labels) != 0 {
		t.Errorf("Label with divergence: %v %v %v", labels, corrupted, err)
	}
}

func FuzzFirstDivergence(f *testing.F) {
	f.Add("Paris is sunny.", "Paris is rainy.", `{"a": 1}`, `{"a": 2}`, "stop", "stop")
	f.Add("", "<｜DSML｜tool_calls>", "", "", "tool_calls", "stop")
	f.Add("same", "same", "x", "x", "stop", "length")
	f.Add("\xff\xfe", "\xff\xfd", "", "", "", "")
	f.Fuzz(func(t *testing.T, bc, ac, bargs, aargs, bfin, afin string) {
		b := []TurnOutput{{Content: bc, ToolCalls: []openai.ToolCall{call("f", bargs)}, FinishReason: bfin}}
		a := []TurnOutput{{Content: ac, ToolCalls: []openai.ToolCall{call("f", aargs)}, FinishReason: afin}}
		d, ok := FirstDivergence(b, a)
		if identical := bc == ac && bargs == aargs && bfin == afin; identical == ok {
			t.Fatalf("identical=%v but diverged=%v (%+v)", identical, ok, d)
		}
		if back, _ := FirstDivergence(a, b); ok && (back.Rune != d.Rune || back.Field != d.Field) {
			t.Fatalf("not symmetric: %+v vs %+v", d, back)
		}
		if !ok {
			return
		}
		// The texts agree on every rune before the reported one.
		field := map[string][2]string{"content": {bc, ac}, "tool call 0 arguments": {bargs, aargs}}[d.Field]
		if pb, pa := runePrefix(field[0], d.Rune), runePrefix(field[1], d.Rune); d.Field != "finish_reason" && pb != pa {
			t.Fatalf("texts differ before rune %d: %q vs %q", d.Rune, pb, pa)
		}
		if utf8.RuneCountInString(d.Baseline) > excerptRunes || utf8.RuneCountInString(d.Arm) > excerptRunes {
			t.Fatalf("excerpts too long: %+v", d)
		}
		if !strings.HasPrefix(d.String(), "turn 0 ") {
			t.Fatalf("String() = %q", d.String())
		}
	})
}

// runePrefix is the first n runes of s (each invalid byte one rune, as range reads it).
func runePrefix(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
