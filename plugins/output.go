package plugins

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"
)

// A plugin inherits arbiter's environment, secrets included, and what it writes to its
// standard error reaches arbiter's: a plugin that prints its configuration would print
// them. Launch therefore writes a plugin's standard error, and go-plugin's own lines about
// it, through the redactor WithOutput gives, line by line.

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

// lineRedactor passes whole lines of what is written to it through redact to w; Flush
// passes the rest.
type lineRedactor struct {
	mu     sync.Mutex
	w      io.Writer
	redact func(string) string
	buf    []byte
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
		if _, err := io.WriteString(l.w, l.redact(line)+"\n"); err != nil {
			return len(p), err
		}
	}
}

// Flush writes what is left of an unfinished last line.
func (l *lineRedactor) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		io.WriteString(l.w, l.redact(string(l.buf))+"\n")
		l.buf = nil
	}
}
