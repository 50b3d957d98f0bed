package gguf

import (
	"container/heap"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenByte        int32 = 6
)

// Vocab is a SentencePiece ("llama") vocabulary as a GGUF file stores it: token i has
// text Tokens[i], score Scores[i] and type Types[i].
type Vocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
}

// Special is a token the tokenizer matches in text before anything else: a chat
// template's markers. Control tokens are matched only when special tokens are parsed
// (engines parse them in prompts); user-defined ones always.
type Special struct {
	Text string
	Type int32 // TokenControl or TokenUserDefined
}

// BuildVocab returns the vocabulary <unk>, <s>, </s>, the specials, the 256 byte tokens
// <0x00>..<0xFF>, the word-boundary marker "▁", the printable ASCII characters, and the
// pieces with every prefix of two or more characters that the SentencePiece merge
// procedure needs to reach them. Scores fall with position, pieces before their
// prefixes, so that the tokenizer prefers the longest piece: a piece whose prefixes are
// all tokens tokenizes to itself when nothing longer overlaps it.
func BuildVocab(specials []Special, pieces []string) (Vocab, error) {
	var v Vocab
	seen := map[string]bool{}
	add := func(tok string, typ int32, score float32) error {
		if seen[tok] {
			return fmt.Errorf("gguf: token %q appears twice", tok)
		}
		if !utf8.ValidString(tok) || tok == "" {
			return fmt.Errorf("gguf: token %q is not valid UTF-8 text", tok)
		}
		seen[tok] = true
		v.Tokens = append(v.Tokens, tok)
		v.Types = append(v.Types, typ)
		v.Scores = append(v.Scores, score)
		return nil
	}
	must := []struct {
		text string
		typ  int32
	}{{"<unk>", TokenUnknown}, {"<s>", TokenControl}, {"</s>", TokenControl}}
	for _, s := range specials {
		if s.Type != TokenControl && s.Type != TokenUserDefined {
			return Vocab{}, fmt.Errorf("gguf: special token %q has type %d, want control or user-defined", s.Text, s.Type)
		}
		must = append(must, struct {
			text string
			typ  int32
		}{s.Text, s.Type})
	}
	for _, m := range must {
		if err := add(m.text, m.typ, 0); err != nil {
			return Vocab{}, err
		}
	}
	for i := range 256 {
		if err := add(fmt.Sprintf("<0x%02X>", i), TokenByte, 0); err != nil {
			return Vocab{}, err
		}
	}
	all := append([]string(nil), pieces...)
	have := map[string]bool{}
	for _, p := range pieces {
		have[p] = true
	}
	for _, p := range pieces {
		for i := range p { // byte offsets of p's runes
			prefix := p[:i]
			if utf8.RuneCountInString(prefix) < 2 || have[prefix] {
				continue
			}
			have[prefix] = true
			all = append(all, prefix)
		}
	}
	score := float32(-1)
	if err := add(spaceMark, TokenNormal, score); err != nil {
		return Vocab{}, err
	}
	for _, p := range all {
		if utf8.RuneCountInString(p) < 2 {
			continue // single characters come below, once
		}
		score--
		if err := add(p, TokenNormal, score); err != nil {
			return Vocab{}, err
		}
	}
	for c := byte('!'); c <= '~'; c++ {
		score--
		if err := add(string(c), TokenNormal, score); err != nil {
			return Vocab{}, err
		}
	}
	return v, nil
}

// Tokenizer encodes text as llama.cpp's SentencePiece tokenizer does for a vocabulary
// with tokenizer.ggml.add_space_prefix false: special tokens are cut out first, longest
// first; every other stretch has its spaces replaced by "▁" and is split into
// characters, which are merged pairwise, the best-scored pair first (the leftmost among
// equals), while a merge makes a token; a character that is no token becomes its bytes'
// tokens. Engines built on llama.cpp (ollama) count a prompt's tokens this way.
type Tokenizer struct {
	ids     map[string]int32
	scores  []float32
	special []int32 // matched in text, longest first
	types   []int32
	tokens  []string
	bytes   [256]int32
	bos     int32
}

