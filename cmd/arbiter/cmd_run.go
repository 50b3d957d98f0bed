package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/internal/ui"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newRunCmd) }

type runOptions struct {
	verdictPath string
	logDir      string
	failOn      string
	// allowInconclusive lets the regression and difference gates pass an arm whose
	// corruption cannot be judged (it crashed, wedged or lost too much).
	allowInconclusive bool
	// noiseFloor names the A/A experiment whose launches' spread the arms are weighed
	// against, in place of the spec's analysis.noise_floor.
	noiseFloor string
}

// addOutputFlag adds -o/--output, the verdict file, with the meaning -o has on every
// command: the file the command's report is written to (with its charts beside it).
// --verdict, its former name, is still read.
func addOutputFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVarP(path, "output", "o", "", "write the verdict (and its SVG charts) to this file (default verdicts/NAME-DB-ID.md beside the database, DB the database's short id)")
	cmd.Flags().StringVar(path, "verdict", "", "the former name of --output")
	cmd.Flags().MarkDeprecated("verdict", "use -o/--output")
}

// addGateFlags adds --fail-on and --allow-inconclusive, shared by run, resume and verdict.
func addGateFlags(cmd *cobra.Command, failOn *string, allow *bool) {
	cmd.Flags().StringVar(failOn, "fail-on", "", "exit 3 when the verdict shows one of (comma-separated): "+strings.Join(verdict.Gates(), ", ")+
		"; exit 6 when it cannot decide: regression and difference on an arm whose corruption is inconclusive, undecided on any comparison too few launches could test, throughput on a load shown neither non-inferior nor below its margin")
	cmd.Flags().BoolVar(allow, "allow-inconclusive", false, "let --fail-on regression or difference pass an arm that crashed, wedged or lost more than analysis.max_loss")
}

func newRunCmd(g *globals) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run SPEC",
		Short: "Run an experiment and write its verdict",
		Long: `Run the experiment a spec describes, block by block: the arms of a block start together,
one on each slot of runtime.nodes (in waves when there are fewer slots than arms), wait until
every one is ready, and get the identical seeded workload at the same moment; every response
is labelled, everything is stored in the results database, and the markdown verdict is
written. The first Ctrl-C stops scheduling, stops the running arms and keeps what was
recorded; a second exits at once.`,
		Example: `  arbiter run examples/quickstart.yaml
  arbiter run spec.yaml --db results.db --fail-on regression   # exit 3 if an arm is shown worse, 6 if one crashed
  arbiter run spec.yaml --fail-on regression,undecided   # exit 6 too when the launches cannot decide
  arbiter run spec.yaml --fail-on regression --allow-inconclusive   # a crashed arm alone does not fail
  arbiter run aa.yaml && arbiter run ab.yaml --noise-floor aa-name  # one launch per arm, weighed against an A/A floor`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExperiment(cmd.Context(), g, args[0], o)
		},
	}
	addOutputFlag(cmd, &o.verdictPath)
	cmd.Flags().StringVar(&o.logDir, "log-dir", "", "engine logs, under DIR/DB/exp-ID (default arbiter-logs beside the database)")
	addGateFlags(cmd, &o.failOn, &o.allowInconclusive)
	cmd.Flags().StringVar(&o.noiseFloor, "noise-floor", "", "weigh the arms against the launch spread an A/A experiment (id or name, in --db) measured on the same engine, workload and hardware: one launch per arm can then decide (overrides analysis.noise_floor)")
	return experimentFlag(addDBFlag(cmd, g), g, "noise-floor")
}

func runExperiment(ctx context.Context, g *globals, specPath string, o runOptions) error {
	if err := checkGates(o.failOn); err != nil {
		return err
	}
	spec, err := arms.Load(specPath)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if o.noiseFloor != "" {
		spec.Analysis.NoiseFloor = o.noiseFloor
	}
	if ref := spec.Analysis.NoiseFloor; ref != "" {
		f, err := noiseFloor(ctx, g, ref, spec)
		if err != nil {
			return err
		}
		spec.Analysis.NoiseFloorID = f.Experiment
	}
	return execute(ctx, g, spec, 0, o)
}

// noiseFloor is the A/A experiment ref as the noise floor of spec (verdict.ResolveFloor),
// its warnings printed.
func noiseFloor(ctx context.Context, g *globals, ref string, spec *arms.Spec) (*verdict.Floor, error) {
	host, _ := os.Hostname()
	f, err := verdict.ResolveFloor(ctx, g.dbPath(), ref, spec, host)
	if err != nil {
		return nil, err
	}
	for _, w := range f.Warnings {
		fmt.Fprintf(g.stderr, "noise floor %s: %s\n", ref, w)
	}
	return f, nil
}

