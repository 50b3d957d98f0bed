package gguf

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Special token ids of the vocabulary built by buildVocab.
const (
	unkID = 0 // <unk>, also used as the padding token
	bosID = 1 // <s>
	eosID = 2 // </s>
)

// spaceMark is the SentencePiece word-boundary marker, U+2581, which
// replaces spaces in token texts.
const spaceMark = "\u2581"

// vocabWords are whole words. Each becomes a token with the space marker in
// front, as SentencePiece spells a word that follows a space.
var vocabWords = strings.Fields(`
the of and to in is was that for it as with be on not he by are this at from
his but have or an they which you one were her all she there would their we
him been has when who will more no if out so said what up its about into than
them can only other new some could time these two may then do first any my now
such like our over man me even most made after also did many before must
through back years where much your way well down should because each just
those people how too little state good very make world still own see men work
long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take
three states himself few house use during without again place around however
home small found thought went say part once general high upon school every
does got united left number course war until always away something fact though
water less public put think almost hand enough far took head yet government
system better set told
`)

// vocabSubwords are word pieces without the space marker. They let the
// tokenizer split words that are not in vocabWords into fewer pieces; the
// model does not generate them.
var vocabSubwords = strings.Fields(`
s es ed ing er ers ly est tion tions ment ments ness able ful less al ity ive
ous ic ist ism ize ized ance ence ship hood ward ish y en un re pre dis over
`)

// vocabPunct are the single-character tokens that the model may generate.
const vocabPunct = `.,;:!?`

// vocab is a SentencePiece-style vocabulary.
type vocab struct {
	tokens []string
	scores []float32
	types  []int32
	// emit reports, per token, whether the model may generate it: the
	// words of vocabWords and the punctuation of vocabPunct. Control
	// tokens, byte tokens, other characters, subwords and the word
	// prefixes that exist only so that the tokenizer can build words by
	// merging are not generated.
	emit []bool
}

// buildVocab returns the vocabulary of [TinyLlama]: <unk>, <s>, </s>, the 256
// byte-fallback tokens <0x00>..<0xFF>, the space marker, the printable ASCII
// characters, the words and subwords above, and every prefix of those that
// the SentencePiece merge procedure needs to reach them: 916 tokens.
//
// llama.cpp tokenizes SentencePiece vocabularies by repeatedly merging
// adjacent pieces whose concatenation is a token, so a word such as "▁the"
// is reachable from "▁", "t", "h", "e" only if "▁t" and "▁th" are tokens too.
// With every prefix present, each word and subword tokenizes to itself: at
// any point of the merging the word is a prefix followed by pieces, and a
// prefix joined with the piece after it is again a prefix, hence a token. Scores decrease with the token's position, which is the order
// SentencePiece uses (more frequent pieces first).
func buildVocab() vocab {
	var v vocab
	seen := make(map[string]bool)
	add := func(tok string, typ int32, score float32, emit bool) {
		if seen[tok] {
			panic(fmt.Sprintf("gguf: duplicate token %q", tok))
		}
		seen[tok] = true
		v.tokens = append(v.tokens, tok)
		v.types = append(v.types, typ)
		v.scores = append(v.scores, score)
		v.emit = append(v.emit, emit)
	}
	add("<unk>", TokenUnknown, 0, false)
	add("<s>", TokenControl, 0, false)
	add("</s>", TokenControl, 0, false)
	for i := range 256 {
		add(fmt.Sprintf("<0x%02X>", i), TokenByte, 0, false)
	}

	// Multi-character pieces: words first (highest scores), then subwords,
	// then the prefixes needed to reach them. Single characters come last,
	// with the printable ASCII set.
	var pieces []string
	emit := make(map[string]bool)
	for _, w := range vocabWords {
		pieces = append(pieces, spaceMark+w)
		emit[spaceMark+w] = true
	}
	for _, w := range vocabSubwords {
		if utf8.RuneCountInString(w) > 1 {
			pieces = append(pieces, w)
		}
	}
	for _, c := range vocabPunct {
		emit[string(c)] = true
	}
	have := make(map[string]bool)
	for _, p := range pieces {
		have[p] = true
	}
	for _, p := range pieces[:len(pieces):len(pieces)] {
		for i := range p { // i runs over the byte offsets of p's runes
			prefix := p[:i]
			if utf8.RuneCountInString(prefix) < 2 || have[prefix] {
				continue
			}
			have[prefix] = true
			pieces = append(pieces, prefix)
		}
	}

	score := float32(-1)
	add(spaceMark, TokenNormal, score, false)
	for _, p := range pieces {
		score--
		add(p, TokenNormal, score, emit[p])
	}
	for c := byte('!'); c <= '~'; c++ {
		score--
		add(string(c), TokenNormal, score, emit[string(c)])
	}
	return v
}
