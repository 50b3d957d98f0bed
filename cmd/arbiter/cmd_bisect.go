package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/bisect"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/internal/ui"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newBisectCmd) }

// bisectGates are the --fail-on gates of a bisection.
var bisectGates = map[string]string{
	string(store.ConclusionCulprit):   "a culprit was named: the regression is real and attributed",
	string(store.ConclusionUncertain): "the search ended without naming a culprit and without showing the bad configuration clean",
}

type bisectOptions struct {
	resume      int64
	verdict     bool
	list        bool
	plan        bool
	spec        string
	reportPath  string
	logDir      string
	failOn      string
	simulations int
	rate        float64
	noiseFloor  string
	// format and quiet shape --list as ls's do.
	format string
	quiet  bool
}

func newBisectCmd(g *globals) *cobra.Command {
	var o bisectOptions
	cmd := &cobra.Command{
		Use:   "bisect SPEC | --resume ID | --verdict [ID] | --list | --plan SPEC",
		Short: "Find which of the changes between a good and a bad configuration makes the engine corrupt",
		Long: `Bisect the changes between two configurations of an engine: the spec names a good and a
bad configuration (env and args pins, or two get_server_info files), the workload, the detectors
and the search's budget. Every step is an experiment in the database, good against good with some
of the changes applied, judged by a three-way group-sequential exact test (corrupts, clean, or
inconclusive when its looks run out); the search tests growing prefixes of the changes, so that a
culprit that is a combination (bf16 index-K corrupts only with HiCache on) is found as that
combination, and ends with the confirmation A/B of good + culprit against good. The probability
of naming a wrong culprit is held to search.error_budget over the whole search. A step calls a
subset clean only when its excess is bounded below search.effect allowing for launches that
differ up to search.launch_icc (0.1 unless declared), or up to the upper bound an A/A experiment
of the good configuration measured (--noise-floor EXP).

The report (the search tree, the culprit with its confirming test, what remains uncertain) is
written beside the database and rebuilt with --verdict. A bisection interrupted (Ctrl-C) or
whose arbiter was killed continues with --resume from the steps it recorded.`,
		Example: `  arbiter bisect examples/bisect/tuesday-release.yaml
  arbiter bisect --plan examples/bisect/tuesday-release.yaml      # the changes, the step design, a simulation; runs nothing
  arbiter bisect --resume 1                        # continue an interrupted bisection
  arbiter bisect --verdict 1 -o bisect-1.md        # its report again
  arbiter bisect --list`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.failOn != "" && bisectGates[o.failOn] == "" {
				return withCode(exitUsage, fmt.Errorf("--fail-on %q: want culprit or uncertain", o.failOn))
			}
			modes := 0
			for _, on := range []bool{o.resume != 0, o.verdict, o.list, o.plan} {
				if on {
					modes++
				}
			}
			switch {
			case modes > 1:
				return withCode(exitUsage, errors.New("give one of --resume, --verdict, --list and --plan"))
			case o.list:
				if len(args) > 0 {
					return withCode(exitUsage, errors.New("--list takes no argument"))
				}
				return listBisections(cmd.Context(), g, o)
			case o.verdict:
				ref := ""
				if len(args) == 1 {
					ref = args[0]
				}
				return bisectVerdict(cmd.Context(), g, ref, o)
			case o.resume != 0:
				if len(args) > 0 {
					return withCode(exitUsage, errors.New("--resume takes the bisection's id; give its spec file with --spec"))
				}
				return resumeBisection(cmd.Context(), g, o)
			case len(args) != 1:
				return withCode(exitUsage, errors.New("give the bisection spec"))
			case o.plan:
				return planBisection(g, args[0], o)
			}
			spec, err := arms.LoadBisect(args[0])
			if err != nil {
				return withCode(exitUsage, err)
			}
			if _, err := applyBisectFloor(cmd.Context(), g, spec, o.noiseFloor); err != nil {
				return err
			}
			return runBisection(cmd.Context(), g, spec, 0, o)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.resume, "resume", 0, "continue the recorded bisection with this id")
	f.StringVar(&o.spec, "spec", "", "with --resume: the bisection's spec file (default: the text recorded with it)")
	f.BoolVar(&o.verdict, "verdict", false, "write the report of a recorded bisection (id or name; default the newest)")
	f.BoolVar(&o.list, "list", false, "list the bisections in the results database")
	f.StringVar(&o.format, "format", "table", "with --list: table, csv or json (--json is --format json)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "with --list: print only the bisection ids, one a line")
	f.BoolVar(&o.plan, "plan", false, "check the spec and print its changes, step design and a simulation; runs nothing")
	f.IntVar(&o.simulations, "simulations", 2000, "with --plan: bisections to simulate")
	f.Float64Var(&o.rate, "rate", 0, "with --plan: the culprit's excess corruption rate to plan for (default search.effect, the hardest the search allows)")
	f.StringVar(&o.noiseFloor, "noise-floor", "", "an A/A experiment of the good configuration (id or name, in --db): its upper bound of how much launches differ replaces search.launch_icc")
	f.StringVarP(&o.reportPath, "output", "o", "", "report file (default verdicts/NAME-DB-bID.md beside the database; with --verdict, stdout)")
	f.StringVar(&o.logDir, "log-dir", "", "engine logs, under DIR/DB/exp-ID (default arbiter-logs beside the database)")
	f.StringVar(&o.failOn, "fail-on", "", "exit 3 when the bisection shows: culprit (a culprit was named) or uncertain (it ended without a conclusion)")
	return experimentFlag(addDBFlag(cmd, g), g, "noise-floor")
}

// stepLines prints every step as it starts and ends, on stderr.
type stepLines struct{ w io.Writer }

func (s stepLines) StepStarted(p bisect.Probe, exp string, maxSteps int) {
	fmt.Fprintf(s.w, "step %d of at most %d (%s): good with changes %s applied, experiment %s\n", p.Step, maxSteps, p.Role, verdict.ChangeNumbers(p.Changes), exp)
}

func (s stepLines) StepEnded(p bisect.Probe, j *verdict.StepJudgement, kept bool) {
	if kept {
		fmt.Fprintf(s.w, "step %d (%s, recorded before the resume): %s\n", p.Step, p.Role, j.Sentence())
		return
	}
	fmt.Fprintf(s.w, "step %d: %s\n", p.Step, j.Sentence())
}

func runBisection(ctx context.Context, g *globals, spec *arms.BisectSpec, resume int64, o bisectOptions) error {
	keep := outfile.Guard{Database: g.dbPath(), Specs: []string{spec.Path}}
	// A -o that would be refused is said now, not after the search ran.
	if o.reportPath != "" {
		if err := checkOutput(keep, o.reportPath); err != nil {
			return err
		}
	}
	// Every step's launches get the same display as a run's: a step's engines take as
	// long to start as any.
	level, err := g.level(slog.LevelWarn)
	if err != nil {
		return err
	}
	progress := newProgress(g.stderr, g.json)
	logger := slog.New(slog.NewTextHandler(progress.Writer(), &slog.HandlerOptions{Level: level}))
	opts := bisect.Options{Spec: spec, DBPath: g.dbPath(), LogDir: o.logDir, Logger: logger, Resume: resume, Runs: progress}
	if !g.json {
		opts.Progress = stepLines{progress.Writer()}
	}
	res, runErr := bisect.Run(ctx, opts)
	progress.Wait()
	if errors.Is(runErr, store.ErrNotArbiterDatabase) {
		return withCode(exitUsage, runErr)
	}
	var se *arms.SpecError
	if errors.As(runErr, &se) {
		return withCode(exitUsage, runErr)
	}
	if res.BisectionID == 0 || errors.Is(runErr, store.ErrLeaseLost) {
		return runErr
	}
	path := o.reportPath
	if path == "" {
		var err error
		if path, err = reportPath(ctx, g, res.Name, res.BisectionID); err != nil {
			return errors.Join(runErr, err)
		}
	}
	// The report is written after an interrupt too: it shows the steps recorded so far.
	r, err := writeBisectionReport(context.WithoutCancel(ctx), g, res.BisectionID, path, keep)
	if err != nil {
		return errors.Join(runErr, err)
	}
	if g.json {
		out := r.Summary()
		out["report"], out["database"], out["elapsed_s"] = path, g.dbPath(), res.Elapsed.Seconds()
		if err := json.NewEncoder(g.stdout).Encode(out); err != nil {
			return err
		}
	} else {
		steps := fmt.Sprintf("%d steps", len(res.Steps))
		if len(res.Steps) == 1 {
			steps = "1 step"
		}
		fmt.Fprintf(g.stdout, "bisection %d (%s): %s in %s, %s\n", res.BisectionID, res.Name, res.Status, res.Elapsed.Round(1e8), steps)
		for _, line := range r.Headline() {
			fmt.Fprint(g.stdout, ui.Wrap(line, "  ", 100))
		}
		fmt.Fprintf(g.stdout, "report: %s\n", path)
	}
	if runErr != nil {
		return runErr
	}
	return bisectGate(r, o.failOn)
}

// bisectGate applies --fail-on to a bisection's report.
func bisectGate(r *verdict.BisectionReport, gate string) error {
	c := r.Conclusion
	if gate == "" || c == nil {
		return nil
	}
	switch {
	case gate != string(c.Status):
	case c.Status == store.ConclusionCulprit:
		return withCode(exitGateFailed, fmt.Errorf("gate culprit failed: changes %s corrupt against good (confirmed by step %d)", verdict.ChangeNumbers(c.Culprit), c.ConfirmedBy))
	case c.Status == store.ConclusionUncertain:
		return withCode(exitGateFailed, fmt.Errorf("gate uncertain failed: %s", c.Reason))
	}
	return nil
}

// reportPath is verdicts/NAME-DB-bID.md beside the database.
func reportPath(ctx context.Context, g *globals, name string, id int64) (string, error) {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return "", err
	}
	defer db.Close()
	uuid, err := store.DatabaseID(ctx, db)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(g.dbPath()), "verdicts", fmt.Sprintf("%s-%s-b%d.md", name, store.ShortID(uuid), id)), nil
}

