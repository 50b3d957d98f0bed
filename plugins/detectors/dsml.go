package detectors

import (
	"context"
	"fmt"
	"regexp"
	"sort"
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
	// closer, when set, matches closing tags that prose can name too ("</tool_call>"):
	// one counts only after an unquoted marker of re or an unquoted JSON key, the body a
	// leaked call would have had.
	closer *regexp.Regexp
	// needs, when set, lists substrings of which every match holds one: content without
	// any of them is not scanned, which keeps clean replies cheap.
	needs []string
}

func fixedName(n string) func(string) string { return func(string) string { return n } }

// bars matches the delimiter bar of DeepSeek and Kimi special tokens: the full-width U+FF5C
// that the tokenizer emits, and the ASCII | that some detokenizers and logs produce.
const bars = `[｜|]`

// v3Token matches the names of DeepSeek V3's tool-call tokens, with sep between words.
func v3Token(sep string) string {
	return `tool` + sep + `(?:calls?` + sep + `(?:begin|end)|sep|outputs?` + sep + `(?:begin|end))`
}

// leakFormats are the tool-call formats the dsml-leak row of docs/workloads-and-engines.md lists. Each pattern needs a token that does not
// occur in prose; a bare word like "invoke" or "tool_call" never matches on its own.
// Every pattern tolerates the garbled spellings corrupted replies show: a space after '<'
// and one or two bars wherever the format has bars.
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
		re: regexp.MustCompile(`<\s*(?:｜{1,2}\s*` + v3Token(`[▁_]`) + `\s*｜{1,2}|\|{1,2}\s*` +
			v3Token(`▁`) + `\s*\|{1,2})\s*>`),
		name: fixedName("DeepSeek V3 tool-call tokens"),
	},
	{
		// Kimi K2 sections.
		re: regexp.MustCompile(`<\s*` + bars + `{1,2}\s*tool_(?:calls_section|call|call_argument)_(?:begin|end)\s*` +
			bars + `{1,2}\s*>`),
		name: fixedName("Kimi tool-call section tokens"),
	},
	{
		// Llama 3 built-in tool calls.
		re:   regexp.MustCompile(`<\s*` + bars + `{1,2}\s*python_tag\s*` + bars + `{1,2}\s*>`),
		name: fixedName("Llama <|python_tag|>"),
	},
	{
		// Qwen/Hermes: the opening tag followed by what only a call puts there: its JSON
		// (an opening bracket, a quote, a key cut short like `elimit":`), another tag
		// (Qwen3-Coder's <function=...>, a repeated <tool_call>), or glued to the word
		// before it as a decoded token is, or opening the reply before anything but a word.
		// A bare "<tool_call>" in prose is not enough.
		re: regexp.MustCompile(`<\s*tool_call\s*>\s*(?:[{\[\]}"]|<\s*/?\s*[A-Za-z_|｜]|[\w.-]+"\s*[:,}\]])` +
			`|[\p{L}\p{N}.,;:!?)]<\s*tool_call\s*>|^\s*<\s*tool_call\s*>\s*(?:[^\s\p{L}]|$)`),
		name:   fixedName("Qwen/Hermes <tool_call>"),
		closer: regexp.MustCompile(`<\s*/\s*tool_call\s*>`),
	},
	{
		// Anthropic-style XML calls, with or without a namespace prefix.
		re:     regexp.MustCompile(`<\s*(?:[A-Za-z]+:)?function_calls\s*>|<\s*(?:[A-Za-z]+:)?invoke\s+name\s*=`),
		name:   fixedName("Anthropic-style <function_calls>"),
		closer: regexp.MustCompile(`<\s*/\s*(?:[A-Za-z]+:)?function_calls\s*>`),
	},
}

// dsmlTag names the tags of DeepSeek's DSML markup.
const dsmlTag = `(?:tool_calls|function_calls|invoke|parameter)`

// fragmentFormats match degenerate fragments of DeepSeek's markup whose angle brackets
// were lost: token soup around ｜DSML｜ or tool▁call that no '<' introduces. Only
// spellings prose never has count: the full-width bar U+FF5C around DSML, DSML glued
// to a bar and a tag name, and "tool" joined to a token word by U+2581. Kimi's and
// Llama's ASCII-barred tokens without brackets are left alone: "|python_tag|" also reads
// as a markdown table cell.
var fragmentFormats = []leakFormat{
	{
		re: regexp.MustCompile(`｜{1,2}\s*DSML\s*｜{1,2}|DSML\s*｜{1,2}\s*` + dsmlTag +
			`|\|{0,2}DSML\|{1,2}` + dsmlTag),
		name:  fixedName(fragmentDSML),
		needs: []string{"DSML"},
	},
	{
		re:    regexp.MustCompile(`tool▁(?:calls?|sep|outputs?)|｜{1,2}\s*` + v3Token(`_`) + `\s*｜{1,2}`),
		name:  fixedName("DeepSeek V3 tool-call token fragments (brackets lost)"),
		needs: []string{"tool▁", "tool_"},
	},
}

