package detectors

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
)

// reply wraps content as the single choice of a completion.
func reply(content string) plugins.Response {
	return plugins.Response{Completion: openai.ChatCompletion{
		Object:  "chat.completion",
		Choices: []openai.Choice{{Message: openai.Message{Role: "assistant", Content: content}, FinishReason: "stop"}},
	}}
}

const (
	v32Leak = "I'll check the weather for you.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"
	v4Leak  = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"read_file\">\n<｜DSML｜parameter name=\"path\" string=\"true\">/etc/hosts</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
	v3Leak  = "Let me look that up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
	qwen    = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	kimi    = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>"
	llama   = "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"
	claude  = "I'll search.\n<function_calls>\n<invoke name=\"search\">\n<parameter name=\"query\">go-plugin</parameter>\n</invoke>\n</function_calls>"
)

func TestDSMLLeak(t *testing.T) {
	tests := []struct {
		name    string
		content string
		format  string // "" means clean
	}{
		{"clean prose", "The capital of France is Paris. It has about 2.1 million inhabitants, and 3 < 5 > 2.", ""},
		{"clean html and comparisons", "Use <div class=\"x\"> and a <b>bold</b> tag; if a<b and b>c then a<c.", ""},
		{"bare tag names in prose", "The parser looks for a <tool_call> tag and the word invoke; function_calls is the wrapper.", ""},
		{"empty", "", ""},
		{"v3.2 dsml", v32Leak, "DeepSeek V3.2 DSML"},
		{"v4 dsml", v4Leak, "DeepSeek V4 DSML"},
		{"v4 doubled bars", "<｜｜DSML｜｜tool_calls>\n<｜｜DSML｜｜invoke name=\"f\">", "DeepSeek V4 DSML (doubled bars)"},
		{"v4 leading space tag", "Sure.\n<｜DSML｜ tool_calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>", "DeepSeek V4 DSML"},
		{"v4 leading space after bracket", "< ｜DSML｜tool_calls>", "DeepSeek V4 DSML"},
		{"dsml ascii bars", "<|DSML|invoke name=\"f\">", "DeepSeek DSML"},
		{"dsml fragment only", "the answer is</｜DSML｜parameter>", "DeepSeek DSML"},
		{"dsml generation from a later wrapper", "<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", "DeepSeek V4 DSML"},
		{"v3 tokens", v3Leak, "DeepSeek V3 tool-call tokens"},
		{"v3 ascii bars", "<|tool▁calls▁begin|><|tool▁call▁begin|>function<|tool▁sep|>f", "DeepSeek V3 tool-call tokens"},
		{"v3 underscores full-width bars", "<｜tool_call_begin｜>function<｜tool_sep｜>f", "DeepSeek V3 tool-call tokens"},
		{"qwen hermes", qwen, "Qwen/Hermes <tool_call>"},
		{"qwen3 coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", "Qwen/Hermes <tool_call>"},
		{"kimi", kimi, "Kimi tool-call section tokens"},
		{"llama", llama, "Llama <|python_tag|>"},
		{"anthropic", claude, "Anthropic-style <function_calls>"},
		{"anthropic namespaced", "<ns:function_calls><ns:invoke name=\"f\">", "Anthropic-style <function_calls>"},

		{"quoted in backtick fence", "A leak looks like this:\n\n```\n" + v4Leak + "\n```\n\nThat is not a call.", ""},
		{"quoted in tilde fence", "Example:\n~~~xml\n" + claude + "\n~~~\n", ""},
		{"quoted in fence inside list item", "1. The V3 format:\n   ```text\n   " + v3Leak + "\n   ```\n2. Done.", ""},
		{"quoted in longer fence holding a shorter one", "````md\n```\n" + qwen + "\n```\n````", ""},
		{"quoted inline", "The V4 wrapper is `<｜DSML｜tool_calls>` and Llama uses ``<|python_tag|>``.", ""},
		{"inline across lines of one paragraph", "Kimi opens with `<|tool_calls_section_begin|>\n<|tool_call_begin|>` tokens.", ""},

		{"unclosed fence is not a quote", "Here you go:\n```json\n" + v4Leak, "DeepSeek V4 DSML"},
		{"leak after a closed fence", "```go\nx := 1\n```\n" + kimi, "Kimi tool-call section tokens"},
		{"fence closed by a shorter one is still open", "````\n" + llama + "\n```\n", "Llama <|python_tag|>"},
		{"closing fence with text after is not a close", "```\ncode\n```" + qwen + "\n", "Qwen/Hermes <tool_call>"},
		{"unmatched backtick", "It's `broken " + v32Leak, "DeepSeek V3.2 DSML"},
		{"inline span does not cross a blank line", "A `tick\n\n" + v4Leak + "\n\nand another` here", "DeepSeek V4 DSML"},
		{"leak beside a quoted mention", "Format: `<tool_call>{}`.\n" + qwen, "Qwen/Hermes <tool_call>"},

		// Garbled variants of the non-DSML formats: doubled bars and a space after '<'.
		{"v3 doubled bars", "Sure.<｜｜tool▁calls▁begin｜｜><｜｜tool▁call▁begin｜｜>function", "DeepSeek V3 tool-call tokens"},
		{"v3 spaced", "Sure.< ｜tool▁calls▁begin｜>< ｜tool▁call▁begin｜>function", "DeepSeek V3 tool-call tokens"},
		{"llama doubled bars", "Here:<||python_tag||>{\"name\": \"f\"", "Llama <|python_tag|>"},
		{"llama spaced", "Here:< |python_tag|>{\"name\": \"f\"", "Llama <|python_tag|>"},
		{"qwen spaced", "Let me know if< tool_call>\n{\"name\": \"f\"", "Qwen/Hermes <tool_call>"},
		{"qwen spaced closer after json", "{\"city\": \"Paris\"}}\n< /tool_call>", "Qwen/Hermes <tool_call>"},
		{"kimi doubled bars", "<||tool_calls_section_begin||><||tool_call_begin||>functions.f:0", "Kimi tool-call section tokens"},
		{"kimi spaced", "< |tool_calls_section_begin|>< |tool_call_begin|>functions.f:0", "Kimi tool-call section tokens"},
		{"anthropic spaced", "I'll search.\n< function_calls>\n< invoke name=\"search\">", "Anthropic-style <function_calls>"},

		// An opening <tool_call> followed by another tag, a quote or a JSON key is a leak.
		{"qwen opener then opener", "Let me know if<tool_call><tool_call>\nelimit\": 3}", "Qwen/Hermes <tool_call>"},
		{"qwen opener then json key fragment", "Let me know if <tool_call>\nelimit\": 3, \"city", "Qwen/Hermes <tool_call>"},
		{"qwen opener then quote", "<tool_call> \"name\"", "Qwen/Hermes <tool_call>"},
		{"qwen opener then closer", "done.<tool_call>\n</tool_call>", "Qwen/Hermes <tool_call>"},
		{"qwen opener glued to a word at the end", "Let me know if<tool_call>", "Qwen/Hermes <tool_call>"},
		{"qwen bare opener at the end of prose", "The parser waits for <tool_call>", ""},
		{"qwen opener then word", "A <tool_call> block holds one call.", ""},
		{"qwen opener opening prose", "<tool_call> is the tag Qwen wraps each call in.", ""},
		{"qwen opener alone", "<tool_call>\n", "Qwen/Hermes <tool_call>"},
		{"qwen opener opening a garbled reply", "<tool_call>: 3}}ty\":", "Qwen/Hermes <tool_call>"},

		// Closing tags alone, in prose, are not leaks.
		{"qwen tags named in prose", "Wrap each call in <tool_call> and </tool_call> tags, one call per block.", ""},
		{"qwen closer in prose", "The block ends with </tool_call> on its own line.", ""},
		{"anthropic closer in prose", "Claude ends its calls with </function_calls>, which the parser strips.", ""},
		{"qwen closer after its json", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "Qwen/Hermes <tool_call>"},
		{"anthropic closer after its opener", "<function_calls> then </function_calls>", "Anthropic-style <function_calls>"},
		{"qwen closer after a quoted opener", "Like `<tool_call>{}` and then </tool_call> closes it.", ""},

		// Indented code blocks and <pre> blocks are quotes.
		{"quoted in indented block", "An example:\n\n    " + strings.ReplaceAll(qwen, "\n", "\n    ") + "\n\nThat is the format.", ""},
		{"quoted in indented block at start", "    " + llama + "\n\nis what Llama emits.", ""},
		{"quoted in tab-indented block", "Example:\n\n\t" + kimi + "\n", ""},
		{"indented line without a blank line before is not a quote", "Example:\n    " + kimi, "Kimi tool-call section tokens"},
		{"leak after an indented block", "Example:\n\n    code\n\n" + llama, "Llama <|python_tag|>"},
		{"quoted in pre", "Example: <pre>" + claude + "</pre> done.", ""},
		{"quoted in pre with attributes", "<PRE class=\"x\">\n" + v3Leak + "\n</Pre >\n", ""},
		{"unclosed pre is not a quote", "<pre>\n" + llama, "Llama <|python_tag|>"},
		{"leak after a pre", "<pre>x</pre>" + kimi, "Kimi tool-call section tokens"},

		// Degenerate fragments whose angle brackets were lost: token soup, no '<'.
		{"dsml soup", "Sure｜DSML｜invoke name=\"get_weather\"｜DSML｜parameter name=\"city\" string=\"true\">Paris", fragmentDSML},
		{"dsml doubled bars alone", "The forecast｜｜DSML｜｜", fragmentDSML},
		{"dsml left bar lost", "Let me check DSML｜tool_calls>\nDSML｜invoke name=\"f\">", fragmentDSML},
		{"dsml spaced tag", "ok DSML｜ invoke name=\"f\"", fragmentDSML},
		{"dsml ascii bars", "|DSML|invoke name=\"f\" DSML|parameter", fragmentDSML},
		{"v3 soup", "Let me look tool▁calls▁begin｜tool▁call▁begin function tool▁sep get_weather", "DeepSeek V3 tool-call token fragments (brackets lost)"},
		{"v3 truncated token", "I'll check the weather.tool▁call", "DeepSeek V3 tool-call token fragments (brackets lost)"},
		{"v3 full-width bars and underscores", "Sure｜tool_call_begin｜function｜tool_sep｜get_weather", "DeepSeek V3 tool-call token fragments (brackets lost)"},
		{"bracketed marker wins over its own fragment", "<｜DSML｜invoke name=\"f\"> then ｜DSML｜parameter", "DeepSeek DSML"},
		{"fragment first, tags later", "｜DSML｜invoke then <｜DSML｜tool_calls>", fragmentDSML},

		// Prose that names the words, or quotes the fragments as code, is not a leak.
		{"the word DSML", "DeepSeek's DSML format wraps every call; DSML stands for a markup language.", ""},
		{"ascii dsml without a tag", "In the table | DSML | yes | the format is listed, and |DSML| alone too.", ""},
		{"markdown table with the words", "| DSML | invoke |\n|---|---|\n| a | b |", ""},
		{"tool call words", "The tool call begins with tool_call and a tool_calls_begin marker, see tool_sep.", ""},
		{"the U+2581 character alone", "SentencePiece marks a word start with ▁, as in ▁hello.", ""},
		{"cjk full-width bars", "東京｜大阪｜名古屋 and the DSM-5 manual｜page 3", ""},
		{"fragments in inline code", "The soup looks like `｜DSML｜invoke name=\"f\"` and ``tool▁call▁begin``.", ""},
		{"fragments in a fence", "Seen in logs:\n\n```\nSure｜DSML｜invoke name=\"get_weather\"｜DSML｜parameter\ntool▁calls▁begin｜tool▁sep\n```\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := dsmlLeak{}.Detect(context.Background(), reply(tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if l.Detector != DSMLLeakName {
				t.Errorf("detector = %q", l.Detector)
			}
			if tt.format == "" {
				if l.Corrupted || l.Reason != "" {
					t.Fatalf("want clean, got %+v", l)
				}
				return
			}
			if !l.Corrupted {
				t.Fatalf("want a %s leak, got clean", tt.format)
			}
			if !strings.HasPrefix(l.Reason, tt.format+" markup") {
				t.Errorf("reason %q does not name %q", l.Reason, tt.format)
			}
			checkExcerpt(t, l.Reason)
		})
	}
}