func writeBisectionReport(ctx context.Context, g *globals, id int64, path string, keep outfile.Guard) (*verdict.BisectionReport, error) {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r, err := verdict.BuildBisection(ctx, db, id)
	if err != nil {
		return nil, err
	}
	r.DB = g.namedDB()
	return r, r.WriteFile(path, keep)
}

func resumeBisection(ctx context.Context, g *globals, o bisectOptions) error {
	b, err := findBisectionForResume(ctx, g.dbPath(), o.resume)
	if err != nil {
		return err
	}
	spec, err := arms.ResumeBisectSpec(fmt.Sprintf("bisection %d", b.ID), o.spec, b.SpecPath, b.Spec)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if o.noiseFloor != "" {
		return withCode(exitUsage, errors.New("--noise-floor: a resumed bisection keeps the launch ICC it was started with"))
	}
	if b.LaunchICC.Valid {
		// The steps recorded so far were decided with it (from a noise floor, perhaps).
		spec.Search.LaunchICC = b.LaunchICC.Float64
	}
	err = runBisection(ctx, g, spec, b.ID, o)
	if errors.Is(err, orchestrator.ErrNothingToResume) {
		return withCode(exitUsage, err)
	}
	return err
}

// findBisectionForResume upgrades the database (resume writes) and finds the bisection;
// it never creates a database.
func findBisectionForResume(ctx context.Context, path string, id int64) (store.BisectionRow, error) {
	st, err := store.OpenExisting(path, store.Options{})
	if errors.Is(err, store.ErrNotArbiterDatabase) {
		return store.BisectionRow{}, withCode(exitUsage, err)
	}
	if err != nil {
		return store.BisectionRow{}, withCode(exitUsage, fmt.Errorf("resume: %w", err))
	}
	defer st.Close()
	b, err := store.BisectionByID(ctx, st.DB(), id)
	if err != nil {
		return b, withCode(exitUsage, err)
	}
	if b.Status == store.ExperimentDone {
		return b, withCode(exitUsage, fmt.Errorf("bisection %d is done: %w (its report: arbiter bisect --verdict %d)", b.ID, orchestrator.ErrNothingToResume, b.ID))
	}
	// Said before the spec is read; bisect.Run's own check when it takes the lease is
	// the one that holds under a race.
	return b, b.Held(time.Now())
}

