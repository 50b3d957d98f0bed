package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiterlab/arbiter/openai/toolschema"
)

// The agent's arguments come from the tool's schema as openai/toolschema compiles it, the
// reader arbiter's workload and detectors use too, so that a clean reply's call is valid
// by the same rules that judge it. Honoured: type, enum, const, properties (in document
// order), required, items and prefixItems (draft-07 tuple items too), minItems and
// maxItems, minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, minLength,
// maxLength, pattern, format (dates, emails, URIs), $ref, and the first branch of anyOf,
// oneOf and allOf. Ignored: not, if/then/else, dependencies, patternProperties, contains,
// uniqueItems, minProperties and maxProperties.
//
// This makes openai/toolschema, and the JSON Schema library under it, refserve's one
// import beyond the standard library, openai, the kernels loader and gonum's
// distributions (which draw a launch's variation, launch.go): refserve reads
// schemas the way the engines it stands in for do (with a real validator), and a second,
// hand-written reader here is exactly the disagreement this package exists to prevent.

// argumentsFor builds arguments that satisfy a tool's parameter schema: every required
// property with the right type, some optional ones. A tool without a readable schema
// gets {}.
func argumentsFor(t *toolschema.Tool, rng *rng, userText string) []param {
	if t == nil || t.Schema == nil {
		return []param{}
	}
	a := &argWriter{tool: t, rng: rng, userText: userText, budget: argBudget}
	v := a.value(t.Schema, "", 0)
	if ps, ok := v.([]param); ok {
		return ps
	}
	return []param{}
}

// argBudget bounds the values one call's arguments hold, so that a schema of nested
// arrays of objects cannot blow up; past it, nested containers come out empty.
const argBudget = 256

// maxRefHops bounds the references followed from one schema to the one that holds its
// keywords; a cycle of references ends there.
const maxRefHops = 16

// argWriter fills in arguments from a compiled schema.
type argWriter struct {
	tool     *toolschema.Tool
	rng      *rng
	userText string
	budget   int
}

// resolve follows references and the first branch of allOf, anyOf or oneOf from a schema
// that declares no type of its own, to the schema that says what a value looks like.
func resolve(s *jsonschema.Schema) *jsonschema.Schema {
	for range maxRefHops {
		if s == nil || s.Types != nil || s.Enum != nil || s.Const != nil {
			return s
		}
		switch {
		case s.Ref != nil:
			s = s.Ref
		case len(s.Properties) > 0 || s.Items2020 != nil || s.Items != nil || len(s.PrefixItems) > 0:
			return s
		case len(s.AllOf) > 0:
			s = s.AllOf[0]
		case len(s.AnyOf) > 0:
			s = s.AnyOf[0]
		case len(s.OneOf) > 0:
			s = s.OneOf[0]
		default:
			return s
		}
	}
	return s
}

func (a *argWriter) value(s *jsonschema.Schema, name string, depth int) any {
	rng, userText := a.rng, a.userText
	a.budget--
	s = resolve(s)
	if s == nil {
		return []param{}
	}
	if s.Const != nil {
		if v, ok := constant(*s.Const); ok {
			return v
		}
	}
	if s.Enum != nil && len(s.Enum.Values) > 0 {
		if v, ok := constant(s.Enum.Values[rng.intn(len(s.Enum.Values))]); ok {
			return v
		}
	}
	typ := ""
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			if typ == "" || typ == "null" {
				typ = t
			}
		}
	}
	if typ == "" {
		switch {
		case len(s.Properties) > 0:
			typ = "object"
		case s.Items2020 != nil || s.Items != nil || len(s.PrefixItems) > 0:
			typ = "array"
		default:
			typ = "string"
		}
	}
	switch typ {
	case "object":
		if depth > 4 || (a.budget <= 0 && depth > 0) {
			return []param{}
		}
		var ps []param
		required := map[string]bool{}
		for _, r := range s.Required {
			required[r] = true
		}
		for _, p := range a.tool.PropertyOrder(s) {
			if required[p] || (a.budget > 0 && rng.intn(2) == 0) {
				ps = append(ps, param{Name: p, Value: a.value(s.Properties[p], p, depth+1)})
				delete(required, p)
			}
		}
		for _, r := range s.Required { // required but not described: a string will do
			if required[r] {
				ps = append(ps, param{Name: r, Value: stringFor(r, "", rng, userText)})
				delete(required, r)
			}
		}
		if ps == nil {
			ps = []param{}
		}
		return ps
	case "array":
		lo, hi := 1, 2
		if s.MinItems != nil && *s.MinItems > lo {
			lo = min(*s.MinItems, 8)
		}
		if s.MaxItems != nil && *s.MaxItems < hi {
			hi = max(*s.MaxItems, 0)
		}
		if hi < lo {
			hi = lo
		}
		n := lo + rng.intn(hi-lo+1)
		if a.budget <= 0 {
			n = 0
		}
		items := make([]any, 0, n)
		for i := range n {
			if depth > 4 {
				items = append(items, stringFor(name, "", rng, userText))
				continue
			}
			items = append(items, a.value(itemSchema(s, i), name, depth+1))
		}
		return items
	case "integer":
		return integerIn(s, rng)
	case "number":
		return numberIn(s, rng)
	case "boolean":
		return rng.intn(2) == 1
	case "null":
		return nil
	default:
		return stringIn(s, name, rng, userText)
	}
}

