package bisect

import (
	"fmt"
	"io"
	"strings"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

// A bisection is planned before it runs (`arbiter bisect --plan`): its changes, the step
// design, what one step decides at the culprit's rate and when clean, and how whole
// bisections end, simulated at a clean good configuration and a culprit at that rate, the
// launches differing as much as the design allows for (its launch ICC).

// Forecast is a bisection's plan; its JSON is `arbiter bisect --plan --json`.
type Forecast struct {
	Changes        []string `json:"changes"`
	EarliestClean  int      `json:"earliest_clean"`
	Effect         float64  `json:"effect"`
	FirstLook      int      `json:"first_look"`
	LaunchICC      float64  `json:"launch_icc"`
	LaunchICCBasis string   `json:"launch_icc_basis"`
	Looks          int      `json:"looks"`
	MaxSteps       int      `json:"max_steps"`
	// Rate is the culprit's excess corruption rate planned for.
	Rate            float64          `json:"rate"`
	SessionsPerLook int              `json:"sessions_per_look"`
	Simulation      BisectionFigures `json:"simulation"`
	StepAlpha       float64          `json:"step_alpha"`
	StepAtEffect    StepFigures      `json:"step_at_effect"`
	StepWhenClean   StepFigures      `json:"step_when_clean"`

	name        string
	budget      float64
	culprits    []int
	design      stats.StepDesign
	culpritRate float64
}

// StepFigures are the shares of a simulated step's outcomes and its mean launches a side
// and sessions.
type StepFigures struct {
	Clean        float64 `json:"clean"`
	Corrupts     float64 `json:"corrupts"`
	Inconclusive float64 `json:"inconclusive"`
	MeanLaunches float64 `json:"mean_launches"`
	MeanSessions float64 `json:"mean_sessions"`
}

// BisectionFigures are how simulated bisections ended: the shares right, wrong and
// uncertain, and their steps, launches and sessions.
type BisectionFigures struct {
	Bisections   int     `json:"bisections"`
	MeanLaunches float64 `json:"mean_launches"`
	MeanSessions float64 `json:"mean_sessions"`
	MeanSteps    float64 `json:"mean_steps"`
	MostSteps    int     `json:"most_steps"`
	Right        float64 `json:"right"`
	Uncertain    float64 `json:"uncertain"`
	Wrong        float64 `json:"wrong"`
}

// ForecastOptions are one plan request. The zero value of each field is valid.
type ForecastOptions struct {
	// Rate is the culprit's excess corruption rate to plan for, in (0, 1]; 0 plans for
	// search.effect, the hardest the search allows.
	Rate float64
	// Simulations is the number of bisections simulated (default, and at least, 1).
	Simulations int
	// LaunchICCBasis says where search.launch_icc comes from (ApplyFloor's basis); empty
	// is LaunchICCBasis(spec).
	LaunchICCBasis string
}

// NewForecast plans the bisection of spec, whose search design is d (Plan).
func NewForecast(spec *arms.BisectSpec, d Design, o ForecastOptions) (Forecast, error) {
	n, rate := d.Sessions, spec.Search.Effect
	if o.Rate != 0 {
		rate = o.Rate
	}
	if !(rate > 0 && rate <= 1) {
		return Forecast{}, fmt.Errorf("a culprit's corruption rate of %g: plan for one in (0, 1]", rate)
	}
	basis := o.LaunchICCBasis
	if basis == "" {
		basis = LaunchICCBasis(spec)
	}
	// Steps and bisections are simulated with launches that differ as much as the
	// design allows for: its clean bound's intra-launch correlation.
	icc := d.Step.LaunchICC
	reps := max(o.Simulations, 1)
	atEffect, err := stats.SimulateStep(0, rate, icc, n, d.Step, reps, 1)
	if err != nil {
		return Forecast{}, err
	}
	clean, err := stats.SimulateStep(0, 0, icc, n, d.Step, reps, 2)
	if err != nil {
		return Forecast{}, err
	}
	sizes := []int{1}
	if len(spec.Changes) > 1 {
		sizes = append(sizes, 2)
	}
	sim, err := Simulate(SimOptions{Changes: len(spec.Changes), CulpritSizes: sizes, RateGood: 0, RateCulprit: rate,
		SessionsPerLook: n, LaunchICC: icc, Design: d.Step, MaxSteps: d.MaxSteps, CheckRevert: spec.Search.CheckRevert, Reps: reps, Seed: 1})
	if err != nil {
		return Forecast{}, err
	}
	f := Forecast{MaxSteps: d.MaxSteps, StepAlpha: d.Step.Alpha, Looks: d.Step.Looks, SessionsPerLook: n, Effect: d.Step.Effect,
		Rate: rate, LaunchICC: icc, LaunchICCBasis: basis, FirstLook: d.Step.FirstLook, EarliestClean: d.Step.EarliestClean(n),
		StepAtEffect:  StepFigures{Corrupts: atEffect.Corrupts, Clean: atEffect.Clean, Inconclusive: atEffect.Inconclusive, MeanLaunches: atEffect.MeanLaunches, MeanSessions: atEffect.MeanSessions},
		StepWhenClean: StepFigures{Clean: clean.Clean, Corrupts: clean.Corrupts, Inconclusive: clean.Inconclusive, MeanLaunches: clean.MeanLaunches, MeanSessions: clean.MeanSessions},
		Simulation: BisectionFigures{Bisections: sim.Reps, Right: float64(sim.Right) / float64(sim.Reps), Wrong: sim.WrongRate(),
			Uncertain: float64(sim.Uncertain) / float64(sim.Reps), MeanSteps: sim.MeanSteps, MostSteps: sim.MostSteps,
			MeanLaunches: sim.MeanLaunches, MeanSessions: sim.MeanSessions},
		name: spec.Name, budget: spec.Search.ErrorBudget, culprits: sizes, design: d.Step, culpritRate: rate}
	for _, c := range spec.Changes {
		f.Changes = append(f.Changes, c.Label())
	}
	return f, nil
}

// WriteText writes the plan for a reader.
func (f Forecast) WriteText(w io.Writer) {
	d, n := f.design, f.SessionsPerLook
	fmt.Fprintf(w, "%s: %d changes from good to bad, in search order\n", f.name, len(f.Changes))
	for i, c := range f.Changes {
		fmt.Fprintf(w, "  %2d  %s\n", i+1, c)
	}
	fmt.Fprintf(w, "search: at most %d steps (a culprit of one change takes at most %d, of two %d), each at alpha %.3g = error budget %g / %d\n",
		f.MaxSteps, MaxSteps(len(f.Changes), 1), MaxSteps(len(f.Changes), 2), d.Alpha, f.budget, f.MaxSteps)
	fmt.Fprintf(w, "a step: up to %d looks, each one launch a side of %d sessions; corrupts when the launches' randomization test reaches %.3g (looks %d to %d: fewer launches cannot reach it), "+
		"clean when the excess is bounded below %.1f points (one-sided level %.3g per look, launches differing up to ICC %.2g)\n",
		d.Looks, n, d.Levels[d.Looks-1], d.FirstLook, d.Looks, 100*d.Effect, d.CleanLevel, f.LaunchICC)
	fmt.Fprintf(w, "launch ICC %.3g: %s\n", f.LaunchICC, f.LaunchICCBasis)
	if k := f.EarliestClean; k > 0 {
		fmt.Fprintf(w, "a step can call a subset clean from look %d (when neither side corrupts a session)\n", k)
	} else {
		fmt.Fprintf(w, "warning: no step can call a subset clean within %d looks of %d sessions, launches differing up to ICC %.3g: every subset that does not corrupt ends inconclusive; give search.looks more launches, or measure the launch ICC with an A/A experiment of the good configuration (--noise-floor)\n",
			d.Looks, n, f.LaunchICC)
	}
	at, clean, sim := f.StepAtEffect, f.StepWhenClean, f.Simulation
	fmt.Fprintf(w, "a step holding the culprit, good at 0%% and the culprit at %.1f%%: corrupts %.3f, clean %.5f, inconclusive %.3f; %.1f launches a side on average\n",
		100*f.culpritRate, at.Corrupts, at.Clean, at.Inconclusive, at.MeanLaunches)
	fmt.Fprintf(w, "a clean step, both at 0%%: clean %.3f, inconclusive %.3f; %.1f launches a side on average\n", clean.Clean, clean.Inconclusive, clean.MeanLaunches)
	fmt.Fprintf(w, "%d simulated bisections (a culprit of %s changes at %.1f%%, launches at ICC %.2g): right %.3f, wrong %.4f, uncertain %.3f; %.1f steps and %.0f launches on average, at most %d steps\n",
		sim.Bisections, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(f.culprits)), " or "), "[]"), 100*f.culpritRate, f.LaunchICC, sim.Right, sim.Wrong,
		sim.Uncertain, sim.MeanSteps, sim.MeanLaunches, sim.MostSteps)
}

