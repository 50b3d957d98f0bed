package detectors

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/plugins"
)

// DSMLLeakName is the spec name of the detector of tool-call markup leaked into content.
const DSMLLeakName = "dsml-leak"

// excerptRunes bounds the excerpt a reason quotes, in runes so that full-width markup is
// never cut in half.
const excerptRunes = 60

// leakFormat is one family of tool-call markup that an engine's tool parser should have
// turned into structured tool_calls.
type leakFormat struct {
	re *regexp.Regexp
	// name names the format of a match; it may look at the match for the variant.
	name func(match string) string
}

func fixedName(n string) func(string) string { return func(string) string { return n } }

// bars matches the delimiter bar of DeepSeek and Kimi special tokens: the full-width U+FF5C
// that the tokenizer emits, and the ASCII | that some detokenizers and logs produce.
const bars = `[｜|]`

// v3Token matches the names of DeepSeek V3's tool-call tokens, with sep between words.
func v3Token(sep string) string {
	return `tool` + sep + `(?:calls?` + sep + `(?:begin|end)|sep|outputs?` + sep + `(?:begin|end))`
}

// leakFormats are the formats FACTS.md lists. Each pattern needs a token that does not
// occur in prose; a bare word like "invoke" or "tool_call" never matches on its own.
var leakFormats = []leakFormat{
	{
		// DeepSeek V3.2 and V4 DSML, with the doubled bars and leading-space tag names that
		// some V4 builds print, opening or closing tags alike.
		re:   regexp.MustCompile(`<\s*/?\s*` + bars + `{1,2}\s*DSML\s*` + bars + `{1,2}\s*[A-Za-z_]*`),
		name: dsmlName,
	},
	{
		// DeepSeek V3/V3.1 special tokens; ▁ is U+2581. With ASCII bars and _ the tokens
		// would be Kimi's, so that spelling is left to the Kimi pattern.
		re:   regexp.MustCompile(`<\s*(?:｜\s*` + v3Token(`[▁_]`) + `\s*｜|\|\s*` + v3Token(`▁`) + `\s*\|)\s*>`),
		name: fixedName("DeepSeek V3 tool-call tokens"),
	},
	{
		// Kimi K2 sections.
		re:   regexp.MustCompile(`<\s*` + bars + `\s*tool_(?:calls_section|call|call_argument)_(?:begin|end)\s*` + bars + `\s*>`),
		name: fixedName("Kimi tool-call section tokens"),
	},
	{
		// Llama 3 built-in tool calls.
		re:   regexp.MustCompile(`<` + bars + `python_tag` + bars + `>`),
		name: fixedName("Llama <|python_tag|>"),
	},
	{
		// Qwen/Hermes: the tag followed by its JSON (or Qwen3-Coder's <function=...>); a
		// bare "<tool_call>" in prose is not enough.
		re:   regexp.MustCompile(`<tool_call>\s*(?:\{|\[|<function=)|</tool_call>`),
		name: fixedName("Qwen/Hermes <tool_call>"),
	},
	{
		// Anthropic-style XML calls, with or without a namespace prefix.
		re:   regexp.MustCompile(`</?(?:[A-Za-z]+:)?function_calls>|<(?:[A-Za-z]+:)?invoke\s+name\s*=`),
		name: fixedName("Anthropic-style <function_calls>"),
	},
}

// dsmlName tells DeepSeek's DSML generations apart by the wrapper tag and the bars.
func dsmlName(m string) string {
	switch {
	case strings.Contains(m, "｜｜") || strings.Contains(m, "||"):
		return "DeepSeek V4 DSML (doubled bars)"
	case strings.HasSuffix(m, "tool_calls"):
		return "DeepSeek V4 DSML"
	case strings.HasSuffix(m, "function_calls"):
		return "DeepSeek V3.2 DSML"
	}
	return genericDSML
}

// genericDSML names DSML markup whose generation the match alone does not show.
const genericDSML = "DeepSeek DSML"

// dsmlLeak flags tool-call markup in the assistant's content: the engine's tool parser
// failed to recognise a call (often because a corrupted token broke the markup), so the
// call reached the client as text. Only content is checked; arguments are the
// toolcall-schema detector's concern.
type dsmlLeak struct{}

func (dsmlLeak) Name() string { return DSMLLeakName }

func (d dsmlLeak) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", DSMLLeakName, err)
	}
	for ci, c := range r.Completion.Choices {
		l, ok := findLeak(c.Message.Content)
		if !ok {
			continue
		}
		where := ""
		if ci > 0 {
			where = fmt.Sprintf("choice %d: ", ci)
		}
		markers := "1 marker"
		if l.count > 1 {
			markers = fmt.Sprintf("%d markers", l.count)
		}
		return plugins.Label{
			Detector:  DSMLLeakName,
			Corrupted: true,
			Reason:    fmt.Sprintf("%s%s markup in content (%s), first at rune %d: %q", where, l.format, markers, l.rune, l.excerpt),
		}, nil
	}
	return plugins.Label{Detector: DSMLLeakName}, nil
}

// leak describes the tool-call markup found in one content string.
type leak struct {
	format  string
	rune    int // rune offset of the first marker
	excerpt string
	count   int // unquoted markers of every format
}

// findLeak returns the first unquoted tool-call marker of content, if any.
func findLeak(content string) (leak, bool) {
	if !strings.Contains(content, "<") {
		return leak{}, false // every format starts with '<'; most clean prose stops here
	}
	var quoted []span
	quotedDone := false
	best := leak{}
	bestAt := -1
	seen := map[int]bool{} // a marker two patterns match counts once
	specificDSML := ""
	for _, f := range leakFormats {
		for _, m := range f.re.FindAllStringIndex(content, -1) {
			if !quotedDone {
				quoted, quotedDone = quotedSpans(content), true
			}
			if seen[m[0]] || inSpans(quoted, m[0]) {
				continue
			}
			seen[m[0]] = true
			best.count++
			name := f.name(content[m[0]:m[1]])
			if specificDSML == "" && name != genericDSML && strings.Contains(name, "DSML") {
				specificDSML = name
			}
			if bestAt < 0 || m[0] < bestAt {
				bestAt = m[0]
				best.format = name
			}
		}
	}
	if bestAt < 0 {
		return leak{}, false
	}
	if best.format == genericDSML && specificDSML != "" {
		// The first marker was an invoke or parameter tag; a wrapper or doubled bars
		// further on tell which generation leaked.
		best.format = specificDSML
	}
	best.rune = utf8.RuneCountInString(content[:bestAt])
	best.excerpt = excerpt(content[bestAt:], excerptRunes)
	return best, true
}

// excerpt returns at most n runes of the start of s.
func excerpt(s string, n int) string {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
