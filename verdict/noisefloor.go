package verdict

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// A noise floor is an A/A experiment (analysis.aa: every arm the same configuration) on
// the same engine, workload and hardware, whose launches measured how launches of one
// configuration differ. An experiment that names one (analysis.noise_floor, `arbiter run
// --noise-floor`, `arbiter verdict --noise-floor`) weighs its arms' difference against
// that spread instead of its own launches' alone, so one launch per arm can decide a
// difference much larger than launches of one configuration show. The floor lends its
// upper confidence bounds (stats.ICCBound, stats.SpreadBound), not its point estimates:
// the tests stay at their level whenever the true spread is at or below the bound. A
// floor that measured another engine, workload or pins is refused, with the reason; one
// measured on another host or with other session counts is used with a warning; and
// where this experiment's own launches differ more than the floor's bound allows, the
// floor is not used for that outcome.

// Floor is the noise floor a verdict's claims were weighed against.
type Floor struct {
	Experiment int64
	Name       string
	// Launches and Sessions are the floor's launches pooled over its arms and their
	// analysed sessions; Corrupted of them corrupted.
	Launches, Sessions, Corrupted int
	// ICC is the intra-launch correlation of corruption the floor measured and ICCUpper
	// its upper bound at Conf, the one the tests use; NaN when the floor had no corrupted
	// session (or nothing else), which says nothing of how launches differ in corruption.
	ICC, ICCUpper float64
	Conf          float64
	// Speed is, by group and metric, the launch-to-launch spread of the log of the
	// launches' medians.
	Speed map[string]map[string]Spread
	// Refused says why the floor is not used at all; empty when it is.
	Refused string
	// Warnings are differences that do not refuse the floor but a reader should weigh.
	Warnings []string
	// Unused names the outcomes it was not used for, and why: this experiment's own
	// launches differed more than the floor's bound.
	Unused []string
}

// Spread is a launch-to-launch standard deviation (of logs), its upper bound and its
// degrees of freedom.
type Spread struct {
	SD, Upper float64
	DF        int
}

// Used reports whether the floor informs the verdict's claims.
func (f *Floor) Used() bool { return f != nil && f.Refused == "" }

// Options changes how Build judges an experiment.
type Options struct {
	// NoiseFloor, when set, is the A/A experiment (id or name) to weigh the arms against,
	// in place of the one the experiment recorded.
	NoiseFloor string
	// NoFloor judges the experiment on its own launches, whatever floor it recorded.
	NoFloor bool
}

// MeasureFloor reads the noise floor A/A experiment id measured; Refused is set when it
// cannot serve as one at all (not an A/A check, fewer than two launches).
func MeasureFloor(ctx context.Context, db *sqlx.DB, id int64) (*Floor, error) {
	fv, err := BuildWith(ctx, db, id, Options{NoFloor: true})
	if err != nil {
		return nil, err
	}
	var groups []string
	if o := fv.Outcomes; o != nil {
		for _, g := range o.Groups {
			groups = append(groups, g.Name)
		}
	}
	f := measureFloor(fv.launchSamples(), groups)
	f.Experiment, f.Name = fv.Experiment.ID, fv.Experiment.Name
	switch {
	case !fv.Design.AA:
		f.Refused = fmt.Sprintf("experiment %d (%s) is not an A/A check (analysis.aa): its arms differ, so its launches do not measure how launches of one configuration differ", f.Experiment, f.Name)
	case f.Launches < 2:
		f.Refused = fmt.Sprintf("experiment %d (%s) has %d launch%s with analysed sessions; how launches differ needs two or more (eight give a useful bound)", f.Experiment, f.Name, f.Launches, pluralEs(f.Launches))
	case math.IsNaN(f.ICCUpper) && len(f.Speed) == 0:
		f.Refused = fmt.Sprintf("experiment %d (%s) measured neither a spread of corruption (%d of %d sessions corrupted) nor of speed", f.Experiment, f.Name, f.Corrupted, f.Sessions)
	}
	return f, nil
}

