package arms

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// A bisection spec names a good and a bad configuration of one engine, and the
// workload, detectors and timeouts every step shares:
//
//	version: 1
//	name: deploy-0312
//	engine: {preset: refserve, args: [--tool-call-parser, deepseekv4]}
//	good: {env: {BF16_INDEX_K: "0"}, args: [--page-size, "1"]}
//	bad:  {env: {BF16_INDEX_K: "1"}, args: [--page-size, "16", --enable-hierarchical-cache]}
//	# or: good: {server_info: good.json}, bad: {server_info: bad.json}
//	workload: {kind: toolcall-agent, sessions: 40, rounds: 4, concurrency: 40, seed: 42}
//	detectors: [dsml-leak, toolcall-schema]
//	search: {effect: 0.10, error_budget: 0.05, looks: 3}
//
// Its changes are the settings (an env variable, a flag with its value) whose values
// differ between good and bad. Every step of the bisection is an ordinary experiment
// whose spec is this one with good, bad and search replaced by one factor, changes, of
// two levels: good, and good with some of the changes applied (StepSpec).

// BisectSpec is a decoded, validated bisection spec.
type BisectSpec struct {
	// Path is the file the spec was read from; Source its text as read.
	Path   string
	Source []byte
	Name   string
	// Base holds what every step shares (engine, runtime, workload, detectors,
	// timeouts); its one factor, changes, has the levels good and bad, so that its
	// Redactor and RedactedSource hide what the configurations hold.
	Base *Spec
	// Good and Bad are the two configurations as resolved.
	Good, Bad Config
	// Changes are the settings that differ, in search order: bad's env variables and
	// flags in the order bad lists them (server info: sorted by name), then those only
	// good sets.
	Changes []Change
	Search  BisectSearch

	// common are the settings good and bad share, rendered in both levels of a step.
	common []settingRef
	// entries are the top-level fields with the line each starts at, in file order.
	entries []topEntry
	pos     map[string]Position
}

// Config is one configuration of a bisection.
type Config struct {
	// ServerInfo is the server-info file the configuration was derived from, as the
	// spec names it; empty when it is given as pins.
	ServerInfo string
	// Settings are its env variables and flags, in the order given.
	Settings []Setting
}

// Setting is one env variable or one flag of a configuration.
type Setting struct {
	// Kind is "env" or "flag".
	Kind string
	// Name is the variable's name, or the flag with its dashes (--page-size).
	Name string
	// Value is the env value, or the flag's value (its arguments joined by a space,
	// empty for a bare flag).
	Value string
	// Tokens are a flag's command-line tokens as given: [--page-size 16],
	// [--page-size=16] or [--enable-x]; nil for env.
	Tokens []string
	// derived is true for a setting read from a server-info file: when good and bad
	// agree on it, the engine's own configuration stands for it and no step pins it.
	derived bool
}

// Setting kinds.
const (
	SettingEnv  = "env"
	SettingFlag = "flag"
)

// Change is one setting that differs between good and bad. Good or Bad is nil where
// that configuration does not set it.
type Change struct {
	Kind string   `json:"kind"`
	Name string   `json:"name"`
	Good *Setting `json:"-"`
	Bad  *Setting `json:"-"`
}

// Label says what the change does, credentials hidden: "BF16_INDEX_K: 0 → 1",
// "--enable-hierarchical-cache: absent → set", "--page-size: 1 → 16".
func (c Change) Label() string {
	return c.Name + ": " + c.describe(c.Good) + " → " + c.describe(c.Bad)
}

func (c Change) describe(s *Setting) string {
	switch {
	case s == nil && c.Kind == SettingEnv:
		return "unset"
	case s == nil:
		return "absent"
	case c.Kind == SettingFlag && s.Value == "":
		return "set"
	case c.secret():
		return Redacted
	case s.Value == "":
		return `""`
	}
	return s.Value
}

func (c Change) secret() bool {
	if c.Kind == SettingEnv {
		return LooksLikeCredential(c.Name)
	}
	return looksLikeCredentialFlag(c.Name)
}

