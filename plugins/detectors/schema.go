package detectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strings"
)

// schema is the subset of JSON Schema that the toolcall-schema detector checks. It is
// deliberately small and says so: a keyword it does not implement never flags a value.
//
// Checked: type (one name or a list; string, integer, number, boolean, array, object,
// null), enum, const, properties, required, additionalProperties (false or a schema),
// items (one schema for every element), allOf, anyOf, and oneOf (checked as anyOf: at
// least one branch must match, not exactly one). The boolean schemas true and false.
//
// Ignored: $ref and $defs, pattern, format, minimum/maximum, minLength/maxLength,
// minItems/maxItems, uniqueItems, prefixItems, patternProperties, dependencies, if/then/
// else, not, nullable. Tool schemas in practice are flat objects of typed, sometimes
// enumerated fields; that is where a corrupted decode shows.
type schema struct {
	// reject is the boolean schema false: no value is valid.
	reject bool
	types  []string
	enum   []any
	cnst   *any
	props  map[string]*schema
	// required lists the fields an object must have, in the schema's order.
	required          []string
	noExtra           bool    // additionalProperties: false
	extra             *schema // additionalProperties as a schema
	items             *schema
	allOf             []*schema
	anyOf             []*schema // anyOf and oneOf
	declaresArguments bool      // the schema declares a property named "arguments"
}

// parseSchema reads a JSON schema; an empty document is the schema that accepts anything.
func parseSchema(raw []byte) (*schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return &schema{}, nil
	}
	var v any
	if err := decodeJSON(raw, &v); err != nil {
		return nil, err
	}
	return schemaOf(v, "")
}

