// Package repro turns a finding into what an engine's maintainers ask for: a bundle that
// holds each arm's exact launch (command, image, environment with secrets redacted, the
// engine's reported version and settings), the seeds and the load, the shortest failing
// requests with their raw responses and where they departed from the baseline, and a
// markdown summary fit to paste into an issue; and a replay that sends those requests to
// a running engine, at the experiment's load, and says whether the failure reproduces.
package repro

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// BundleFile is the bundle's machine-readable part, which the replay reads.
const BundleFile = "bundle.json"

// DefaultCases is how many failing requests a bundle keeps when not told.
const DefaultCases = 5

// Bundle is what a reproducer needs, as bundle.json holds it.
type Bundle struct {
	Experiment     int64     `json:"experiment"`
	Name           string    `json:"name"`
	Created        time.Time `json:"created"`
	ArbiterVersion string    `json:"arbiter_version"`
	Spec           string    `json:"spec"`
	Seed           int64     `json:"seed"`
	Concurrency    int       `json:"concurrency"`
	Detectors      []string  `json:"detectors"`
	Baseline       string    `json:"baseline"`
	Headline       string    `json:"headline"`
	Arms           []Arm     `json:"arms"`
	Cases          []Case    `json:"cases"`
	// Load are the requests the first case's launch sent to open the same round in its
	// other sessions: the load it met, which a replay sends beside the cases (a
	// load-dependent failure needs it).
	Load []json.RawMessage `json:"load"`
}

// Arm is one arm's launch as recorded.
type Arm struct {
	Name    string            `json:"name"`
	Pins    string            `json:"pins"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env"`
	// ServerInfo is what the engine of its first launch reported about itself; Version
	// the version in it, when it names one.
	ServerInfo json.RawMessage `json:"server_info,omitempty"`
	Version    string          `json:"version,omitempty"`
	// Sessions and Corrupted are its analysed and corrupted sessions; Rate its share
	// with its 95% Wilson interval.
	Sessions, Corrupted int
	Rate                float64    `json:"rate"`
	Interval            [2]float64 `json:"wilson95"`
}

// Case is one failing request: the first corrupted turn of a corrupted session.
type Case struct {
	ID       string          `json:"id"`
	Arm      string          `json:"arm"`
	Block    int             `json:"block"`
	Session  int             `json:"session"`
	Turn     int             `json:"turn"`
	Round    int             `json:"round"`
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response"`
	// RawFile is the file beside bundle.json that holds the body as received.
	RawFile string `json:"raw_file"`
	Reasons string `json:"reasons"`
	// Baseline and BaselineCalls are the baseline arm's content and structured tool
	// calls at the same session and turn.
	Baseline      string          `json:"baseline_content"`
	BaselineCalls json.RawMessage `json:"baseline_tool_calls,omitempty"`
	// Departs is the first character at which the case's content departs from the
	// baseline's; -1 when they agree or the baseline has none.
	Departs int `json:"departs_at"`
}