// excerptAt precedes the quoted excerpt that ends a reason.
var excerptAt = regexp.MustCompile(`at rune \d+: `)

// checkExcerpt asserts the quoted excerpt at the end of a reason is at most 60 runes.
func checkExcerpt(t *testing.T, reason string) {
	t.Helper()
	m := excerptAt.FindStringIndex(reason)
	if m == nil {
		t.Fatalf("reason %q has no excerpt", reason)
	}
	ex, err := strconv.Unquote(reason[m[1]:])
	if err != nil {
		t.Fatalf("excerpt of %q: %v", reason, err)
	}
	if n := utf8.RuneCountInString(ex); n > excerptRunes || n == 0 {
		t.Errorf("excerpt %q is %d runes", ex, n)
	}
}

func TestDSMLLeakReasonDetails(t *testing.T) {
	content := strings.Repeat("ü", 10) + "\n" + v4Leak
	l, _ := dsmlLeak{}.Detect(context.Background(), reply(content))
	// The first marker sits after 11 runes; the V4 leak holds 6 markers.
	if !strings.Contains(l.Reason, "first at rune 11") || !strings.Contains(l.Reason, "(6 markers)") {
		t.Errorf("reason = %q", l.Reason)
	}
	if !strings.Contains(l.Reason, `"<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"read_file\">`) {
		t.Errorf("excerpt missing from %q", l.Reason)
	}
	r := reply("clean")
	r.Completion.Choices = append(r.Completion.Choices, openai.Choice{Index: 1, Message: openai.Message{Content: llama}})
	l, _ = dsmlLeak{}.Detect(context.Background(), r)
	if !l.Corrupted || !strings.HasPrefix(l.Reason, "choice 1: ") {
		t.Errorf("second choice: %+v", l)
	}
}

