package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// Attestation: once an arm's engine is ready, and before any traffic, arbiter reads back
// what the engine says it runs with and compares it with the arm's pins. Where a pin is
// read is its rule (arms.AttestRule): a key of the server info, a line of the engine's
// log, or a metric; the preset's rules, the spec's engine.attest, and for engines whose
// server info holds every flag (SGLang, refserve) the flag's own key. A pin the engine
// reports otherwise stops the experiment (ErrPinsNotHeld, exit code 5): an A/B of a
// setting that never took effect would report "no difference" about nothing. A pin
// nothing reports is recorded unverified, and the verdict names it.

// PinResult is what an engine reported about one pin.
type PinResult struct {
	// Pin is the variable or flag; Want its pinned value ("on" for a bare flag).
	Pin, Want string
	// Got is the reported value, as the engine wrote it; empty when nothing was read.
	Got string
	// Source says where it was read (arms.AttestRule.Source), Evidence what the engine
	// wrote there: the log line, or the reported JSON value.
	Source, Evidence string
	Status           store.PinStatus
	// Why says why the pin is unverified, or quotes the rule's note when it is not in effect.
	Why string
	// Common marks a setting of engine.env or engine.args, attested because a rule names it.
	Common bool
	// flag says that Pin is a flag (a bare one when Want is "on" and bare is set).
	flag, bare bool
	// stringEnv says that the report was an env object's member, which must be a string.
	stringEnv bool
}

// Text says the outcome in one phrase, as the verdict and the logs write it:
// "BF16_INDEX_K=1", `BF16_INDEX_K is "0", pinned "1"`, "--page-size is 32, pinned 64",
// "OTHER (the engine does not report it)".
func (r PinResult) Text() string {
	switch r.Status {
	case store.PinVerified:
		if r.flag {
			if r.bare {
				return r.Pin
			}
			return r.Pin + " " + r.Want
		}
		return r.Pin + "=" + r.Want
	case store.PinNotInEffect:
		switch {
		case r.stringEnv && !strings.HasPrefix(r.Evidence, `"`):
			return fmt.Sprintf("%s is %s, not a string, pinned %q", r.Pin, r.Got, r.Want)
		case r.stringEnv:
			return fmt.Sprintf("%s is %q, pinned %q", r.Pin, r.Got, r.Want)
		}
		return fmt.Sprintf("%s is %s, pinned %s", r.Pin, r.Got, r.Want)
	}
	return r.Pin + " (" + r.Why + ")"
}

// PinCheck sorts an engine's report on an arm's pins by outcome, each as PinResult.Text.
type PinCheck struct {
	Verified, Mismatched, Unverified []string
	// Results are the outcomes in full, in the order of the three lists' pins.
	Results []PinResult
}

func newPinCheck(results []PinResult) PinCheck {
	c := PinCheck{Results: results}
	for _, r := range results {
		switch r.Status {
		case store.PinVerified:
			c.Verified = append(c.Verified, r.Text())
		case store.PinNotInEffect:
			c.Mismatched = append(c.Mismatched, r.Text())
		default:
			c.Unverified = append(c.Unverified, r.Text())
		}
	}
	return c
}

func (c PinCheck) summary() string {
	s := fmt.Sprintf("%d pins confirmed by the engine", len(c.Verified))
	if len(c.Unverified) > 0 {
		s += fmt.Sprintf(", %d not reported (%s)", len(c.Unverified), strings.Join(c.Unverified, "; "))
	}
	return s
}

// observation is what an engine said about itself once it was ready: its server info,
// its metrics and its log, each with the reason it is missing when it is.
type observation struct {
	info       map[string]any
	infoWhy    string
	metrics    map[string]*dto.MetricFamily
	metricsWhy string
	log        []byte
	logWhy     string
}

// maxAttestLog is how much of the end of an engine's log attestation reads: the lines a
// model load writes come early, but an engine that logs every request must not make
// arbiter read gigabytes.
const maxAttestLog = 16 << 20

