package plugins

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/arbiterlab/arbiter/internal/inert"
)

// A plugin may hold secrets (those its caller's WithEnv grants it; without WithEnv, all of
// arbiter's environment), and what it writes to its standard error reaches arbiter's: a
// plugin that prints its configuration would print them. Launch therefore writes a
// plugin's standard error, and go-plugin's own lines about it, through the redactor
// WithOutput gives, line by line.

// Output is where a launched plugin's standard error goes, and the redactor every line of
// it passes through first.
type Output struct {
	W      io.Writer
	Redact func(string) string
}

type outputKey struct{}

// WithOutput makes the plugins launched under ctx write their standard error to o.W,
// each line through o.Redact. Without it they write to arbiter's standard error as they
// are: a caller that holds secrets gives its redactor.
func WithOutput(ctx context.Context, o Output) context.Context {
	return context.WithValue(ctx, outputKey{}, o)
}

type envKey struct{}

// WithEnv makes the plugins launched under ctx start with env (KEY=VALUE pairs, as
// os.Environ gives them) instead of arbiter's whole environment: a caller that holds
// secrets gives the environment without them (arms.Spec.PluginEnv).
func WithEnv(ctx context.Context, env []string) context.Context {
	return context.WithValue(ctx, envKey{}, slices.Clip(env))
}

// envOf is the environment ctx gives plugins, and whether it gives one.
func envOf(ctx context.Context) ([]string, bool) {
	env, ok := ctx.Value(envKey{}).([]string)
	return env, ok
}

// outputOf is the Output ctx carries, or arbiter's standard error unredacted.
func outputOf(ctx context.Context) Output {
	o, _ := ctx.Value(outputKey{}).(Output)
	if o.W == nil {
		o.W = os.Stderr
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	return o
}

// maxPluginLine is the longest line a plugin may write before it is passed on cut: a
// secret split across the cut is the redactor's to find in each part.
const maxPluginLine = 64 << 10

// maxShownLine is the most of one line of a plugin's that reaches arbiter's standard error.
const maxShownLine = 4 << 10

// MaxPluginOutput is the most a plugin may write to arbiter's standard error over its life;
// one line says when the rest was dropped.
const MaxPluginOutput = 1 << 20

// lineRedactor passes whole lines of what is written to it through redact to w; Flush
// passes the rest.
type lineRedactor struct {
	mu     sync.Mutex
	w      io.Writer
	redact func(string) string
	buf    []byte
	// name, when set, starts every line passed on, so that a reader knows whose it is.
	name string
	// dropLogs drops the structured (JSON) lines go-plugin's library writes on the plugin's
	// side: go-plugin logs them again, at their level, through arbiter's logger.
	dropLogs bool
	// budget is what may still be written; at most MaxPluginOutput in all (shared by the
	// writers of one plugin).
	budget *atomic.Int64
}

// newLineRedactors returns the writers of one plugin's standard error: its process's own,
// and what go-plugin's server forwards over gRPC, sharing one budget.
func newLineRedactors(o Output, name string) (raw, synced *lineRedactor) {
	budget := &atomic.Int64{}
	budget.Store(MaxPluginOutput)
	raw = &lineRedactor{w: o.W, redact: o.Redact, name: name, dropLogs: true, budget: budget}
	synced = &lineRedactor{w: o.W, redact: o.Redact, name: name, budget: budget}
	return raw, synced
}

func (l *lineRedactor) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 && len(l.buf) < maxPluginLine {
			return len(p), nil
		}
		if i < 0 {
			i = maxPluginLine - 1
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		if err := l.pass(line); err != nil {
			return len(p), err
		}
	}
}

// pass writes one line: made inert (escape sequences and control characters out), then
// redacted, then cut, within the budget.
func (l *lineRedactor) pass(line string) error {
	if l.dropLogs && strings.HasPrefix(line, `{"@level":`) {
		return nil
	}
	if l.budget != nil && l.budget.Load() <= 0 {
		return nil
	}
	if l.name != "" {
		line = l.name + ": " + line
	}
	line = inert.Text(l.redact(inert.Text(line, 0)), maxShownLine)
	if l.budget != nil {
		if l.budget.Add(-int64(len(line)+1)) <= 0 {
			line += "\n" + l.redact(inert.Text(l.name, 0)) + ": (more of its standard error dropped: over the limit of 1 MiB)"
		}
	}
	_, err := io.WriteString(l.w, line+"\n")
	return err
}

// Flush writes what is left of an unfinished last line.
func (l *lineRedactor) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.pass(string(l.buf))
		l.buf = nil
	}
}