func bisectVerdict(ctx context.Context, g *globals, ref string, o bisectOptions) error {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return err
	}
	defer db.Close()
	b, err := store.FindBisection(ctx, db, ref)
	if errors.Is(err, store.ErrNotFound) {
		return withCode(exitUsage, err)
	}
	if err != nil {
		return err
	}
	r, err := verdict.BuildBisection(ctx, db, b.ID)
	if err != nil {
		return err
	}
	r.DB = g.namedDB()
	switch {
	case o.reportPath != "":
		if err := r.WriteFile(o.reportPath, outfile.Guard{Database: g.dbPath()}); err != nil {
			return err
		}
		fmt.Fprintln(g.stdout, o.reportPath)
	case g.json:
		if err := json.NewEncoder(g.stdout).Encode(r.Summary()); err != nil {
			return err
		}
	default:
		if err := r.Markdown(g.stdout); err != nil {
			return err
		}
	}
	return bisectGate(r, o.failOn)
}

func listBisections(ctx context.Context, g *globals, o bisectOptions) error {
	format, err := listFormat(g, o.format)
	if err != nil {
		return err
	}
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := store.ListBisections(ctx, db)
	if err != nil {
		return err
	}
	type line struct {
		ID         int64                  `json:"id"`
		Name       string                 `json:"name"`
		Status     store.ExperimentStatus `json:"status"`
		Created    string                 `json:"created_at"`
		Steps      int                    `json:"steps"`
		Conclusion string                 `json:"conclusion"`
		Culprit    []int                  `json:"culprit,omitempty"`
	}
	var out []line
	for _, b := range rows {
		steps, err := store.BisectionSteps(ctx, db, b.ID)
		if err != nil {
			return err
		}
		l := line{ID: b.ID, Name: b.Name, Status: b.State(), Created: toTheSecond(b.CreatedAt), Steps: len(steps), Conclusion: "–"}
		c, err := b.ParsedConclusion()
		if err != nil {
			return err
		}
		if c != nil {
			l.Conclusion = string(c.Status)
			for _, x := range c.Culprit {
				l.Culprit = append(l.Culprit, x+1)
			}
		}
		out = append(out, l)
	}
	return listing[line]{
		items:     out,
		id:        func(l line) int64 { return l.ID },
		columns:   []string{"id", "name", "status", "created_at", "steps", "conclusion", "culprit"},
		tableHead: []string{"ID", "NAME", "STATUS", "STARTED", "STEPS", "CONCLUSION", "CULPRIT"},
		csvRow: func(l line) []string {
			return []string{fmt.Sprint(l.ID), l.Name, string(l.Status), l.Created, fmt.Sprint(l.Steps), l.Conclusion,
				culpritColumn(l.Culprit)}
		},
		tableRow: func(l line) []string {
			return []string{fmt.Sprint(l.ID), l.Name, string(l.Status), verdict.When(l.Created), fmt.Sprint(l.Steps), l.Conclusion,
				dash(culpritColumn(l.Culprit))}
		},
	}.write(g, format, o.quiet)
}

