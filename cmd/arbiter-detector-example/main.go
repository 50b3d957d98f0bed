// Command arbiter-detector-example is an external arbiter detector, and the template for
// writing one: a Detector and a main that hands it to plugins.Serve.
//
// Its detector, contains-word, flags a response whose content contains a word, as a whole
// word and ignoring case. The word comes from $ARBITER_CONTAINS_WORD (default "forbidden"):
// a plugin inherits arbiter's environment (without its credentials, but for those the
// spec's detector_secrets grants), which is how it is configured. Put the binary on
// PATH and name it in a spec as plugin:example, or give its path as plugin:/path/to/it.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/arbiterlab/arbiter/plugins"
)

func main() {
	word := os.Getenv("ARBITER_CONTAINS_WORD")
	if word == "" {
		word = "forbidden"
	}
	// What a plugin writes to its standard error reaches arbiter's log, through arbiter's
	// redactor: the configuration it runs with is worth a line.
	fmt.Fprintf(os.Stderr, "contains-word: flagging %q\n", word)
	plugins.Serve(containsWord{word: strings.ToLower(word)})
}

// containsWord flags content that holds word (lower case) as a whole word.
type containsWord struct{ word string }

func (containsWord) Name() string { return "contains-word" }

func (c containsWord) Detect(ctx context.Context, r plugins.Response) (plugins.Label, error) {
	if err := ctx.Err(); err != nil {
		return plugins.Label{}, err
	}
	for ci, choice := range r.Completion.Choices {
		if at, ok := findWord(choice.Message.Content, c.word); ok {
			return plugins.Label{
				Detector:  c.Name(),
				Corrupted: true,
				Reason:    fmt.Sprintf("choice %d content contains %q at rune %d", ci, c.word, at),
			}, nil
		}
	}
	return plugins.Label{Detector: c.Name()}, nil
}

// findWord returns the rune offset of the first whole-word, case-insensitive occurrence of
// word (already lower case) in s.
func findWord(s, word string) (int, bool) {
	// Offsets count in the lowered text; the few runes whose case changes their length
	// can shift them, which a reason can live with.
	lower := strings.ToLower(s)
	for from := 0; ; {
		i := strings.Index(lower[from:], word)
		if i < 0 {
			return 0, false
		}
		start, end := from+i, from+i+len(word)
		before, _ := utf8.DecodeLastRuneInString(lower[:start])
		after, _ := utf8.DecodeRuneInString(lower[end:])
		if !isWordRune(before) && !isWordRune(after) {
			return utf8.RuneCountInString(lower[:start]), true
		}
		from = start + 1
	}
}

func isWordRune(r rune) bool {
	return r != utf8.RuneError && (r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r))
}
