package detectors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/plugins"
)

// RepetitionName is the spec name of the detector of degenerate repetition loops.
const RepetitionName = "repetition"

// Thresholds of the repetition detector. They are conservative on purpose: a false alarm
// in the control arm costs as much as a miss, and a real loop runs for hundreds of tokens.
const (
	// longUnit is the shortest unit, in tokens, that counts as a long loop...
	longUnit = 8
	// ...when it repeats back to back at least longRepeats times.
	longRepeats = 4
	// A shorter unit must repeat back to back until its words alone number shortCover (30
	// runs of one word, 15 of a pair of words): punctuation and numbers do not count, since
	// "| x |" cells and "---" rules are the stuff of markdown tables and a list of zeros or
	// an identity matrix is data.
	shortCover = 30
	// A long unit of structure rather than language (a table row, a JSON object, a row of
	// a matrix) must repeat structRepeats times: a table of identical rows or an array of
	// identical objects is legitimate at the sizes people ask for, while a model stuck on
	// one row repeats it until the token limit.
	structRepeats = 16
	// A long unit is language when it holds at least proseWords distinct words and words
	// are at least half of its tokens.
	proseWords = 4
	// maxUnit bounds the unit searched for, which keeps the pass linear in the content.
	maxUnit = 256
)

// repetition flags a degenerate loop in the content: the same span of tokens over and over.
// Tokens are words (letters, digits, _), single CJK characters, and runs of one
// punctuation character; whitespace separates and is not a token. A token without a letter
// (a number) counts as punctuation, not as a word. A loop is a tandem repeat of a primitive
// unit (one that is not itself a repeat of a shorter one) of longUnit or more tokens at
// least longRepeats times (structRepeats for a unit of structure), or of a shorter unit
// whose repeats hold shortCover words. Closed fenced code blocks are skipped: code and data
// quoted whole repeat legitimately, and a loop cannot close the fence it runs in.
type repetition struct{}

func (repetition) Name() string { return RepetitionName }

func (repetition) inProcess() {}

func (repetition) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, fmt.Errorf("%s: %w", RepetitionName, err)
	}
	for ci, c := range r.Completion.Choices {
		l, ok := findLoop(c.Message.Content)
		if !ok {
			continue
		}
		return plugins.Label{
			Detector:  RepetitionName,
			Corrupted: true,
			Reason: inChoice(ci, fmt.Sprintf("a %d-token span repeated %d times back to back at rune %d: %q",
				l.unit, l.repeats, l.rune, l.excerpt)),
		}, nil
	}
	return plugins.Label{Detector: RepetitionName}, nil
}

// token is one token of content, interned as id, at byte offset off.
type token struct {
	id, off int
	word    bool // holds a letter
}

// tokenize splits content into tokens as the repetition detector defines them.
func tokenize(s string) []token {
	// Sized for prose, about a token per five bytes, so that a long reply is not
	// copied over and over as the slice and the map grow.
	toks := make([]token, 0, len(s)/5+1)
	ids := make(map[string]int, min(len(s)/5, maxInternHint))
	intern := func(t string) int {
		id, ok := ids[t]
		if !ok {
			id = len(ids)
			ids[t] = id
		}
		return id
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case unicode.IsSpace(r):
			i += size
		case isCJK(r):
			toks = append(toks, token{id: intern(s[i : i+size]), off: i, word: true})
			i += size
		case isWordRune(r):
			j := i + size
			for j < len(s) {
				r2, s2 := utf8.DecodeRuneInString(s[j:])
				if !isWordRune(r2) || isCJK(r2) {
					break
				}
				j += s2
			}
			toks = append(toks, token{id: intern(s[i:j]), off: i, word: hasLetter(s[i:j])})
			i = j
		default:
			j := i + size
			for j < len(s) {
				r2, s2 := utf8.DecodeRuneInString(s[j:])
				if r2 != r {
					break
				}
				j += s2
			}
			toks = append(toks, token{id: intern(s[i:j]), off: i})
			i = j
		}
	}
	return toks
}