// observe reads what the preset's rules and the arm's pins need from a ready engine at
// base: the server info (ErrPinsUncheckable when it answers but cannot be read), the
// metrics when a rule reads one, and the log at logPath ("" when the runtime keeps
// none arbiter can read).
func observe(ctx context.Context, base string, preset arms.Preset, logPath string) (observation, error) {
	var o observation
	if preset.ServerInfoPath == "" {
		o.infoWhy = "the " + preset.Name + " preset serves no server info"
	} else {
		u, raw, err := fetchServerInfo(ctx, base, preset)
		if err == nil {
			o.info, err = readServerInfo(raw, preset.EnvInServerInfo)
		}
		if err != nil {
			return o, fmt.Errorf("%w: GET %s: %v; arbiter does not judge an arm whose pins it cannot check", ErrPinsUncheckable, arms.RedactURL(u), err)
		}
	}
	needs := func(metric bool) bool {
		return slices.ContainsFunc(preset.Attest, func(r arms.AttestRule) bool { return (r.Metric != "") == metric && (metric || r.Log != nil) })
	}
	if needs(true) {
		if preset.MetricsPath == "" {
			o.metricsWhy = "the engine serves no metrics"
		} else {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			fams, err := fetchMetrics(cctx, enginehttp.Client(0), strings.TrimRight(base, "/")+preset.MetricsPath)
			cancel()
			if err != nil {
				o.metricsWhy = "its metrics could not be read: " + err.Error()
			}
			o.metrics = fams
		}
	}
	if needs(false) {
		o.log, o.logWhy = readLogEnd(logPath)
	}
	return o, nil
}