// CheckFloor compares the floor's experiment with the one it is to judge, and sets
// Refused or Warnings: the engine, the detectors, the workload's shape and every pin the
// judged experiment's arms do not vary must be the same; the host, the runtime, the
// session count and the seed should be.
func CheckFloor(f *Floor, floorExp, exp store.ExperimentRow) {
	if f.Refused != "" {
		return
	}
	if floorExp.ID == exp.ID {
		f.Refused = "an experiment cannot be its own noise floor"
		return
	}
	fs, err := arms.Parse(floorExp.SpecPath, []byte(floorExp.Spec))
	if err != nil {
		f.Warnings = append(f.Warnings, fmt.Sprintf("its spec could not be read back to compare with this one (%v)", err))
		return
	}
	es, err := arms.Parse(exp.SpecPath, []byte(exp.Spec))
	if err != nil {
		f.Warnings = append(f.Warnings, fmt.Sprintf("this experiment's spec could not be read back to compare with the floor's (%v)", err))
		return
	}
	if why := floorRefusal(fs, es); why != "" {
		f.Refused = fmt.Sprintf("experiment %d (%s) %s", f.Experiment, f.Name, why)
		return
	}
	warn := func(format string, args ...any) { f.Warnings = append(f.Warnings, fmt.Sprintf(format, args...)) }
	if floorExp.Host != exp.Host {
		warn("the floor ran on host %s, this experiment on %s: launches on other hardware may differ more or less", inertText(floorExp.Host), inertText(exp.Host))
	}
	if fs.Runtime.Kind != es.Runtime.Kind || fmt.Sprint(fs.Runtime.Nodes) != fmt.Sprint(es.Runtime.Nodes) {
		warn("the floor's runtime (%s) is not this experiment's (%s)", runtimeText(fs), runtimeText(es))
	}
	if fs.Workload.Sessions != es.Workload.Sessions {
		warn("the floor's launches ran %d sessions, this experiment's %d: the launch spread is assumed the same at both sizes", fs.Workload.Sessions, es.Workload.Sessions)
	}
	if fs.Workload.Seed != es.Workload.Seed {
		warn("the floor's workload seed is %d, this experiment's %d", fs.Workload.Seed, es.Workload.Seed)
	}
}

// floorRefusal says how the floor's spec differs from the judged experiment's in what a
// launch's spread depends on; empty when it does not.
func floorRefusal(fs, es *arms.Spec) string {
	fe, ee := fs.Engine, es.Engine
	switch {
	case fe.Preset != ee.Preset || fe.Image != ee.Image:
		return fmt.Sprintf("ran engine %s, this experiment %s", engineText(fs), engineText(es))
	case !slices.Equal(fe.Command, ee.Command) || !slices.Equal(fe.Args, ee.Args) || !maps.Equal(fe.Env, ee.Env) || fe.GPUs != ee.GPUs:
		return "configured the engine otherwise (engine command, args, env or GPUs differ)"
	case fmt.Sprint(fe.Model) != fmt.Sprint(ee.Model):
		return "served another model"
	case !slices.Equal(fs.Detectors, es.Detectors):
		return fmt.Sprintf("judged with detectors %s, this experiment with %s: its corruption is another measure", strings.Join(fs.Detectors, ", "), strings.Join(es.Detectors, ", "))
	}
	fw, ew := fs.Workload, es.Workload
	if fw.Kind != ew.Kind || fw.Rounds != ew.Rounds || fw.Concurrency != ew.Concurrency || fw.Temperature != ew.Temperature {
		return fmt.Sprintf("ran another workload (%s; this experiment: %s)", fw.Describe(), ew.Describe())
	}
	fa, err := fs.Expand()
	if err != nil || len(fa) == 0 {
		return "has arms that could not be expanded"
	}
	ea, err := es.Expand()
	if err != nil || len(ea) == 0 {
		return ""
	}
	// The pins this experiment varies may take any value in the floor; every other one
	// must be what this experiment's arms all set.
	varied := map[string]bool{}
	for _, a := range ea {
		for k := range unionKeys(a.Env, ea[0].Env) {
			if a.Env[k] != ea[0].Env[k] {
				varied[k] = true
			}
		}
	}
	for k := range unionKeys(fa[0].Env, ea[0].Env) {
		if !varied[k] && fa[0].Env[k] != ea[0].Env[k] {
			return fmt.Sprintf("pins %s=%q, which this experiment's arms all set to %q", k, inertText(fa[0].Env[k]), inertText(ea[0].Env[k]))
		}
	}
	sameCommand := true
	for _, a := range ea {
		sameCommand = sameCommand && slices.Equal(a.Command, ea[0].Command)
	}
	matches := slices.ContainsFunc(ea, func(a arms.Arm) bool { return slices.Equal(a.Command, fa[0].Command) })
	switch {
	case sameCommand && !matches:
		return fmt.Sprintf("launches the engine as %q, this experiment's arms all as %q", inertText(strings.Join(fa[0].Command, " ")), inertText(strings.Join(ea[0].Command, " ")))
	case !matches:
		return fmt.Sprintf("launches the engine as %q, which is none of this experiment's arms' command lines", inertText(strings.Join(fa[0].Command, " ")))
	}
	return ""
}

func unionKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func engineText(s *arms.Spec) string {
	switch {
	case s.Engine.Image != "":
		return s.Engine.Preset + " (" + s.Engine.Image + ")"
	case s.Engine.Preset != "":
		return s.Engine.Preset
	}
	return strings.Join(s.Engine.Command, " ")
}

func runtimeText(s *arms.Spec) string {
	kind := s.Runtime.Kind
	if kind == "" {
		kind = arms.RuntimeProcess
	}
	return fmt.Sprintf("%s, %d node(s)", kind, max(len(s.Runtime.Nodes), 1))
}

// inertText cuts a value read from a spec or an engine to one short line for a sentence.
func inertText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// loadFloor finds the floor the experiment is to be judged against (the option's, or
// the one it recorded) and measures it.
func (v *Verdict) loadFloor(ctx context.Context, db *sqlx.DB, o Options) error {
	if o.NoFloor {
		return nil
	}
	var fe store.ExperimentRow
	switch {
	case o.NoiseFloor != "":
		e, err := store.FindExperiment(ctx, db, o.NoiseFloor)
		if err != nil {
			return fmt.Errorf("--noise-floor %s: %w", o.NoiseFloor, err)
		}
		fe = e
	case v.Design.NoiseFloor > 0:
		e, err := store.ExperimentByID(ctx, db, v.Design.NoiseFloor)
		if err != nil {
			v.Floor = &Floor{Experiment: v.Design.NoiseFloor, ICC: math.NaN(), ICCUpper: math.NaN(),
				Refused: fmt.Sprintf("experiment %d, recorded as this experiment's noise floor, cannot be read from this database (%v)", v.Design.NoiseFloor, err)}
			return nil
		}
		fe = e
	default:
		return nil
	}
	f, err := MeasureFloor(ctx, db, fe.ID)
	if err != nil {
		return err
	}
	CheckFloor(f, fe, v.Experiment)
	v.Floor = f
	return nil
}

// familyFloor is what the floor lends the claims (see floorInput); it records on the
// floor the outcomes it was not used for.
func (v *Verdict) familyFloor(samples [][]launchSample, groups []string) *familyFloor {
	if !v.Floor.Used() {
		return nil
	}
	ff, unused := floorInput(v.Floor, samples, groups)
	v.Floor.Unused = unused
	return ff
}

// floorInput is what a floor lends the claims, less what this experiment's own launches
// show it understated: an outcome whose own spread (its launches within each arm, where
// an arm has two or more) is above the floor's bound is tested without it, and unused
// says which and why.
func floorInput(f *Floor, samples [][]launchSample, groups []string) (ff *familyFloor, unused []string) {
	ff = &familyFloor{Experiment: f.Experiment, ICC: -1, SD: map[string]map[string]float64{}}
	if !math.IsNaN(f.ICCUpper) {
		ff.ICC = f.ICCUpper
		if own := pooledICC(samples...); own > f.ICCUpper {
			ff.ICC = -1
			unused = append(unused, fmt.Sprintf("corruption: this experiment's own launches differ more (intra-launch correlation %.3g) than the floor's bound %.3g allows", own, f.ICCUpper))
		}
	}
	for _, g := range groups {
		for _, m := range metricOrder {
			sp, ok := f.Speed[g][m]
			if !ok || !(sp.Upper > 0) {
				continue
			}
			var logs [][]float64
			for _, arm := range samples {
				logs = append(logs, logMedians(arm, g, m))
			}
			if own := pooledCV(logs...); own > sp.Upper {
				unused = append(unused, fmt.Sprintf("%s (%s): this experiment's own launches differ more (%.3g on the log scale) than the floor's bound %.3g allows", m, g, own, sp.Upper))
				continue
			}
			if ff.SD[g] == nil {
				ff.SD[g] = map[string]float64{}
			}
			ff.SD[g][m] = sp.Upper
		}
	}
	return ff, unused
}