// hasLetter reports whether a word token is more than digits and underscores.
func hasLetter(w string) bool {
	for _, r := range w {
		if unicode.IsLetter(r) {
			return true
		}
	}
	return false
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// isCJK reports scripts written without spaces, where each character is a token.
func isCJK(r rune) bool {
	// Below U+1100 (Hangul Jamo, the first of the four) none is: most text stops here.
	return r >= cjkFirst && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// maxInternHint bounds the room tokenize makes for distinct tokens before it has seen
// them: a long reply repeats most of its words.
const maxInternHint = 4096

// cjkFirst is the lowest rune of the scripts isCJK names.
const cjkFirst = 0x1100

// loop describes the longest degenerate repeat found.
type loop struct {
	unit, repeats, rune int
	excerpt             string
}

// findLoop returns the tandem repeat that covers the most tokens among those that count as
// a loop.
func findLoop(content string) (loop, bool) {
	toks := unfenced(content, tokenize(content))
	n := len(toks)
	ids := make([]int32, n) // dense copy for the inner loop
	for i, t := range toks {
		ids[i] = int32(t.id)
	}
	best, bestCover := loop{}, 0
	for p := 1; p <= maxUnit && p*2 <= n; p++ {
		// A stretch of period p is a run of positions i with toks[i] == toks[i+p]; a run
		// of r such positions is a stretch of r+p tokens. No run shorter than minRun is a
		// loop (isLoop wants longRepeats units), and a run that long covers minRun
		// positions in a row, so it takes in one of every minRun-th: only those are
		// probed, and a match is grown both ways into its run. The pass over all units is
		// then about n/3 * ln(maxUnit) probes, not n * maxUnit.
		minRun := (longRepeats - 1) * p
		for i := minRun - 1; i+p < n; i += minRun {
			if ids[i] != ids[i+p] {
				continue
			}
			start, end := i, i+1
			for start > 0 && ids[start-1] == ids[start-1+p] {
				start--
			}
			for end+p < n && ids[end] == ids[end+p] {
				end++
			}
			// The next probe is past the run's end: a later run starts beyond it.
			i = end
			run := end - start
			if run < minRun {
				continue
			}
			cover := run + p
			if cover > bestCover && isLoop(toks[start:start+p], cover) {
				bestCover = cover
				best = loop{unit: p, repeats: cover / p, rune: utf8.RuneCountInString(content[:toks[start].off])}
				best.excerpt = excerpt(content[toks[start].off:], excerptRunes)
			}
		}
	}
	return best, bestCover > 0
}

// unfenced drops the tokens of content's closed fenced code blocks. The text on either side
// of a block is joined, so that a loop which quotes the same block every time is still one.
func unfenced(content string, toks []token) []token {
	if !strings.Contains(content, "```") && !strings.Contains(content, "~~~") {
		return toks
	}
	fenced := fencedSpans(content)
	if len(fenced) == 0 {
		return toks
	}
	out := toks[:0]
	for _, t := range toks {
		if !inSpans(fenced, t.off) {
			out = append(out, t)
		}
	}
	return out
}

// isLoop applies the thresholds to a stretch of cover tokens with period len(unit).
func isLoop(unit []token, cover int) bool {
	p := len(unit)
	if p >= longUnit {
		// Cheapest test first: most stretches repeat too few times to matter.
		repeats := cover / p
		if repeats < longRepeats || (repeats < structRepeats && !language(unit)) {
			return false
		}
		return primitive(unit)
	}
	words := 0
	for _, t := range unit {
		if t.word {
			words++
		}
	}
	return cover/p >= longRepeats && words*(cover/p) >= shortCover
}

// language reports whether a long unit is language rather than structure.
func language(unit []token) bool {
	words := 0
	var distinct [proseWords]int // the first proseWords distinct words are enough
	nd := 0
	for _, t := range unit {
		if !t.word {
			continue
		}
		words++
		if nd < proseWords && !slices.Contains(distinct[:nd], t.id) {
			distinct[nd] = t.id
			nd++
		}
	}
	return nd >= proseWords && 2*words >= len(unit)
}

// primitive reports whether unit is not a whole repeat of a shorter unit, so that a loop
// of a short unit is judged by the short-unit rule only.
func primitive(unit []token) bool {
	p := len(unit)
	// Prefix function: the longest proper border of unit gives its smallest period.
	pi := make([]int, p)
	for i := 1; i < p; i++ {
		k := pi[i-1]
		for k > 0 && unit[i].id != unit[k].id {
			k = pi[k-1]
		}
		if unit[i].id == unit[k].id {
			k++
		}
		pi[i] = k
	}
	period := p - pi[p-1]
	return period == p || p%period != 0
}
