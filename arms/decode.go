package arms

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/bytesize"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Defaults written into a Spec when the file leaves a field out.
const (
	DefaultRuntime        = RuntimeProcess
	DefaultWorkload       = WorkloadAgent
	DefaultUnit           = "session"
	DefaultAlpha          = 0.05
	DefaultBlocks         = 1
	DefaultStartupTimeout = 30 * time.Minute
	DefaultRequestTimeout = 10 * time.Minute
	DefaultStallTimeout   = 120 * time.Second
	// DefaultDetectorTimeout bounds one detector's judgement of one response.
	DefaultDetectorTimeout = 60 * time.Second
)

// DefaultMaxLoss is analysis.max_loss when the spec leaves it out (store.DefaultMaxLoss is
// the same number, for experiments recorded without one).
const DefaultMaxLoss = 0.10

// DefaultMinEffect is analysis.min_effect when the spec leaves it out (store's is the same
// number, for experiments recorded without one).
const DefaultMinEffect = 0.02

// Designs, in the words a spec uses.
const (
	DesignExplicit       = "explicit"
	DesignFullFactorial  = "full-factorial"
	DesignOneAtATime     = "one-at-a-time"
	pluginPrefix         = "plugin:"
	maxNameLen           = 64
	maxAliasResolveDepth = 64
)

// DefaultDetectors label every response when the spec lists none.
var DefaultDetectors = []string{"dsml-leak", "toolcall-schema"}

// KnownDetectors are the built-in detectors; a spec may also name an external one as
// plugin:NAME or plugin:PATH.
var KnownDetectors = []string{"dsml-leak", "toolcall-schema", "repetition", "finish-anomaly", "divergence"}

// KnownWorkloads are the workload kinds this arbiter can drive. A spec naming another is
// refused here rather than failing after the engines have started.
var KnownWorkloads = []string{WorkloadAgent, WorkloadThroughput, WorkloadAbortCascade, WorkloadLongContext, WorkloadTrace, WorkloadVerify}

var (
	runtimes = []string{string(RuntimeProcess), string(RuntimeDocker), string(RuntimeExternal), string(RuntimeSlurm)}
	designs  = []string{DesignExplicit, DesignFullFactorial, DesignOneAtATime}
	units    = []string{"session", "response", "launch"}

	// identRE is what arm, factor, node and plugin names look like: they name files,
	// containers and database rows, and appear in arm names of factorial designs.
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	// levelRE allows a leading digit or dot, because level names are often values ("0", "0.5").
	levelRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	// specNameRE: an experiment name becomes part of file and container names.
	specNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	gpuListRE  = regexp.MustCompile(`^(all|[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)$`)
)

// Load reads the spec at path and parses it; see Parse. Only a regular file of at most
// MaxSpecBytes is read: a named pipe, a device or a larger file is refused before a byte
// of it is read.
func Load(path string) (*Spec, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// openSpec checks the text of a spec (an experiment's or a bisection's) before and while
// parsing it, and returns a decoder for its one document with the document's body;
// the error joins every problem that stops the decoding from starting.
func openSpec(path string, data []byte) (*decoder, ast.Node, error) {
	if len(data) > MaxSpecBytes {
		return nil, nil, joinSorted([]*SpecError{tooBig(path, strconv.Itoa(len(data))+" bytes,")})
	}
	if e := checkShape(path, data); e != nil {
		return nil, nil, joinSorted([]*SpecError{e})
	}
	d := &decoder{
		file:    path,
		anchors: map[string]ast.Node{},
		typos:   map[string]bool{},
		spec:    &Spec{Path: path, Source: bytes.Clone(data), pos: map[string]Position{}},
	}
	f, err := parseYAML(data)
	if err != nil {
		return nil, nil, joinSorted([]*SpecError{d.syntaxError(err)})
	}
	var body ast.Node
	if len(f.Docs) > 0 {
		body = f.Docs[0].Body
	}
	for _, doc := range f.Docs[min(1, len(f.Docs)):] {
		if doc.Body != nil {
			d.add(doc.Body, "", "a spec is one YAML document; remove the second one")
		}
	}
	if body == nil {
		d.errs = append(d.errs, &SpecError{File: path, Line: 1, Col: 1, Msg: "spec is empty: start with \"version: 1\""})
		return nil, nil, joinSorted(d.errs)
	}
	for _, doc := range f.Docs {
		d.collectAnchors(doc.Body, 0)
	}
	return d, body, nil
}

// Parse decodes and validates a version 1 spec read from path (used only in errors).
// It fills defaults, expands the arms once to run the confound check, and returns
// every problem it finds as an errors.Join of *SpecError sorted by position.
//
// A text over MaxSpecBytes, nested deeper than MaxSpecDepth, with more than MaxSpecNodes
// nodes or more than MaxArms arms or levels of a factor is refused from a scan of the
// text, before the YAML parser runs.
func Parse(path string, data []byte) (*Spec, error) {
	d, body, err := openSpec(path, data)
	if err != nil {
		return nil, err
	}
	d.decodeSpec(body)
	if len(d.errs) > 0 {
		return nil, joinSorted(d.errs)
	}
	arms, err := d.spec.Expand()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(arms))
	for i, arm := range arms {
		names[i] = arm.Name
	}
	d.checkBaseline(names)
	if len(d.errs) > 0 {
		return nil, joinSorted(d.errs)
	}
	return d.spec, nil
}

// parseYAML runs the YAML parser, turning a panic inside it into an error so that a
// malformed file can never take arbiter down.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	// Duplicate keys are reported by the decoder, together with every other problem.
	return parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
}

// decoder walks the YAML AST by hand rather than through reflection, so that every
// problem can name the node, its position and its dotted path, and so that all of them
// are collected instead of stopping at the first.
type decoder struct {
	file    string
	spec    *Spec
	errs    []*SpecError
	anchors map[string]ast.Node
	// typos are the paths of known fields that an unknown field's name resembles:
	// "missing required field" would only repeat that error.
	typos map[string]bool
}

func (d *decoder) syntaxError(err error) *SpecError {
	se := &SpecError{File: d.file, Line: 1, Col: 1, Msg: err.Error()}
	var ye yaml.Error
	if errors.As(err, &ye) {
		se.Msg = ye.GetMessage()
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			se.Line, se.Col = max(tk.Position.Line, 1), max(tk.Position.Column, 1)
		}
	}
	se.Msg = "YAML syntax: " + se.Msg
	return se
}

// add records a problem at node n.
func (d *decoder) add(n ast.Node, path, format string, args ...any) {
	d.addAt(posOf(n), path, format, args...)
}