// LaunchICCBasis says where a bisection's launch ICC comes from when no noise floor
// replaced it.
func LaunchICCBasis(spec *arms.BisectSpec) string {
	if spec.Search.LaunchICC == arms.DefaultLaunchICC {
		return "assumed (search.launch_icc's default; an A/A experiment of the good configuration measures it: --noise-floor)"
	}
	return "search.launch_icc"
}

// FloorSpec is the experiment a noise floor of the bisection must match (verdict.
// ResolveFloor): a step's, with every change applied, alike in everything but the
// changes.
func FloorSpec(spec *arms.BisectSpec) (*arms.Spec, error) {
	all := make([]int, len(spec.Changes))
	for i := range all {
		all[i] = i
	}
	return spec.StepSpec(arms.StepOptions{Name: spec.Name, Applied: all, Alpha: spec.Search.ErrorBudget})
}

// floorTooWide is a floor whose launches differ too much to bound any step.
type floorTooWide string

func (e floorTooWide) Error() string { return string(e) }
func (e floorTooWide) Unwrap() error { return verdict.ErrFloorRefused }

// ApplyFloor replaces the spec's search.launch_icc with the upper bound of how launches
// differ in corruption that the noise floor f (named ref, of the good configuration)
// measured, and says where it comes from; verdict.ErrFloorRefused when it measured none,
// or one so wide that no step could bound a subset's excess.
func ApplyFloor(spec *arms.BisectSpec, f *verdict.Floor, ref string) (string, error) {
	icc, basis, err := f.CorruptionBound(ref)
	if err != nil {
		return "", err
	}
	if !(icc < 1) {
		return "", floorTooWide(fmt.Sprintf("--noise-floor %s: its launches differ so much (ICC bound %.3g) that no step could bound a subset's excess", ref, icc))
	}
	spec.Search.LaunchICC = icc
	return basis, nil
}
