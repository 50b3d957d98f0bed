package arms

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Expand renders the spec's arms, in a stable order: explicit arms in file order, or
// the factors expanded by the design.
//
// Full factorial: the cartesian product of the factors' levels, the first factor
// varying slowest. One at a time: the baseline (every factor at its first level), then
// each other level of each factor alone, the rest at their first levels.
//
// A factorial arm is named by its levels, factor=level pairs joined by commas in factor
// order, e.g. "bf16_index_k=1,hicache=on". Factor names are identifiers and level names
// use only letters, digits, _, . and -, so an arm name never holds a space, a slash or
// a quote and is safe in file names; runtimes whose names are stricter (docker
// containers) must map = and , themselves.
//
// Expand runs the confound check and returns every refusal as a *SpecError wrapping
// ErrConfounded, joined.
func (s *Spec) Expand() ([]Arm, error) {
	if err := s.checkArmCount(); err != nil {
		return nil, err
	}
	var arms []Arm
	if len(s.Arms) > 0 {
		for _, a := range s.Arms {
			arm := s.render(a.Name, nil, a.Pins)
			arm.BaseURL = a.BaseURL
			arms = append(arms, arm)
		}
	} else {
		for _, combo := range s.combinations() {
			names := make([]string, len(combo))
			levels := map[string]string{}
			var pins Pins
			for i, li := range combo {
				f := s.Factors[i]
				l := f.Levels[li]
				names[i] = f.Name + "=" + l.Name
				levels[f.Name] = l.Name
				pins = mergePins(pins, l.Pins)
			}
			arms = append(arms, s.render(strings.Join(names, ","), levels, pins))
		}
	}
	if len(arms) == 0 {
		// Parse never lets this through; a Spec built in code can.
		return nil, joinSorted([]*SpecError{{File: s.Path, Path: "arms", Msg: "no arms: list explicit arms, or factors with levels"}})
	}
	c := confoundCheck{spec: s, grammar: s.Grammar()}
	c.checkArgs()
	c.engineOverrides()
	c.sharedFactorVariables()
	c.sameLevels()
	c.pinSets()
	if len(c.errs) == 0 {
		// Identical arms are usually the echo of a refusal above; say it only alone.
		c.identical(arms)
	}
	if err := joinSorted(c.errs); err != nil {
		return nil, err
	}
	return arms, nil
}

// MaxArms is the most arms a spec may expand to. Every arm is at least one engine
// launch, so a spec over it is almost always a mistake (twelve binary factors are 4096
// launches), and the confound check stays cheap below it.
const MaxArms = 256

// armCount is how many arms the spec expands to, computed without expanding; over is
// true when the count does not fit an int64.
func (s *Spec) armCount() (n int64, over bool) {
	if len(s.Arms) > 0 || len(s.Factors) == 0 {
		return int64(len(s.Arms)), false
	}
	if s.Design == DesignOneAtATime {
		n = 1
		for _, f := range s.Factors {
			n += int64(max(len(f.Levels)-1, 0))
		}
		return n, false
	}
	n = 1
	for _, f := range s.Factors {
		l := int64(len(f.Levels))
		if l == 0 {
			return 0, false
		}
		if n > math.MaxInt64/l {
			over = true
			continue // a later factor without levels still makes it 0
		}
		n *= l
	}
	if over {
		return math.MaxInt64, true
	}
	return n, false
}