// addAt records a problem at p, or at the top of the file when p is unknown.
func (d *decoder) addAt(p Position, path, format string, args ...any) {
	p.Line, p.Col = max(p.Line, 1), max(p.Col, 1)
	d.errs = append(d.errs, &SpecError{File: d.file, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// posOf is where a node starts as a user would point at it: the first key of a block
// mapping rather than its first colon.
func posOf(n ast.Node) Position {
	if n == nil {
		return Position{1, 1}
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return posOf(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return posOf(v.Key)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Position{1, 1}
	}
	return Position{max(tk.Position.Line, 1), max(tk.Position.Column, 1)}
}

func (d *decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > 1000 {
		return
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		if v.Name != nil {
			if _, seen := d.anchors[v.Name.GetToken().Value]; !seen {
				d.anchors[v.Name.GetToken().Value] = v.Value
			}
		}
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Key, depth+1)
		d.collectAnchors(v.Value, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.collectAnchors(e, depth+1)
		}
	case *ast.TagNode:
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingKeyNode:
		d.collectAnchors(v.Value, depth+1)
	}
}

// resolve looks through anchors, aliases and tags other than !!str (which the scalar
// readers honour) to the node that carries the value.
func (d *decoder) resolve(n ast.Node) ast.Node {
	for range maxAliasResolveDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			if v.Value == nil {
				return nil
			}
			target, ok := d.anchors[v.Value.GetToken().Value]
			if !ok {
				return v
			}
			n = target
		case *ast.TagNode:
			if v.Start != nil && v.Start.Value == "!!str" {
				return v
			}
			n = v.Value
		case *ast.MappingKeyNode:
			n = v.Value
		default:
			return n
		}
	}
	return n
}

// describe names a node's kind for messages ("a number", "a list").
func describe(n ast.Node) string {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode, *ast.TagNode:
		return "a string"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "true/false"
	case *ast.NullNode, nil:
		return "empty"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.AliasNode:
		return "an undefined alias"
	}
	return "an unsupported value"
}

func isNull(n ast.Node) bool {
	_, ok := n.(*ast.NullNode)
	return n == nil || ok
}

// entry is one key: value pair of a mapping.
type entry struct {
	key     string
	keyNode ast.Node
	val     ast.Node // resolved
	path    string
}

// keyText is a key's text as written: level names such as 0 and 1 are numbers to YAML.
func (d *decoder) keyText(k ast.Node) (string, bool) {
	switch v := d.resolve(k).(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return v.GetToken().Value, true
	case *ast.TagNode:
		if v.Value != nil && v.Value.GetToken() != nil {
			return v.Value.GetToken().Value, true
		}
	}
	return "", false
}

// mapping lists the entries of a mapping node in file order; null counts as empty.
func (d *decoder) mapping(n ast.Node, path string) ([]entry, bool) {
	n = d.resolve(n)
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	case *ast.NullNode, nil:
		return nil, true
	default:
		d.add(n, path, "value must be a mapping, not %s", describe(n))
		return nil, false
	}
	var out []entry
	first := map[string]ast.Node{}
	for _, mv := range values {
		if _, merge := mv.Key.(*ast.MergeKeyNode); merge {
			d.add(mv.Key, path, "merge keys (<<) are not supported; write the fields out")
			continue
		}
		key, ok := d.keyText(mv.Key)
		if !ok {
			d.add(mv.Key, path, "key must be a plain name, not %s", describe(d.resolve(mv.Key)))
			continue
		}
		if prev, dup := first[key]; dup {
			d.add(mv.Key, joinPath(path, key), "duplicate key (first written at line %d)", posOf(prev).Line)
			continue
		}
		first[key] = mv.Key
		out = append(out, entry{key: key, keyNode: mv.Key, val: d.resolve(mv.Value), path: joinPath(path, key)})
	}
	return out, true
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fields decodes a mapping with a fixed set of field names, calling set for each known
// one and reporting the others; it returns the entries seen, by name.
func (d *decoder) fields(n ast.Node, path string, known []string, set func(e entry)) map[string]entry {
	entries, _ := d.mapping(n, path)
	seen := map[string]entry{}
	for _, e := range entries {
		if !slices.Contains(known, e.key) {
			d.unknownField(e, path, known)
			continue
		}
		seen[e.key] = e
		set(e)
	}
	return seen
}

// unknownField reports a field of the mapping at path that is not among known, with the
// known one it may be a typo of.
func (d *decoder) unknownField(e entry, path string, known []string) {
	msg := "unknown field"
	if s := suggest(e.key, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
		d.typos[joinPath(path, s)] = true
	} else {
		msg += fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
	}
	d.add(e.keyNode, e.path, "%s", msg)
}

// requireTop reports the spec's required fields that it does not have (a typo of one was
// reported as such).
func (d *decoder) requireTop(seen map[string]entry, names ...string) {
	for _, name := range names {
		if _, ok := seen[name]; !ok && !d.typos[name] {
			d.addAt(Position{}, name, "missing required field")
		}
	}
}

// version reads the spec's version, which is the integer 1.
func (d *decoder) version(e entry) {
	if _, isInt := e.val.(*ast.IntegerNode); !isInt {
		d.add(e.val, e.path, "value must be 1, not %s", describe(e.val))
		return
	}
	if v, ok := d.integer(e, math.MinInt64); ok {
		if v != 1 {
			d.add(e.val, e.path, "unsupported spec version %d: this arbiter reads version 1", v)
			return
		}
		d.spec.Version = 1
	}
}

// specName reads the spec's name, at most most long (why says what the limit leaves room
// for, or is empty).
func (d *decoder) specName(e entry, most int, why string) (string, bool) {
	v, ok := d.str(e)
	if !ok {
		return "", false
	}
	if !specNameRE.MatchString(v) || len(v) > most {
		d.add(e.val, e.path, "name %q must be letters, digits, _, . and -, starting with a letter or digit, at most %d long%s", v, most, why)
	}
	d.spec.Name = v
	return v, true
}

// require reports fields that must be present; at is the node the message points to
// (the parent's key) when the field is missing.
func (d *decoder) require(seen map[string]entry, at ast.Node, path string, names ...string) {
	for _, name := range names {
		if _, ok := seen[name]; !ok && !d.typos[joinPath(path, name)] {
			d.add(at, joinPath(path, name), "missing required field")
		}
	}
}

func (d *decoder) str(e entry) (string, bool) {
	switch v := e.val.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value, true
		}
		return "", true
	case *ast.TagNode:
		// !!str before a block scalar: the value is the block's text, not its | or >.
		if sc, ok := v.Value.(ast.ScalarNode); ok && sc.GetToken() != nil {
			return scalarValue(sc), true
		}
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		d.add(e.val, e.path, "value must be a string (write %q)", v.GetToken().Value)
		return "", false
	case *ast.NullNode:
		d.add(e.val, e.path, "value must be a string (write \"\" for an empty one)")
		return "", false
	}
	d.add(e.val, e.path, "value must be a string, not %s", describe(e.val))
	return "", false
}