// BisectSearch is the search's budget and model.
type BisectSearch struct {
	// ErrorBudget bounds the probability that the bisection names a wrong culprit or
	// calls the bad configuration clean (default 0.05).
	ErrorBudget float64
	// Effect is the smallest excess corruption rate over good that the culprit causes;
	// a step whose excess is shown below it is clean. Required.
	Effect float64
	// Looks is the most launches of each side (one block of workload.sessions each) a
	// step may take before it is called inconclusive (default DefaultBisectLooks). The
	// launch is the unit a step decides on, so a step needs enough of them to reach its
	// share of the error budget at all.
	Looks int
	// LaunchICC is the most the launches of one configuration may differ (intra-launch
	// correlation of corruption) that a step's clean bound allows for (default
	// DefaultLaunchICC); an A/A experiment measures it.
	LaunchICC float64
	// MaxSteps caps the steps; 0 lets the bisection choose (enough for a culprit of
	// one or two changes). The budget is split evenly over it.
	MaxSteps int
	// MaxLoss is every step's analysis.max_loss (default DefaultMaxLoss).
	MaxLoss float64
	// CheckRevert adds a last step: every change but the culprit's against good.
	CheckRevert bool
	// Ignore are server-info keys left out of the comparison.
	Ignore []string
}

// Defaults of a bisection's search.
const (
	DefaultErrorBudget = 0.05
	DefaultBisectLooks = 10
	// DefaultLaunchICC is the intra-launch correlation of corruption assumed where a
	// spec declares none and no A/A experiment measured it: GPU launches of one
	// configuration measured 0.01 to 0.09, and assuming less than launches show makes a
	// bisection call a culprit's subset clean too readily.
	DefaultLaunchICC = 0.1
	// MaxBisectChanges is the most changes a bisection searches: every step is an
	// experiment, and a deploy that changed more settings is better split first.
	MaxBisectChanges = 64
	// MaxBisectLooks bounds search.looks: launches of each side in one step.
	MaxBisectLooks = 30
	// MaxBisectSteps bounds search.max_steps.
	MaxBisectSteps = 200
)

type topEntry struct {
	key  string
	line int // 1-based line of the key
}

type settingRef struct {
	good, bad *Setting
}

// LoadBisect reads and validates the bisection spec at path; see ParseBisect.
func LoadBisect(path string) (*BisectSpec, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return nil, err
	}
	return ParseBisect(path, data)
}

// ParseBisect decodes and validates a bisection spec read from path: every problem is a
// *SpecError naming file:line:col and the field, all of them joined. Server-info files
// are read relative to the spec's folder. The reproduction step's spec is built and
// validated too, so that a spec accepted here runs.
func ParseBisect(path string, data []byte) (*BisectSpec, error) {
	d, body, err := openSpec(path, data)
	if err != nil {
		return nil, err
	}
	b := &BisectSpec{Path: path, Source: bytes.Clone(data), Base: d.spec, pos: d.spec.pos}
	bd := &bisectDecoder{decoder: d, b: b}
	bd.decode(body)
	if len(d.errs) > 0 {
		return nil, joinSorted(d.errs)
	}
	bd.resolveConfigs()
	if len(d.errs) > 0 {
		return nil, joinSorted(d.errs)
	}
	// The steps' specs are this text with good, bad and search replaced: building the
	// reproduction's now runs every check a spec gets (the workload's, the detectors',
	// the confound check) with positions in this file.
	all := make([]int, len(b.Changes))
	for i := range all {
		all[i] = i
	}
	if _, err := b.StepSpec(StepOptions{Name: b.Name, Applied: all, Alpha: b.Search.ErrorBudget}); err != nil {
		return nil, err
	}
	return b, nil
}

// bisectDecoder reads the fields a bisection spec has beyond an experiment's.
type bisectDecoder struct {
	*decoder
	b *BisectSpec
	// good and bad are the configurations as written, with where they were written.
	good, bad configEntry
}

// configEntry is good or bad as written.
type configEntry struct {
	e          entry
	serverInfo string
	siPos      Position
	env        []Setting
	args       []string
	argsPos    Position
	given      bool
}

var bisectFields = []string{"version", "name", "engine", "runtime", "good", "bad", "workload", "detectors", "search", "timeouts"}