// NewTokenizer returns the tokenizer of v, whose begin-of-sequence token is bos.
func NewTokenizer(v Vocab, bos int32) (*Tokenizer, error) {
	if len(v.Tokens) != len(v.Scores) || len(v.Tokens) != len(v.Types) {
		return nil, fmt.Errorf("gguf: vocabulary of %d tokens has %d scores and %d types", len(v.Tokens), len(v.Scores), len(v.Types))
	}
	t := &Tokenizer{ids: make(map[string]int32, len(v.Tokens)), scores: v.Scores, types: v.Types, tokens: v.Tokens, bos: bos}
	for i, tok := range v.Tokens {
		t.ids[tok] = int32(i)
		switch v.Types[i] {
		case TokenControl, TokenUserDefined, TokenUnknown:
			t.special = append(t.special, int32(i))
		}
	}
	sort.SliceStable(t.special, func(a, b int) bool { return len(v.Tokens[t.special[a]]) > len(v.Tokens[t.special[b]]) })
	for b := range 256 {
		id, ok := t.ids[fmt.Sprintf("<0x%02X>", b)]
		if !ok {
			return nil, fmt.Errorf("gguf: vocabulary has no byte token <0x%02X>", b)
		}
		t.bytes[b] = id
	}
	if bos < 0 || int(bos) >= len(v.Tokens) {
		return nil, fmt.Errorf("gguf: begin-of-sequence token %d is outside the vocabulary", bos)
	}
	return t, nil
}

// ID is the token whose text is s.
func (t *Tokenizer) ID(s string) (int32, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// fragment is a stretch of text, or a special token cut out of it (token >= 0).
type fragment struct {
	text  string
	token int32
}

// Encode tokenizes text, with the begin-of-sequence token first when bos, and special
// tokens matched in the text when special (as engines tokenize prompts).
func (t *Tokenizer) Encode(text string, bos, special bool) []int32 {
	frags := []fragment{{text: text, token: -1}}
	for _, id := range t.special {
		if !special && t.types[id] != TokenUserDefined {
			continue
		}
		frags = splitOn(frags, t.tokens[id], id)
	}
	var out []int32
	if bos {
		out = append(out, t.bos)
	}
	for _, f := range frags {
		if f.token >= 0 {
			out = append(out, f.token)
			continue
		}
		out = t.encodeText(strings.ReplaceAll(f.text, " ", spaceMark), out)
	}
	return out
}

// splitOn cuts every occurrence of s out of the text fragments, as the token id.
func splitOn(frags []fragment, s string, id int32) []fragment {
	var out []fragment
	for _, f := range frags {
		if f.token >= 0 {
			out = append(out, f)
			continue
		}
		rest := f.text
		for {
			i := strings.Index(rest, s)
			if i < 0 {
				break
			}
			if i > 0 {
				out = append(out, fragment{text: rest[:i], token: -1})
			}
			out = append(out, fragment{token: id})
			rest = rest[i+len(s):]
		}
		if rest != "" {
			out = append(out, fragment{text: rest, token: -1})
		}
	}
	return out
}

// symbol is a stretch of the text being merged; n == 0 once merged into its left.
type symbol struct {
	start, n   int
	prev, next int
}

type bigram struct {
	left, right int
	score       float32
	size        int
}

// bigrams is a max-heap: the best score first, the leftmost among equals.
type bigrams []bigram

func (h bigrams) Len() int { return len(h) }
func (h bigrams) Less(i, j int) bool {
	return h[i].score > h[j].score || h[i].score == h[j].score && h[i].left < h[j].left
}
func (h bigrams) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *bigrams) Push(x any)   { *h = append(*h, x.(bigram)) }
func (h *bigrams) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// encodeText merges the characters of s (spaces already marked) and appends the tokens.
func (t *Tokenizer) encodeText(s string, out []int32) []int32 {
	var syms []symbol
	for off := 0; off < len(s); {
		n := utf8LenOf(s[off])
		n = min(n, len(s)-off)
		next := len(syms) + 1
		if off+n == len(s) {
			next = -1
		}
		syms = append(syms, symbol{start: off, n: n, prev: len(syms) - 1, next: next})
		off += n
	}
	var q bigrams
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		text := s[syms[l].start : syms[l].start+syms[l].n+syms[r].n]
		if id, ok := t.ids[text]; ok {
			heap.Push(&q, bigram{left: l, right: r, score: t.scores[id], size: len(text)})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(&q).(bigram)
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i != -1 && len(syms) > 0; i = syms[i].next {
		text := s[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.ids[text]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(text); j++ {
			out = append(out, t.bytes[text[j]])
		}
	}
	return out
}

// utf8LenOf is the length of the UTF-8 sequence that begins with byte b, as llama.cpp
// reads it from the high bits alone (1 for a byte that begins none).
func utf8LenOf(b byte) int {
	return [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[b>>4]
}

// Decode is the text of tokens as an engine prints it: "▁" as a space, byte tokens as
// their bytes, special tokens as their text.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			continue
		}
		switch t.types[id] {
		case TokenByte:
			var v byte
			fmt.Sscanf(t.tokens[id], "<0x%02X>", &v)
			b.WriteByte(v)
		case TokenNormal:
			b.WriteString(strings.ReplaceAll(t.tokens[id], spaceMark, " "))
		default:
			b.WriteString(t.tokens[id])
		}
	}
	return b.String()
}