// oneOf reads a string that must be one of allowed.
func (d *decoder) oneOf(e entry, what string, allowed []string) (string, bool) {
	s, ok := d.str(e)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		msg := fmt.Sprintf("unknown %s %q", what, s)
		if sg := suggest(s, allowed); sg != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", sg)
		} else {
			msg += fmt.Sprintf(" (known: %s)", strings.Join(allowed, ", "))
		}
		d.add(e.val, e.path, "%s", msg)
		return "", false
	}
	return s, true
}

func (d *decoder) integer(e entry, least int64) (int64, bool) {
	v, ok := e.val.(*ast.IntegerNode)
	if !ok {
		d.add(e.val, e.path, "value must be a whole number, not %s", describe(e.val))
		return 0, false
	}
	var n int64
	switch x := v.Value.(type) {
	case int64:
		n = x
	case uint64:
		if x > math.MaxInt64 {
			d.add(e.val, e.path, "value %s is too large", v.GetToken().Value)
			return 0, false
		}
		n = int64(x)
	}
	if n < least {
		d.add(e.val, e.path, "value must be at least %d, not %d", least, n)
		return 0, false
	}
	return n, true
}

// bounded reads a count between least and most; why says what the bound protects, for
// the message.
func (d *decoder) bounded(e entry, least, most int64, why string) (int, bool) {
	n, ok := d.integer(e, least)
	if ok && n > most {
		if why == "" {
			d.add(e.val, e.path, "value %d is too large", n)
		} else {
			d.add(e.val, e.path, "value %d is more than %d: %s", n, most, why)
		}
		return 0, false
	}
	return int(n), ok
}

func (d *decoder) number(e entry) (float64, bool) {
	switch v := e.val.(type) {
	case *ast.FloatNode:
		return v.Value, true
	case *ast.IntegerNode:
		switch x := v.Value.(type) {
		case int64:
			return float64(x), true
		case uint64:
			return float64(x), true
		}
	}
	d.add(e.val, e.path, "value must be a number, not %s", describe(e.val))
	return 0, false
}

// fraction reads a number in [0, 1): a share, a rate difference or a correlation; what
// says what it is when it is out of range.
// fraction reads a number from 0 up to (not including) 1; what is the error otherwise.
func (d *decoder) fraction(e entry, what string) (float64, bool) {
	return d.unitInterval(e, true, what)
}

// probability reads a number strictly between 0 and 1 (a level such as alpha or power);
// what is the error otherwise.
func (d *decoder) probability(e entry, what string) (float64, bool) {
	return d.unitInterval(e, false, what)
}