// Write builds the bundle of experiment id of db into dir (created; it must not hold
// a bundle already) with at most cases failing requests, and returns it. Its files are
// written atomically, never over what keep protects.
func Write(ctx context.Context, db *sqlx.DB, id int64, dir string, cases int, keep outfile.Guard) (*Bundle, error) {
	v, err := verdict.Build(ctx, db, id)
	if err != nil {
		return nil, err
	}
	exp := v.Experiment
	if cases <= 0 {
		cases = DefaultCases
	}
	b := &Bundle{Experiment: exp.ID, Name: exp.Name, Created: time.Now().UTC(), ArbiterVersion: exp.Version, Spec: exp.Spec,
		Seed: exp.Seed, Concurrency: v.Design.Concurrency, Baseline: v.Arms[v.Baseline].Name, Headline: v.Headline()[0]}
	pins := map[string]string{}
	for _, a := range v.Arms {
		pins[a.Name] = a.Pins
	}
	for _, d := range v.Detectors {
		b.Detectors = append(b.Detectors, d.Detector)
	}
	armRows, err := store.Arms(ctx, db, exp.ID)
	if err != nil {
		return nil, err
	}
	for i, a := range armRows {
		arm := Arm{Name: a.Name, Pins: pins[a.Name]}
		json.Unmarshal([]byte(a.Command), &arm.Command)
		json.Unmarshal([]byte(a.Env), &arm.Env)
		for _, r := range v.Runs {
			if r.Arm == a.Name && r.ServerInfo != nil {
				arm.ServerInfo, _ = json.Marshal(r.ServerInfo)
				if ver, ok := r.ServerInfo["version"].(string); ok {
					arm.Version = ver
				}
				break
			}
		}
		if i < len(v.Arms) {
			ar := v.Arms[i]
			arm.Sessions, arm.Corrupted, arm.Rate, arm.Interval = ar.Sessions, ar.Corrupted, ar.Rate, [2]float64{ar.Wilson.Lo, ar.Wilson.Hi}
		}
		b.Arms = append(b.Arms, arm)
	}
	failing, err := store.FailingTurns(ctx, db, exp.ID, b.Baseline)
	if err != nil {
		return nil, err
	}
	if len(failing) == 0 {
		return nil, fmt.Errorf("experiment %d has no corrupted session outside its baseline %s: nothing to reproduce", exp.ID, b.Baseline)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, BundleFile)); err == nil {
		return nil, fmt.Errorf("%s already holds a bundle; give another folder", dir)
	}
	// The folder is the user's to name, not its files: a README.md or case file already
	// there (repro -o . in a project) is never written over.
	names := []string{"README.md"}
	for i := range min(cases, len(failing)) {
		names = append(names, fmt.Sprintf("case-%d.raw", i+1))
	}
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			return nil, fmt.Errorf("%s already holds %s, which a bundle would write over; give another folder", dir, n)
		}
	}
	for i, f := range failing[:min(cases, len(failing))] {
		c := Case{ID: fmt.Sprintf("case-%d", i+1), Arm: f.Arm, Block: f.Block, Session: f.Session, Turn: f.Turn, Round: f.Round,
			Request: json.RawMessage(f.Request), Response: json.RawMessage(f.Response), Reasons: f.Reasons,
			Baseline: f.BaselineContent, Departs: departs(contentOf(f.Response), f.BaselineContent)}
		if json.Valid([]byte(f.BaselineToolCalls)) {
			c.BaselineCalls = json.RawMessage(f.BaselineToolCalls)
		}
		c.RawFile = c.ID + ".raw"
		if err := keep.Write(filepath.Join(dir, c.RawFile), []byte(f.Raw)); err != nil {
			return nil, err
		}
		b.Cases = append(b.Cases, c)
	}
	first := b.Cases[0]
	load, err := store.RoundOpenings(ctx, db, exp.ID, first.Arm, first.Block, first.Round)
	if err != nil {
		return nil, err
	}
	for _, r := range load {
		b.Load = append(b.Load, json.RawMessage(r))
	}
	js, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := keep.Write(filepath.Join(dir, BundleFile), js); err != nil {
		return nil, err
	}
	if err := keep.Write(filepath.Join(dir, "README.md"), []byte(b.Markdown())); err != nil {
		return nil, err
	}
	return b, nil
}

// contentOf is an assembled response's first choice's content.
func contentOf(response string) string {
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(response), &c) != nil || len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Message.Content
}

// departs is the first rune at which a departs from b; -1 when they agree or b is empty.
func departs(a, b string) int {
	if b == "" || a == b {
		return -1
	}
	ra, rb := []rune(a), []rune(b)
	for i := range min(len(ra), len(rb)) {
		if ra[i] != rb[i] {
			return i
		}
	}
	return min(len(ra), len(rb))
}

// Markdown is the bundle as an upstream issue: title, versions, the arms' launches,
// rates with intervals, the decisive sentence, and the shortest failing request.
func (b *Bundle) Markdown() string {
	s := &strings.Builder{}
	fmt.Fprintf(s, "# %s: %s\n\n", mdText(b.Name), b.title())
	fmt.Fprintf(s, "%s\n\n", b.Headline)
	fmt.Fprintf(s, "## Versions and launches\n\n- arbiter %s, experiment %d, workload seed %d, %d sessions at once; detectors: %s.\n",
		b.ArbiterVersion, b.Experiment, b.Seed, b.Concurrency, strings.Join(b.Detectors, ", "))
	for _, a := range b.Arms {
		ver := mdText(inert.Text(a.Version, 64))
		if ver == "" {
			ver = "not reported"
		}
		fmt.Fprintf(s, "- **%s** (engine version %s): `%s`", a.Name, ver, strings.Join(a.Command, " "))
		if len(a.Env) > 0 {
			var env []string
			for k, v := range a.Env {
				env = append(env, k+"="+v)
			}
			slices.Sort(env)
			fmt.Fprintf(s, " with `%s`", strings.Join(env, " "))
		}
		fmt.Fprintf(s, "\n")
	}
	fmt.Fprintf(s, "\n## Rates\n\n| arm | corrupted | sessions | rate | 95%% CI (Wilson) |\n|---|---:|---:|---:|---|\n")
	for _, a := range b.Arms {
		fmt.Fprintf(s, "| %s | %d | %d | %.1f%% | %.1f%% – %.1f%% |\n", a.Name, a.Corrupted, a.Sessions, 100*a.Rate, 100*a.Interval[0], 100*a.Interval[1])
	}
	fmt.Fprintf(s, "\n## Failing requests\n\nThe shortest first; each is the first corrupted turn of its session, its request as sent (`bundle.json`) and its response as received (the `.raw` file).\n\n")
	for _, c := range b.Cases {
		fmt.Fprintf(s, "- **%s**: arm %s, session %d, turn %d (round %d): %s", c.ID, mdText(c.Arm), c.Session, c.Turn, c.Round, mdText(c.Reasons))
		switch names := callNames(c.BaselineCalls); {
		case c.Departs >= 0:
			fmt.Fprintf(s, "; departs from %s's reply at character %d", b.Baseline, c.Departs)
		case c.Baseline == "" && len(names) > 0:
			fmt.Fprintf(s, "; %s answered the same turn with the structured call %s", b.Baseline, strings.Join(names, ", "))
		}
		fmt.Fprintf(s, ".\n")
	}
	fmt.Fprintf(s, "\n## Reproduce\n\nStart the engine as the failing arm's launch above, then:\n\n    arbiter repro --replay %s --base-url http://HOST:PORT\n\n"+
		"It sends the failing requests with the %d requests that opened the same round in the failing launch's other sessions, %d at once (the experiment's load: the failure may need it), and says which failing requests reproduce.\n", "BUNDLE", len(b.Load), b.Concurrency)
	return s.String()
}

