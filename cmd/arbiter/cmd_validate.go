package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/bytesize"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/plan"
)

func init() { subcommands = append(subcommands, newValidateCmd) }

func newValidateCmd(g *globals) *cobra.Command {
	var preflight bool
	cmd := &cobra.Command{
		Use:   "validate SPEC",
		Short: "Check an experiment spec and show the arms it expands to",
		Long: "validate reads a spec, reports every problem with file:line:col, runs the confound check " +
			"and prints the arms with their pins. It launches nothing. Exit code 2 when the spec is invalid.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("validate takes one spec file, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !preflight || !g.json {
				if err := validateSpec(g, args[0]); err != nil || !preflight {
					return err
				}
			}
			return preflightSpec(cmd.Context(), g, args[0])
		},
	}
	cmd.Flags().BoolVar(&preflight, "preflight", false, "also run the checks arbiter run makes before it records anything: "+
		"each Docker daemon answers, holds the image and can give GPUs; GPUs and fixed ports are there and free; external arms answer and report their pins; the model file is GGUF and pads to head_dim")
	return cmd
}

// preflightSpec runs the preflight of the spec at path and prints each check. Exit
// code 1 when one failed.
func preflightSpec(ctx context.Context, g *globals, path string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	spec, err := arms.Load(path)
	if err != nil {
		return withCode(exitUsage, err)
	}
	pf, err := orchestrator.RunPreflight(ctx, spec)
	if err != nil {
		return err
	}
	if g.json {
		// One document: the spec's summary with the preflight in it.
		expanded, _ := spec.Expand()
		sum := summarize(spec, expanded, spec.Redactor(os.LookupEnv))
		sum.Preflight = &pf
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "preflight  %d %s\n", len(pf.Checks), pluralize(len(pf.Checks), "check"))
		for _, c := range pf.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(&b, "  %s %s %s: %s\n", mark, c.Node, c.What, c.Detail)
		}
		for _, u := range pf.Unverified {
			fmt.Fprintf(&b, "  not verified: %s\n", u)
		}
		if _, err := io.WriteString(g.stdout, b.String()); err != nil {
			return err
		}
	}
	return pf.Err()
}

// validateSpec prints the spec's summary to stdout, or every problem to stderr; with
// --json, either one goes to stdout as JSON (the exit code still says which).
func validateSpec(g *globals, path string) error {
	spec, err := arms.Load(path)
	if err != nil {
		problems := arms.Errors(err)
		if len(problems) == 0 {
			return invalid(g, path, err, []specProblem{{File: path, Message: err.Error()}})
		}
		var ps []specProblem
		for _, p := range problems {
			ps = append(ps, specProblem{File: p.File, Line: p.Line, Col: p.Col, Field: p.Path, Message: p.Msg, Text: p.Error()})
			if !g.json {
				fmt.Fprintln(g.stderr, p.Error())
			}
		}
		return invalid(g, path, fmt.Errorf("%s: invalid spec (%d %s)", path, len(problems), pluralize(len(problems), "problem")), ps)
	}
	expanded, err := spec.Expand()
	if err != nil {
		return invalid(g, path, err, []specProblem{{File: path, Message: err.Error()}}) // Load already ran this check; kept for safety
	}
	// A trace's lines are checked here as run checks them, before any engine starts.
	if _, err := orchestrator.LoadTrace(spec); err != nil {
		if !g.json {
			fmt.Fprintln(g.stderr, err.Error())
		}
		return invalid(g, path, fmt.Errorf("%s: invalid trace", path), []specProblem{{File: path, Message: err.Error(), Text: err.Error()}})
	}
	sum := summarize(spec, expanded, spec.Redactor(os.LookupEnv))
	sum.Valid = true
	if g.json {
		return json.NewEncoder(g.stdout).Encode(sum)
	}
	return sum.write(g.stdout)
}

// specProblem is one problem of an invalid spec, as validate --json prints it.
type specProblem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Text is the problem as the plain output writes it (file:line:col: field: message).
	Text string `json:"text,omitempty"`
}