// measureFloor is a Floor from an A/A experiment's launches, by arm: the pooled
// intra-launch correlation of corruption and, by group and metric, the spread of the
// logs of the launches' medians, each with its upper bound at FloorConf.
func measureFloor(samples [][]launchSample, groups []string) *Floor {
	f := &Floor{Conf: stats.FloorConf, ICC: math.NaN(), ICCUpper: math.NaN(), Speed: map[string]map[string]Spread{}}
	var clusters []stats.ClusterCounts
	for _, arm := range samples {
		for _, s := range arm {
			if s.sessions > 0 {
				clusters = append(clusters, stats.ClusterCounts{Events: s.corrupt, Responses: s.sessions})
				f.Sessions += s.sessions
				f.Corrupted += s.corrupt
			}
		}
	}
	f.Launches = len(clusters)
	f.ICC, f.ICCUpper = stats.ICCBound(clusters, f.Conf)
	for _, g := range groups {
		for _, m := range metricOrder {
			var logs [][]float64
			for _, arm := range samples {
				logs = append(logs, logMedians(arm, g, m))
			}
			if sd, up, df := stats.SpreadBound(logs, f.Conf); df > 0 {
				if f.Speed[g] == nil {
					f.Speed[g] = map[string]Spread{}
				}
				f.Speed[g][m] = Spread{SD: sd, Upper: up, DF: df}
			}
		}
	}
	return f
}

// floorCaveat says what the claims rest on, or why the floor named was not used.
func (v *Verdict) floorCaveat(add func(CaveatKind, string, ...any)) {
	f := v.Floor
	if f == nil {
		return
	}
	if !f.Used() {
		add(CaveatDesign, "Noise floor not used: %s. The claims rest on this experiment's own launches.", f.Refused)
		return
	}
	weighed, beyond := v.floorWeighs()
	if weighed == 0 && beyond > 0 {
		add(CaveatDesign, "Noise floor of A/A experiment %d not needed: every claim's arms have %d launches or more, which test it on their own with more power than the floor's bound.",
			f.Experiment, stats.FloorMaxLaunches+1)
		return
	}
	add(CaveatDesign, "%s", f.Sentence())
	if beyond > 0 {
		add(CaveatDesign, "Noise floor not used for the claims whose arms have %d launches or more: their own launches test them, with more power than the floor's bound.",
			stats.FloorMaxLaunches+1)
	}
	for _, w := range f.Warnings {
		add(CaveatDesign, "Noise floor: %s.", w)
	}
	for _, u := range f.Unused {
		add(CaveatDesign, "Noise floor not used for %s.", u)
	}
}

// floorWeighs counts the claims on rates and speeds a noise floor weighs and those whose
// arms have launches enough to be tested on their own (stats.FloorWeighs).
func (v *Verdict) floorWeighs() (weighed, beyond int) {
	if v.Claims == nil {
		return 0, 0
	}
	for _, c := range v.Claims.Claims {
		if c.Outcome == OutcomeWedge || c.Outcome == OutcomeStability {
			continue
		}
		if stats.FloorWeighs(c.LaunchesArm, c.LaunchesBase) {
			weighed++
		} else {
			beyond++
		}
	}
	return weighed, beyond
}