// notInBisect explains the experiment fields a bisection builds itself.
var notInBisect = map[string]string{
	"arms":     "a bisection builds the arms of its steps from good and bad; remove arms",
	"factors":  "a bisection builds the arms of its steps from good and bad; remove factors",
	"design":   "a bisection chooses the subsets each step applies; remove design",
	"analysis": "a bisection sets each step's analysis from search (error_budget, looks, max_loss); remove analysis",
	"blocks":   "a step takes up to search.looks blocks; remove blocks",
	"launches": "a step launches each side up to search.looks times; remove launches",
}

func (d *bisectDecoder) decode(root ast.Node) {
	s := d.spec
	b := d.b
	root = d.resolve(root)
	mn, ok := root.(*ast.MappingNode)
	if !ok {
		if _, ok := root.(*ast.MappingValueNode); !ok {
			d.add(root, "", "a bisection spec must be a mapping of fields (version, name, engine, good, bad, ...), not %s", describe(root))
			return
		}
	} else if mn.IsFlowStyle {
		d.add(root, "", "write a bisection spec in block style, one field per line: its steps reuse its lines")
		return
	}
	entries, _ := d.mapping(root, "")
	seen := map[string]entry{}
	for _, e := range entries {
		line := posOf(e.keyNode).Line
		if n := len(b.entries); n > 0 && b.entries[n-1].line >= line {
			d.add(e.keyNode, e.key, "write a bisection spec in block style, one field per line: its steps reuse its lines")
			return
		}
		b.entries = append(b.entries, topEntry{key: e.key, line: line})
		if why, ok := notInBisect[e.key]; ok {
			d.add(e.keyNode, e.path, "%s", why)
			continue
		}
		if !slices.Contains(bisectFields, e.key) {
			d.unknownField(e, "", bisectFields)
			continue
		}
		seen[e.key] = e
		switch e.key {
		case "version":
			d.version(e)
		case "name":
			// Step experiments are named NAME-bID-sNN: leave room for the suffix.
			if v, ok := d.specName(e, 100, " (its steps' experiments add -bID-sNN)"); ok {
				b.Name = v
			}
		case "engine":
			d.decodeEngine(e)
		case "runtime":
			d.decodeRuntime(e)
		case "good":
			d.good = d.decodeConfig(e)
		case "bad":
			d.bad = d.decodeConfig(e)
		case "workload":
			d.decodeWorkload(e)
			if k := s.Workload.Kind; k == WorkloadThroughput || k == WorkloadAbortCascade {
				d.add(e.keyNode, e.path+".kind", "a bisection judges corrupted sessions, which workload kind %s does not measure; use %s, %s or %s",
					k, DefaultWorkload, WorkloadLongContext, WorkloadTrace)
			}
		case "detectors":
			d.decodeDetectors(e)
		case "search":
			d.decodeSearch(e)
		case "timeouts":
			d.decodeTimeouts(e)
		}
	}
	d.requireTop(seen, "version", "name", "engine", "good", "bad", "workload", "search")
}

// decodeConfig reads good or bad: pins (env, args) or a server-info file with
// optional env pins beside it.
func (d *bisectDecoder) decodeConfig(e entry) configEntry {
	c := configEntry{e: e, given: true}
	seen := d.fields(e.val, e.path, []string{"env", "args", "server_info"}, func(f entry) {
		switch f.key {
		case "env":
			c.env = append(c.env, d.envEntries(f)...)
		case "args":
			c.args = d.args(f)
			c.argsPos = posOf(f.keyNode)
		case "server_info":
			if v, ok := d.str(f); ok {
				if v == "" {
					d.add(f.val, f.path, "name the file that holds the deployment's get_server_info JSON")
					return
				}
				c.serverInfo, c.siPos = v, posOf(f.val)
			}
		}
	})
	if _, hasArgs := seen["args"]; hasArgs && c.serverInfo != "" {
		d.add(seen["args"].keyNode, joinPath(e.path, "args"), "the flags come from server_info; give env beside it for what the server info does not report, not args")
	}
	if e.val == nil || isNull(e.val) {
		d.add(e.keyNode, e.path, "give the configuration's pins (env, args) or its server_info file")
	}
	return c
}

