package arms

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Redacted replaces a secret wherever arbiter writes text.
const Redacted = "[redacted]"

// minSecretLen is the shortest value a Redactor replaces: a 1-3 byte value ("0", "on")
// occurs everywhere, and replacing it would garble every record without protecting
// anything a guess could not recover anyway.
const minSecretLen = 4

// credentialWords are the _-separated words that make a variable name look like it
// holds a credential (API_KEY and ACCESS_KEY are two words each). TOKENS is left out on
// purpose: MAX_TOKENS and its kin count model tokens.
var credentialWords = [][]string{
	{"TOKEN"}, {"SECRET"}, {"SECRETS"}, {"PASSWORD"}, {"PASSWD"},
	{"API", "KEY"}, {"ACCESS", "KEY"}, {"CREDENTIAL"}, {"CREDENTIALS"}, {"AUTH"},
}

// LooksLikeCredential reports whether a variable name suggests its value is a
// credential: one of TOKEN, SECRET(S), PASSWORD, PASSWD, API_KEY, ACCESS_KEY,
// CREDENTIAL(S), AUTH as whole _-separated words, in any case. BF16_INDEX_K is not
// one; HF_TOKEN and AWS_SECRET_ACCESS_KEY are.
func LooksLikeCredential(name string) bool {
	words := strings.Split(strings.ToUpper(name), "_")
	for i := range words {
		for _, cw := range credentialWords {
			if i+len(cw) <= len(words) && slices.Equal(words[i:i+len(cw)], cw) {
				return true
			}
		}
	}
	return false
}

// Redactor replaces secret values with [redacted]. It is immutable once built, so it is
// safe for concurrent use.
type Redactor struct {
	replacer *strings.Replacer // nil when there is nothing to hide
}

// Redactor collects the values to hide: every variable named in engine.secrets, as
// arbiter's environment holds it (environ is os.LookupEnv in production), and every env
// value of the engine, an arm or a factor level whose name looks like a credential.
// Values shorter than 4 bytes are not replaced: they would match everywhere.
func (s *Spec) Redactor(environ func(string) (string, bool)) *Redactor {
	var values []string
	if environ != nil {
		for _, name := range s.Engine.Secrets {
			if v, ok := environ(name); ok {
				values = append(values, v)
			}
		}
	}
	for _, env := range s.allEnv() {
		for k, v := range env {
			if LooksLikeCredential(k) {
				values = append(values, v)
			}
		}
	}
	return newRedactor(values)
}

// allEnv lists every env mapping in the spec.
func (s *Spec) allEnv() []map[string]string {
	out := []map[string]string{s.Engine.Env}
	for _, a := range s.Arms {
		out = append(out, a.Pins.Env)
	}
	for _, f := range s.Factors {
		for _, l := range f.Levels {
			out = append(out, l.Pins.Env)
		}
	}
	return out
}