// checkArmCount refuses a spec that expands to more than MaxArms arms, naming the
// count and what produced it.
func (s *Spec) checkArmCount() error {
	n, over := s.armCount()
	if n <= MaxArms {
		return nil
	}
	count := strconv.FormatInt(n, 10)
	if over {
		count = "more than " + strconv.FormatInt(math.MaxInt64, 10)
	}
	if len(s.Arms) > 0 {
		p := s.pos["arms"]
		return joinSorted([]*SpecError{{File: s.Path, Line: p.Line, Col: p.Col, Path: "arms",
			Msg: fmt.Sprintf("%s arms listed, more than %d; split the experiment", count, MaxArms)}})
	}
	sizes := make([]string, len(s.Factors))
	names := make([]string, len(s.Factors))
	for i, f := range s.Factors {
		names[i] = f.Name
		sizes[i] = strconv.Itoa(len(f.Levels))
	}
	how := "x"
	hint := "use fewer factors or levels, or design: one-at-a-time"
	if s.Design == DesignOneAtATime {
		how, hint = "+", "use fewer factors or levels"
	}
	p := s.pos["factors"]
	return joinSorted([]*SpecError{{File: s.Path, Line: p.Line, Col: p.Col, Path: "factors",
		Msg: fmt.Sprintf("design %s expands factors %s (levels %s) to %s arms, more than %d; %s",
			s.Design, strings.Join(names, ", "), strings.Join(sizes, how), count, MaxArms, hint)}})
}

// combinations lists level indexes per arm, one index per factor.
func (s *Spec) combinations() [][]int {
	if len(s.Factors) == 0 {
		return nil
	}
	for _, f := range s.Factors {
		if len(f.Levels) == 0 {
			return nil
		}
	}
	if s.Design == DesignOneAtATime {
		base := make([]int, len(s.Factors))
		out := [][]int{base}
		for i, f := range s.Factors {
			for li := 1; li < len(f.Levels); li++ {
				c := slices.Clone(base)
				c[i] = li
				out = append(out, c)
			}
		}
		return out
	}
	out := [][]int{{}}
	for _, f := range s.Factors {
		var next [][]int
		for _, prefix := range out {
			for li := range f.Levels {
				next = append(next, append(slices.Clone(prefix), li))
			}
		}
		out = next
	}
	return out
}

func mergePins(a, b Pins) Pins {
	out := Pins{Args: slices.Concat(a.Args, b.Args)}
	if len(a.Env)+len(b.Env) > 0 {
		out.Env = map[string]string{}
		maps.Copy(out.Env, a.Env)
		maps.Copy(out.Env, b.Env)
	}
	return out
}

// render builds one arm: engine command, engine args, then the pins' args; engine env
// overlaid by the pins' env.
func (s *Spec) render(name string, levels map[string]string, pins Pins) Arm {
	cmd := s.Engine.Command
	if len(cmd) == 0 {
		cmd = PresetFor(s.Engine.Preset).Command
	}
	env := map[string]string{}
	maps.Copy(env, s.Engine.Env)
	maps.Copy(env, pins.Env)
	return Arm{
		Name:    name,
		Levels:  levels,
		Pins:    Pins{Env: maps.Clone(pins.Env), Args: slices.Clone(pins.Args)},
		Command: slices.Concat(cmd, s.Engine.Args, pins.Args),
		Env:     env,
		Secrets: slices.Clone(s.Engine.Secrets),
	}
}

// flag is one command-line setting, as the confound check compares it: --name value,
// --name=value, a bare --name, or words before any flag (named by the first).
type flag struct {
	name, value string
}

// parseFlags reads args as flags and their values by the engine's grammar (args.go).
// A command line the grammar refuses was refused by checkArgs; the reading of it here
// only needs to be deterministic.
func parseFlags(g Grammar, args []string) []flag {
	read, _ := g.Parse(args)
	out := make([]flag, len(read))
	for i, f := range read {
		if f.Name == "" {
			out[i] = flag{name: f.Tokens[0], value: strings.Join(f.Tokens[1:], " ")}
			continue
		}
		out[i] = flag{name: f.Name, value: f.Value}
	}
	return out
}

// variables are the names a set of pins sets: env names, then flag names, in order.
func variables(g Grammar, p Pins) []string {
	out := slices.Sorted(maps.Keys(p.Env))
	for _, f := range parseFlags(g, p.Args) {
		if !slices.Contains(out, f.name) {
			out = append(out, f.name)
		}
	}
	return out
}