func (d *bisectDecoder) decodeSearch(e entry) {
	sr := &d.b.Search
	rate := func(f entry, what string, lo float64, hiOpen float64) (float64, bool) {
		v, ok := d.number(f)
		if !ok {
			return 0, false
		}
		if !(v > lo && v < hiOpen) {
			d.add(f.val, f.path, "%s", what)
			return 0, false
		}
		return v, true
	}
	seen := d.fields(e.val, e.path, []string{"error_budget", "effect", "looks", "launch_icc", "max_steps", "max_loss", "check_revert", "ignore"}, func(f entry) {
		d.spec.pos[f.path] = posOf(f.val)
		switch f.key {
		case "error_budget":
			sr.ErrorBudget, _ = rate(f, "error_budget is the probability of a wrong conclusion over the whole search: above 0 and below 0.5, e.g. 0.05", 0, 0.5)
		case "effect":
			sr.Effect, _ = rate(f, "effect is a rate difference: above 0 and below 1, e.g. 0.10 for a culprit that corrupts 10 points more sessions than good", 0, 1)
		case "looks":
			sr.Looks, _ = d.bounded(f, 1, MaxBisectLooks, "launches of each side in one step")
		case "launch_icc":
			if v, ok := d.fraction(f, "launch_icc is an intra-launch correlation: 0 or more and below 1, e.g. 0.05"); ok {
				sr.LaunchICC = v
			}
		case "max_steps":
			sr.MaxSteps, _ = d.bounded(f, 1, MaxBisectSteps, "steps of one bisection")
		case "max_loss":
			if v, ok := d.fraction(f, "max_loss is a share of an arm's sessions: 0 or more and below 1, e.g. 0.1"); ok {
				sr.MaxLoss = v
			}
		case "check_revert":
			sr.CheckRevert, _ = d.boolean(f)
		case "ignore":
			d.list(f, func(it entry) {
				if v, ok := d.str(it); ok {
					sr.Ignore = append(sr.Ignore, v)
				}
			})
		}
	})
	d.require(seen, e.keyNode, e.path, "effect")
	if sr.ErrorBudget == 0 {
		sr.ErrorBudget = DefaultErrorBudget
	}
	if sr.Looks == 0 {
		sr.Looks = DefaultBisectLooks
	}
	if _, set := seen["max_loss"]; !set {
		sr.MaxLoss = DefaultMaxLoss
	}
	if _, set := seen["launch_icc"]; !set {
		sr.LaunchICC = DefaultLaunchICC
	}
}

// resolveConfigs reads the configurations (server-info files included), finds the changes
// and refuses configurations that set what the engine sets for every step.
func (d *bisectDecoder) resolveConfigs() {
	b := d.b
	en := d.spec.Engine
	if len(en.Command) == 0 && en.Preset != "" {
		d.spec.Engine.Command = PresetFor(en.Preset).Command
	}
	var ok bool
	if b.Good, ok = d.config(d.good); !ok {
		return
	}
	if b.Bad, ok = d.config(d.bad); !ok {
		return
	}
	find := func(c Config, kind, name string) *Setting {
		for i := range c.Settings {
			if c.Settings[i].Kind == kind && c.Settings[i].Name == name {
				return &c.Settings[i]
			}
		}
		return nil
	}
	for i := range b.Bad.Settings {
		bs := &b.Bad.Settings[i]
		gs := find(b.Good, bs.Kind, bs.Name)
		if gs != nil && gs.Value == bs.Value {
			if !gs.derived || !bs.derived {
				b.common = append(b.common, settingRef{good: gs, bad: bs})
			}
			continue
		}
		b.Changes = append(b.Changes, Change{Kind: bs.Kind, Name: bs.Name, Good: gs, Bad: bs})
	}
	for i := range b.Good.Settings {
		gs := &b.Good.Settings[i]
		if find(b.Bad, gs.Kind, gs.Name) == nil {
			b.Changes = append(b.Changes, Change{Kind: gs.Kind, Name: gs.Name, Good: gs})
		}
	}
	d.unknownBoolFlags()
	d.engineShared("good", d.good, b.Good)
	d.engineShared("bad", d.bad, b.Bad)
	if len(d.errs) > 0 {
		return
	}
	switch {
	case len(b.Changes) == 0:
		d.add(d.bad.e.keyNode, "bad", "good and bad set the same env and flags: there is nothing to bisect")
	case len(b.Changes) > MaxBisectChanges:
		d.add(d.bad.e.keyNode, "bad", "good and bad differ in %d settings, more than %d; bisect a part of them at a time (pin the rest in engine)", len(b.Changes), MaxBisectChanges)
	}
	// The steps' levels are good and bad: the Redactor and RedactedSource of Base then
	// hide what the configurations hold.
	b.Base.Factors = []Factor{{Name: "changes", Levels: []Level{
		{Name: "good", Pins: b.render(nil)},
		{Name: "bad", Pins: b.render(allChanges(len(b.Changes)))},
	}}}
}