// readLogEnd reads the last maxAttestLog bytes of the log at path.
func readLogEnd(path string) ([]byte, string) {
	if path == "" {
		return nil, "arbiter keeps no log of an engine it did not start"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "its log could not be read: " + err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxAttestLog {
		if _, err := f.Seek(fi.Size()-maxAttestLog, io.SeekStart); err != nil {
			return nil, "its log could not be read: " + err.Error()
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxAttestLog))
	if err != nil {
		return nil, "its log could not be read: " + err.Error()
	}
	return b, ""
}

// attest compares what an engine reported (o) with an arm's pins, read by the engine's
// grammar, and with the settings of the engine's configuration (common) that a rule
// names. Every pin of the arm gets one result; a common setting one only when a rule
// names it.
func attest(preset arms.Preset, g arms.Grammar, pins, common arms.Pins, o observation) []PinResult {
	var out []PinResult
	add := func(name, want string, flag, bare, isCommon bool) {
		r := PinResult{Pin: name, Want: want, flag: flag, bare: bare, Common: isCommon}
		rule, ok := preset.Rule(name)
		switch {
		case ok:
		case isCommon:
			return
		case flag && preset.FlagsInServerInfo:
			rule = arms.AttestRule{Pin: name, ServerInfo: strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_")}
		case !flag && preset.EnvInServerInfo != "":
			rule = arms.AttestRule{Pin: name, ServerInfo: preset.EnvInServerInfo + "." + name}
			r.stringEnv = true
		default:
			r.Status, r.Source = store.PinUnverified, "nowhere"
			r.Why = "nothing the " + preset.Name + " preset reads reports it; engine.attest can say where the engine does"
			out = append(out, r)
			return
		}
		r.Source = rule.Source()
		r = r.judge(rule, o)
		// What the engine reported is the engine's text: judged whole, then kept and
		// shown inert and bounded (a 2.7 MB value is not printed whole).
		r.Got = inert.Text(r.Got, maxReportedBytes)
		r.Evidence = inert.Text(r.Evidence, 2*maxReportedBytes)
		out = append(out, r)
	}
	for _, k := range slices.Sorted(maps.Keys(pins.Env)) {
		add(k, pins.Env[k], false, false, false)
	}
	flags, _ := g.Parse(pins.Args) // pins Expand accepted
	for _, f := range flags {
		if f.Name == "" {
			out = append(out, PinResult{Pin: f.Tokens[0], Want: f.Tokens[0], Status: store.PinUnverified, Source: "nowhere", Why: "not a flag"})
			continue
		}
		add(f.Name, pinnedValue(f), true, f.Bare(), false)
	}
	for _, k := range slices.Sorted(maps.Keys(common.Env)) {
		if _, pinned := pins.Env[k]; !pinned {
			add(k, common.Env[k], false, false, true)
		}
	}
	commonFlags, _ := g.Parse(common.Args)
	for _, f := range commonFlags {
		if f.Name != "" && !slices.ContainsFunc(flags, func(p arms.Flag) bool { return p.Name == f.Name }) {
			add(f.Name, pinnedValue(f), true, f.Bare(), true)
		}
	}
	return out
}

// pinnedValue is a flag's value as pinned: "on" for a bare flag, its words otherwise.
func pinnedValue(f arms.Flag) string {
	if f.Bare() {
		return "on"
	}
	return f.Value
}

// judge reads the pin's value where rule says and compares it with the pin.
func (r PinResult) judge(rule arms.AttestRule, o observation) PinResult {
	var got any
	switch {
	case rule.ServerInfo != "":
		if o.info == nil {
			r.Status, r.Why = store.PinUnverified, o.infoWhy
			return r
		}
		v, ok, why := lookupKey(o.info, rule.ServerInfo)
		if !ok {
			r.Status, r.Why = store.PinUnverified, why
			return r
		}
		got = v
		r.Evidence = reportedJSON(v)
	case rule.Log != nil:
		if o.logWhy != "" {
			r.Status, r.Why = store.PinUnverified, o.logWhy
			return r
		}
		line, value, ok := lastMatch(o.log, rule)
		if !ok {
			r.Status, r.Why = store.PinUnverified, noLogLine
			return r
		}
		got, r.Evidence = value, line
	default:
		if o.metricsWhy != "" {
			r.Status, r.Why = store.PinUnverified, o.metricsWhy
			return r
		}
		value, evidence, ok := metricValue(o.metrics, rule)
		if !ok {
			r.Status, r.Why = store.PinUnverified, "the engine's metrics do not report it"
			return r
		}
		got, r.Evidence = value, evidence
	}
	r.Got = reportedText(got)
	_, isString := got.(string)
	held := false
	switch {
	case r.stringEnv:
		held = isString && r.Got == r.Want
	case rule.Bool:
		want, wok := onOff(r.Want)
		have, hok := onOff(r.Got)
		held = wok && hok && want == have
	case r.bare:
		held = reportedOn(got)
	default:
		held = sameValue(got, r.Want)
	}
	if held {
		r.Status = store.PinVerified
	} else {
		r.Status, r.Why = store.PinNotInEffect, rule.Note
	}
	return r
}

// lookupKey finds a dotted key in server info ("page_size", "env.BF16_INDEX_K"), or
// says why it is not there.
func lookupKey(info map[string]any, key string) (any, bool, string) {
	const absent = "the engine does not report it"
	var cur any = info
	parts := strings.Split(key, ".")
	for i, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			if cur == nil {
				return nil, false, absent
			}
			return nil, false, fmt.Sprintf("server info's %s is %s, not an object", strings.Join(parts[:i], "."), arms.JSONKind(cur))
		}
		if cur, ok = m[p]; !ok {
			return nil, false, absent
		}
	}
	return cur, true, ""
}

// lastMatch finds the last line of log that rule's expression matches, and the value it
// captures (the group named value, else the first).
func lastMatch(log []byte, rule arms.AttestRule) (line, value string, ok bool) {
	group := rule.Log.SubexpIndex("value")
	if group < 0 {
		group = 1
	}
	rest := log
	for len(rest) > 0 {
		end := bytes.LastIndexByte(rest, '\n')
		l := rest[end+1:]
		rest = rest[:max(end, 0)]
		if m := rule.Log.FindSubmatchIndex(l); m != nil && m[2*group] >= 0 {
			return trimEvidence(string(l)), string(l[m[2*group]:m[2*group+1]]), true
		}
		if end < 0 {
			break
		}
	}
	return "", "", false
}