// pinSource is an explicit arm or a factor level: something that sets pins.
type pinSource struct {
	what string // "arm treatment", "level on of factor hicache"
	path string // arms.treatment, factors.hicache.on
	pins Pins
}

type confoundCheck struct {
	spec *Spec
	// grammar is how the engine reads its command line.
	grammar Grammar
	errs    []*SpecError
	// overrides are the variables already refused as engine overrides, so that the
	// pin-set rule does not report them a second time.
	overrides map[string]bool
}

func (c *confoundCheck) refuse(path, format string, args ...any) {
	p := c.spec.pos[path]
	c.errs = append(c.errs, &SpecError{File: c.spec.Path, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...), Err: ErrConfounded})
}

func (c *confoundCheck) sources() []pinSource {
	var out []pinSource
	for _, a := range c.spec.Arms {
		out = append(out, pinSource{what: "arm " + a.Name, path: "arms." + a.Name, pins: a.Pins})
	}
	for _, f := range c.spec.Factors {
		for _, l := range f.Levels {
			out = append(out, pinSource{what: fmt.Sprintf("level %s of factor %s", l.Name, f.Name), path: "factors." + f.Name + "." + l.Name, pins: l.Pins})
		}
	}
	return out
}

// argSegment is one list of args as the spec wrote it (engine.args, an arm's or a
// level's args), part of a rendered command line.
type argSegment struct {
	path string // engine, arms.treatment, factors.hicache.on
	args []string
}