// itemSchema is the schema of element i of an array: its prefixItems (or draft-07 tuple
// items) entry, else items, else additionalItems.
func itemSchema(s *jsonschema.Schema, i int) *jsonschema.Schema {
	if i < len(s.PrefixItems) {
		return s.PrefixItems[i]
	}
	if s.Items2020 != nil {
		return s.Items2020
	}
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		return it
	case []*jsonschema.Schema:
		if i < len(it) {
			return it[i]
		}
		if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			return ai
		}
	}
	return nil
}

// constant turns an enum or const value into an argument value; objects and arrays are
// left to the type's own rules.
func constant(v any) (any, bool) {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, true
		}
		return v, true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), true
		}
		return v, true
	case string, bool:
		return v, true
	case nil:
		return nil, true
	}
	return nil, false
}

// ratFloat converts a bound to float64; nil stays nil.
func ratFloat(r *big.Rat) *float64 {
	if r == nil {
		return nil
	}
	f, _ := r.Float64()
	return &f
}

// integerIn picks an integer within the schema's bounds (1..10 when it states none), on a
// multiple of multipleOf when it asks for one.
func integerIn(s *jsonschema.Schema, rng *rng) any {
	minimum, maximum := ratFloat(s.Minimum), ratFloat(s.Maximum)
	if e := ratFloat(s.ExclusiveMinimum); e != nil && (minimum == nil || *e >= *minimum) {
		v := math.Floor(*e) + 1
		minimum = &v
	}
	if e := ratFloat(s.ExclusiveMaximum); e != nil && (maximum == nil || *e <= *maximum) {
		v := math.Ceil(*e) - 1
		maximum = &v
	}
	lo, hi := 1.0, 10.0
	if minimum != nil {
		lo = math.Ceil(*minimum)
		if maximum == nil {
			hi = lo + 9
		}
	}
	if maximum != nil {
		hi = math.Floor(*maximum)
		if minimum == nil {
			lo = min(lo, hi)
		}
	}
	if m := ratFloat(s.MultipleOf); m != nil && *m > 0 && *m == math.Trunc(*m) {
		klo, khi := math.Ceil(lo / *m), math.Floor(hi / *m)
		if khi < klo || khi-klo > 1e15 {
			return int64(klo * *m)
		}
		return (int64(klo) + int64(rng.intn(int(khi-klo)+1))) * int64(*m)
	}
	if hi < lo || hi-lo > 1e15 {
		return int64(lo)
	}
	return int64(lo) + int64(rng.intn(int(hi-lo)+1))
}

// numberIn picks a number within the schema's bounds (0.5..100 when it states none).
func numberIn(s *jsonschema.Schema, rng *rng) any {
	minimum, maximum := ratFloat(s.Minimum), ratFloat(s.Maximum)
	exclLo, exclHi := false, false
	if e := ratFloat(s.ExclusiveMinimum); e != nil && (minimum == nil || *e >= *minimum) {
		minimum, exclLo = e, true
	}
	if e := ratFloat(s.ExclusiveMaximum); e != nil && (maximum == nil || *e <= *maximum) {
		maximum, exclHi = e, true
	}
	lo, hi := 0.5, 100.0
	if minimum != nil {
		lo = *minimum
		if maximum == nil {
			hi = lo + 100
		}
	}
	if maximum != nil {
		hi = *maximum
		if minimum == nil {
			lo = min(lo, hi)
		}
	}
	if m := s.MultipleOf; m != nil && m.Sign() > 0 {
		return multipleIn(m, lo, hi, exclLo, exclHi, rng)
	}
	if !(hi >= lo) || hi-lo > 1e15 {
		return lo
	}
	k := rng.intn(1001)
	if exclLo || exclHi { // keep off an excluded end
		k = 1 + rng.intn(999)
	}
	return lo + (hi-lo)*float64(k)/1000
}