func (d *decoder) unitInterval(e entry, zero bool, what string) (float64, bool) {
	v, ok := d.number(e)
	if !ok {
		return 0, false
	}
	low := v > 0
	if zero {
		low = v >= 0
	}
	if !low || !(v < 1) {
		d.add(e.val, e.path, "%s", what)
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(e entry) (bool, bool) {
	if v, ok := e.val.(*ast.BoolNode); ok {
		return v.Value, true
	}
	d.add(e.val, e.path, "value must be true or false, not %s", describe(e.val))
	return false, false
}

func (d *decoder) duration(e entry) (time.Duration, bool) {
	if _, ok := e.val.(*ast.StringNode); !ok {
		d.add(e.val, e.path, "value must be a duration such as 30m or 120s, not %s", describe(e.val))
		return 0, false
	}
	s, _ := d.str(e)
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 {
		d.add(e.val, e.path, "bad duration %q: write a positive duration such as 30m or 120s", s)
		return 0, false
	}
	return t, true
}

// list reads a sequence whose items are read by item; null counts as empty.
func (d *decoder) list(e entry, item func(e entry)) bool {
	switch v := e.val.(type) {
	case *ast.SequenceNode:
		for i, n := range v.Values {
			item(entry{key: fmt.Sprint(i), keyNode: n, val: d.resolve(n), path: fmt.Sprintf("%s.%d", e.path, i)})
		}
		return true
	case *ast.NullNode, nil:
		return true
	}
	d.add(e.val, e.path, "value must be a list, not %s", describe(e.val))
	return false
}

func (d *decoder) strings(e entry) []string {
	out := []string{}
	d.list(e, func(it entry) {
		if s, ok := d.str(it); ok {
			out = append(out, s)
		}
	})
	return out
}

// args reads a command line, keeping where it and each of its tokens were written
// (PATH.args, PATH.args.N), for the errors of the engine's grammar (checkArgs).
func (d *decoder) args(e entry) []string {
	d.spec.pos[e.path] = posOf(e.keyNode)
	out := []string{}
	d.list(e, func(it entry) {
		if s, ok := d.str(it); ok {
			d.spec.pos[joinPath(e.path, strconv.Itoa(len(out)))] = posOf(it.val)
			out = append(out, s)
		}
	})
	return out
}

// envEntries reads an env mapping, in the order written: names must be variable names,
// values strings. It returns the settings that are, each with its position recorded.
func (d *decoder) envEntries(e entry) []Setting {
	entries, _ := d.mapping(e.val, e.path)
	var out []Setting
	for _, it := range entries {
		if !envNameRE.MatchString(it.key) {
			d.add(it.keyNode, it.path, "%q is not a variable name (letters, digits and _, not starting with a digit)", it.key)
			continue
		}
		d.spec.pos[it.path] = posOf(it.keyNode)
		if v, ok := d.str(it); ok {
			out = append(out, Setting{Kind: SettingEnv, Name: it.key, Value: v})
		}
	}
	return out
}

// envMap reads an env mapping as envEntries does, into a map.
func (d *decoder) envMap(e entry) map[string]string {
	out := map[string]string{}
	for _, s := range d.envEntries(e) {
		out[s.Name] = s.Value
	}
	return out
}

func (d *decoder) ident(n ast.Node, path, what, name string) bool {
	if !identRE.MatchString(name) || len(name) > maxNameLen {
		d.add(n, path, "%s name %q must be an identifier (letters, digits, _ and -, starting with a letter or _, at most %d long)", what, name, maxNameLen)
		return false
	}
	return true
}

func (d *decoder) decodeSpec(root ast.Node) {
	s := d.spec
	root = d.resolve(root)
	if _, ok := root.(*ast.MappingNode); !ok {
		if _, ok := root.(*ast.MappingValueNode); !ok {
			d.add(root, "", "a spec must be a mapping of fields (version, name, engine, ...), not %s", describe(root))
			return
		}
	}
	known := []string{"version", "name", "engine", "runtime", "arms", "factors", "design", "workload", "detectors", "detector_secrets", "analysis", "launches", "blocks", "timeouts", "verify"}
	seen := d.fields(root, "", known, func(e entry) {
		switch e.key {
		case "version":
			d.version(e)
		case "name":
			d.specName(e, 128, "")
		case "engine":
			d.decodeEngine(e)
		case "runtime":
			d.decodeRuntime(e)
		case "arms":
			d.decodeArms(e)
		case "factors":
			d.decodeFactors(e)
		case "design":
			if v, ok := d.oneOf(e, "design", designs); ok {
				s.Design = v
			}
		case "workload":
			d.decodeWorkload(e)
		case "detectors":
			d.decodeDetectors(e)
		case "detector_secrets":
			s.DetectorSecrets = d.envNames(e, "detector secret")
		case "analysis":
			d.decodeAnalysis(e)
		case "launches", "blocks":
			// Launches per arm: every block launches every arm once, so the two are one
			// number under two names.
			if v, ok := d.bounded(e, 1, MaxBlocks, "every block launches every arm again"); ok {
				if s.Blocks != 0 && s.Blocks != v {
					d.add(e.val, e.path, "launches and blocks are the same number (every block launches every arm once): write one of them")
					return
				}
				s.Blocks = v
			}
		case "timeouts":
			d.decodeTimeouts(e)
		case "verify":
			d.decodeVerify(e)
		}
	})
	d.requireTop(seen, "version", "name", "engine", "workload")
	d.crossCheck(seen)
}

func (d *decoder) decodeEngine(e entry) {
	en := &d.spec.Engine
	var model *entry
	known := []string{"preset", "image", "command", "args", "env", "secrets", "mounts", "gpus", "bool_flags", "port", "endpoints", "model", "attest"}
	seen := d.fields(e.val, e.path, known, func(f entry) {
		switch f.key {
		case "preset":
			if v, ok := d.oneOf(f, "preset", PresetNames()); ok {
				en.Preset = v
			}
		case "image":
			if v, ok := d.str(f); ok {
				en.Image = v
			}
		case "command":
			en.Command = d.strings(f)
			if len(en.Command) == 0 {
				d.add(f.val, f.path, "command must list at least the program to run")
			}
			d.spec.pos[f.path] = posOf(f.keyNode)
		case "args":
			en.Args = d.args(f)
		case "env":
			en.Env = d.envMap(f)
		case "secrets":
			en.Secrets = d.envNames(f, "secret")
		case "mounts":
			d.list(f, func(it entry) {
				if v, ok := d.str(it); ok {
					if !strings.Contains(v, ":") {
						d.add(it.val, it.path, "mount %q must read HOST:CONTAINER[:ro]", v)
					}
					en.Mounts = append(en.Mounts, v)
				}
			})
		case "gpus":
			if v, ok := d.bounded(f, 0, MaxGPUs, "GPUs per arm"); ok {
				en.GPUs = v
			}
		case "port":
			d.decodePort(f)
		case "endpoints":
			d.decodeEndpoints(f)
		case "model":
			model = &f // decoded after preset, which says whether the engine keeps models
		case "attest":
			d.decodeAttest(f)
		case "bool_flags":
			d.list(f, func(it entry) {
				v, ok := d.str(it)
				switch {
				case !ok:
				case !IsFlagToken(v) || strings.Contains(v, "="):
					d.add(it.val, it.path, "%q is not a flag: list flags as the engine reads them, e.g. --enable-mixed-chunk", v)
				case slices.Contains(en.BoolFlags, v):
					d.add(it.val, it.path, "%s is listed twice", v)
				default:
					en.BoolFlags = append(en.BoolFlags, v)
					d.spec.pos[joinPath(f.path, v)] = posOf(it.val)
				}
			})
		}
	})
	d.require(seen, e.keyNode, e.path, "preset")
	if model != nil {
		d.decodeModel(*model)
	}
	if en.Preset != "" {
		valued := PresetFor(en.Preset).Grammar.Valued
		for _, v := range en.BoolFlags {
			if slices.Contains(valued, v) {
				path := joinPath(e.path, "bool_flags")
				d.addAt(d.spec.pos[joinPath(path, v)], path, "the %s preset reads %s with a value; it cannot be a flag without one", en.Preset, v)
			}
		}
	}
	if en.Preset == "custom" && len(en.Command) == 0 {
		if _, given := seen["command"]; !given {
			d.add(e.keyNode, joinPath(e.path, "command"), "the custom preset needs a command")
		}
	}
	for _, name := range en.Secrets {
		if _, clash := en.Env[name]; clash {
			path := joinPath(e.path, "env."+name)
			d.addAt(d.spec.pos[path], path, "%s is both a secret and a plain env value; keep it only in secrets", name)
		}
	}
}

func (d *decoder) decodeRuntime(e entry) {
	rt := &d.spec.Runtime
	names := map[string]bool{}
	slurmFields := map[string]entry{}
	seen := d.fields(e.val, e.path, []string{"kind", "nodes", "partition", "account", "qos", "time", "sbatch", "host_flag", "rest"}, func(f entry) {
		switch f.key {
		case "kind":
			if v, ok := d.oneOf(f, "runtime", runtimes); ok {
				rt.Kind = RuntimeKind(v)
			}
		case "partition", "account", "qos", "time", "host_flag", "rest":
			slurmFields[f.key] = f
			v, ok := d.str(f)
			if !ok {
				return
			}
			if strings.ContainsAny(v, " \t\n") {
				d.add(f.val, f.path, "%s %q must be one word", f.key, v)
				return
			}
			switch f.key {
			case "partition":
				rt.Slurm.Partition = v
			case "account":
				rt.Slurm.Account = v
			case "qos":
				rt.Slurm.QOS = v
			case "time":
				if !slurmTimeRE.MatchString(v) {
					d.add(f.val, f.path, "time %q is not a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH or D-HH:MM:SS)", v)
				}
				rt.Slurm.Time = v
			case "host_flag":
				rt.Slurm.HostFlag = v
			case "rest":
				if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
					d.add(f.val, f.path, "rest %q must be slurmrestd's http:// or https:// URL", v)
				}
				rt.Slurm.REST = v
			}
		case "sbatch":
			slurmFields[f.key] = f
			rt.Slurm.Options = d.strings(f)
			for _, o := range rt.Slurm.Options {
				if !strings.HasPrefix(o, "-") {
					d.add(f.val, f.path, "sbatch option %q must start with - (write --opt=value as one item)", o)
				}
			}
		case "nodes":
			d.list(f, func(it entry) {
				var n Node
				d.spec.pos[it.path] = posOf(it.val)
				seen := d.fields(it.val, it.path, []string{"name", "host", "gpus", "slots", "ca", "cert", "key", "publish", "network"}, func(g entry) {
					d.spec.pos[g.path] = posOf(g.keyNode)
					if g.key == "slots" {
						if v, ok := d.bounded(g, 1, MaxSlots, "slots on one node"); ok {
							n.Slots = v
						}
						return
					}
					v, ok := d.str(g)
					if !ok {
						return
					}
					switch g.key {
					case "name":
						if d.ident(g.val, g.path, "node", v) {
							n.Name = v
						}
					case "host":
						n.Host = v
					case "gpus":
						if !gpuListRE.MatchString(v) {
							d.add(g.val, g.path, "gpus %q must be all, a range such as 0-7, or a list such as 0,2,4", v)
						}
						n.GPUs = v
					default:
						d.decodeNodeDocker(g, &n, v)
					}
				})
				d.require(seen, it.val, it.path, "name")
				if n.Name != "" && names[n.Name] {
					d.add(it.val, it.path+".name", "node %s is listed twice", n.Name)
				}
				names[n.Name] = true
				rt.Nodes = append(rt.Nodes, n)
			})
		}
	})
	if rt.Kind != RuntimeSlurm {
		for _, k := range []string{"partition", "account", "qos", "time", "sbatch", "host_flag", "rest"} {
			f, ok := slurmFields[k]
			if !ok {
				continue
			}
			d.add(f.keyNode, f.path, "%s is a setting of the slurm runtime, but runtime.kind is %s", k, kindOrDefault(rt.Kind))
		}
	} else if _, ok := slurmFields["rest"]; ok && len(rt.Slurm.Options) > 0 {
		f := slurmFields["sbatch"]
		d.add(f.keyNode, f.path, "sbatch options cannot go through slurmrestd (runtime.rest); submit with the Slurm commands, or leave them out")
	} else if n, ok := seen["nodes"]; ok {
		d.add(n.keyNode, n.path, "the slurm runtime places arms itself: list no nodes (Slurm picks them; use partition or sbatch options such as --nodelist)")
	}
}

func kindOrDefault(k RuntimeKind) RuntimeKind {
	if k == "" {
		return DefaultRuntime
	}
	return k
}

// slurmTimeRE matches sbatch's --time formats.
var slurmTimeRE = regexp.MustCompile(`^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$`)

func (d *decoder) decodePins(e entry) Pins {
	return d.decodePinsAnd(e, nil, nil)
}

// decodePinsAnd decodes pins, and the fields named in more through field.
func (d *decoder) decodePinsAnd(e entry, more []string, field func(f entry)) Pins {
	var p Pins
	d.fields(e.val, e.path, append([]string{"env", "args"}, more...), func(f entry) {
		switch f.key {
		default:
			field(f)
		case "env":
			p.Env = d.envMap(f)
		case "args":
			p.Args = d.args(f)
		}
	})
	return p
}

// listing reads the top-level field e (arms, factors) as a mapping of named entries,
// its position recorded; an empty one is an error that says what to list.
func (d *decoder) listing(e entry, list string) ([]entry, bool) {
	d.spec.pos[e.path] = posOf(e.keyNode)
	entries, ok := d.mapping(e.val, e.path)
	if ok && len(entries) == 0 {
		d.add(e.keyNode, e.path, "%s is empty: list %s", e.key, list)
		return nil, false
	}
	return entries, ok
}

func (d *decoder) decodeArms(e entry) {
	entries, ok := d.listing(e, "at least two arms, e.g. control and treatment")
	if !ok {
		return
	}
	if len(entries) > MaxArms {
		// Counted before any arm is decoded: a list of thousands fails at once.
		d.add(e.keyNode, e.path, "%d arms listed, more than %d; split the experiment", len(entries), MaxArms)
		return
	}
	for _, a := range entries {
		if !d.ident(a.keyNode, a.path, "arm", a.key) {
			continue
		}
		d.spec.pos[a.path] = posOf(a.keyNode)
		d.spec.Arms = append(d.spec.Arms, d.decodeArm(a))
	}
	if len(entries) == 1 {
		d.add(e.keyNode, e.path, "an experiment compares at least two arms; only %s is listed", entries[0].key)
	}
}

func (d *decoder) decodeFactors(e entry) {
	entries, ok := d.listing(e, "at least one factor with two levels")
	if !ok {
		return
	}
	for _, fe := range entries {
		if !d.ident(fe.keyNode, fe.path, "factor", fe.key) {
			continue
		}
		d.spec.pos[fe.path] = posOf(fe.keyNode)
		f := Factor{Name: fe.key}
		if d.isEnvShorthand(fe.val) {
			f.Levels = d.decodeEnvShorthand(fe)
		} else {
			levels, _ := d.mapping(fe.val, fe.path)
			if len(levels) > MaxArms {
				d.add(fe.keyNode, fe.path, "factor %s has %d levels, so any design expands it to at least %d arms, more than %d; use fewer levels",
					fe.key, len(levels), len(levels), MaxArms)
				continue
			}
			for _, le := range levels {
				if !levelRE.MatchString(le.key) || len(le.key) > maxNameLen {
					d.add(le.keyNode, le.path, "level name %q must be letters, digits, _, . and - (it becomes part of arm names)", le.key)
					continue
				}
				d.spec.pos[le.path] = posOf(le.keyNode)
				f.Levels = append(f.Levels, Level{Name: le.key, Pins: d.decodePins(le)})
			}
			if len(levels) < 2 {
				d.add(fe.keyNode, fe.path, "a factor needs at least two levels, e.g. off: {} and on: {args: [...]}")
			}
		}
		d.spec.Factors = append(d.spec.Factors, f)
	}
}

// isEnvShorthand tells the form {env: NAME, levels: [...]} from a mapping of levels, in
// which "env" could only be a level whose value is a mapping.
func (d *decoder) isEnvShorthand(n ast.Node) bool {
	mn, ok := n.(*ast.MappingNode)
	if !ok {
		return false
	}
	for _, mv := range mn.Values {
		key, _ := d.keyText(mv.Key)
		switch key {
		case "levels":
			return true
		case "env":
			switch d.resolve(mv.Value).(type) {
			case *ast.MappingNode, *ast.MappingValueNode, *ast.NullNode:
			default:
				return true
			}
		}
	}
	return false
}

func (d *decoder) decodeEnvShorthand(fe entry) []Level {
	var name string
	var levels []Level
	listed := map[string]bool{}
	seen := d.fields(fe.val, fe.path, []string{"env", "levels"}, func(f entry) {
		switch f.key {
		case "env":
			if v, ok := d.str(f); ok {
				if !envNameRE.MatchString(v) {
					d.add(f.val, f.path, "%q is not a variable name", v)
					return
				}
				name = v
			}
		case "levels":
			if v, ok := f.val.(*ast.SequenceNode); ok && len(v.Values) > MaxArms {
				d.add(f.val, f.path, "factor %s has %d levels, so any design expands it to at least %d arms, more than %d; use fewer levels",
					fe.key, len(v.Values), len(v.Values), MaxArms)
				return
			}
			d.list(f, func(it entry) {
				v, ok := d.str(it)
				if !ok {
					return
				}
				if !levelRE.MatchString(v) || len(v) > maxNameLen {
					d.add(it.val, it.path, "level %q cannot name an arm (letters, digits, _, . and - only); use the mapping form", v)
					return
				}
				if listed[v] {
					d.add(it.val, it.path, "level %q is listed twice", v)
					return
				}
				listed[v] = true
				d.spec.pos[joinPath(fe.path, v)] = posOf(it.val)
				levels = append(levels, Level{Name: v})
			})
			if v, ok := f.val.(*ast.SequenceNode); ok && len(v.Values) < 2 || isNull(f.val) {
				d.add(f.val, f.path, "a factor needs at least two levels")
			}
		}
	})
	d.require(seen, fe.keyNode, fe.path, "env", "levels")
	for i := range levels {
		levels[i].Pins = Pins{Env: map[string]string{name: levels[i].Name}}
		d.spec.pos[joinPath(fe.path, levels[i].Name)+".env."+name] = d.spec.pos[joinPath(fe.path, levels[i].Name)]
	}
	return levels
}

// requestField decodes a workload field that shapes every request, whatever the kind:
// seed, temperature, max_tokens, model, max_response_bytes or stream.
func (d *decoder) requestField(f entry, w *Workload) {
	switch f.key {
	case "seed":
		w.Seed, _ = d.integer(f, math.MinInt64)
	case "temperature":
		if v, ok := d.number(f); ok {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				d.add(f.val, f.path, "temperature must be 0 or more")
			}
			w.Temperature = v
		}
	case "max_tokens":
		w.MaxTokens, _ = d.bounded(f, 0, MaxMaxTokens, "tokens of one completion")
	case "model":
		w.Model, _ = d.str(f)
	case "max_response_bytes":
		w.MaxResponseBytes, _ = d.byteSize(f, MinMaxResponseBytes, MaxMaxResponseBytes)
	case "stream":
		if v, ok := d.boolean(f); ok {
			w.NoStream = !v
		}
	}
}