// invalid ends validate for an invalid spec: with --json its problems go to stdout as
// {"spec": ..., "valid": false, "problems": [...]}; the exit code is 2 either way.
func invalid(g *globals, path string, err error, problems []specProblem) error {
	if g.json {
		for i := range problems {
			if problems[i].Text == "" {
				problems[i].Text = problems[i].Message
			}
		}
		out := struct {
			Spec     string        `json:"spec"`
			Valid    bool          `json:"valid"`
			Problems []specProblem `json:"problems"`
		}{path, false, problems}
		if jerr := json.NewEncoder(g.stdout).Encode(out); jerr != nil {
			return jerr
		}
	}
	return withCode(exitUsage, err)
}

func pluralize(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// specSummary is what validate prints; its JSON form is the --json output.
type specSummary struct {
	Spec      string          `json:"spec"`
	Valid     bool            `json:"valid"`
	Name      string          `json:"name"`
	Preset    string          `json:"preset"`
	Runtime   string          `json:"runtime"`
	Model     string          `json:"model,omitempty"`
	Slots     []string        `json:"slots"`
	Design    string          `json:"design"`
	Arms      []armSummary    `json:"arms"`
	Baseline  string          `json:"baseline"`
	Workload  workloadSummary `json:"workload"`
	Detectors []string        `json:"detectors"`
	Analysis  analysisSummary `json:"analysis"`
	Blocks    int             `json:"blocks"`
	// Launches is what the design's launches per arm let a verdict claim.
	Launches plan.LaunchClaims `json:"launches"`
	Timeouts map[string]string `json:"timeouts"`
	Secrets  []string          `json:"secrets,omitempty"`
	// DetectorSecrets are the credentials the detector plugins are granted.
	DetectorSecrets []string `json:"detector_secrets,omitempty"`
	// Preflight is what validate --preflight found; absent without it.
	Preflight *orchestrator.Preflight `json:"preflight,omitempty"`
}

type armSummary struct {
	Name    string            `json:"name"`
	Levels  map[string]string `json:"levels,omitempty"`
	Env     map[string]string `json:"pinned_env,omitempty"`
	Args    []string          `json:"pinned_args,omitempty"`
	Command []string          `json:"command"`
}

type workloadSummary struct {
	Kind             string  `json:"kind"`
	Sessions         int     `json:"sessions"`
	Rounds           int     `json:"rounds"`
	Concurrency      int     `json:"concurrency"`
	Seed             int64   `json:"seed"`
	Temperature      float64 `json:"temperature"`
	MaxTokens        int     `json:"max_tokens,omitempty"`
	MaxResponseBytes int64   `json:"max_response_bytes"`
	Stream           bool    `json:"stream"`
	// Describe is the workload in a sentence, for kinds whose shape is not sessions x
	// rounds (throughput, abort cascades, long contexts, traces).
	Describe string `json:"describe,omitempty"`
}

type analysisSummary struct {
	Unit  string  `json:"unit"`
	Alpha float64 `json:"alpha"`
	AA    bool    `json:"aa,omitempty"`
}

func summarize(s *arms.Spec, expanded []arms.Arm, r *arms.Redactor) specSummary {
	sum := specSummary{
		Spec: s.Path, Name: s.Name, Preset: s.Engine.Preset, Runtime: string(s.Runtime.Kind), Design: s.Design,
		Model:     s.Engine.Model.Describe(),
		Baseline:  s.Analysis.Baseline,
		Detectors: s.Detectors,
		Workload: workloadSummary{Kind: s.Workload.Kind, Sessions: s.Workload.Sessions, Rounds: s.Workload.Rounds,
			Concurrency: s.Workload.Concurrency, Seed: s.Workload.Seed, Temperature: s.Workload.Temperature,
			MaxTokens: s.Workload.MaxTokens, MaxResponseBytes: s.Workload.MaxResponseBytes, Stream: !s.Workload.NoStream,
			Describe: s.Workload.Describe()},
		Analysis: analysisSummary{Unit: s.Analysis.Unit, Alpha: s.Analysis.Alpha, AA: s.Analysis.AA},
		Blocks:   s.Blocks,
		Launches: plan.SpecLaunches(s, len(expanded)),
		Timeouts: map[string]string{"startup": s.Timeouts.Startup.String(), "request": s.Timeouts.Request.String(), "stall": s.Timeouts.Stall.String(), "detector": s.Timeouts.Detector.String()},
		Secrets:  s.Engine.Secrets,

		DetectorSecrets: s.DetectorSecrets,
	}
	// Decoding checked that every node can be cut.
	slots, _ := orchestrator.Slots(s)
	for _, sl := range slots {
		sum.Slots = append(sum.Slots, sl.String())
	}
	for _, a := range expanded {
		// RedactEnv and RedactArgs hide credential values of any length where they are
		// written; the Redactor then catches a secret repeated under another name.
		as := armSummary{Name: a.Name, Levels: a.Levels}
		for _, c := range arms.RedactArgs(a.Pins.Args) {
			as.Args = append(as.Args, r.Redact(c))
		}
		for _, c := range arms.RedactArgs(a.Command) {
			as.Command = append(as.Command, r.Redact(c))
		}
		if len(a.Pins.Env) > 0 {
			as.Env = map[string]string{}
			for k, v := range s.RedactEnv(a.Pins.Env) {
				as.Env[k] = r.Redact(v)
			}
		}
		sum.Arms = append(sum.Arms, as)
	}
	return sum
}

func (s specSummary) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: valid\n", s.Spec)
	fmt.Fprintf(&b, "name       %s\n", s.Name)
	fmt.Fprintf(&b, "engine     %s, runtime %s\n", s.Preset, s.Runtime)
	if s.Model != "" {
		fmt.Fprintf(&b, "model      %s\n", s.Model)
	}
	if len(s.Slots) > 0 {
		waves := orchestrator.Waves(len(s.Arms), len(s.Slots))
		how := "every arm of a block at once"
		if waves > 1 {
			how = fmt.Sprintf("%d waves per block", waves)
		}
		fmt.Fprintf(&b, "slots      %d (%s): %s\n", len(s.Slots), how, strings.Join(s.Slots, ", "))
	}
	fmt.Fprintf(&b, "arms       %d (%s), baseline %s\n", len(s.Arms), s.Design, s.Baseline)
	width := 0
	for _, a := range s.Arms {
		width = max(width, len(a.Name))
	}
	for _, a := range s.Arms {
		var pins []string
		for _, k := range slices.Sorted(maps.Keys(a.Env)) {
			pins = append(pins, k+"="+a.Env[k])
		}
		pins = append(pins, a.Args...)
		if len(pins) == 0 {
			pins = []string{"(engine defaults)"}
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, a.Name, strings.Join(pins, " "))
	}
	w8 := s.Workload
	if w8.Describe != "" {
		fmt.Fprintf(&b, "workload   %s; %d sessions per launch, seed %d, temperature %g\n", w8.Describe, w8.Sessions, w8.Seed, w8.Temperature)
	} else {
		fmt.Fprintf(&b, "workload   %s: %d sessions x %d rounds, concurrency %d, seed %d, temperature %g\n",
			w8.Kind, w8.Sessions, w8.Rounds, w8.Concurrency, w8.Seed, w8.Temperature)
	}
	streamed := "streamed"
	if !w8.Stream {
		streamed = "not streamed"
	}
	tokens := ""
	if w8.MaxTokens > 0 {
		tokens = fmt.Sprintf(", at most %d tokens", w8.MaxTokens)
	}
	fmt.Fprintf(&b, "responses  %s, at most %s each%s\n", streamed, bytesize.String(w8.MaxResponseBytes), tokens)
	fmt.Fprintf(&b, "detectors  %s\n", strings.Join(s.Detectors, ", "))
	if len(s.DetectorSecrets) > 0 {
		fmt.Fprintf(&b, "           plugins granted %s from arbiter's environment; no other credential\n", strings.Join(s.DetectorSecrets, ", "))
	}
	aa := ""
	if s.Analysis.AA {
		aa = ", A/A check"
	}
	fmt.Fprintf(&b, "analysis   unit %s, alpha %g, %d %s%s\n", s.Analysis.Unit, s.Analysis.Alpha, s.Blocks, pluralize(s.Blocks, "block"), aa)
	fmt.Fprintf(&b, "launches   %s\n", s.Launches.Sentence())
	fmt.Fprintf(&b, "timeouts   startup %s, request %s, stall %s, detector %s\n", s.Timeouts["startup"], s.Timeouts["request"], s.Timeouts["stall"], s.Timeouts["detector"])
	if len(s.Secrets) > 0 {
		fmt.Fprintf(&b, "secrets    %s (from arbiter's environment)\n", strings.Join(s.Secrets, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
