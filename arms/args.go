package arms

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// An engine's command line is read one way only: by the engine's own parser. arbiter
// reads it the same way wherever it splits args into flags (the confound check, a
// bisection's changes, the comparison of an external arm's pins with its server info),
// so that a value that starts with - (--model-path --enable-hierarchical-cache, as
// refserve reads it) is never taken for a flag, nor a flag for a value.
//
// The rules, per preset (Grammar):
//
//   - --flag=value always binds: the value is what follows the first =;
//   - a known boolean flag takes no value: the token after it is the next flag, and a
//     token that is not a flag there is refused (the engine would refuse it too);
//   - a known valued flag takes the next token as its value, even one that starts with
//     -: -1 always; any other only where the engine does (Go's flag package, refserve's);
//     Python's argparse (SGLang, vLLM) reads --flag --other as a flag missing its value,
//     and so does arbiter, refusing it;
//   - tokens that are not flags (a value starts with anything but -, or is a number such
//     as -1) follow the flag before them: a list flag's items;
//   - an unknown flag followed by a token that starts with - and is not a number may be a
//     boolean flag or a flag whose value is that token: arbiter refuses to guess and asks
//     for --flag=value.

// Grammar is how an engine reads its command line: which flags take no value and which
// take the next token. The zero Grammar knows no flag (the custom preset).
type Grammar struct {
	// Bool are the flags that take no value (argparse's store_true, Go's bool flags).
	Bool []string
	// Valued are the flags that take the next token as their value.
	Valued []string
	// Argparse is true for engines that read their command line with Python's argparse,
	// which refuses a token that looks like a flag (not a number) as a flag's value.
	Argparse bool
}

// Flag is one setting of a command line: a flag with its value, or the words before the
// first flag (Name empty).
type Flag struct {
	// Name is the flag with its dashes (--page-size); empty for words before any flag.
	Name string
	// Value is the flag's value: what follows = in --flag=value, else its tokens after
	// the flag joined by a space (a list flag's items); empty for a bare flag.
	Value string
	// Tokens are the flag's command-line tokens as given: [--page-size 16],
	// [--page-size=16] or [--enable-x].
	Tokens []string
	// Index is the position of Tokens[0] in the command line.
	Index int
}

// Bare reports a flag given alone, without a value.
func (f Flag) Bare() bool {
	return f.Name != "" && len(f.Tokens) == 1 && !strings.Contains(f.Tokens[0], "=")
}

// Bound reports a flag written --flag=value.
func (f Flag) Bound() bool { return f.Name != "" && strings.Contains(f.Tokens[0], "=") }

// Text is the flag as a reader would write it: --page-size 16, --enable-x.
func (f Flag) Text() string {
	if f.Value == "" {
		return f.Name
	}
	return f.Name + " " + f.Value
}

// ArgError is a command line that the engine's grammar does not read one way, or reads
// as an error.
type ArgError struct {
	// Index is the token of the flag at fault (of the first word, for words before any
	// flag); Flag is its name, empty for words.
	Index int
	Flag  string
	// Msg says what is wrong and how to write it instead.
	Msg string
}

func (e *ArgError) Error() string { return e.Msg }

// IsFlagToken reports whether a token reads as a flag: it starts with - and is not a
// number (-1 is a value).
func IsFlagToken(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	_, err := strconv.ParseFloat(a, 64)
	return err != nil
}

func (g Grammar) isBool(name string) bool   { return slices.Contains(g.Bool, name) }
func (g Grammar) isValued(name string) bool { return slices.Contains(g.Valued, name) }

// Parse reads args as flags by the grammar (see above). It always returns a reading of
// every token, each in exactly one Flag's Tokens, in order; the error, an *ArgError, is
// the first place where that reading is a guess or where the engine would refuse the
// command line. Callers that judge a spec refuse it; those that only compare command
// lines already judged may use the reading alone.
func (g Grammar) Parse(args []string) ([]Flag, error) {
	var out []Flag
	var first *ArgError
	fail := func(i int, flag, format string, a ...any) {
		if first == nil {
			first = &ArgError{Index: i, Flag: flag, Msg: fmt.Sprintf(format, a...)}
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !IsFlagToken(a) {
			if len(out) == 0 {
				out = append(out, Flag{Index: i})
			}
			last := &out[len(out)-1]
			switch {
			case last.Bound():
				fail(last.Index, last.Name, "%q follows %s, which already has its value", a, last.Tokens[0])
			case last.Name != "" && g.isBool(last.Name) && len(last.Tokens) == 1:
				fail(last.Index, last.Name, "%q follows %s, which takes no value", a, last.Name)
			}
			last.Tokens = append(last.Tokens, a)
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		f := Flag{Name: name, Tokens: []string{a}, Index: i}
		if f.Bound() {
			out = append(out, f)
			continue
		}
		var next string
		hasNext := i+1 < len(args)
		if hasNext {
			next = args[i+1]
		}
		shown := next // what an error may quote of next: never a credential
		if looksLikeCredentialFlag(name) {
			shown = Redacted
		}
		switch {
		case g.isBool(name):
		case g.isValued(name) && !hasNext:
			fail(i, name, "%s needs a value: write %s=VALUE", name, name)
		case g.isValued(name) && IsFlagToken(next) && g.Argparse:
			fail(i, name, "%s needs a value, and the engine reads %q after it as a flag, not as its value: write %s=%s if it is the value", name, shown, name, shown)
		case g.isValued(name) && IsFlagToken(next):
			f.Tokens = append(f.Tokens, next)
			i++
		case hasNext && IsFlagToken(next):
			fail(i, name, "%s is followed by %q, which the engine may read as the value of %s or as the next flag: write %s=%s if it is the value, or list %s in engine.bool_flags if it takes none",
				name, shown, name, name, shown, name)
		}
		out = append(out, f)
	}
	for i := range out {
		f := &out[i]
		switch {
		case f.Name == "":
			f.Value = strings.Join(f.Tokens, " ")
		case f.Bound():
			_, f.Value, _ = strings.Cut(f.Tokens[0], "=")
			if len(f.Tokens) > 1 {
				f.Value = strings.Join(append([]string{f.Value}, f.Tokens[1:]...), " ")
			}
		default:
			f.Value = strings.Join(f.Tokens[1:], " ")
		}
	}
	if first != nil {
		return out, first
	}
	return out, nil
}