func TestDSMLLeakOnlyContent(t *testing.T) {
	r := reply("")
	r.Completion.Choices[0].Message.ToolCalls = []openai.ToolCall{{Function: openai.FunctionCall{Name: "f", Arguments: `{"x": "<｜DSML｜invoke name=\"g\">"}`}}}
	if l, _ := (dsmlLeak{}).Detect(context.Background(), r); l.Corrupted {
		t.Errorf("markup in arguments is toolcall-schema's concern, got %+v", l)
	}
}

func TestDetectHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range Names() {
		d, _ := Builtin(name)
		if _, err := d.Detect(ctx, reply(v4Leak)); err == nil {
			t.Errorf("%s judged a response under a cancelled context", name)
		}
	}
}

func TestQuotedSpans(t *testing.T) {
	s := "a `b` c\n```\nd\n```\ne ``f`g`` h"
	got := quotedSpans(s)
	want := []string{"`b`", "```\nd\n```", "``f`g``"}
	if len(got) != len(want) {
		t.Fatalf("spans = %v", got)
	}
	for i, sp := range got {
		if s[sp.start:sp.end] != want[i] && strings.TrimSuffix(s[sp.start:sp.end], "\n") != want[i] {
			t.Errorf("span %d = %q, want %q", i, s[sp.start:sp.end], want[i])
		}
	}
}

