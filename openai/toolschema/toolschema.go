// Package toolschema reads the JSON Schemas of the tools a chat request offers, with one
// maintained JSON Schema implementation (github.com/santhosh-tekuri/jsonschema/v6), for
// every part of arbiter that reads them: the workload's fake tools validate the calls
// they answer, the toolcall-schema detector labels calls that break their schema, and
// refserve builds the arguments of its scripted calls from them. One reader means the
// three never disagree about what a schema allows.
//
// A schema is compiled once per offered tool set (Of caches by the tools' bytes), so a
// run of thousands of turns over the same tools compiles each schema once.
//
// Schemas follow JSON Schema 2020-12 unless they name another draft in "$schema"; a
// schema without "$schema" that is only valid as draft-07 (tuple "items", for one) is read
// as draft-07, as tool schemas written for older validators often are. "format" is an
// annotation, not checked. References ($ref) resolve within the tool's own schema only:
// nothing is ever loaded from a file or the network, since schemas come from requests.
package toolschema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/arbiterlab/arbiter/openai"
)

// Tool is one offered tool with its compiled parameters schema.
type Tool struct {
	// Name is the function's name.
	Name string
	// Schema is the compiled parameters schema; nil when the tool declares no parameters
	// (any arguments object is then valid) or when they could not be read (Err says why).
	Schema *jsonschema.Schema
	// Err says why the parameters are not a usable JSON Schema; nil when they are.
	Err error

	raw   []byte
	order sync.Map // schema location -> []string, properties in document order
}

// Set is the compiled tools of one request's tool list.
type Set struct {
	tools map[string]*Tool
	names []string
	// source is what the set was compiled from (names and parameters), which a cache hit
	// is checked against.
	source [][]byte
}

// Lookup returns the offered tool of that name. When a request offers two tools of one
// name, the first is the one that counts.
func (s *Set) Lookup(name string) (*Tool, bool) {
	t, ok := s.tools[name]
	return t, ok
}

// Names lists the offered tools' names, sorted.
func (s *Set) Names() []string { return s.names }

// cacheSize bounds the tool sets kept compiled. A workload offers a few dozen distinct
// sets at most; the bound only keeps an adversarial stream of requests from growing it.
const cacheSize = 512

var cache = struct {
	sync.Mutex
	sets map[uint64]*Set
	fifo []uint64
}{sets: map[uint64]*Set{}}

// seed keys the cache: a fast 64-bit hash whose hits are confirmed byte for byte, where a
// cryptographic hash of every turn's tools cost more than the check it saved.
var seed = maphash.MakeSeed()

// Of returns the compiled set of tools, from the cache when the same tool definitions
// (names and parameters, byte for byte) were compiled before. It never fails: a tool
// whose parameters are not a schema carries the reason in Err.
func Of(tools []openai.Tool) *Set {
	key := setKey(tools)
	cache.Lock()
	s, ok := cache.sets[key]
	cache.Unlock()
	if ok && s.compiledFrom(tools) {
		return s
	}
	s = compileSet(tools)
	cache.Lock()
	defer cache.Unlock()
	if prev, ok := cache.sets[key]; ok && prev.compiledFrom(tools) { // compiled meanwhile by another caller
		return prev
	}
	if _, taken := cache.sets[key]; !taken {
		if len(cache.fifo) >= cacheSize {
			delete(cache.sets, cache.fifo[0])
			cache.fifo = cache.fifo[1:]
		}
		cache.fifo = append(cache.fifo, key)
	}
	cache.sets[key] = s // a colliding set replaces the other: both stay correct
	return s
}

// setKey hashes what validation depends on: each tool's name and parameters bytes.
func setKey(tools []openai.Tool) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	for _, t := range tools {
		binary.LittleEndian.PutUint64(n[:], uint64(len(t.Function.Name)))
		h.Write(n[:])
		h.WriteString(t.Function.Name)
		binary.LittleEndian.PutUint64(n[:], uint64(len(t.Function.Parameters)))
		h.Write(n[:])
		h.Write(t.Function.Parameters)
	}
	return h.Sum64()
}

// compiledFrom reports whether s was compiled from exactly these definitions.
func (s *Set) compiledFrom(tools []openai.Tool) bool {
	if len(s.source) != 2*len(tools) {
		return false
	}
	for i, t := range tools {
		if string(s.source[2*i]) != t.Function.Name || !bytes.Equal(s.source[2*i+1], t.Function.Parameters) {
			return false
		}
	}
	return true
}

func compileSet(tools []openai.Tool) *Set {
	s := &Set{tools: make(map[string]*Tool, len(tools))}
	for _, t := range tools {
		s.source = append(s.source, []byte(t.Function.Name), bytes.Clone(t.Function.Parameters))
		if _, dup := s.tools[t.Function.Name]; dup {
			continue
		}
		s.tools[t.Function.Name] = Compile(t.Function.Name, t.Function.Parameters)
		s.names = append(s.names, t.Function.Name)
	}
	sort.Strings(s.names)
	return s
}

