package bisect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// Options configure one bisection. Spec and DBPath are required; every other zero value
// is a working default.
type Options struct {
	Spec *arms.BisectSpec
	// DBPath is the results database; created if missing.
	DBPath string
	// Runtime launches every step's arms (default: the spec's runtime kind).
	Runtime runtime.Runtime
	// LogDir receives the engine logs of every step (see orchestrator.Options.LogDir).
	LogDir string
	// Environ reads arbiter's own environment, for secrets (default os.LookupEnv).
	Environ func(string) (string, bool)
	// Logger receives progress and problems (default: slog's default logger).
	Logger *slog.Logger
	// Progress, if set, hears about steps as they start and end.
	Progress Progress
	// Runs, if set, hears about every step's launches and sessions.
	Runs orchestrator.Progress
	// Resume, when not 0, continues that recorded bisection: its steps are replayed
	// from what they recorded, and an unfinished step's experiment is resumed.
	Resume int64
	// LeaseHeartbeat is how often the bisection's lease is renewed (default
	// store.LeaseHeartbeat).
	LeaseHeartbeat time.Duration
}

// Progress hears about a bisection's steps.
type Progress interface {
	// StepStarted is called before a step's experiment runs (or resumes).
	StepStarted(p Probe, experiment string, maxSteps int)
	// StepEnded is called with the step's judgement; kept is true for a step whose
	// experiment had finished before a resume, read back rather than run.
	StepEnded(p Probe, j *verdict.StepJudgement, kept bool)
}

// Result summarises a bisection that ended or stopped.
type Result struct {
	BisectionID int64
	Name        string
	// Status is done when the search ended (whatever it concluded), interrupted or
	// failed otherwise.
	Status     store.ExperimentStatus
	Conclusion Conclusion
	Steps      []StepResult
	Elapsed    time.Duration
}

// StepResult is one step of a bisection.
type StepResult struct {
	Probe        Probe
	ExperimentID int64
	Outcome      stats.StepOutcome
	Sentence     string
	// Kept is true for a step whose experiment finished before a resume.
	Kept bool
}

// Design is the search's plan for a spec: how many steps at most, each step's alpha, and
// the step design.
type Design struct {
	Changes  int
	MaxSteps int
	Step     stats.StepDesign
	Sessions int // per launch: one launch a side per look
}

// Plan lays out the search for a spec: search.max_steps, or enough steps for a culprit
// of one or two changes (plus the revert check); the error budget split evenly over
// them.
func Plan(spec *arms.BisectSpec) (Design, error) {
	n := len(spec.Changes)
	sr := spec.Search
	maxSteps := sr.MaxSteps
	if maxSteps == 0 {
		maxSteps = MaxSteps(n, 2)
		if sr.CheckRevert {
			maxSteps++
		}
	}
	if least := MaxSteps(n, 1); maxSteps < least {
		return Design{}, spec.ErrorAt("search.max_steps", "%d steps cannot find even a single culprit among %d changes: that takes up to %d", maxSteps, n, least)
	}
	alpha := sr.ErrorBudget / float64(maxSteps)
	d, err := stats.NewStepDesign(sr.Looks, alpha, sr.Effect, sr.LaunchICC)
	if err != nil {
		least := 0
		for k := sr.Looks + 1; k <= arms.MaxBisectLooks && least == 0; k++ {
			if _, err := stats.NewStepDesign(k, alpha, sr.Effect, sr.LaunchICC); err == nil {
				least = k
			}
		}
		if least == 0 {
			return Design{}, spec.ErrorAt("search", "a step's share of the error budget, %.3g (%g over %d steps), is beyond what %d launches a side can reach: raise search.error_budget or lower search.max_steps",
				alpha, sr.ErrorBudget, maxSteps, arms.MaxBisectLooks)
		}
		return Design{}, spec.ErrorAt("search.looks", "%d launches a side cannot show a subset corrupting at a step's share of the error budget, %.3g (%g over %d steps): a step decides on launches and needs at least %d looks",
			sr.Looks, alpha, sr.ErrorBudget, maxSteps, least)
	}
	return Design{Changes: n, MaxSteps: maxSteps, Step: d, Sessions: spec.Base.Workload.Sessions}, nil
}