// multipleIn picks k*m within [lo, hi], written exactly: a float product such as 3*0.1
// would print as 0.30000000000000004, which is no multiple of 0.1.
func multipleIn(m *big.Rat, lo, hi float64, exclLo, exclHi bool, rng *rng) any {
	mf, _ := m.Float64()
	klo, khi := math.Ceil(lo/mf), math.Floor(hi/mf)
	if exclLo && klo*mf <= lo {
		klo++
	}
	if exclHi && khi*mf >= hi {
		khi--
	}
	k := klo
	if khi >= klo && khi-klo < 1e15 {
		k += float64(rng.intn(int(khi-klo) + 1))
	}
	if math.IsInf(k, 0) || math.IsNaN(k) || math.Abs(k) > 1e15 {
		k = 0
	}
	r := new(big.Rat).Mul(m, new(big.Rat).SetInt64(int64(k)))
	return json.Number(exactDecimal(r))
}

// exactDecimal writes a rational whose denominator divides a power of ten (every product
// of a JSON number and an integer) as a plain decimal.
func exactDecimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	for prec := 1; prec <= 400; prec++ {
		s := r.FloatString(prec)
		if back, ok := new(big.Rat).SetString(s); ok && back.Cmp(r) == 0 {
			return s
		}
	}
	return r.FloatString(400)
}

// stringIn picks a string for a property: one its pattern matches, else a plausible word
// from its name, format and the user's words, stretched or cut to its length bounds.
func stringIn(s *jsonschema.Schema, name string, rng *rng, userText string) string {
	format := ""
	if s.Format != nil {
		format = s.Format.Name
	}
	var out string
	if s.Pattern != nil {
		if v, ok := fromPattern(s.Pattern.String(), rng); ok {
			out = v
		}
	}
	if out == "" {
		out = stringFor(name, format, rng, userText)
	}
	if s.MaxLength != nil && utf8.RuneCountInString(out) > *s.MaxLength {
		out = string([]rune(out)[:max(*s.MaxLength, 0)])
	}
	if s.MinLength != nil {
		if n := utf8.RuneCountInString(out); n < *s.MinLength {
			out += strings.Repeat("x", min(*s.MinLength, 4096)-n)
		}
	}
	return out
}

// stringFor picks a plausible string for a property from its name and the user's words.
func stringFor(name, format string, rng *rng, userText string) string {
	n := strings.ToLower(name)
	switch {
	case format == "date" || strings.Contains(n, "date"):
		return fmt.Sprintf("2026-%02d-%02d", 1+rng.intn(12), 1+rng.intn(28))
	case format == "email" || strings.Contains(n, "email"):
		return "user@example.com"
	case format == "uri" || strings.Contains(n, "url"):
		return "https://example.com/" + strings.ToLower(topicOf(userText, rng.next()))
	}
	return topicOf(userText, rng.next())
}

// maxPatternRunes bounds a string built from a pattern.
const maxPatternRunes = 256

// fromPattern builds a string that pattern matches, checked with the same regexp engine
// the validator uses; false when the pattern has none it can build.
func fromPattern(pattern string, rng *rng) (string, bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	if !writeMatch(&b, re.Simplify(), rng, 0) || utf8.RuneCountInString(b.String()) > maxPatternRunes {
		return "", false
	}
	out := b.String()
	if ok, err := regexp.MatchString(pattern, out); err != nil || !ok || out == "" {
		return "", false
	}
	return out, true
}

// writeMatch writes one string the regexp re matches: literals as written, a class by
// one of its runes, repetitions a few times.
func writeMatch(b *strings.Builder, re *syntax.Regexp, rng *rng, depth int) bool {
	if depth > 64 || b.Len() > 4*maxPatternRunes {
		return false
	}
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		if len(re.Rune) < 2 {
			return false
		}
		i := 2 * rng.intn(len(re.Rune)/2)
		lo, hi := re.Rune[i], re.Rune[i+1]
		if lo < ' ' && hi >= ' ' { // a negated class starts at NUL; a printable rune reads better
			lo = ' '
		}
		r := lo + rune(rng.intn(int(min(hi-lo, 25))+1))
		b.WriteRune(r)
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte('x')
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
	case syntax.OpCapture:
		return writeMatch(b, re.Sub[0], rng, depth+1)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := 0, 2
		switch re.Op {
		case syntax.OpPlus:
			lo, hi = 1, 3
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 || hi > lo+2 {
				hi = lo + 2
			}
		}
		if lo > maxPatternRunes {
			return false
		}
		n := lo + rng.intn(hi-lo+1)
		for range n {
			if !writeMatch(b, re.Sub[0], rng, depth+1) {
				return false
			}
		}
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !writeMatch(b, sub, rng, depth+1) {
				return false
			}
		}
	case syntax.OpAlternate:
		return writeMatch(b, re.Sub[rng.intn(len(re.Sub))], rng, depth+1)
	default:
		return false
	}
	return true
}