// execute runs (or, with resume set, resumes) the experiment of spec, writes its verdict
// and prints where it is.
func execute(ctx context.Context, g *globals, spec *arms.Spec, resume int64, o runOptions) error {
	keep := outfile.Guard{Database: g.dbPath(), Specs: []string{spec.Path}}
	// A -o that would be refused is said now, not after the experiment ran.
	if o.verdictPath != "" {
		if err := checkOutput(keep, verdict.Files(o.verdictPath)...); err != nil {
			return err
		}
	}
	// The progress display (bars on a terminal, else a line per launch event) says what
	// the log's info lines say: unless asked otherwise (--log-level info), only warnings
	// and errors get through beside it, so that no event is printed twice.
	level, err := g.level(slog.LevelWarn)
	if err != nil {
		return err
	}
	progress := newProgress(g.stderr, g.json)
	// Logs go through the display's writer, which keeps its lines and theirs whole.
	logger := slog.New(slog.NewTextHandler(progress.Writer(), &slog.HandlerOptions{Level: level}))
	opts := orchestrator.Options{Spec: spec, DBPath: g.dbPath(), LogDir: o.logDir, Logger: logger, Resume: resume, Progress: progress}
	res, runErr := orchestrator.Run(ctx, opts)
	progress.Wait()
	if errors.Is(runErr, store.ErrNotArbiterDatabase) {
		return withCode(exitUsage, runErr)
	}
	// An experiment this arbiter never owned, or lost to another, is not its to judge.
	if res.ExperimentID == 0 || errors.Is(runErr, store.ErrLeaseLost) {
		return runErr
	}
	// The verdict is written even after an interrupt, where it would be without one: it
	// says what was recorded so far.
	path, err := verdictPath(context.WithoutCancel(ctx), g, o, res.Name, res.ExperimentID)
	if err != nil {
		return errors.Join(runErr, err)
	}
	v, verr := writeVerdict(context.WithoutCancel(ctx), g, res.ExperimentID, path, keep)
	if verr != nil {
		return errors.Join(runErr, verr)
	}
	if g.json {
		out := map[string]any{"experiment_id": res.ExperimentID, "name": res.Name, "status": res.Status,
			"verdict": path, "database": g.dbPath(), "elapsed_s": res.Elapsed.Seconds(), "summary": v.Summary()}
		if err := json.NewEncoder(g.stdout).Encode(out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(g.stdout, "experiment %d (%s): %s in %s\n", res.ExperimentID, res.Name, res.Status, res.Elapsed.Round(1e8))
		for _, line := range v.Headline() {
			fmt.Fprint(g.stdout, ui.Wrap(line, "  ", 100))
		}
		fmt.Fprintf(g.stdout, "verdict: %s\n", path)
	}
	if errors.Is(runErr, orchestrator.ErrNoData) && o.failOn != "" {
		// An arm whose engine died before any session finished is the verdict's to judge
		// (inconclusive, or no comparison): a failed gate says more than "error".
		if err := gateTo(v, o.failOn, o.allowInconclusive, g.stderr); err != nil {
			return errors.Join(err, runErr)
		}
	}
	if runErr != nil {
		return runErr
	}
	return gateTo(v, o.failOn, o.allowInconclusive, g.stderr)
}

// gateTo applies the comma-separated --fail-on gates: exit 3 when one fails, else 6 when
// one cannot decide. A regression or difference gate that passes a comparison its
// launches could not test says so on note (nil: nowhere), so that a pass is not read as
// "no regression".
func gateTo(v *verdict.Verdict, names string, allowInconclusive bool, note io.Writer) error {
	if names == "" {
		return nil
	}
	o := verdict.GateOptions{AllowInconclusive: allowInconclusive}
	var undecided error
	for _, name := range gateNames(names) {
		switch g, why := v.CheckGate(name, o); g {
		case verdict.GateFail:
			return withCode(exitGateFailed, fmt.Errorf("gate %s failed: %s", name, why))
		case verdict.GateUndecided:
			if undecided == nil {
				undecided = withCode(exitUndecided, fmt.Errorf("gate %s undecided: %s", name, why))
			}
		case verdict.GatePass:
			if name != "regression" && name != "difference" || note == nil {
				continue
			}
			if u, why := v.CheckGate("undecided", o); u == verdict.GateUndecided {
				fmt.Fprintf(note, "gate %s passed, but the launches could not decide: %s (--fail-on %s,undecided fails such a run)\n", name, why, name)
			}
		}
	}
	return undecided
}

// gateNames splits a --fail-on value into its gates.
func gateNames(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// checkGates refuses an unknown gate name as bad usage.
func checkGates(s string) error {
	for _, n := range gateNames(s) {
		if !verdict.IsGate(n) {
			return withCode(exitUsage, fmt.Errorf("--fail-on %q: want one or more (comma-separated) of %s", n, strings.Join(verdict.Gates(), ", ")))
		}
	}
	return nil
}

// verdictPath is where an experiment's verdict goes: -o, else verdicts/NAME-DB-ID.md
// beside the database, DB being the database's short id: experiment ids restart in every
// database, so two databases in one folder would otherwise write each other's verdicts.
func verdictPath(ctx context.Context, g *globals, o runOptions, name string, id int64) (string, error) {
	if o.verdictPath != "" {
		return o.verdictPath, nil
	}
	dbPath := g.dbPath()
	db, err := store.OpenReadOnly(dbPath)
	if err != nil {
		return "", err
	}
	defer db.Close()
	uuid, err := store.DatabaseID(ctx, db)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dbPath), "verdicts", fmt.Sprintf("%s-%s-%d.md", name, store.ShortID(uuid), id)), nil
}

// checkOutput refuses, as bad usage, output paths that keep would not write.
func checkOutput(keep outfile.Guard, paths ...string) error {
	for _, p := range paths {
		if err := keep.Check(p); err != nil {
			return withCode(exitUsage, err)
		}
	}
	return nil
}

// writeVerdict builds the verdict of experiment id from g's database and writes
// it (markdown and charts) to path through keep.
func writeVerdict(ctx context.Context, g *globals, id int64, path string, keep outfile.Guard) (*verdict.Verdict, error) {
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	v, err := verdict.Build(ctx, db, id)
	if err != nil {
		return nil, err
	}
	v.DB = g.namedDB()
	if err := v.WriteFiles(path, keep); err != nil {
		return nil, err
	}
	return v, nil
}