// Sentence says what the floor measured and lends, in one sentence.
func (f *Floor) Sentence() string {
	var parts []string
	if !math.IsNaN(f.ICCUpper) {
		parts = append(parts, fmt.Sprintf("an intra-launch correlation of corruption of at most %.3g (%s%% upper bound; estimate %.3g, %d of %d sessions corrupted)",
			f.ICCUpper, confText(f.Conf), f.ICC, f.Corrupted, f.Sessions))
	}
	if sp, ok := f.Speed[""][MetricThroughput]; ok {
		parts = append(parts, fmt.Sprintf("a launch-to-launch spread of tok/s of at most %s", pct(math.Expm1(sp.Upper))))
	} else {
		// Load by load: a closed loop's launches may agree within 0.1% while an open
		// loop's differ by several percent, and each claim rests on its own load's bound.
		var loads []string
		for _, g := range slices.Sorted(maps.Keys(f.Speed)) {
			if sp, ok := f.Speed[g][MetricThroughput]; ok {
				loads = append(loads, fmt.Sprintf("%s at %s", pct(math.Expm1(sp.Upper)), g))
			}
		}
		if len(loads) > 0 {
			parts = append(parts, "a launch-to-launch spread of tok/s of at most "+joinAnd(loads))
		}
	}
	return fmt.Sprintf("Claims rest on the noise floor of A/A experiment %d (%s): over %d launches it measured %s; a difference between launches of one configuration is taken to be no larger.",
		f.Experiment, f.Name, f.Launches, joinAnd(parts))
}

// ErrFloorRefused marks a noise floor that cannot serve the experiment it was named for:
// another engine, workload or pins, too few launches, or no spread measured.
var ErrFloorRefused = errors.New("noise floor refused")

// floorMissing says that no results database holds a floor, and floorRefused why a floor
// cannot serve, each in its own words; underneath they are store.ErrNotFound and
// ErrFloorRefused.
type (
	floorMissing string
	floorRefused string
)

func (e floorMissing) Error() string { return string(e) }
func (e floorMissing) Unwrap() error { return store.ErrNotFound }
func (e floorRefused) Error() string { return string(e) }
func (e floorRefused) Unwrap() error { return ErrFloorRefused }

// ResolveFloor finds the A/A experiment ref (an id or a name) in the results database at
// dbPath, measures it, and checks that it can be the noise floor of an experiment of spec
// run on host: one that ran another engine, workload or pins is refused (ErrFloorRefused)
// before anything is launched, and what only warns (another host, other session counts)
// is in the floor's Warnings. A missing database or experiment is store.ErrNotFound.
func ResolveFloor(ctx context.Context, dbPath, ref string, spec *arms.Spec, host string) (*Floor, error) {
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		return nil, floorMissing(fmt.Sprintf("noise floor %s: no results database at %s holds it (run the A/A experiment there first, or give --db)", ref, dbPath))
	}
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	e, err := store.FindExperiment(ctx, db, ref)
	if err != nil {
		return nil, fmt.Errorf("noise floor %s: %w", ref, err)
	}
	f, err := MeasureFloor(ctx, db, e.ID)
	if err != nil {
		return nil, err
	}
	CheckFloor(f, e, store.ExperimentRow{Name: spec.Name, SpecPath: spec.Path, Spec: string(spec.Source), Host: host})
	if !f.Used() {
		return nil, floorRefused(fmt.Sprintf("noise floor %s refused: %s", ref, f.Refused))
	}
	return f, nil
}

// CorruptionBound is the intra-launch correlation of corruption the floor lends a plan
// or a bisection (its upper bound, as the verdict weighs launches with it) and where it
// comes from; ErrFloorRefused when the floor had no corrupted session to measure it by.
func (f *Floor) CorruptionBound(ref string) (icc float64, basis string, err error) {
	if math.IsNaN(f.ICCUpper) {
		return 0, "", floorRefused(fmt.Sprintf("--noise-floor %s: experiment %d had %d corrupted sessions of %d, so how launches differ in corruption was not measured", ref, f.Experiment, f.Corrupted, f.Sessions))
	}
	return f.ICCUpper, fmt.Sprintf("the %g%% upper bound measured by A/A experiment %d over %d launches (estimate %.3g)", 100*f.Conf, f.Experiment, f.Launches, f.ICC), nil
}
