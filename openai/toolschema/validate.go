package toolschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Violation is one way a tool call's arguments break the tool's schema, in words an
// engineer reads in a label or a tool's error reply.
type Violation struct {
	// Path is where in the arguments: "args", "args.top_k", "args.filters[0].field".
	Path string
	// Keyword is the schema keyword that failed: "maximum", "required", "pattern", ...
	Keyword string
	// Message says what is wrong, quoting the offending value and the limit:
	// "5000 is above maximum 10".
	Message string
}

// String is "PATH: MESSAGE".
func (v Violation) String() string { return v.Path + ": " + v.Message }

// valueRunes bounds a value quoted in a message, in runes.
const valueRunes = 60

// Validate checks arguments (decoded by DecodeJSON, so numbers stay exact) against the
// tool's schema and returns every violation in a stable order: by path, then keyword,
// then message. A tool without a readable schema accepts anything.
func (t *Tool) Validate(args any) []Violation {
	if t.Schema == nil {
		return nil
	}
	var extreme []Violation
	extremeNumbers(args, "args", &extreme)
	if len(extreme) > 0 {
		// Exact arithmetic on such numbers costs a tenth of a second each; a reply full of
		// them would stall the labelling of a whole run.
		return extreme
	}
	err := t.Schema.Validate(args)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Path: "args", Keyword: "", Message: oneLine(err.Error())}}
	}
	var out []Violation
	collect(ve, args, &out)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Keyword != b.Keyword {
			return a.Keyword < b.Keyword
		}
		return a.Message < b.Message
	})
	return out
}

// maxExponent bounds the decimal exponent of a number Validate judges exactly: float64
// reaches 1e308, and tool harnesses (Python's json among them) read anything beyond as
// infinity or zero.
const maxExponent = 400

// extremeNumbers reports every number of v whose decimal exponent lies beyond
// ±maxExponent.
func extremeNumbers(v any, path string, out *[]Violation) {
	switch v := v.(type) {
	case json.Number:
		if e := exponent(string(v)); e > maxExponent || e < -maxExponent {
			*out = append(*out, Violation{path, "number", fmt.Sprintf("%s is beyond the range of a 64-bit float (exponent %+d)", Short(v), e)})
		}
	case []any:
		for i, e := range v {
			extremeNumbers(e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			p, _ := locate(v, []string{k})
			extremeNumbers(v[k], path+strings.TrimPrefix(p, "args"), out)
		}
	}
}

// exponent is the decimal exponent of a JSON number: the position of its first
// significant digit, so 1234 is 3 and 0.001 is -3; 0 for zero.
func exponent(num string) int {
	mant, expPart, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(num, "-")), "e")
	e := 0
	if expPart != "" {
		n, err := strconv.Atoi(expPart)
		if err != nil { // too long for an int: beyond any bound
			if strings.HasPrefix(expPart, "-") {
				return math.MinInt32
			}
			return math.MaxInt32
		}
		e = n
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if t := strings.TrimLeft(intPart, "0"); t != "" {
		return e + len(t) - 1
	}
	if t := strings.TrimLeft(frac, "0"); t != "" {
		return e - (len(frac) - len(t)) - 1
	}
	return 0
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// collect flattens the library's error tree into violations: containers (the schema,
// groups, references, allOf) give their causes; every other kind is one violation,
// without the branch-by-branch detail of anyOf or oneOf.
func collect(e *jsonschema.ValidationError, args any, out *[]Violation) {
	switch e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference, *kind.AllOf:
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				collect(c, args, out)
			}
			return
		}
	}
	path, value := locate(args, e.InstanceLocation)
	kw := strings.Join(e.ErrorKind.KeywordPath(), "/")
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		names := append([]string(nil), k.Properties...)
		sort.Strings(names)
		for _, n := range names {
			*out = append(*out, Violation{path, kw, fmt.Sprintf("unexpected field %q (additionalProperties is false)", n)})
		}
		return
	case *kind.Required:
		for _, n := range k.Missing {
			*out = append(*out, Violation{path, kw, fmt.Sprintf("missing required field %q", n)})
		}
		return
	}
	*out = append(*out, Violation{path, kw, describe(e.ErrorKind, value)})
}

// printer renders the library's own messages for the kinds described here generically.
var printer = message.NewPrinter(language.English)

// describe says what is wrong with value under one failed keyword.
func describe(k jsonschema.ErrorKind, value any) string {
	v := Short(value)
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("is %s, want %s", withArticle(Kind(value)), strings.Join(k.Want, " or "))
	case *kind.Enum:
		return fmt.Sprintf("%s is not one of %s", v, Short(k.Want))
	case *kind.Const:
		return fmt.Sprintf("%s is not the constant %s", v, Short(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("%s is above maximum %s", v, rat(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("%s is below minimum %s", v, rat(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("%s is not below exclusiveMaximum %s", v, rat(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("%s is not above exclusiveMinimum %s", v, rat(k.Want))
	case *kind.MultipleOf:
		return fmt.Sprintf("%s is not a multipleOf %s", v, rat(k.Want))
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match pattern %s", v, Short(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("%s has %d characters, fewer than minLength %d", v, k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("%s has %d characters, more than maxLength %d", v, k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("has %d items, fewer than minItems %d", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("has %d items, more than maxItems %d", k.Got, k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal (uniqueItems)", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return fmt.Sprintf("has %d fields, fewer than minProperties %d", k.Got, k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("has %d fields, more than maxProperties %d", k.Got, k.Want)
	case *kind.AnyOf:
		return fmt.Sprintf("%s matches none of the anyOf branches", v)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return fmt.Sprintf("%s matches none of the oneOf branches", v)
		}
		return fmt.Sprintf("%s matches oneOf branches %d and %d; want exactly one", v, k.Subschemas[0], k.Subschemas[1])
	case *kind.Not:
		return fmt.Sprintf("%s matches the schema under not", v)
	case *kind.FalseSchema:
		return "no value is allowed here"
	}
	return oneLine(k.LocalizedString(printer))
}

// locate renders an instance location as a readable path under "args" and returns the
// value found there: array elements as [i], fields as .name, or ["name"] when the name
// is not a plain word.
func locate(args any, loc []string) (string, any) {
	var b strings.Builder
	b.WriteString("args")
	cur := args
	for _, tok := range loc {
		switch c := cur.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
		case map[string]any:
			if plainName.MatchString(tok) {
				b.WriteString("." + tok)
			} else {
				b.WriteString("[" + strconv.Quote(tok) + "]")
			}
			cur = c[tok]
		default:
			b.WriteString("." + tok)
			cur = nil
		}
	}
	return b.String(), cur
}

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// rat writes a schema bound as the number a schema author would have written.
func rat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Short renders a JSON value for a message, at most 60 runes, with "…" when cut.
func Short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if utf8.RuneCountInString(s) <= valueRunes {
		return s
	}
	i, n := 0, 0
	for n < valueRunes && i < len(s) {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return s[:i] + "…"
}

// Kind names the JSON type of a value decoded by DecodeJSON; a number without a
// fractional part is an integer, as JSON Schema has it (1.0 is an integer). Numbers are
// read exactly, as the validator reads them, so the two agree; one whose exponent is too
// large to read exactly (1e99999999) is a number.
func Kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(v)); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	case float64:
		if v == math.Trunc(v) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// withArticle puts "a" or "an" before a JSON type name.
func withArticle(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}