// culpritColumn is the culprit's change numbers (1-based) in a column of --list: "2,6".
func culpritColumn(culprit []int) string {
	words := make([]string, len(culprit))
	for i, x := range culprit {
		words[i] = strconv.Itoa(x)
	}
	return strings.Join(words, ",")
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// planBisection checks a spec and says what its search will do, running nothing
// (bisect.NewForecast).
func planBisection(g *globals, path string, o bisectOptions) error {
	spec, err := arms.LoadBisect(path)
	if err != nil {
		return withCode(exitUsage, err)
	}
	basis, err := applyBisectFloor(context.Background(), g, spec, o.noiseFloor)
	if err != nil {
		return err
	}
	d, err := bisect.Plan(spec)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if o.rate != 0 && !(o.rate > 0 && o.rate <= 1) {
		return withCode(exitUsage, fmt.Errorf("--rate %g: a corruption rate in (0, 1]", o.rate))
	}
	f, err := bisect.NewForecast(spec, d, bisect.ForecastOptions{Rate: o.rate, Simulations: o.simulations, LaunchICCBasis: basis})
	if err != nil {
		return err
	}
	if g.json {
		return json.NewEncoder(g.stdout).Encode(f)
	}
	f.WriteText(g.stdout)
	return nil
}

// applyBisectFloor replaces the spec's search.launch_icc with the bound the A/A
// experiment ref measured, when ref is given (bisect.ApplyFloor), and says where the ICC
// a bisection allows for comes from.
func applyBisectFloor(ctx context.Context, g *globals, spec *arms.BisectSpec, ref string) (string, error) {
	if ref == "" {
		return bisect.LaunchICCBasis(spec), nil
	}
	step, err := bisect.FloorSpec(spec)
	if err != nil {
		return "", err
	}
	f, err := noiseFloor(ctx, g, ref, step)
	if err != nil {
		return "", err
	}
	return bisect.ApplyFloor(spec, f, ref)
}