// ExperimentName is the name of a step's experiment: NAME-bID-sNN.
func ExperimentName(name string, bisection int64, step int) string {
	return fmt.Sprintf("%s-b%d-s%02d", name, bisection, step)
}

// Run runs the bisection the spec describes (or resumes one) until its search ends,
// ctx is cancelled (the step running is stopped and kept; the bisection is then
// interrupted and resumable), or a step's experiment cannot run at all.
func Run(ctx context.Context, opts Options) (Result, error) {
	start := time.Now()
	spec := opts.Spec
	if spec == nil {
		return Result{}, errors.New("bisect: no spec")
	}
	design, err := Plan(spec)
	if err != nil {
		return Result{}, err
	}
	environ := opts.Environ
	if environ == nil {
		environ = os.LookupEnv
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Resume == 0 && opts.Runtime == nil {
		// The steps share the engine, the runtime and its nodes: the first step's
		// preflight is every step's, and a failed one leaves no bisection behind.
		// Another program's database is the first thing to hear about.
		if err := store.Identify(opts.DBPath); err != nil {
			return Result{}, err
		}
		if err := preflight(ctx, spec); err != nil {
			return Result{}, err
		}
	}
	redactor := spec.Base.Redactor(environ)
	st, err := store.Open(opts.DBPath, store.Options{Redact: redactor.Redact})
	if err != nil {
		return Result{}, err
	}
	defer st.Close()

	owner := store.ThisProcess()
	var id int64
	var lease *store.BisectionLease
	if opts.Resume != 0 {
		id = opts.Resume
		if lease, err = reopen(ctx, st, id, spec, design, owner); err != nil {
			return Result{}, err
		}
	} else {
		host, _ := os.Hostname()
		id, lease, err = st.StartBisection(ctx, store.Bisection{
			Name: spec.Name, SpecPath: spec.Path, Spec: string(spec.RedactedSource()), Changes: changesJSON(spec),
			ErrorBudget: spec.Search.ErrorBudget, Effect: spec.Search.Effect, Looks: spec.Search.Looks,
			MaxSteps: design.MaxSteps, StepAlpha: design.Step.Alpha, LaunchICC: design.Step.LaunchICC, Sessions: design.Sessions,
			Version: orchestrator.Version(), Host: host, Created: start,
		}, owner)
		if err != nil {
			return Result{}, err
		}
	}
	log = log.With("bisection", id, "name", spec.Name)
	b := &bisection{opts: opts, spec: spec, design: design, id: id, store: st, log: log, environ: environ}

	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	stopBeat, beatDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(beatDone)
		b.heartbeat(lease, stopBeat, cancelRun)
	}()
	res := Result{BisectionID: id, Name: spec.Name}
	runErr := b.search(runCtx, &res)
	res.Elapsed = time.Since(start)
	close(stopBeat)
	<-beatDone

	bg := context.WithoutCancel(ctx)
	if cause := context.Cause(runCtx); ctx.Err() == nil && errors.Is(cause, store.ErrLeaseLost) {
		res.Status = store.ExperimentInterrupted
		return res, fmt.Errorf("%w; this arbiter stopped and leaves the bisection to the new owner", cause)
	}
	status, errText, conclusion := store.ExperimentDone, "", ""
	switch {
	case ctx.Err() != nil:
		status = store.ExperimentInterrupted
	case runErr != nil:
		status, errText = store.ExperimentFailed, redactor.Redact(runErr.Error())
	default:
		c, _ := json.Marshal(res.Conclusion)
		conclusion = string(c)
	}
	res.Status = status
	if err := lease.Finish(bg, status, conclusion, errText, time.Now()); err != nil && runErr == nil {
		runErr = err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, runErr
}

// reopen takes over a recorded bisection for a resume: its lease (refused while another
// arbiter holds it live), the same spec, and its status set running again.
func reopen(ctx context.Context, st *store.Store, id int64, spec *arms.BisectSpec, d Design, owner store.Owner) (*store.BisectionLease, error) {
	row, err := store.BisectionByID(ctx, st.DB(), id)
	if err != nil {
		return nil, err
	}
	switch {
	case row.Status == store.ExperimentDone:
		return nil, fmt.Errorf("bisection %d is done: %w", id, orchestrator.ErrNothingToResume)
	case row.Spec != string(spec.RedactedSource()):
		return nil, fmt.Errorf("bisection %d was recorded with another spec than %s: resume needs the same one", id, spec.Path)
	case row.Changes != changesJSON(spec) || row.MaxSteps != d.MaxSteps || row.StepAlpha != d.Step.Alpha:
		// Same text, other changes: a server-info file it reads was edited since.
		return nil, fmt.Errorf("bisection %d: its changes or design differ from what %s gives now (a server-info file changed?): resume needs the same ones", id, spec.Path)
	}
	lease, err := st.AcquireBisection(ctx, id, owner, time.Now())
	if err != nil {
		return nil, err
	}
	if err := lease.Reopen(ctx); err != nil {
		return nil, err
	}
	return lease, nil
}

// changesJSON is the changes as the store keeps them.
func changesJSON(spec *arms.BisectSpec) string {
	out := make([]store.BisectionChange, len(spec.Changes))
	for i, c := range spec.Changes {
		out[i] = store.BisectionChange{Kind: c.Kind, Name: c.Name, Label: c.Label()}
		parts := strings.SplitN(out[i].Label, ": ", 2)
		if vals := strings.SplitN(parts[len(parts)-1], " → ", 2); len(vals) == 2 {
			out[i].Good, out[i].Bad = vals[0], vals[1]
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

type bisection struct {
	opts    Options
	spec    *arms.BisectSpec
	design  Design
	id      int64
	store   *store.Store
	log     *slog.Logger
	environ func(string) (string, bool)
}

func (b *bisection) heartbeat(lease *store.BisectionLease, stop <-chan struct{}, cancel context.CancelCauseFunc) {
	store.KeepRenewed(lease, b.opts.LeaseHeartbeat, stop, func(err error) {
		b.log.Error("another arbiter took this bisection over; stopping", "err", err)
		cancel(err)
	}, func(err error) { b.log.Warn("bisection lease heartbeat failed; retrying", "err", err) })
}

// search asks the search for steps and runs each, replaying the steps a resumed
// bisection recorded.
func (b *bisection) search(ctx context.Context, res *Result) error {
	s, err := NewSearch(b.design.Changes, b.design.MaxSteps, b.spec.Search.CheckRevert)
	if err != nil {
		return err
	}
	recorded := map[int]store.BisectionStep{}
	if b.opts.Resume != 0 {
		steps, err := store.BisectionSteps(ctx, b.store.DB(), b.id)
		if err != nil {
			return err
		}
		for _, st := range steps {
			recorded[st.Step] = st
		}
	}
	for {
		p, ok := s.Next()
		if !ok {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		sr, err := b.step(ctx, p, recorded)
		if err != nil {
			return err
		}
		res.Steps = append(res.Steps, sr)
		if ctx.Err() != nil {
			// The step was stopped part way: it stays unjudged, for the resume.
			return nil
		}
		if err := s.Record(sr.Outcome); err != nil {
			return err
		}
	}
	res.Conclusion = s.Conclusion()
	if len(recorded) > len(res.Steps) {
		return fmt.Errorf("bisection %d recorded %d steps, but its search ended after %d: the spec or this arbiter's search differs from the one that ran it", b.id, len(recorded), len(res.Steps))
	}
	return nil
}

// step runs one probe's experiment (or finds the one recorded before a resume, resuming
// it when it did not finish) and judges it.
func (b *bisection) step(ctx context.Context, p Probe, recorded map[int]store.BisectionStep) (StepResult, error) {
	name := ExperimentName(b.spec.Name, b.id, p.Step)
	applied, _ := json.Marshal(p.Changes)
	sr := StepResult{Probe: p}
	rec, have := recorded[p.Step]
	if have && (rec.Role != p.Role || rec.Applied != string(applied)) {
		return sr, fmt.Errorf("bisection %d step %d was recorded as %s applying %s, but the search now asks for %s applying %s: resume needs the spec and arbiter that ran it",
			b.id, p.Step, rec.Role, rec.Applied, p.Role, applied)
	}
	if !have {
		if err := b.store.AddBisectionStep(ctx, store.BisectionStep{BisectionID: b.id, Step: p.Step, Role: p.Role,
			Applied: string(applied), ExperimentName: name}); err != nil {
			return sr, err
		}
	}
	spec, err := b.spec.StepSpec(arms.StepOptions{Name: name, Applied: p.Changes, Alpha: b.design.Step.Alpha,
		Note: fmt.Sprintf("Step %d (%s) of bisection %d: good with changes %s applied, against good.", p.Step, p.Role, b.id, numberList(p.Changes))})
	if err != nil {
		return sr, fmt.Errorf("step %d: %w", p.Step, err)
	}
	// The experiment of a recorded step: linked, or found by its name.
	var expID int64
	var expStatus store.ExperimentStatus
	if have {
		e, err := rec.Experiment(ctx, b.store.DB())
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return sr, err
		case e.Name != name:
			return sr, fmt.Errorf("bisection %d step %d is linked to experiment %d (%s), not %s", b.id, p.Step, e.ID, e.Name, name)
		default:
			expID, expStatus = e.ID, e.Status
		}
	}
	switch {
	case expID != 0 && (expStatus == store.ExperimentDone || expStatus == store.ExperimentFailed):
		sr.Kept = true
	default:
		if pr := b.opts.Progress; pr != nil {
			pr.StepStarted(p, name, b.design.MaxSteps)
		}
		res, err := orchestrator.Run(ctx, orchestrator.Options{Spec: spec, DBPath: b.opts.DBPath, Runtime: b.opts.Runtime,
			LogDir: b.opts.LogDir, Environ: b.environ, Logger: b.log, Progress: b.opts.Runs, Resume: expID,
			LeaseHeartbeat: b.opts.LeaseHeartbeat, Look: b.looker()})
		if res.ExperimentID == 0 {
			if err == nil {
				err = errors.New("no experiment was recorded")
			}
			return sr, fmt.Errorf("step %d: %w", p.Step, err)
		}
		expID = res.ExperimentID
		if err := b.store.SetBisectionStep(context.WithoutCancel(ctx), b.id, p.Step, expID, ""); err != nil {
			return sr, err
		}
		switch {
		case ctx.Err() != nil:
			sr.ExperimentID = expID
			return sr, nil
		case err != nil && !errors.Is(err, orchestrator.ErrNoData):
			// An arm without any completed session is the step's to judge
			// (inconclusive, its engine never served); anything else stops the search.
			return sr, fmt.Errorf("step %d (experiment %d): %w", p.Step, expID, err)
		}
	}
	sr.ExperimentID = expID
	j, err := b.judge(ctx, expID)
	if err != nil {
		return sr, fmt.Errorf("step %d: %w", p.Step, err)
	}
	sr.Outcome, sr.Sentence = j.Outcome, j.Sentence()
	if !sr.Outcome.Decided() {
		return sr, fmt.Errorf("step %d (experiment %d) ended without a decision (%s)", p.Step, expID, sr.Sentence)
	}
	if err := b.store.SetBisectionStep(ctx, b.id, p.Step, expID, string(sr.Outcome)); err != nil {
		return sr, err
	}
	b.log.Info("step judged", "step", p.Step, "role", p.Role, "changes", numberList(p.Changes), "experiment", expID, "outcome", sr.Outcome)
	if pr := b.opts.Progress; pr != nil {
		pr.StepEnded(p, j, sr.Kept)
	}
	return sr, nil
}

// preflight runs the orchestrator's preflight on the reproduction step: every change
// applied against good.
func preflight(ctx context.Context, spec *arms.BisectSpec) error {
	all := make([]int, len(spec.Changes))
	for i := range all {
		all[i] = i
	}
	step, err := spec.StepSpec(arms.StepOptions{Name: spec.Name, Applied: all, Alpha: spec.Search.ErrorBudget})
	if err != nil {
		return err
	}
	pf, err := orchestrator.RunPreflight(ctx, step)
	if err != nil {
		return err
	}
	return pf.Err()
}

// looker is a step experiment's stopping rule: the step's own design (stats.StepDesign)
// decides after every block, on the launches so far, and a step that is decided,
// corrupting or shown clean, stops there. The orchestrator's looks give cumulative
// counts, from the first block on, so each block's own counts are their differences.
func (b *bisection) looker() func(block int, counts []orchestrator.ArmCounts) (bool, string) {
	var blocks []stats.LookCounts
	var prev stats.LookCounts
	return func(block int, counts []orchestrator.ArmCounts) (bool, string) {
		if len(counts) != 2 || block+1 > b.design.Step.Looks {
			return false, ""
		}
		// The good level comes first in every step's spec.
		good, applied := counts[0], counts[1]
		cum := stats.LookCounts{EventsA: good.Corrupted, SessionsA: good.Sessions, EventsB: applied.Corrupted, SessionsB: applied.Sessions}
		blocks = append(blocks, stats.LookCounts{EventsA: cum.EventsA - prev.EventsA, SessionsA: cum.SessionsA - prev.SessionsA,
			EventsB: cum.EventsB - prev.EventsB, SessionsB: cum.SessionsB - prev.SessionsB})
		prev = cum
		d := b.design.Step
		sl, o := d.Look(blocks)
		switch o {
		case stats.StepClean:
			return true, fmt.Sprintf("Stopped clean at look %d of %d: %d/%d against %d/%d over %d launches a side, the excess is at most %+.1f points, below the bisection's effect of %.1f points.",
				sl.Look, d.Looks, cum.EventsB, cum.SessionsB, cum.EventsA, cum.SessionsA, sl.LaunchesB, 100*sl.Upper, 100*d.Effect)
		case stats.StepCorrupts, stats.StepLower:
			return true, fmt.Sprintf("Stopped at look %d of %d: %d/%d against %d/%d over %d launches a side, launch p = %.3g reaches the look's level %.3g.",
				sl.Look, d.Looks, cum.EventsB, cum.SessionsB, cum.EventsA, cum.SessionsA, sl.LaunchesB, sl.P, sl.Level)
		}
		return false, ""
	}
}

// judge reads a step's experiment back and decides it.
func (b *bisection) judge(ctx context.Context, expID int64) (*verdict.StepJudgement, error) {
	ro, err := store.OpenReadOnly(b.opts.DBPath)
	if err != nil {
		return nil, err
	}
	defer ro.Close()
	return verdict.JudgeStep(ctx, ro, expID, b.design.Step)
}

// numberList writes change indexes 1-based: "1, 2, 6".
func numberList(idx []int) string {
	s := slices.Clone(idx)
	slices.Sort(s)
	words := make([]string, len(s))
	for i, x := range s {
		words[i] = fmt.Sprint(x + 1)
	}
	return strings.Join(words, ", ")
}