// fence wraps s whole in a backtick fence longer than any backtick run inside it, the
// way a careful writer quotes arbitrary text.
func fence(s string) string {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", max(3, longest+1))
	return f + "\n" + s + "\n" + f
}

func FuzzDSMLLeak(f *testing.F) {
	for _, s := range []string{"", "plain prose", v32Leak, v4Leak, v3Leak, qwen, kimi, llama, claude,
		"```\n" + v4Leak + "\n```", "`" + llama + "`", "```\n" + qwen, "<｜｜DSML｜｜ tool_calls>", "~~~\n~~~~\n<|python_tag|>"} {
		f.Add(s)
	}
	for _, g := range garbledReplies {
		f.Add(g.content)
	}
	for _, s := range []string{"<tool_call> and </tool_call>", "\n    <|python_tag|>", "<pre><tool_call>{}</pre>", "`<pre>`<tool_call>{}`</pre>`"} {
		f.Add(s)
	}
	// Fragments that lost their brackets, and prose near them.
	for _, s := range []string{"Sure｜DSML｜invoke name=\"f\"｜DSML｜parameter", "DSML｜ tool_calls", "|DSML|invoke", "| DSML | invoke |",
		"tool▁calls▁begin｜tool▁sep", "｜tool_call_begin｜", "`｜DSML｜`", "東京｜大阪", "▁hello tool_call", "<｜DSML｜invoke ｜DSML｜parameter"} {
		f.Add(s)
	}
	for _, g := range garbledReplies {
		f.Add(stripBrackets(g.content))
	}
	f.Fuzz(func(t *testing.T, content string) {
		l, err := dsmlLeak{}.Detect(context.Background(), reply(content))
		if err != nil {
			t.Fatal(err)
		}
		if l.Corrupted == (l.Reason == "") {
			t.Fatalf("corrupted=%v with reason %q", l.Corrupted, l.Reason)
		}
		if l.Corrupted {
			checkExcerpt(t, l.Reason)
			if !strings.ContainsAny(content, "<▁｜") && !strings.Contains(content, "DSML") {
				t.Fatalf("leak without '<', U+2581, U+FF5C or DSML in %q", content)
			}
		}
		if q, _ := (dsmlLeak{}).Detect(context.Background(), reply(fence(content))); q.Corrupted {
			t.Fatalf("content quoted whole in a fence was flagged: %q", q.Reason)
		}
	})
}