func newRedactor(values []string) *Redactor {
	// The core of a value is what leaks into logs; a block scalar's trailing newline
	// is YAML's, and replacing it would join two lines.
	for i, v := range values {
		values[i] = strings.TrimSpace(v)
	}
	values = slices.DeleteFunc(values, func(v string) bool { return len(v) < minSecretLen })
	if len(values) == 0 {
		return &Redactor{}
	}
	// A value written inside JSON (a stored env, an engine's server info) is escaped
	// there: "p&ss" becomes "p\u0026ss". Its escaped forms are secrets too.
	for _, v := range values {
		values = append(values, jsonEscapedForms(v)...)
	}
	// Longest first: strings.Replacer tries old strings in argument order at each
	// position, so a secret that contains another is replaced whole.
	slices.SortFunc(values, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	values = slices.Compact(values)
	pairs := make([]string, 0, 2*len(values))
	for _, v := range values {
		pairs = append(pairs, v, Redacted)
	}
	return &Redactor{replacer: strings.NewReplacer(pairs...)}
}

// jsonEscapedForms are the ways encoding/json may write v inside a string, other than
// v itself: with and without escaping <, > and & as \u003c, \u003e and \u0026.
func jsonEscapedForms(v string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) != nil {
			continue
		}
		e := strings.TrimSuffix(b.String(), "\n")
		e = e[1 : len(e)-1] // the quotes
		if e != v && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// Redact returns s with every secret value replaced by [redacted].
func (r *Redactor) Redact(s string) string {
	if r == nil || r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// RedactBytes is Redact for bytes; it returns b itself when nothing needs hiding.
func (r *Redactor) RedactBytes(b []byte) []byte {
	if r == nil || r.replacer == nil {
		return b
	}
	out := r.replacer.Replace(string(b))
	if len(out) == len(b) && out == string(b) {
		return b
	}
	return []byte(out)
}

// RedactedSource is the spec's text as the store keeps it: every inline env value
// whose name looks like a credential is replaced by "[redacted]" where it is written,
// whatever its length, and any other occurrence of a value of 4 bytes or more too.
func (s *Spec) RedactedSource() []byte {
	src := s.Source
	if f, err := parser.ParseBytes(src, 0, parser.AllowDuplicateMapKey()); err == nil {
		var spots []valueSpot
		for _, doc := range f.Docs {
			collectCredentialValues(doc.Body, false, &spots, 0)
		}
		src = replaceSpots(src, spots)
	}
	return s.Redactor(nil).RedactBytes(src)
}

// valueSpot is where a scalar value is written: line and column from 1, and its text.
type valueSpot struct {
	line, col int
	text      string
}

// collectCredentialValues finds the scalar values of credential-looking keys under any
// mapping key named env (the engine's, an arm's or a level's).
func collectCredentialValues(n ast.Node, underEnv bool, spots *[]valueSpot, depth int) {
	if n == nil || depth > 200 {
		return
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, mv := range v.Values {
			collectCredentialValues(mv, underEnv, spots, depth+1)
		}
	case *ast.MappingValueNode:
		key := ""
		if tk := v.Key.GetToken(); tk != nil {
			key = tk.Value
		}
		if underEnv && LooksLikeCredential(key) {
			val := v.Value
			if a, ok := val.(*ast.AnchorNode); ok {
				val = a.Value
			}
			// Only one-line scalars are rewritten in place; a block or multi-line
			// scalar is left to the value replacer, which keeps the YAML intact.
			if sn, ok := val.(*ast.StringNode); ok && sn.Token != nil && sn.Token.Position != nil {
				text := strings.TrimSpace(sn.Token.Origin)
				if !strings.Contains(text, "\n") {
					*spots = append(*spots, valueSpot{line: sn.Token.Position.Line, col: sn.Token.Position.Column, text: text})
				}
			}
			return
		}
		collectCredentialValues(v.Value, key == "env", spots, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			collectCredentialValues(e, false, spots, depth+1)
		}
	case *ast.AnchorNode:
		collectCredentialValues(v.Value, underEnv, spots, depth+1)
	case *ast.TagNode:
		collectCredentialValues(v.Value, underEnv, spots, depth+1)
	}
}

// replaceSpots writes "[redacted]" over each spot whose text is found where the parser
// put it; a spot that does not match (a multi-line scalar) is left to the value
// replacer.
func replaceSpots(src []byte, spots []valueSpot) []byte {
	lines := strings.SplitAfter(string(src), "\n")
	quoted := fmt.Sprintf("%q", Redacted)
	// Right to left, so that earlier columns on the same line stay valid.
	slices.SortFunc(spots, func(a, b valueSpot) int {
		return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(b.col, a.col))
	})
	for _, sp := range spots {
		if sp.line < 1 || sp.line > len(lines) || sp.text == "" {
			continue
		}
		line := lines[sp.line-1]
		for _, at := range []int{runeOffset(line, sp.col-1), sp.col - 1} {
			if at >= 0 && at <= len(line) && strings.HasPrefix(line[at:], sp.text) {
				lines[sp.line-1] = line[:at] + quoted + line[at+len(sp.text):]
				break
			}
		}
	}
	return []byte(strings.Join(lines, ""))
}

// runeOffset is the byte offset of the n-th rune of s, or -1 past its end.
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	if n == 0 {
		return len(s)
	}
	return -1
}

// LaunchEnv is the environment an arm's process gets, as sorted KEY=VALUE pairs: the
// arm's env plus every secret copied from arbiter's environment (environ is
// os.LookupEnv in production). A secret that is not set is an error that names it;
// no error ever carries a value.
func (a Arm) LaunchEnv(environ func(string) (string, bool)) ([]string, error) {
	env := maps.Clone(a.Env)
	if env == nil {
		env = map[string]string{}
	}
	var missing []string
	for _, name := range a.Secrets {
		v, ok := "", false
		if environ != nil {
			v, ok = environ(name)
		}
		if !ok {
			missing = append(missing, name)
			continue
		}
		env[name] = v
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("secret %s not set in arbiter's environment (engine.secrets copies it from there)", strings.Join(missing, ", "))
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out, nil
}
