package orchestrator

import (
	"strconv"

	"context"
	"fmt"
	"log/slog"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// workloadConfig is the workload one launch of block b drives, with the spec's kind and
// its own fields.
func (e *experiment) workloadConfig(model string, arm string, b int) workload.Config {
	cfg := kindConfig(e.spec, e.trace)
	cfg.Model = model
	cfg.SessionOffset = b * e.spec.Workload.Sessions
	// Every request tells the engine what it belongs to, for its metrics and logs.
	cfg.Labels = map[string]string{"experiment": strconv.FormatInt(e.id, 10), "arm": arm, "block": strconv.Itoa(b)}
	cfg.LabelsHeader = e.spec.Preset().LabelsHeader
	return cfg
}

// kindConfig translates the spec's workload into the workload package's terms; trace
// is the index of a trace workload, checked before any engine started.
func kindConfig(spec *arms.Spec, trace *workload.TraceIndex) workload.Config {
	ws := spec.Workload
	cfg := workload.Config{Kind: ws.Kind, Sessions: ws.Sessions, Rounds: ws.Rounds, Concurrency: ws.Concurrency,
		Seed: ws.Seed, Temperature: ws.Temperature, MaxTokens: ws.MaxTokens, Model: ws.Model,
		RequestTimeout: spec.Timeouts.Request, StallTimeout: spec.Timeouts.Stall,
		MaxResponseBytes: ws.MaxResponseBytes, NoStream: ws.NoStream}
	// The kinds' own settings are the spec's types: copied, so that nothing the
	// workload does reaches the spec.
	switch {
	case ws.Throughput != nil:
		t := *ws.Throughput
		cfg.Throughput = &t
	case ws.AbortCascade != nil:
		a := *ws.AbortCascade
		cfg.AbortCascade = &a
	case ws.LongContext != nil:
		l := *ws.LongContext
		cfg.LongContext = &l
	case ws.Trace != nil:
		cfg.Trace = &workload.TraceConfig{Path: ws.Trace.Resolved, Index: trace, Format: ws.Trace.Format,
			Arrivals: ws.Trace.Arrivals, Speed: ws.Trace.Speed}
	}
	return cfg
}

// LoadTrace reads and checks the trace of a trace workload (nil for other kinds), so
// that a bad line fails the experiment, naming file and line, before any engine starts.
// It keeps where each conversation is, not the conversations: each session reads its
// own when it starts.
func LoadTrace(spec *arms.Spec) (*workload.TraceIndex, error) {
	if spec.Workload.Trace == nil {
		return nil, nil
	}
	index, err := workload.ReadTraceFormat(spec.Workload.Trace.Resolved, spec.Workload.Trace.Format)
	if err != nil {
		return nil, err
	}
	if n := spec.Workload.Sessions; n > index.Len() {
		return nil, fmt.Errorf("trace %s: %d conversations, fewer than the %d sessions the spec asks for", spec.Workload.Trace.Resolved, index.Len(), n)
	}
	if planned := workload.Planned(kindConfig(spec, index)); planned != spec.Workload.Sessions {
		return nil, fmt.Errorf("trace %s: %d conversations to replay, but the spec counted %d (did the file change?)", spec.Workload.Trace.Resolved, planned, spec.Workload.Sessions)
	}
	return index, nil
}

// Calibration records what a length trace's probes measured of the engine.
func (t *sessionTracker) Calibration(c workload.TraceCalibration) {
	row := store.TraceCalibration{ExperimentID: t.e.id, RunID: t.runID, ArmID: t.armID, ShortBytes: c.ShortBytes,
		ShortTokens: c.ShortTokens, LongBytes: c.LongBytes, LongTokens: c.LongTokens, BytesPerToken: c.BytesPerToken,
		TemplateTokens: c.TemplateTokens, Note: c.Note}
	if err := t.e.store.AddTraceCalibration(context.Background(), row); err != nil {
		t.e.log.Error("trace calibration not recorded", "arm", t.arm, "err", err)
	}
	attrs := []any{"arm", t.arm, "block", t.block, "bytes_per_token", c.BytesPerToken, "template_tokens", c.TemplateTokens}
	if c.Note != "" {
		t.e.log.Warn("trace calibration", append(attrs, "note", c.Note)...)
		return
	}
	t.e.log.Info("trace calibration", attrs...)
}

// Phase records what the workload measured over one of its phases.
func (t *sessionTracker) Phase(p workload.Phase) {
	if t.phaseEnded != nil {
		t.phaseEnded()
	}
	row := store.Phase{ExperimentID: t.e.id, RunID: t.runID, ArmID: t.armID, Name: p.Name, Kind: p.Kind,
		Position: p.Position, Concurrency: p.Concurrency, Rate: p.Rate, FirstSession: p.FirstSession,
		Sessions: p.Sessions, Started: p.Started, Ended: p.Ended, Requests: p.Requests, Completed: p.Completed,
		Tokens: p.Tokens, TokensPerSecond: p.TokensPerSecond(), Abort: p.Abort, Aborted: p.Aborted,
		Finished: p.Finished, AbortedAt: p.AbortedAt, Canaries: p.Canaries, Note: p.Note}
	if p.Kind == workload.PhaseCascade {
		recovered := p.Recovered
		row.Recovered, row.Recovery = &recovered, p.Recovery
	}
	// The phase is written beside the batched turns: it is small, and the verdict reads
	// it only after the run.
	if err := t.e.store.AddPhase(context.Background(), row); err != nil {
		t.e.log.Error("phase not recorded", "arm", t.arm, "phase", p.Name, "err", err)
	}
	if p.Kind == workload.PhaseCascade {
		attrs := []any{"arm", t.arm, "block", t.block, "phase", p.Name, "abort", p.Abort, "aborted", p.Aborted}
		if p.Recovered {
			attrs = append(attrs, "recovered_in", p.Recovery)
		} else {
			attrs = append(attrs, "recovered", false)
		}
		t.e.log.Log(context.Background(), slog.LevelInfo, "abort cascade", attrs...)
	}
}
