package detectors

import (
	"context"
	"strings"
	"testing"
)

// garbledReplies are corrupted replies as refserve emits them for each --tool-call-parser
// and markup variant (plain, doubled bars, a space after '<'): a clean start, then the
// lure call's markup truncated, repeated and interleaved out of order. A call reply
// flushes its plainly printed prefix before the variant tail.
var garbledReplies = []struct{ parser, variant, content string }{
	{"deepseekv4", "plain", "Sure, I can help with that. Let me know if<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Pa</｜DSML｜par"},
	{"deepseekv4", "doubled", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜｜DSML｜｜parameter name=\"city\"ris</｜｜DSML｜｜parameter>\n string=\"true\">"},
	{"deepseekv4", "spaced", "The forecast for Vienna is<｜DSML｜ tool_calls>\n<｜DSML｜ invoke name=\"get_weather\">Paris</｜DSML｜ param\n<｜DSML｜ invoke"},
	{"deepseekv32", "plain", "Happy to help.<｜DSML｜function_calls>\n<｜DSML｜inv name=\"city\"</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
	{"deepseekv32", "doubled", "Booked for two<｜｜DSML｜｜function_calls>\n\n<｜｜DSML｜｜invoke name=\"get_weather\"> name=\"get_weather\">"},
	{"deepseekv32", "spaced", "Let me check<｜DSML｜ function_calls>\n<｜DSML｜ invoke name=\"book\"> string=\"false\">4</｜DSML｜ parameter>"},
	{"deepseekv3", "plain", "Let me know if<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_\n```json\n{\"ci<｜tool▁sep｜>weather"},
	{"deepseekv3", "doubled", "I'll look that up<｜｜tool▁calls▁begin｜｜><｜｜tool▁call▁begin｜｜>funct<｜｜tool▁sep｜｜>get_weat\n```"},
	{"deepseekv3", "spaced", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function< ｜tool▁sep｜>get_weather\n```json\n\"Par< ｜tool▁call▁end｜>< ｜tool▁calls▁"},
	{"qwen25", "plain", "Sure, let me know if<tool_call><tool_call>\nelimit\": 3, \"city\": \"Pa}\n</tool_call>"},
	{"qwen25", "plain truncated", "Let me know if<tool_call>\n{\"na{\"city\": \"Paris\"}}\n</tool_"},
	{"qwen25", "spaced", "Here is the plan< tool_call>\n{\"name\": \"get_weather\", \"arguments\": ty\": < /tool_call>"},
	{"qwen25", "spaced after plain prefix", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci\"Paris< tool_call>ty\":"},
	{"qwen25", "plain, the reply opens with the tag", "<tool_call>: 3}}ty\":{\"city\":ris\"\n{\"name\": \"get_weather\", \"arg{\"ci"},
	{"hermes", "plain, the reply opens with the tag", "<tool_call>\n, \"day: {\"name\": \"get_weather\", \"arguments\": \nty\": \"Pa"},
	{"hermes", "plain", "Great question. Let me know if<tool_call>\n\n{\"name\": \"book_table\", \"arguments\": {\"people\": 4}}\n}"},
	{"hermes", "plain, opener cut short", "Great question. Let me know if<tool_c\"time\": \"19:00\"}}\n</tool_call>"},
	{"hermes", "spaced", "All set< tool_call>\n< tool_call>\n\"people\": 4, \"time"},
	{"kimi_k2", "plain", "Let me know if<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"ci<|tool_call_begin|>"},
	{"kimi_k2", "doubled", "Sure<||tool_calls_section_begin||><||tool_call_begin||>functions.get_wea{\"city\": \"Paris\"}<||tool_call_end||><||tool_calls_sec"},
	{"kimi_k2", "spaced", "Of course.< |tool_calls_section_begin|>< |tool_call_begin|>functions.get_weather:0< |tool_call_argu\"Paris\"}"},
	{"llama3", "plain", "Let me know if<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"ci<|python_tag|>"},
	{"llama3", "doubled", "Of course<||python_tag||>{\"name\": \"get_weather\", \"par<||python_tag||>ty\": \"Paris\"}}"},
	{"llama3", "spaced", "Right away< |python_tag|>{\"name\": \"get_weather\", \"parameters\": ris\"}< |pyth"},
}

func TestGarbledRepliesAreLeaks(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range garbledReplies {
		seen[g.parser] = true
		l, err := dsmlLeak{}.Detect(context.Background(), reply(g.content))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Corrupted {
			t.Errorf("%s (%s): garbled reply judged clean: %q", g.parser, g.variant, g.content)
			continue
		}
		checkExcerpt(t, l.Reason)
	}
	// Every parser refserve accepts has garbled replies above.
	for _, p := range []string{"deepseekv4", "deepseekv32", "deepseekv3", "qwen25", "hermes", "kimi_k2", "llama3"} {
		if !seen[p] {
			t.Errorf("no garbled %s reply", p)
		}
	}
}

// stripBrackets removes every angle bracket, the way some degenerate replies lose them.
func stripBrackets(s string) string { return strings.NewReplacer("<", "", ">", "").Replace(s) }

// TestGarbledRepliesWithoutBracketsAreLeaks: refserve's garbled DeepSeek replies are still
// leaks once their angle brackets are gone; the formats whose tokens prose can spell
// (ASCII bars, <tool_call>) are not claimed without them.
func TestGarbledRepliesWithoutBracketsAreLeaks(t *testing.T) {
	for _, g := range garbledReplies {
		if !strings.HasPrefix(g.parser, "deepseek") {
			continue
		}
		content := stripBrackets(g.content)
		l, err := dsmlLeak{}.Detect(context.Background(), reply(content))
		if err != nil {
			t.Fatal(err)
		}
		if !l.Corrupted || !strings.Contains(l.Reason, "(brackets lost)") {
			t.Errorf("%s (%s) without brackets: %+v for %q", g.parser, g.variant, l, content)
			continue
		}
		checkExcerpt(t, l.Reason)
	}
}