// checkArgs refuses command lines that the engine's grammar reads as an error or could
// read two ways: each arm's engine args followed by its pins, as it is launched, so that
// a bare flag at the end of engine.args is read with the pins after it.
func (c *confoundCheck) checkArgs() {
	s := c.spec
	engine := argSegment{path: "engine", args: s.Engine.Args}
	var lines [][]argSegment
	for _, a := range s.Arms {
		lines = append(lines, []argSegment{engine, {path: "arms." + a.Name, args: a.Pins.Args}})
	}
	if len(s.Arms) == 0 {
		for _, combo := range s.combinations() {
			line := []argSegment{engine}
			for i, li := range combo {
				f := s.Factors[i]
				line = append(line, argSegment{path: "factors." + f.Name + "." + f.Levels[li].Name, args: f.Levels[li].Pins.Args})
			}
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		lines = append(lines, []argSegment{engine})
	}
	seen := map[string]bool{}
	for _, line := range lines {
		var args []string
		for _, seg := range line {
			args = append(args, seg.args...)
		}
		_, err := c.grammar.Parse(args)
		ae, ok := err.(*ArgError)
		if !ok {
			continue
		}
		seg, i := line[0], ae.Index
		for _, next := range line[1:] {
			if i < len(seg.args) {
				break
			}
			i -= len(seg.args)
			seg = next
		}
		path := seg.path + ".args"
		if key := fmt.Sprintf("%s\x00%d\x00%s", path, i, ae.Msg); !seen[key] {
			seen[key] = true
			p, at := s.pos[fmt.Sprintf("%s.%d", path, i)]
			if !at {
				p = s.pos[path]
			}
			c.errs = append(c.errs, &SpecError{File: s.Path, Line: p.Line, Col: p.Col, Path: path, Msg: ae.Msg})
		}
	}
}

// engineOverrides refuses pins that change what the engine declares for every arm: a
// shared setting silently changed in one arm is a second varied variable.
func (c *confoundCheck) engineOverrides() {
	c.overrides = map[string]bool{}
	engineFlags := map[string]string{}
	for _, f := range parseFlags(c.grammar, c.spec.Engine.Args) {
		engineFlags[f.name] = f.value
	}
	for _, src := range c.sources() {
		for _, k := range slices.Sorted(maps.Keys(src.pins.Env)) {
			if _, shared := c.spec.Engine.Env[k]; shared {
				c.refuse(src.path, "%s pins %s, which engine.env sets for every arm; a shared setting must not change per arm: remove %s from engine.env or from the pins", src.what, k, k)
				c.overrides[k] = true
			}
		}
		for _, f := range parseFlags(c.grammar, src.pins.Args) {
			if v, shared := engineFlags[f.name]; shared && v != f.value {
				c.refuse(src.path, "%s sets %s, which engine.args sets to %q for every arm; a shared setting must not change per arm: remove %s from engine.args or from the pins", src.what, flagText(f), v, f.name)
				c.overrides[f.name] = true
			}
		}
	}
}

func flagText(f flag) string {
	if f.value == "" {
		return f.name
	}
	return f.name + " " + f.value
}

// sharedFactorVariables refuses two factors that set the same variable: their effects
// could not be told apart, and one level would overwrite the other.
func (c *confoundCheck) sharedFactorVariables() {
	owner := map[string]string{}
	for _, f := range c.spec.Factors {
		mine := map[string]bool{}
		for _, l := range f.Levels {
			for _, v := range variables(c.grammar, l.Pins) {
				if other, taken := owner[v]; taken && other != f.Name && !mine[v] {
					c.refuse("factors."+f.Name+"."+l.Name, "factors %s and %s both set %s; vary each variable in one factor only", other, f.Name, v)
				}
				mine[v] = true
			}
		}
		for v := range mine {
			if _, taken := owner[v]; !taken {
				owner[v] = f.Name
			}
		}
	}
}

// sameLevels refuses two levels of one factor that set the same pins: every arm with
// one would be identical to its twin with the other.
func (c *confoundCheck) sameLevels() {
	for _, f := range c.spec.Factors {
		first := map[string]string{} // pins key -> the first level with those pins
		for _, l := range f.Levels {
			key := pinsKey(c.grammar, l.Pins)
			if prev, twin := first[key]; twin {
				c.refuse("factors."+f.Name+"."+l.Name, "levels %s and %s of factor %s set the same pins, so their arms would be identical", prev, l.Name, f.Name)
				continue
			}
			first[key] = l.Name
		}
	}
}

// pinSets refuses explicit arms that pin different variables: an arm that leaves a
// variable to the engine's default while another sets it varies two things at once.
// One exception keeps the plainest A/B expressible: when the arms differ in nothing
// but the presence of one flag (control {} vs treatment {args: [--enable-x]}).
func (c *confoundCheck) pinSets() {
	arms := c.spec.Arms
	if len(arms) < 2 {
		return
	}
	pinnedBy := map[string][]string{}
	var order []string
	for _, a := range arms {
		for _, v := range variables(c.grammar, a.Pins) {
			if _, seen := pinnedBy[v]; !seen {
				order = append(order, v)
			}
			pinnedBy[v] = append(pinnedBy[v], a.Name)
		}
	}
	var partial []string
	for _, v := range order {
		if len(pinnedBy[v]) < len(arms) && !c.overrides[v] {
			partial = append(partial, v)
		}
	}
	if len(partial) == 0 {
		return
	}
	if len(partial) == 1 && IsFlagToken(partial[0]) && onlyToggles(c.grammar, arms, partial[0]) {
		return
	}
	for _, v := range partial {
		var missing []string
		for _, a := range arms {
			if !slices.Contains(pinnedBy[v], a.Name) {
				missing = append(missing, a.Name)
			}
		}
		first := pinnedBy[v][0]
		c.refuse("arms."+first, "arm %s pins %s but %s %s not, so more than the declared pins would vary; pin %s in every arm, or vary it as a factor",
			first, v, plural("arm", missing), verb(missing), v)
	}
}

func plural(noun string, names []string) string {
	if len(names) == 1 {
		return noun + " " + names[0]
	}
	return noun + "s " + strings.Join(names, ", ")
}

func verb(names []string) string {
	if len(names) == 1 {
		return "does"
	}
	return "do"
}

// onlyToggles reports whether the arms are identical once flag is removed.
func onlyToggles(g Grammar, arms []ArmSpec, flagName string) bool {
	var first string
	for i, a := range arms {
		var rest []flag
		for _, f := range parseFlags(g, a.Pins.Args) {
			if f.name != flagName {
				rest = append(rest, f)
			}
		}
		key := envKey(a.Pins.Env) + "\x01" + flagsKey(rest)
		if i == 0 {
			first = key
		} else if key != first {
			return false
		}
	}
	return true
}

// identical refuses arms that would launch the same command with the same env, unless
// the spec declares an A/A check, which in turn requires every arm to be identical.
func (c *confoundCheck) identical(arms []Arm) {
	s := c.spec
	if s.Analysis.AA {
		for _, a := range arms[min(1, len(arms)):] {
			if armKey(c.grammar, a) != armKey(c.grammar, arms[0]) {
				p := s.pos["arms."+a.Name]
				c.errs = append(c.errs, &SpecError{File: s.Path, Line: p.Line, Col: p.Col, Path: "arms." + a.Name,
					Msg: fmt.Sprintf("analysis.aa declares an A/A check, but arm %s differs from arm %s; an A/A check needs identical arms", a.Name, arms[0].Name)})
			}
		}
		return
	}
	// The divergence floor repeats the baseline on purpose (Analysis.DivergenceFloor).
	floor, base := s.Analysis.DivergenceFloor, s.baselineName()
	if floor != "" {
		fi := slices.IndexFunc(arms, func(a Arm) bool { return a.Name == floor })
		bi := slices.IndexFunc(arms, func(a Arm) bool { return a.Name == base })
		if fi >= 0 && bi >= 0 && armKey(c.grammar, arms[fi]) != armKey(c.grammar, arms[bi]) {
			p := s.pos["analysis.divergence_floor"]
			c.errs = append(c.errs, &SpecError{File: s.Path, Line: p.Line, Col: p.Col, Path: "analysis.divergence_floor",
				Msg: fmt.Sprintf("arm %s is the divergence floor, so it must repeat the baseline %s's pins exactly, and it differs", floor, base)})
		}
	}
	first := make(map[string]string, len(arms)) // arm key -> the first arm with it
	for _, a := range arms {
		key := armKey(c.grammar, a)
		prev, twin := first[key]
		if !twin {
			first[key] = a.Name
			continue
		}
		if pair := []string{prev, a.Name}; floor != "" && slices.Contains(pair, floor) && slices.Contains(pair, base) {
			continue
		}
		path := "arms." + a.Name
		if a.Levels != nil {
			if c.hasLevelTwins() {
				continue // already explained per factor
			}
			path = "factors"
		}
		c.refuse(path, "arms %s and %s are identical (same command and env), so nothing varies; for an A/A check set analysis.aa: true", prev, a.Name)
	}
}

func (c *confoundCheck) hasLevelTwins() bool {
	for _, e := range c.errs {
		if strings.HasPrefix(e.Path, "factors.") && strings.Contains(e.Msg, "set the same pins") {
			return true
		}
	}
	return false
}

func envKey(env map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%s=%s\x00", k, env[k])
	}
	return b.String()
}

// flagsKey is the canonical form of a command line: its flags with their values,
// sorted by name, so that [--a, --b] and [--b, --a] compare equal. The sort is stable:
// a repeated flag's last value wins, so the order among its repeats still counts.
func flagsKey(flags []flag) string {
	flags = slices.Clone(flags)
	slices.SortStableFunc(flags, func(a, b flag) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	for _, f := range flags {
		fmt.Fprintf(&b, "%s\x00%s\x00", f.name, f.value)
	}
	return b.String()
}

func pinsKey(g Grammar, p Pins) string {
	return envKey(p.Env) + "\x01" + flagsKey(parseFlags(g, p.Args))
}

func armKey(g Grammar, a Arm) string {
	return envKey(a.Env) + "\x01" + flagsKey(parseFlags(g, a.Command))
}
