// Command arbiter runs controlled A/B experiments on LLM serving engines and judges them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/internal/ui"
	"github.com/arbiterlab/arbiter/internal/version"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// Exit codes of the CLI contract, the same for every command (docs/commands.md lists them).
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2 // bad usage or an invalid spec
	exitGateFailed  = 3 // the verdict's --fail-on gate failed
	exitNotFound    = 4 // the experiment, bisection or database named does not exist
	exitPinRefused  = 5 // an engine reported a pin not in effect, or its report could not be read
	exitUndecided   = 6 // the verdict cannot decide a --fail-on gate's question
	exitInterrupted = 130
)

func main() {
	ctx, stop := signalContext(context.Background())
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext cancels its context on the first SIGINT or SIGTERM, so a running
// experiment stops scheduling, tears its arms down and keeps its data; a second signal
// exits at once with 130.
func signalContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			fmt.Fprintln(os.Stderr, "arbiter: interrupted; stopping arms and keeping data (again to exit now)")
			cancel()
		case <-done:
			return
		}
		// A signal sent to the whole process group (GNU timeout, a shell's Ctrl-C seen
		// twice) arrives at once; only a later one means "exit now".
		first := time.Now()
		for {
			select {
			case <-sigs:
				if time.Since(first) < time.Second {
					continue
				}
				os.Exit(exitInterrupted)
			case <-done:
				return
			}
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(done); cancel() }
}

// globals are the settings every subcommand shares.
type globals struct {
	stdout, stderr io.Writer
	db             string // --db flag; see dbPath
	json           bool   // --json
	logLevel       string // --log-level; see level
}

// level is the level of the log lines a command writes: --log-level where given, else
// the command's own default (warn for run, resume and bisect, whose progress display says
// what the info lines would).
func (g *globals) level(def slog.Level) (slog.Level, error) {
	if g.logLevel == "" {
		return def, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(g.logLevel)); err != nil {
		return 0, withCode(exitUsage, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel))
	}
	return l, nil
}

// dbPath resolves the database: --db, else $ARBITER_DB, else ./arbiter.db.
func (g *globals) dbPath() string {
	if g.db != "" {
		return g.db
	}
	if p := os.Getenv("ARBITER_DB"); p != "" {
		return p
	}
	return "arbiter.db"
}

// namedDB is the results database as the user named it, for the commands arbiter
// suggests: empty for the default ./arbiter.db, which they need not name.
func (g *globals) namedDB() string {
	if g.db == "" && os.Getenv("ARBITER_DB") == "" {
		return ""
	}
	return g.dbPath()
}

// addDBFlag gives a command that reads or writes the results database its --db flag;
// commands that use no database (validate, stats, classify, version) have none.
func addDBFlag(cmd *cobra.Command, g *globals) *cobra.Command {
	cmd.Flags().StringVar(&g.db, "db", "", "results database (default $ARBITER_DB, else ./arbiter.db)")
	return cmd
}

// subcommands is filled by the init functions of the cmd_*.go files, one per subcommand.
var subcommands []func(*globals) *cobra.Command

// exitCodeError carries a specific exit code up to run.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

// withCode marks err so that arbiter exits with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitCodeError{code: code, err: err}
}

// run is the whole CLI; main only adds the process around it, so tests call run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &countingWriter{w: stdout}
	g := &globals{stdout: out, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "arbiter: interrupted; what was recorded is kept")
		return exitInterrupted
	}
	// An error can quote an engine (its answer, its log): nothing in it may drive the terminal.
	fmt.Fprintln(stderr, "arbiter:", ui.Safe(err.Error()))
	code := exitCodeFor(ctx, err)
	if g.json && out.n == 0 {
		// A script that asked for JSON reads JSON on stdout, failures included; a
		// command that answered with a document of its own (validate's problems,
		// classify's lines before a bad one) has said it there already.
		json.NewEncoder(stdout).Encode(map[string]any{"error": err.Error(), "exit_code": code})
	}
	return code
}

// countingWriter counts what a command wrote to stdout.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// exitCodeFor maps a command's error to the CLI contract's exit code.
func exitCodeFor(ctx context.Context, err error) int {
	var ce *exitCodeError
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Whatever the command: "not found" is one exit code everywhere.
		return exitNotFound
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, orchestrator.ErrPinsNotHeld), errors.Is(err, orchestrator.ErrPinsUncheckable):
		// The engine is not what the arm says it is: nothing was judged.
		return exitPinRefused
	case errors.Is(err, verdict.ErrFloorRefused):
		// The noise floor named is not one for this experiment: the user's choice.
		return exitUsage
	case errors.Is(err, store.ErrNotArbiterDatabase):
		// --db named a file that is not a results database: the user's mistake.
		return exitUsage
	case errors.As(err, new(*outfile.RefusedError)):
		// -o named a file that must survive, or something that is not a file.
		return exitUsage
	case ctx.Err() != nil:
		return exitInterrupted
	case isUsageError(err):
		return exitUsage
	case errors.Is(err, fs.ErrNotExist):
		return exitNotFound
	}
	return exitError
}

// newRoot builds the command tree around g.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "arbiter",
		Short:         "Controlled A/B experiments on LLM serving engines",
		Long:          "arbiter launches the same engine with different pinned flags (the arms), drives an identical seeded workload against every arm, labels every response, stores everything in SQLite and writes a statistically honest verdict.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate("arbiter {{.Version}}\n")
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print results as JSON")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "", "log lines on stderr from this level up: debug, info, warn or error (default: warn: run, resume and bisect show their progress instead of the info lines)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return &flagError{withFlagSuggestion(cmd, err)} })
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd(g))
	}
	markArgErrors(root)
	return root
}

// commandGroup is a command that only holds subcommands: without one it prints its
// help; with a word it does not know it is bad usage, not help with exit 0.
func commandGroup(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return withCode(exitUsage, errors.New(msg))
		},
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		SuggestionsMinimumDistance: 2,
	}
}

// markArgErrors makes every command's argument-count errors usage errors (exit 2).
func markArgErrors(c *cobra.Command) {
	if orig := c.Args; orig != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return &flagError{fmt.Errorf("%w; usage: %s (%s --help says more)", err, cmd.UseLine(), cmd.CommandPath())}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markArgErrors(sub)
	}
}

// withFlagSuggestion adds the nearest flag the command knows to an unknown flag's error:
// "unknown flag: --dbb; did you mean --db?".
func withFlagSuggestion(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	name, _, _ = strings.Cut(name, "=")
	best, bestDist := "", 3 // farther than two edits is no suggestion
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if d := arms.EditDistance(name, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if d := arms.EditDistance(name, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return fmt.Errorf("%w (%s --help lists the flags)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w; did you mean --%s?", err, best)
}

// isUsageError reports whether cobra rejected the command line itself.
func isUsageError(err error) bool {
	var fe *flagError
	return errors.As(err, &fe) || strings.HasPrefix(err.Error(), "unknown command")
}

// flagError wraps cobra's flag parsing errors so they map to exit code 2.
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }
