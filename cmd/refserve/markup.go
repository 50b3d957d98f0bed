package main

import (
	"strings"
)

// toolCallParsers are the --tool-call-parser values refserve accepts. The parser decides
// how the agent's calls look as decoded tokens, and so what a corrupted reply leaks.
var toolCallParsers = []string{"deepseekv4", "deepseekv32", "deepseekv3", "qwen25", "hermes", "kimi_k2", "llama3"}

const dsmlBar = "\uFF5C" // ｜, the full-width bar of DeepSeek's special tokens

// callMarkup is a call as the model decodes it in the parser's format, one token per
// piece. The tool-call parser turns exactly these tokens back into a structured call.
func callMarkup(parser string, c call) []string {
	args := c.Arguments()
	switch parser {
	case "deepseekv4", "deepseekv32":
		wrap := "tool_calls"
		if parser == "deepseekv32" {
			wrap = "function_calls"
		}
		open := "<" + dsmlBar + "DSML" + dsmlBar
		shut := "</" + dsmlBar + "DSML" + dsmlBar
		p := []string{open + wrap + ">", "\n", open + "invoke", ` name="` + c.Name + `">`, "\n"}
		for _, a := range c.Params {
			var v strings.Builder
			str := "false"
			if s, ok := a.Value.(string); ok {
				v.WriteString(s)
				str = "true"
			} else {
				writeValue(&v, a.Value)
			}
			p = append(p, open+"parameter", ` name="`+a.Name+`"`, ` string="`+str+`">`)
			p = append(p, chunks(v.String())...)
			p = append(p, shut+"parameter>", "\n")
		}
		return append(p, shut+"invoke>", "\n", shut+wrap+">")
	case "deepseekv3":
		p := []string{"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>"}
		p = append(p, chunks(c.Name)...)
		p = append(p, "\n```json\n")
		p = append(p, chunks(args)...)
		return append(p, "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")
	case "kimi_k2":
		p := []string{"<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions." + c.Name + ":0", "<|tool_call_argument_begin|>"}
		p = append(p, chunks(args)...)
		return append(p, "<|tool_call_end|>", "<|tool_calls_section_end|>")
	case "llama3":
		p := []string{"<|python_tag|>", `{"name": "` + c.Name + `", "parameters": `}
		p = append(p, chunks(args)...)
		return append(p, "}")
	default: // qwen25, hermes
		p := []string{"<tool_call>", "\n", `{"name": "` + c.Name + `", "arguments": `}
		p = append(p, chunks(args)...)
		return append(p, "}", "\n", "</tool_call>")
	}
}

// chunks splits text into tokens of up to four characters, the size of a typical BPE
// piece of code or JSON.
func chunks(s string) []string {
	r := []rune(s)
	out := make([]string, 0, len(r)/4+1)
	for len(r) > 4 {
		out = append(out, string(r[:4]))
		r = r[4:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}

// textPieces splits an answer into word tokens, each word with its leading space.
func textPieces(s string) []string {
	f := strings.Fields(s)
	for i := 1; i < len(f); i++ {
		f[i] = " " + f[i]
	}
	return f
}

// Variants of leaked markup seen in the field: some builds print doubled bars, or tag
// names with a leading space.
const (
	variantPlain = iota
	variantDoubled
	variantSpaced
	numVariants
)

// applyVariant rewrites one markup token the way a variant build prints it. The field saw
// these variants from DeepSeek's DSML builds only, so other formats leak plain.
func applyVariant(parser string, variant int, piece string) string {
	if parser != "deepseekv4" && parser != "deepseekv32" {
		return piece
	}
	switch variant {
	case variantDoubled:
		if strings.Contains(piece, dsmlBar) {
			return strings.ReplaceAll(piece, dsmlBar, dsmlBar+dsmlBar)
		}
		piece = strings.ReplaceAll(piece, "<|", "<||")
		return strings.ReplaceAll(piece, "|>", "||>")
	case variantSpaced:
		if strings.Contains(piece, "DSML"+dsmlBar) {
			return strings.ReplaceAll(piece, "DSML"+dsmlBar, "DSML"+dsmlBar+" ")
		}
		if strings.HasPrefix(piece, "<") && len(piece) > 1 {
			return "< " + piece[1:]
		}
	}
	return piece
}

// garble is the tail of a reply whose decoding went wrong: n tokens of the lure call's
// markup, starting near token start, truncated, repeated and interleaved out of order.
// Once the indexer selects the wrong tokens the model keeps attending to its own
// broken markup, so the tail never recovers within the reply.
func garble(parser string, lure call, start, n, variant int, r *rng) []string {
	frags := callMarkup(parser, lure)
	out := make([]string, 0, n)
	i := min(start, len(frags)-1)
	for len(out) < n {
		if i >= len(frags) {
			i = r.intn(len(frags))
		}
		if len(out) == 0 { // the first broken token is always a whole one: the leak is visible
			out = append(out, frags[i])
			i++
			continue
		}
		switch x := r.intn(100); {
		case x < 50: // carry on
			out = append(out, frags[i])
			i++
		case x < 65: // cut a token short and jump elsewhere
			rs := []rune(frags[i])
			if len(rs) > 1 {
				rs = rs[:1+r.intn(len(rs)-1)]
			}
			out = append(out, string(rs))
			i = r.intn(len(frags))
		case x < 85: // fall back and repeat
			i = max(0, i-1-r.intn(4))
		default: // interleave a fragment from elsewhere
			i = r.intn(len(frags))
		}
	}
	for k := range out {
		out[k] = applyVariant(parser, variant, out[k])
	}
	return out
}