// fragmentDSML names DSML markup that lost its angle brackets.
const fragmentDSML = "DeepSeek DSML fragments (brackets lost)"

// jsonKey matches the key of a JSON object, the body of a leaked call whose opening tag
// was lost.
var jsonKey = regexp.MustCompile(`"\s*:`)

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
// call reached the client as text. Degenerate fragments of DeepSeek's markup that lost
// their angle brackets (token soup around ｜DSML｜ or tool▁call) count too. Markup
// quoted as code (a closed fence, an indented block, <pre>, inline code) never does.
// Only content is checked; arguments are the toolcall-schema detector's concern.
type dsmlLeak struct{}

func (dsmlLeak) Name() string { return DSMLLeakName }

func (dsmlLeak) inProcess() {}

func (d dsmlLeak) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", DSMLLeakName, err)
	}
	for ci, c := range r.Completion.Choices {
		l, ok := findLeak(c.Message.Content)
		if !ok {
			continue
		}
		markers := "1 marker"
		if l.count > 1 {
			markers = fmt.Sprintf("%d markers", l.count)
		}
		return plugins.Label{
			Detector:  DSMLLeakName,
			Corrupted: true,
			Reason:    inChoice(ci, fmt.Sprintf("%s markup in content (%s), first at rune %d: %q", l.format, markers, l.rune, l.excerpt)),
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
	// One byte search each: ContainsAny decodes content rune by rune once a set holds
	// more than ASCII.
	if strings.IndexByte(content, '<') < 0 && !strings.Contains(content, "▁") && !strings.Contains(content, "｜") &&
		!strings.Contains(content, "DSML") {
		return leak{}, false // every format needs one of these; most clean prose stops here
	}
	var quoted []span
	quotedDone := false
	isQuoted := func(off int) bool {
		if !quotedDone {
			quoted, quotedDone = quotedSpans(content), true
		}
		return inSpans(quoted, off)
	}
	best := leak{}
	bestAt := -1
	seen := map[int]bool{} // a marker two patterns match counts once
	specificDSML := ""
	mark := func(at int, name string) {
		if seen[at] {
			return
		}
		seen[at] = true
		best.count++
		if specificDSML == "" && name != genericDSML && name != fragmentDSML && strings.Contains(name, "DSML") {
			specificDSML = name
		}
		if bestAt < 0 || at < bestAt {
			bestAt = at
			best.format = name
		}
	}
	firstKey := -2  // -2: not looked for yet; -1: none unquoted
	var tags []span // the markers with brackets, where a fragment match is part of one
	for _, f := range leakFormats {
		firstOpen := -1
		for _, m := range f.re.FindAllStringIndex(content, -1) {
			// A pattern may start on the character before the tag it found.
			at := m[0] + strings.IndexByte(content[m[0]:m[1]], '<')
			tags = append(tags, span{at, m[1]})
			if isQuoted(at) {
				continue
			}
			if firstOpen < 0 {
				firstOpen = at
			}
			mark(at, f.name(content[at:m[1]]))
		}
		if f.closer == nil {
			continue
		}
		for _, m := range f.closer.FindAllStringIndex(content, -1) {
			if isQuoted(m[0]) {
				continue
			}
			if firstKey == -2 {
				firstKey = firstUnquoted(jsonKey, content, isQuoted)
			}
			opened := firstOpen >= 0 && firstOpen < m[0]
			if !opened && (firstKey < 0 || firstKey > m[0]) {
				continue // a closing tag named in prose
			}
			mark(m[0], f.name(content[m[0]:m[1]]))
		}
	}
	tags = mergeSpans(tags)
	for _, f := range fragmentFormats {
		if !containsAny(content, f.needs) {
			continue
		}
		for _, m := range f.re.FindAllStringIndex(content, -1) {
			if inSpans(tags, m[0]) || isQuoted(m[0]) {
				continue
			}
			mark(m[0], f.name(content[m[0]:m[1]]))
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

// containsAny reports whether s holds one of subs; no subs means yes.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return len(subs) == 0
}

// mergeSpans sorts spans and merges those that overlap, the form inSpans needs.
func mergeSpans(spans []span) []span {
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out := spans[:0]
	for _, sp := range spans {
		if n := len(out); n > 0 && sp.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, sp.end)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// firstUnquoted returns the offset of the first match of re in content that isQuoted
// rejects, or -1.
func firstUnquoted(re *regexp.Regexp, content string, isQuoted func(int) bool) int {
	for _, m := range re.FindAllStringIndex(content, -1) {
		if !isQuoted(m[0]) {
			return m[0]
		}
	}
	return -1
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