// unknownBoolFlags refuses a change that server info reports as true (a flag without a
// value) when the preset's grammar does not know the flag: a step's command line, which
// gives it bare before other flags, would be refused as ambiguous. engine.bool_flags
// declares it.
func (d *bisectDecoder) unknownBoolFlags() {
	g := d.spec.Grammar()
	for _, c := range d.b.Changes {
		for _, side := range []struct {
			name string
			s    *Setting
			e    configEntry
		}{{"good", c.Good, d.good}, {"bad", c.Bad, d.bad}} {
			s := side.s
			if s == nil || !s.derived || s.Kind != SettingFlag || len(s.Tokens) != 1 || strings.Contains(s.Tokens[0], "=") || slices.Contains(g.Bool, s.Name) {
				continue
			}
			key := strings.ReplaceAll(strings.TrimPrefix(s.Name, "--"), "-", "_")
			d.addAt(side.e.siPos, side.name+".server_info", "%s: %s is true, the flag %s without a value, which the %s preset does not know: list %s in engine.bool_flags, so that the steps' command lines read it so",
				side.e.serverInfo, key, s.Name, d.spec.Engine.Preset, s.Name)
		}
	}
}

// config resolves one configuration: its pins parsed into settings, or its server-info
// file read and mapped by the engine's preset.
func (d *bisectDecoder) config(c configEntry) (Config, bool) {
	out := Config{ServerInfo: c.serverInfo}
	path := c.e.path
	if c.serverInfo != "" {
		file := c.serverInfo
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(d.b.Path), file)
		}
		data, err := readServerInfo(file)
		if err != nil {
			d.addAt(c.siPos, path+".server_info", "%v", err)
			return out, false
		}
		settings, err := ServerInfoSettings(d.spec.Engine.Preset, data, d.b.Search.Ignore)
		if err != nil {
			d.addAt(c.siPos, path+".server_info", "%s: %v", c.serverInfo, err)
			return out, false
		}
		for _, s := range c.env {
			for _, t := range settings {
				if t.Kind == SettingEnv && t.Name == s.Name {
					d.addAt(d.spec.pos[path+".env."+s.Name], path+".env."+s.Name, "%s is already in %s (%q); set it in one place", s.Name, c.serverInfo, t.Value)
				}
			}
		}
		for i := range settings {
			settings[i].derived = true
		}
		out.Settings = append(slices.Clone(c.env), settings...)
		return out, true
	}
	out.Settings = slices.Clone(c.env)
	flags, err := flagSettings(d.spec.Grammar(), c.args)
	if err != nil {
		at := c.argsPos
		if ae, ok := err.(*ArgError); ok {
			if p, ok := d.spec.pos[fmt.Sprintf("%s.args.%d", path, ae.Index)]; ok {
				at = p
			}
		}
		d.addAt(at, path+".args", "%v", err)
		return out, false
	}
	out.Settings = append(out.Settings, flags...)
	return out, true
}

// engineShared refuses a configuration that sets what engine.env or engine.args set
// for every step: one of the two values would silently win.
func (d *bisectDecoder) engineShared(name string, c configEntry, cfg Config) {
	en := d.spec.Engine
	engineFlags := map[string]bool{}
	for _, f := range parseFlags(d.spec.Grammar(), en.Args) {
		engineFlags[f.name] = true
	}
	for _, s := range cfg.Settings {
		if s.derived && !d.b.changes(s.Kind, s.Name) {
			continue // the engine's configuration stands for it in every step
		}
		switch {
		case s.Kind == SettingEnv && slices.Contains(en.Secrets, s.Name):
			d.addAt(d.spec.pos[name+".env."+s.Name], name+".env."+s.Name, "%s is one of engine.secrets; a secret is taken from arbiter's environment, not pinned", s.Name)
		case s.Kind == SettingEnv && hasKey(en.Env, s.Name):
			at := d.spec.pos[name+".env."+s.Name]
			if c.serverInfo != "" && at.Line == 0 {
				at = c.siPos
			}
			d.addAt(at, name+".env."+s.Name, "%s is set in engine.env for every step; set it in engine or in good and bad, not both", s.Name)
		case s.Kind == SettingFlag && engineFlags[s.Name]:
			at := c.argsPos
			if c.serverInfo != "" {
				at = c.siPos
			}
			d.addAt(at, name+".args", "%s is set in engine.args for every step; set it in engine or in good and bad, not both", s.Name)
		}
	}
}

// changes reports whether the setting is one of the changes.
func (b *BisectSpec) changes(kind, name string) bool {
	for _, c := range b.Changes {
		if c.Kind == kind && c.Name == name {
			return true
		}
	}
	return false
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// flagSettings reads a command line as flags by the engine's grammar (args.go), each
// with its value: --name value, --name=value or a bare --name. A command line the
// grammar refuses or could read two ways, a flag given twice, or a value before any
// flag, is refused (an *ArgError naming the flag's token): a bisection changes each
// setting once, and must change what the engine reads.
func flagSettings(g Grammar, args []string) ([]Setting, error) {
	flags, err := g.Parse(args)
	if err != nil {
		return nil, err
	}
	var out []Setting
	for _, f := range flags {
		if f.Name == "" {
			return nil, &ArgError{Index: f.Index, Msg: fmt.Sprintf("%q comes before any flag: args are flags with their values", f.Tokens[0])}
		}
		for _, s := range out {
			if s.Name == f.Name {
				return nil, &ArgError{Index: f.Index, Flag: f.Name, Msg: fmt.Sprintf("%s is given twice; give each flag once", f.Name)}
			}
		}
		out = append(out, Setting{Kind: SettingFlag, Name: f.Name, Value: f.Value, Tokens: f.Tokens})
	}
	return out, nil
}

func allChanges(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// render is the good configuration with the changes applied: env in the order good
// then bad list it, and flags likewise.
func (b *BisectSpec) render(applied []int) Pins {
	on := map[int]bool{}
	for _, i := range applied {
		on[i] = true
	}
	chosen := map[string]*Setting{} // kind+name -> the value this level sets, nil for none
	key := func(kind, name string) string { return kind + "\x00" + name }
	for i, c := range b.Changes {
		if on[i] {
			chosen[key(c.Kind, c.Name)] = c.Bad
		} else {
			chosen[key(c.Kind, c.Name)] = c.Good
		}
	}
	for _, r := range b.common {
		chosen[key(r.good.Kind, r.good.Name)] = r.good
	}
	var order []string
	for _, c := range []Config{b.Good, b.Bad} {
		for _, s := range c.Settings {
			if k := key(s.Kind, s.Name); !slices.Contains(order, k) {
				order = append(order, k)
			}
		}
	}
	p := Pins{}
	for _, k := range order {
		s := chosen[k]
		if s == nil {
			continue
		}
		if s.Kind == SettingEnv {
			if p.Env == nil {
				p.Env = map[string]string{}
			}
			p.Env[s.Name] = s.Value
			continue
		}
		p.Args = append(p.Args, s.Tokens...)
	}
	return p
}

// StepOptions say what one step's experiment compares.
type StepOptions struct {
	// Name is the experiment's name.
	Name string
	// Applied are the changes (indexes into Changes) applied to good.
	Applied []int
	// Alpha is the step's share of the error budget: its experiment's analysis.alpha.
	Alpha float64
	// Note is a line of text written into the step's spec as a comment.
	Note string
}

// LevelName is the name of the level that applies the changes: with-1.3.6 (1-based
// change numbers), or with-N-changes when that would be too long.
func LevelName(applied []int) string {
	nums := make([]string, len(applied))
	for i, x := range sortedInts(applied) {
		nums[i] = strconv.Itoa(x + 1)
	}
	name := "with-" + strings.Join(nums, ".")
	if len(name) > maxNameLen {
		name = fmt.Sprintf("with-%d-changes", len(applied))
	}
	return name
}

func sortedInts(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// StepSpec is the experiment spec of one step: this spec's text with good, bad and
// search left out (their lines kept blank, so that every other field keeps its line
// and column), the name replaced, and one factor, changes, whose levels are good and
// good with opts.Applied applied; the baseline is changes=good, alpha and max_loss come
// from the search, and a step of several looks is a group-sequential design of as many
// blocks.
func (b *BisectSpec) StepSpec(opts StepOptions) (*Spec, error) {
	if len(opts.Applied) == 0 {
		return nil, fmt.Errorf("bisect: a step applies at least one change")
	}
	for _, i := range opts.Applied {
		if i < 0 || i >= len(b.Changes) {
			return nil, fmt.Errorf("bisect: change %d of %d", i+1, len(b.Changes))
		}
	}
	return Parse(b.Path, b.stepText(opts))
}

func (b *BisectSpec) stepText(opts StepOptions) []byte {
	lines := strings.SplitAfter(string(b.Source), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	blank := func(from, to int) { // 1-based lines [from, to)
		for l := from; l < to && l <= len(lines); l++ {
			lines[l-1] = "\n"
		}
	}
	for i, e := range b.entries {
		end := len(lines) + 1
		if i+1 < len(b.entries) {
			end = b.entries[i+1].line
		}
		switch e.key {
		case "good", "bad", "search":
			blank(e.line, end)
		case "name":
			blank(e.line, end)
			lines[e.line-1] = "name: " + quoteYAML(opts.Name) + "\n"
		}
	}
	// A document end marker would make what follows a second document.
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "..." {
		lines = lines[:len(lines)-1]
	}
	var w strings.Builder
	for _, l := range lines {
		w.WriteString(l)
	}
	if w.Len() > 0 && !strings.HasSuffix(w.String(), "\n") {
		w.WriteString("\n")
	}
	fmt.Fprintf(&w, "# Written by arbiter bisect from %s.\n", filepath.Base(b.Path))
	if opts.Note != "" {
		fmt.Fprintf(&w, "# %s\n", strings.ReplaceAll(opts.Note, "\n", " "))
	}
	level := LevelName(opts.Applied)
	w.WriteString("factors:\n  changes:\n")
	fmt.Fprintf(&w, "    good: %s\n", flowPins(b.render(nil)))
	fmt.Fprintf(&w, "    %s: %s\n", level, flowPins(b.render(opts.Applied)))
	w.WriteString("analysis:\n")
	fmt.Fprintf(&w, "  alpha: %s\n", strconv.FormatFloat(opts.Alpha, 'f', -1, 64))
	w.WriteString("  baseline: changes=good\n")
	fmt.Fprintf(&w, "  max_loss: %s\n", strconv.FormatFloat(b.Search.MaxLoss, 'f', -1, 64))
	if b.Search.Looks > 1 {
		fmt.Fprintf(&w, "  sequential: {looks: %d}\n", b.Search.Looks)
	}
	fmt.Fprintf(&w, "blocks: %d\n", b.Search.Looks)
	return []byte(w.String())
}

// flowPins writes pins as a YAML flow mapping: {env: {"A": "1"}, args: ["--x", "2"]}.
func flowPins(p Pins) string {
	var parts []string
	if len(p.Env) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p.Env)) {
			kv = append(kv, quoteYAML(k)+": "+quoteYAML(p.Env[k]))
		}
		parts = append(parts, "env: {"+strings.Join(kv, ", ")+"}")
	}
	if len(p.Args) > 0 {
		q := make([]string, len(p.Args))
		for i, a := range p.Args {
			q[i] = quoteYAML(a)
		}
		parts = append(parts, "args: ["+strings.Join(q, ", ")+"]")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// ErrorAt is a *SpecError at the field path of the spec (search.max_steps, say), for
// checks made after decoding.
func (b *BisectSpec) ErrorAt(path, format string, args ...any) error {
	p := b.pos[path]
	return &SpecError{File: b.Path, Line: p.Line, Col: p.Col, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// RedactedSource is the spec's text as the store keeps it (see Spec.RedactedSource).
func (b *BisectSpec) RedactedSource() []byte { return b.Base.RedactedSource() }

// readServerInfo reads a server-info file: a regular file of at most MaxSpecBytes.
func readServerInfo(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the server info: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > MaxSpecBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a server info may be", path, fi.Size(), MaxSpecBytes)
	}
	return os.ReadFile(path)
}