// trimEvidence keeps a log line short enough to quote.
func trimEvidence(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// metricValue reads a metric's label (or sample value) on its first series.
func metricValue(fams map[string]*dto.MetricFamily, rule arms.AttestRule) (string, string, bool) {
	fam, ok := fams[rule.Metric]
	if !ok || len(fam.GetMetric()) == 0 {
		return "", "", false
	}
	m := fam.GetMetric()[0]
	evidence := rule.Metric + labelString(m.GetLabel())
	if rule.Label != "" {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == rule.Label {
				return lp.GetValue(), evidence, true
			}
		}
		return "", "", false
	}
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return "", "", false
	}
	s := fmt.Sprint(v)
	return s, evidence + " " + s, true
}

// noLogLine is why a pin read from the log is unverified when no line reports it.
const noLogLine = "the engine's log has no line that reports it"

// onOff reads a boolean setting: 1, true, yes, on against 0, false, no, off.
func onOff(s string) (on, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off", "":
		return false, true
	}
	return false, false
}

// reportedJSON is a reported value as JSON, for the evidence.
func reportedJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return reportedText(v)
	}
	return trimEvidence(string(b))
}

// attestLogWait is how long attestation waits for an engine's log to show a line its
// rules look for: the engine wrote it before it answered the readiness generation, but
// the runtime copies the log to its file a moment later.
const attestLogWait = 5 * time.Second

// maxReportedBytes bounds a value an engine reports for a pin, as stored and shown.
const maxReportedBytes = 256

// errEndedUnderCheck: the engine ended by itself while its pins were being checked.
var errEndedUnderCheck = errors.New("the engine ended while its pins were checked")

// attestRun attests a ready launch's pins (attest) and records what its engine
// reported. A pin not in effect is an error wrapping ErrPinsNotHeld, server info that
// cannot be read one wrapping ErrPinsUncheckable; either way the wave's other arms are
// told to send no traffic. An engine that ended by itself under the check is
// errEndedUnderCheck, which tells the wave nothing.
func (e *experiment) attestRun(ctx context.Context, inst runtime.Instance, preset arms.Preset, ai int, run store.Run, log *slog.Logger) error {
	arm := e.arms[ai]
	logPath, common := run.LogPath, arms.Pins{Env: e.spec.Engine.Env, Args: e.spec.Engine.Args}
	if e.spec.Runtime.Kind == arms.RuntimeExternal {
		// arbiter neither started the engine nor reads its log.
		logPath, common = "", arms.Pins{}
	}
	var results []PinResult
	wait := 20 * time.Millisecond
	for deadline := time.Now().Add(attestLogWait); ; {
		o, err := observe(ctx, inst.Endpoint(), preset, logPath)
		if err != nil && ctx.Err() == nil && endedByItself(ctx, inst) {
			// What could not be read says nothing about the pins of an engine that
			// went away under the check (its node failed, it crashed).
			return fmt.Errorf("%w: %v", errEndedUnderCheck, err)
		}
		if err != nil {
			why := fmt.Sprintf("arm %s's engine could not be checked", arm.Name)
			e.refused.Store(&why)
			return err
		}
		results = attest(preset, e.spec.Grammar(), arm.Pins, common, o)
		if !slices.ContainsFunc(results, func(r PinResult) bool { return r.Why == noLogLine }) || time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
	checks := make([]store.PinCheck, len(results))
	for i, r := range results {
		checks[i] = store.PinCheck{RunID: run.ID, Pin: r.Pin, Want: r.Want, Got: r.Got, Source: r.Source,
			Evidence: r.Evidence, Status: r.Status, Why: r.Why, Common: r.Common}
	}
	if err := e.store.RecordPinChecks(context.WithoutCancel(ctx), checks); err != nil {
		return err
	}
	pc := newPinCheck(results)
	for _, u := range pc.Unverified {
		log.Warn("pin not verified", "pin", u)
	}
	if len(pc.Verified) > 0 {
		log.Info("pins confirmed by the engine", "pins", strings.Join(pc.Verified, "; "))
	}
	if len(pc.Mismatched) > 0 {
		why := fmt.Sprintf("arm %s's engine does not run as pinned (%s)", arm.Name, strings.Join(pc.Mismatched, "; "))
		e.refused.Store(&why)
		return fmt.Errorf("%w: %s", ErrPinsNotHeld, strings.Join(pc.Mismatched, "; "))
	}
	return nil
}