// schemaOf builds a schema from a decoded JSON value; path names it in errors.
func schemaOf(v any, path string) (*schema, error) {
	switch v := v.(type) {
	case bool:
		return &schema{reject: !v}, nil
	case map[string]any:
		s := &schema{}
		if t, ok := v["type"]; ok {
			switch t := t.(type) {
			case string:
				s.types = []string{t}
			case []any:
				for _, e := range t {
					name, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("schema%s: type list holds a %s, not a string", path, jsonKind(e))
					}
					s.types = append(s.types, name)
				}
			default:
				return nil, fmt.Errorf("schema%s: type is a %s, not a string or list", path, jsonKind(t))
			}
		}
		if e, ok := v["enum"].([]any); ok {
			s.enum = e
		}
		if c, ok := v["const"]; ok {
			s.cnst = &c
		}
		if p, ok := v["properties"].(map[string]any); ok {
			s.props = make(map[string]*schema, len(p))
			for name, sub := range p {
				ps, err := schemaOf(sub, path+"."+name)
				if err != nil {
					return nil, err
				}
				s.props[name] = ps
			}
			_, s.declaresArguments = p["arguments"]
		}
		if r, ok := v["required"].([]any); ok {
			for _, e := range r {
				if name, ok := e.(string); ok {
					s.required = append(s.required, name)
				}
			}
		}
		switch ap := v["additionalProperties"].(type) {
		case bool:
			s.noExtra = !ap
		case map[string]any:
			sub, err := schemaOf(ap, path+".additionalProperties")
			if err != nil {
				return nil, err
			}
			s.extra = sub
		}
		if it, ok := v["items"]; ok {
			if _, isObj := it.(map[string]any); isObj {
				sub, err := schemaOf(it, path+"[]")
				if err != nil {
					return nil, err
				}
				s.items = sub
			}
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			list, ok := v[kw].([]any)
			if !ok {
				continue
			}
			for i, e := range list {
				sub, err := schemaOf(e, fmt.Sprintf("%s.%s[%d]", path, kw, i))
				if err != nil {
					return nil, err
				}
				if kw == "allOf" {
					s.allOf = append(s.allOf, sub)
				} else {
					s.anyOf = append(s.anyOf, sub)
				}
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("schema%s: a schema must be an object or a boolean, not a %s", path, jsonKind(v))
}

// violation is one way a value fails its schema; path is like "args.items[2].name".
type violation struct {
	path, why string
}

func (v violation) String() string { return v.path + ": " + v.why }

// check returns the violations of v against s, at most limit of them.
func (s *schema) check(v any, path string, out []violation, limit int) []violation {
	if len(out) >= limit {
		return out
	}
	if s.reject {
		return append(out, violation{path, "no value is allowed here"})
	}
	if len(s.types) > 0 && !hasType(v, s.types) {
		return append(out, violation{path, fmt.Sprintf("is %s, want %s", withArticle(jsonKind(v)), strings.Join(s.types, " or "))})
	}
	if s.enum != nil && !inEnum(v, s.enum) {
		return append(out, violation{path, fmt.Sprintf("%s is not one of %s", short(v), short(s.enum))})
	}
	if s.cnst != nil && !jsonEqual(v, *s.cnst) {
		return append(out, violation{path, fmt.Sprintf("%s is not the constant %s", short(v), short(*s.cnst))})
	}
	switch v := v.(type) {
	case map[string]any:
		for _, name := range s.required {
			if _, ok := v[name]; !ok {
				out = append(out, violation{path, fmt.Sprintf("missing required field %q", name)})
			}
		}
		for _, name := range sortedKeys(v) {
			if ps, ok := s.props[name]; ok {
				out = ps.check(v[name], path+"."+name, out, limit)
				continue
			}
			if s.noExtra {
				out = append(out, violation{path, fmt.Sprintf("unexpected field %q (additionalProperties is false)", name)})
			} else if s.extra != nil {
				out = s.extra.check(v[name], path+"."+name, out, limit)
			}
		}
	case []any:
		if s.items != nil {
			for i, e := range v {
				out = s.items.check(e, fmt.Sprintf("%s[%d]", path, i), out, limit)
			}
		}
	}
	for _, sub := range s.allOf {
		out = sub.check(v, path, out, limit)
	}
	if len(s.anyOf) > 0 {
		matched := false
		for _, sub := range s.anyOf {
			if len(sub.check(v, path, nil, 1)) == 0 {
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, violation{path, "matches none of the anyOf/oneOf branches"})
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// hasType reports whether v is of one of the named JSON types. An unknown type name
// matches anything, since the checker cannot judge it.
func hasType(v any, types []string) bool {
	for _, t := range types {
		switch t {
		case "string", "number", "integer", "boolean", "array", "object", "null":
		default:
			return true
		}
		k := jsonKind(v)
		if k == t || (t == "number" && k == "integer") {
			return true
		}
	}
	return false
}

// jsonKind names the JSON type of a value decoded with UseNumber; a number without a
// fractional part is an integer, as JSON Schema has it (1.0 is an integer).
func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if f, ok := new(big.Float).SetString(string(v)); ok && f.IsInt() {
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
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// inEnum reports whether v equals one of the enum's values.
func inEnum(v any, enum []any) bool {
	for _, e := range enum {
		if jsonEqual(v, e) {
			return true
		}
	}
	return false
}

// jsonEqual compares decoded JSON values, numbers by value (1 equals 1.0).
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		fa, okA := new(big.Float).SetString(string(a))
		fb, okB := new(big.Float).SetString(string(bn))
		if !okA || !okB {
			return string(a) == string(bn)
		}
		return fa.Cmp(fb) == 0
	case []any:
		bl, ok := b.([]any)
		if !ok || len(bl) != len(a) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(bm) != len(a) {
			return false
		}
		for k, av := range a {
			bv, ok := bm[k]
			if !ok || !jsonEqual(av, bv) {
				return false
			}
		}
		return true
	}
	return a == b
}

// decodeJSON decodes exactly one JSON value, keeping numbers exact; anything after the
// value but whitespace is an error, as a truncated or doubled call would leave.
func decodeJSON(raw []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("data after the JSON value at byte %d", dec.InputOffset())
	}
	return nil
}

// short renders a value for a reason, at most excerptRunes runes.
func short(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := excerpt(string(b), excerptRunes)
	if len(s) < len(b) {
		s += "…"
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