// noLoader refuses every reference outside the schema itself: tool schemas arrive in
// requests, and a "$ref" must never make arbiter or refserve read a file or the network.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("references outside the tool's own schema are not followed (%s)", u)
}

// location names a tool's schema resource; the scheme is arbiter's own, never fetched.
const location = "arbiter://tool/parameters.json"

// Compile compiles one tool's parameters schema, uncached. Empty parameters (absent or
// null) give a Tool with neither Schema nor Err: any arguments object is valid.
func Compile(name string, params json.RawMessage) *Tool {
	t := &Tool{Name: name, raw: bytes.TrimSpace(params)}
	if len(t.raw) == 0 || string(t.raw) == "null" {
		t.raw = nil
		return t
	}
	doc, err := DecodeJSON(t.raw)
	if err != nil {
		t.Err = fmt.Errorf("parameters are not JSON: %w", err)
		return t
	}
	obj, isObj := doc.(map[string]any)
	t.Schema, t.Err = compileDoc(doc, jsonschema.Draft2020)
	if t.Err != nil && isObj && obj["$schema"] == nil {
		// Written for draft-07 (tuple items, say): read it as such before giving up.
		if s, err := compileDoc(doc, jsonschema.Draft7); err == nil {
			t.Schema, t.Err = s, nil
		}
	}
	if t.Err != nil {
		t.Err = fmt.Errorf("parameters are not a valid JSON Schema: %s", oneLine(t.Err.Error()))
	}
	return t
}

func compileDoc(doc any, draft *jsonschema.Draft) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(draft)
	if err := c.AddResource(location, doc); err != nil {
		return nil, err
	}
	return c.Compile(location)
}

// oneLine folds the library's multi-line messages into one line for a reason or a log.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// DecodeJSON decodes exactly one JSON value with numbers kept exact (json.Number), the
// form Validate expects. Anything after the value but whitespace is an error, as a
// truncated or doubled tool call leaves.
func DecodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON value at byte %d", dec.InputOffset())
	}
	return v, nil
}

// root follows the references at the top of a schema to the schema that holds the
// keywords, so that "{"$ref": "#/$defs/Args"}" reads as Args.
func root(s *jsonschema.Schema) *jsonschema.Schema {
	for i := 0; s != nil && s.Ref != nil && i < 32; i++ {
		s = s.Ref
	}
	return s
}

// Required lists the top-level required properties, in the schema's order; none when the
// tool has no readable schema.
func (t *Tool) Required() []string {
	if r := root(t.Schema); r != nil {
		return r.Required
	}
	return nil
}

// Declares reports whether the top level of the schema declares a property of that name.
func (t *Tool) Declares(property string) bool {
	r := root(t.Schema)
	if r == nil {
		return false
	}
	_, ok := r.Properties[property]
	return ok
}

// PropertyOrder lists the properties of s, a schema compiled from this tool, in the
// order the document writes them; the compiled form keeps them in a map, which loses it.
// Properties the document does not list (there are none for a schema of this tool) come
// last, sorted.
func (t *Tool) PropertyOrder(s *jsonschema.Schema) []string {
	if s == nil || len(s.Properties) == 0 {
		return nil
	}
	if v, ok := t.order.Load(s.Location); ok {
		return v.([]string)
	}
	names := orderedKeys(t.raw, s.Location)
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(s.Properties))
	for _, n := range names {
		if _, ok := s.Properties[n]; ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	var rest []string
	for n := range s.Properties {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	out = append(out, rest...)
	t.order.Store(s.Location, out)
	return out
}

// orderedKeys returns the keys of the "properties" object of the schema at loc (a
// location of this tool's resource: "arbiter://tool/parameters.json#/properties/a") in document
// order.
func orderedKeys(raw []byte, loc string) []string {
	_, frag, ok := strings.Cut(loc, "#")
	if !ok {
		return nil
	}
	ptr, err := url.PathUnescape(frag)
	if err != nil {
		return nil
	}
	cur := json.RawMessage(raw)
	if ptr != "" {
		for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			if cur, ok = child(cur, tok); !ok {
				return nil
			}
		}
	}
	props, ok := child(cur, "properties")
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(props))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		k, _ := t.(string)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return out
		}
		out = append(out, k)
	}
	return out
}

// child returns the member tok of a JSON object, or element tok of an array.
func child(raw json.RawMessage, tok string) (json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		v, ok := obj[tok]
		return v, ok
	}
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		var i int
		if _, err := fmt.Sscanf(tok, "%d", &i); err == nil && i >= 0 && i < len(arr) && fmt.Sprint(i) == tok {
			return arr[i], true
		}
	}
	return nil, false
}