func (d *decoder) decodeWorkload(e entry) {
	if kind := d.workloadKind(e); kind != DefaultWorkload && slices.Contains(KnownWorkloads, kind) {
		d.decodeKindWorkload(e, kind)
		return
	}
	w := &d.spec.Workload
	known := []string{"kind", "sessions", "rounds", "concurrency", "seed", "temperature", "max_tokens", "model", "max_response_bytes", "stream"}
	seen := d.fields(e.val, e.path, known, func(f entry) {
		switch f.key {
		case "kind":
			if v, ok := d.str(f); ok {
				if !slices.Contains(KnownWorkloads, v) {
					d.add(f.val, f.path, "unknown workload kind %q (known: %s)", v, strings.Join(KnownWorkloads, ", "))
					return
				}
				w.Kind = v
			}
		case "sessions":
			w.Sessions, _ = d.bounded(f, 1, MaxSessions, "sessions per arm and block; use blocks for more")
		case "rounds":
			w.Rounds, _ = d.bounded(f, 1, MaxRounds, "rounds of one conversation")
		case "concurrency":
			w.Concurrency, _ = d.bounded(f, 1, MaxConcurrency, "sessions in flight at once against one engine")
		case "seed", "temperature", "max_tokens", "model", "max_response_bytes", "stream":
			d.requestField(f, w)
		}
	})
	d.require(seen, e.keyNode, e.path, "sessions", "rounds")
	if w.Kind == "" {
		w.Kind = DefaultWorkload
	}
	if w.MaxResponseBytes == 0 {
		w.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if _, ok := seen["concurrency"]; !ok {
		w.Concurrency = w.Sessions
		if w.Sessions > MaxConcurrency {
			d.add(seen["sessions"].val, joinPath(e.path, "concurrency"),
				"concurrency defaults to sessions (%d), more than %d sessions in flight at once; set workload.concurrency", w.Sessions, MaxConcurrency)
		}
	}
	if turns := int64(w.Sessions) * int64(w.Rounds); turns > MaxTurnsPerRun {
		d.add(e.keyNode, e.path, "%d sessions x %d rounds is %d conversation rounds per arm and block, more than %d; use fewer, or more blocks",
			w.Sessions, w.Rounds, turns, MaxTurnsPerRun)
	}
}

// byteSize reads a size in bytes: a whole number, or a string with a unit such as
// "512KiB", "8MiB", "1GiB" (or KB, MB, GB in powers of 1000), between least and most.
func (d *decoder) byteSize(e entry, least, most int64) (int64, bool) {
	var n int64
	switch v := e.val.(type) {
	case *ast.IntegerNode:
		var ok bool
		if n, ok = d.integer(e, 0); !ok {
			return 0, false
		}
	case *ast.StringNode:
		var ok bool
		if n, ok = bytesize.Parse(v.Value); !ok {
			d.add(e.val, e.path, "bad size %q: write bytes as a number, or with a unit such as 512KiB, 8MiB or 1GiB", v.Value)
			return 0, false
		}
	default:
		d.add(e.val, e.path, "value must be a size such as 8MiB or 8388608, not %s", describe(e.val))
		return 0, false
	}
	if n < least || n > most {
		d.add(e.val, e.path, "size %d bytes is outside %d (64 KiB) to %d (1 GiB)", n, least, most)
		return 0, false
	}
	return n, true
}

// isPluginRef reports whether s names an external detector: plugin:PATH (any path with
// a slash, as plugins/detectors runs it) or plugin:NAME (arbiter-detector-NAME on PATH).
// Whitespace and control characters are refused: they are typos far more often than
// parts of a real path.
func isPluginRef(s string) bool {
	ref, ok := strings.CutPrefix(s, pluginPrefix)
	if !ok || ref == "" {
		return false
	}
	if strings.ContainsRune(ref, '/') {
		return !strings.ContainsFunc(ref, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
	}
	return identRE.MatchString(ref)
}

// envNames decodes a list of variable names (engine.secrets, detector_secrets), each
// once, and records where each was written; what names an entry in errors.
func (d *decoder) envNames(f entry, what string) []string {
	var out []string
	d.list(f, func(it entry) {
		v, ok := d.str(it)
		switch {
		case !ok:
		case !envNameRE.MatchString(v):
			d.add(it.val, it.path, "%q is not a variable name", v)
		case slices.Contains(out, v):
			d.add(it.val, it.path, "%s %s is listed twice", what, v)
		default:
			out = append(out, v)
			d.spec.pos[joinPath(f.path, v)] = posOf(it.val)
		}
	})
	return out
}

func (d *decoder) decodeDetectors(e entry) {
	d.spec.Detectors = []string{}
	d.list(e, func(it entry) {
		v, ok := d.str(it)
		if !ok {
			return
		}
		switch {
		case !isPluginRef(v) && !slices.Contains(KnownDetectors, v):
			msg := fmt.Sprintf("unknown detector %q", v)
			if s := suggest(v, KnownDetectors); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			} else {
				msg += fmt.Sprintf(" (known: %s, plugin:NAME or plugin:PATH)", strings.Join(KnownDetectors, ", "))
			}
			d.add(it.val, it.path, "%s", msg)
		case slices.Contains(d.spec.Detectors, v):
			d.add(it.val, it.path, "detector %s is listed twice", v)
		default:
			d.spec.Detectors = append(d.spec.Detectors, v)
			d.spec.pos["detectors."+v] = posOf(it.val)
		}
	})
	if seq, ok := e.val.(*ast.SequenceNode); !ok || len(seq.Values) == 0 {
		if ok || isNull(e.val) {
			d.add(e.keyNode, e.path, "list at least one detector, or leave detectors out for the default (%s)", strings.Join(DefaultDetectors, ", "))
		}
	}
}

func (d *decoder) decodeAnalysis(e entry) {
	a := &d.spec.Analysis
	known := []string{"unit", "alpha", "baseline", "margin", "throughput_margin", "min_effect", "max_loss", "sequential", "aa", "plan", "divergence_floor", "noise_floor"}
	d.fields(e.val, e.path, known, func(f entry) {
		switch f.key {
		case "unit":
			a.Unit, _ = d.oneOf(f, "unit", units)
		case "alpha":
			if v, ok := d.probability(f, "alpha must be between 0 and 1 (exclusive), e.g. 0.05"); ok {
				a.Alpha = v
			}
		case "baseline":
			if v, ok := d.str(f); ok {
				a.Baseline = v
				d.spec.pos[f.path] = posOf(f.val)
			}
		case "margin":
			if v, ok := d.fraction(f, "margin is a rate difference: 0 or more and below 1"); ok {
				a.Margin = v
			}
		case "throughput_margin":
			a.ThroughputMargin, _ = d.share(f)
		case "min_effect":
			d.spec.pos[f.path] = posOf(f.val)
			text := strings.TrimSuffix(strings.TrimSpace(f.val.String()), "%")
			if v, err := strconv.ParseFloat(text, 64); err == nil && v == 0 {
				a.MinEffect = 0 // every significant change counts
				return
			}
			a.MinEffect, _ = d.share(f)
		case "max_loss":
			d.spec.pos[f.path] = posOf(f.val)
			if v, ok := d.fraction(f, "max_loss is a share of an arm's sessions: 0 or more and below 1, e.g. 0.1"); ok {
				a.MaxLoss = v
			}
		case "sequential":
			d.fields(f.val, f.path, []string{"looks"}, func(g entry) {
				a.Sequential.Looks, _ = d.bounded(g, 0, MaxLooks, "a group-sequential design takes a handful of looks")
				d.spec.pos[g.path] = posOf(g.val)
			})
		case "plan":
			d.decodePlan(f)
		case "aa":
			a.AA, _ = d.boolean(f)
			d.spec.pos[f.path] = posOf(f.keyNode)
		case "divergence_floor":
			if v, ok := d.str(f); ok && d.ident(f.val, f.path, "arm", v) {
				a.DivergenceFloor = v
			}
			d.spec.pos[f.path] = posOf(f.val)
		case "noise_floor":
			if v, ok := d.str(f); ok {
				if strings.TrimSpace(v) == "" {
					d.add(f.val, f.path, "names no experiment: give the name or id of an A/A experiment in the results database, or leave the field out")
				}
				a.NoiseFloor = strings.TrimSpace(v)
			}
			d.spec.pos[f.path] = posOf(f.val)
		}
	})
}

// decodePlan reads what `arbiter plan` needs: the rates the experiment expects (none for
// a speed claim), the power it wants, the correlation of responses within a session, and a turn's duration.
func (d *decoder) decodePlan(e entry) {
	p := &d.spec.Analysis.Plan
	rate := func(f entry, dst *float64) {
		if v, ok := d.number(f); ok {
			if !(v >= 0 && v <= 1) {
				d.add(f.val, f.path, "a rate is between 0 and 1, e.g. 0.12")
				return
			}
			*dst = v
		}
	}
	rates := false
	d.fields(e.val, e.path, []string{"p0", "p1", "power", "icc", "launch_icc", "turn_seconds"}, func(f entry) {
		switch f.key {
		case "p0":
			rate(f, &p.P0)
			rates = true
		case "p1":
			rate(f, &p.P1)
			rates = true
		case "power":
			if v, ok := d.probability(f, "power is between 0 and 1 (exclusive), e.g. 0.8"); ok {
				p.Power = v
			}
		case "icc":
			rate(f, &p.ICC)
		case "launch_icc":
			rate(f, &p.LaunchICC)
			p.LaunchICCSet = true
		case "turn_seconds":
			if v, ok := d.number(f); ok {
				if !(v > 0) {
					d.add(f.val, f.path, "turn_seconds must be positive")
					return
				}
				p.TurnSeconds = v
			}
		}
	})
	// A plan of a speed claim (a throughput workload) declares no rates, only its power.
	if rates && p.P0 == p.P1 && len(d.errs) == 0 {
		d.add(e.val, e.path, "plan needs two different rates p0 and p1 to plan for")
	}
}

func (d *decoder) decodeTimeouts(e entry) {
	t := &d.spec.Timeouts
	d.fields(e.val, e.path, []string{"startup", "request", "stall", "detector"}, func(f entry) {
		v, ok := d.duration(f)
		if !ok {
			return
		}
		switch f.key {
		case "startup":
			t.Startup = v
		case "request":
			t.Request = v
		case "stall":
			t.Stall = v
		case "detector":
			t.Detector = v
		}
	})
}

// crossCheck applies defaults and the rules that involve more than one field.
func (d *decoder) crossCheck(seen map[string]entry) {
	s := d.spec
	if e, ok := seen["verify"]; ok && s.Workload.Kind != WorkloadVerify {
		d.add(e.keyNode, "verify", "verify sets the pass bar of a verify workload, but workload.kind is %s", s.Workload.Kind)
	}
	if e, ok := seen["detectors"]; ok && s.Workload.Kind == WorkloadVerify && !slices.Contains(s.Detectors, "toolcall-schema") {
		d.add(e.keyNode, "detectors", "a verify workload scores schema accuracy from toolcall-schema's labels: list toolcall-schema")
	}
	armsE, hasArms := seen["arms"]
	factorsE, hasFactors := seen["factors"]
	switch {
	case hasArms && hasFactors:
		d.add(factorsE.keyNode, "factors", "a spec has either arms or factors, not both (arms are at line %d)", posOf(armsE.keyNode).Line)
	case !hasArms && !hasFactors:
		d.addAt(Position{}, "arms", "missing: list the arms to compare (or factors to expand)")
	}
	designE, hasDesign := seen["design"]
	switch {
	case !hasDesign && hasFactors:
		s.Design = DesignFullFactorial
	case !hasDesign:
		s.Design = DesignExplicit
	case hasArms && s.Design != "" && s.Design != DesignExplicit:
		d.add(designE.val, "design", "design %s expands factors, but this spec lists explicit arms (use design: explicit or leave it out)", s.Design)
	case hasFactors && s.Design == DesignExplicit:
		d.add(designE.val, "design", "design explicit needs arms; factors expand by full-factorial or one-at-a-time")
	}
	if s.Runtime.Kind == "" {
		s.Runtime.Kind = DefaultRuntime
	}
	d.checkSlots()
	d.checkRuntimeKind()
	d.checkEngineAddress()
	if s.Runtime.Kind == RuntimeDocker && s.Engine.Image == "" {
		if e, ok := seen["engine"]; ok {
			d.add(e.keyNode, "engine.image", "the docker runtime needs an engine image")
		}
	}
	if len(s.Engine.Command) == 0 && s.Engine.Preset != "" {
		s.Engine.Command = PresetFor(s.Engine.Preset).Command
	}
	if s.Detectors == nil {
		s.Detectors = slices.Clone(DefaultDetectors)
	}
	if e, ok := seen["detector_secrets"]; ok && !slices.ContainsFunc(s.Detectors, isPluginRef) {
		d.add(e.keyNode, "detector_secrets", "detector_secrets hands variables to detector plugins, but detectors lists none (plugin:NAME or plugin:PATH)")
	}
	if slices.Contains(s.Detectors, "divergence") && s.Workload.Temperature != 0 {
		d.addAt(s.pos["detectors.divergence"], "detectors", "divergence compares arms token for token at temperature 0, but workload.temperature is %g: sampling would make every arm diverge", s.Workload.Temperature)
	}
	a := &s.Analysis
	if looks := a.Sequential.Looks; looks > 0 && (s.Workload.Kind == WorkloadThroughput || s.Workload.Kind == WorkloadAbortCascade) {
		// The looks stop on the launches' corruption rates, which is not what these
		// workloads ask: their claim is a speed, or wedges.
		claim := map[string]string{WorkloadThroughput: "a speed (tok/s per request)", WorkloadAbortCascade: "wedged launches"}[s.Workload.Kind]
		d.addAt(s.pos["analysis.sequential.looks"], "analysis.sequential.looks",
			"a group-sequential design stops on the launches' corruption rates, but workload kind %s claims %s: run its launches as blocks", s.Workload.Kind, claim)
	} else if looks > 0 {
		// Each block is one look: a group-sequential design needs as many blocks as
		// looks, and says so rather than guess which blocks to look after.
		switch {
		case s.Blocks == 0:
			s.Blocks = looks
		case s.Blocks != looks:
			d.addAt(s.pos["analysis.sequential.looks"], "analysis.sequential.looks",
				"%d looks need %d blocks (every block is one look), but blocks is %d; leave blocks out or make them equal", looks, looks, s.Blocks)
		}
	}
	if s.Blocks == 0 {
		s.Blocks = DefaultBlocks
	}
	if a.Unit == "" {
		a.Unit = DefaultUnit
	}
	if a.Alpha == 0 {
		a.Alpha = DefaultAlpha
	}
	if _, set := s.pos["analysis.min_effect"]; !set {
		a.MinEffect = DefaultMinEffect
	}
	if _, set := s.pos["analysis.max_loss"]; !set {
		// 0 is a valid setting (any lost session makes the decision inconclusive), so
		// only a spec that leaves the field out gets the default.
		a.MaxLoss = DefaultMaxLoss
	}
	if a.AA && hasFactors {
		d.addAt(s.pos["analysis.aa"], "analysis.aa", "an A/A check compares identical explicit arms, not factors")
	}
	if hasArms && a.Baseline != "" {
		names := make([]string, len(s.Arms))
		for i, arm := range s.Arms {
			names[i] = arm.Name
		}
		d.checkBaseline(names)
	}
	d.checkDivergenceFloor(hasFactors)
	t := &s.Timeouts
	if t.Startup == 0 {
		t.Startup = DefaultStartupTimeout
	}
	if t.Request == 0 {
		t.Request = DefaultRequestTimeout
	}
	if t.Stall == 0 {
		t.Stall = DefaultStallTimeout
	}
	if t.Detector == 0 {
		t.Detector = DefaultDetectorTimeout
	}
}

// checkBaseline makes sure the baseline names one of the arms, defaulting it to the first.
func (d *decoder) checkBaseline(names []string) {
	a := &d.spec.Analysis
	if a.Baseline == "" {
		if len(names) > 0 {
			a.Baseline = names[0]
		}
		return
	}
	if slices.Contains(names, a.Baseline) {
		return
	}
	p := d.spec.pos["analysis.baseline"]
	msg := fmt.Sprintf("baseline %q names no arm (arms: %s)", a.Baseline, strings.Join(names, ", "))
	if s := suggest(a.Baseline, names); s != "" {
		msg = fmt.Sprintf("baseline %q names no arm (did you mean %s?)", a.Baseline, s)
	}
	d.addAt(p, "analysis.baseline", "%s", msg)
}

// suggest returns the candidate closest to s when it is plausibly a typo.
func suggest(s string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if dist := EditDistance(strings.ToLower(s), strings.ToLower(c)); dist < bestDist && dist < len(c) {
			best, bestDist = c, dist
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b (strings longer than 64
// bytes are far from everything), for the suggestions of a mistyped name.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkSlots checks that every node can be cut into slots of engine.gpus, that the
// process runtime's nodes are this machine, and that no two nodes of one machine share
// a device (one GPU would serve two arms at once).
func (d *decoder) checkSlots() {
	s := d.spec
	owner := map[string]string{} // host + device -> node
	for i, n := range s.Runtime.Nodes {
		path := fmt.Sprintf("runtime.nodes.%d", i)
		at := func(field string) (Position, string) {
			if p, ok := s.pos[path+"."+field]; ok {
				return p, path + "." + field
			}
			return s.pos[path], path
		}
		if s.Runtime.Kind == DefaultRuntime && !IsLocalHost(n.Host) {
			p, f := at("host")
			d.addAt(p, f, "the process runtime runs engines on this machine: leave host out or write local (got %q)", n.Host)
		}
		if !gpuListRE.MatchString(strings.TrimSpace(n.GPUs)) && strings.TrimSpace(n.GPUs) != "" {
			continue // already reported
		}
		if _, err := nodeSlots(n, i, s.Engine.GPUs); err != nil {
			field, msg, _ := strings.Cut(err.Error(), ": ")
			p, f := at(field)
			d.addAt(p, f, "node %s: %s", n.Name, msg)
			continue
		}
		if g := strings.TrimSpace(n.GPUs); g != "" && g != "all" {
			ids, _ := ExpandGPUs(g)
			host := n.Host
			if IsLocalHost(host) {
				host = LocalNode
			}
			for _, id := range ids {
				if other, taken := owner[host+"\x00"+id]; taken {
					p, f := at("gpus")
					d.addAt(p, f, "GPU %s of node %s is also node %s's: nodes on one machine must not share devices", id, n.Name, other)
					break
				}
				owner[host+"\x00"+id] = n.Name
			}
		}
	}
}