// title says, from the rates, which arms corrupted more responses than the baseline; or,
// when the baseline corrupted more, that it did.
func (b *Bundle) title() string {
	var base *Arm
	for i := range b.Arms {
		if b.Arms[i].Name == b.Baseline {
			base = &b.Arms[i]
		}
	}
	if base == nil {
		return "corrupted responses"
	}
	name := func(a Arm) string { return fmt.Sprintf("%s (%s)", mdText(a.Name), mdText(a.Pins)) }
	var worse, better, alike []string
	for _, a := range b.Arms {
		switch {
		case a.Name == b.Baseline:
		case a.Rate > base.Rate:
			worse = append(worse, name(a))
		case a.Rate < base.Rate:
			better = append(better, name(a))
		default:
			alike = append(alike, name(a))
		}
	}
	switch {
	case len(worse) > 0 && base.Corrupted == 0:
		return fmt.Sprintf("responses corrupted with %s, not with %s", strings.Join(worse, ", "), mdText(base.Name))
	case len(worse) > 0:
		return fmt.Sprintf("more responses corrupted with %s than with %s", strings.Join(worse, ", "), mdText(base.Name))
	case len(better) > 0 && len(alike) == 0 && slices.ContainsFunc(b.Arms, func(a Arm) bool { return a.Name != b.Baseline && a.Corrupted == 0 }):
		return fmt.Sprintf("responses corrupted with %s (%s), not with %s", mdText(base.Name), mdText(base.Pins), strings.Join(better, ", "))
	case len(better) > 0:
		return fmt.Sprintf("more responses corrupted with %s (%s) than with %s", mdText(base.Name), mdText(base.Pins), strings.Join(better, ", "))
	}
	return fmt.Sprintf("responses corrupted alike with %s and %s", strings.Join(alike, ", "), mdText(base.Name))
}

// mdText is text arbiter did not write (an engine's version, a detector's reason, a
// name) as markdown prose: inert, bounded, and with markdown's own characters escaped.
func mdText(s string) string { return inert.Markdown(s, 1<<10) }

// callNames are the functions of a JSON list of tool calls.
func callNames(calls json.RawMessage) []string {
	var cs []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(calls, &cs) != nil {
		return nil
	}
	var out []string
	for _, c := range cs {
		out = append(out, c.Function.Name)
	}
	return out
}

// CulpritExperiment is the experiment of a bisection's step that shows its culprit best:
// the last confirmation (the culprit alone against good), else the reproduction (every
// change against good); an error when the bisection ran neither.
func CulpritExperiment(ctx context.Context, db *sqlx.DB, bisection string) (int64, error) {
	b, err := store.FindBisection(ctx, db, bisection)
	if err != nil {
		return 0, err
	}
	steps, err := store.BisectionSteps(ctx, db, b.ID)
	if err != nil {
		return 0, err
	}
	for _, role := range []store.StepRole{store.RoleConfirm, store.RoleReproduce} {
		for i := len(steps) - 1; i >= 0; i-- {
			if s := steps[i]; s.Role == role && s.ExperimentID.Valid {
				return s.ExperimentID.Int64, nil
			}
		}
	}
	return 0, fmt.Errorf("bisection %d ran no step that shows a culprit (no confirmation, no reproduction)", b.ID)
}
