package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
)

// redactingHandler passes every log record through the spec's redactor before it
// reaches the real handler: an engine's error text can quote a secret, and the rule is
// that no secret reaches a log.
type redactingHandler struct {
	next   slog.Handler
	redact func(string) string
}

func (h redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.redact(v.String()))
	case slog.KindGroup:
		var attrs []any
		for _, g := range v.Group() {
			attrs = append(attrs, h.attr(g))
		}
		return slog.Group(a.Key, attrs...)
	case slog.KindAny:
		// Errors and other values print through fmt; redact what they print.
		return slog.String(a.Key, h.redact(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return redactingHandler{next: h.next.WithAttrs(red), redact: h.redact}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{next: h.next.WithGroup(name), redact: h.redact}
}
