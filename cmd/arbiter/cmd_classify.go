package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/plugins"
	"github.com/arbiterlab/arbiter/plugins/detectors"
)

func init() { subcommands = append(subcommands, newClassifyCmd) }

// classifyStdin is where classify reads "-"; tests point it at their own input.
var classifyStdin io.Reader = os.Stdin

// classifyOptions are the flags of arbiter classify; the zero value runs every built-in
// detector without tools.
type classifyOptions struct {
	tools      string   // --tools: JSON array of openai.Tool offered to the responses
	toolChoice string   // --tool-choice: the requests' tool_choice; empty means auto
	detectors  []string // --detectors; empty means every built-in detector that judges one response
}

func newClassifyCmd(g *globals) *cobra.Command {
	var o classifyOptions
	cmd := &cobra.Command{
		Use:   "classify [FILE|-]",
		Short: "Run detectors on saved chat completion responses",
		Long: `Read chat completion responses (OpenAI JSON objects, one per line; blank lines are
skipped) from FILE, or standard input when FILE is - or absent, run the detectors on each,
and print one result per response: with --json, {"line": N, "corrupted": bool, "labels": [...]};
otherwise a readable line, with a summary on standard error.

A line that is not a chat completion stops arbiter with exit status 2, naming FILE:LINE;
the results of the lines before it are already printed.

A detector plugin (--detectors plugin:NAME) gets arbiter's environment without the
variables whose names look like credentials (HF_TOKEN, OPENAI_API_KEY): with no spec,
nothing grants one, as a spec's detector_secrets does for arbiter run.`,
		Example: `  arbiter classify responses.jsonl --tools tools.json
  arbiter classify --json --detectors dsml-leak,plugin:contains-word - < responses.jsonl`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return withCode(exitUsage, fmt.Errorf("classify reads one FILE (or - for stdin), got %d", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			file := "-"
			if len(args) == 1 {
				file = args[0]
			}
			return runClassify(cmd.Context(), g, file, o)
		},
	}
	cmd.Flags().StringVar(&o.tools, "tools", "", "JSON file with the array of tools the requests offered (enables the tool checks of toolcall-schema)")
	cmd.Flags().StringVar(&o.toolChoice, "tool-choice", "", "the requests' tool_choice, for finish-anomaly: auto, none, required or a function name (default auto)")
	cmd.Flags().StringSliceVar(&o.detectors, "detectors", nil, "comma-separated detectors to run: built-in names or plugin:PATH / plugin:NAME (default: every built-in that judges one response)")
	return cmd
}

// classifyResult is one line of classify --json.
type classifyResult struct {
	Line      int             `json:"line"`
	Corrupted bool            `json:"corrupted"`
	Labels    []plugins.Label `json:"labels"`
}

func runClassify(ctx context.Context, g *globals, file string, o classifyOptions) error {
	names := o.detectors
	if len(names) == 0 {
		names = detectors.ResponseNames()
	}
	for _, n := range names {
		if detectors.IsCrossArm(n) {
			return withCode(exitUsage, fmt.Errorf("--detectors: %s %w (it runs in arbiter run, over every arm's sessions)", n, detectors.ErrCrossArm))
		}
	}
	toolChoice := openai.ToolChoiceJSON(o.toolChoice)
	var tools []openai.Tool
	if o.tools != "" {
		var err error
		if tools, err = readTools(o.tools); err != nil {
			return withCode(exitUsage, err)
		}
	}
	in, name := classifyStdin, "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("classify: %w", err))
		}
		defer f.Close()
		in, name = f, file
	}
	// A plugin gets arbiter's environment without what looks like a credential: with no
	// spec, nothing grants one.
	env, _ := (*arms.Spec)(nil).PluginEnv(os.Environ(), nil)
	ds, release, err := detectors.ResolveAll(plugins.WithEnv(ctx, env), names)
	if err != nil {
		return withCode(exitUsage, fmt.Errorf("--detectors: %w", err))
	}
	defer release()

	out := bufio.NewWriter(g.stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	total, corrupted := 0, 0
	byDetector := map[string]int{}
	r := bufio.NewReader(in)
	for lineNo := 1; ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("%s:%d: %w", name, lineNo, readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			c, err := decodeCompletion(line)
			if err != nil {
				out.Flush()
				return withCode(exitUsage, fmt.Errorf("%s:%d: %w", name, lineNo, err))
			}
			labels, bad, err := detectors.Label(ctx, ds, plugins.Response{Completion: c, Tools: tools, ToolChoice: toolChoice})
			if err != nil {
				out.Flush()
				return fmt.Errorf("%s:%d: %w", name, lineNo, err)
			}
			total++
			if bad {
				corrupted++
			}
			for _, l := range labels {
				if l.Corrupted {
					byDetector[l.Detector]++
				}
			}
			if g.json {
				if err := enc.Encode(classifyResult{Line: lineNo, Corrupted: bad, Labels: labels}); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(out, readableResult(lineNo, bad, labels))
			}
		}
		if readErr != nil { // io.EOF: the last line may lack its newline
			break
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if !g.json {
		parts := make([]string, 0, len(ds))
		for _, d := range ds {
			parts = append(parts, fmt.Sprintf("%s %d", d.Name(), byDetector[d.Name()]))
		}
		fmt.Fprintf(g.stderr, "%d responses, %d corrupted (%s)\n", total, corrupted, strings.Join(parts, ", "))
	}
	return nil
}

// decodeCompletion reads one chat completion; an object without "choices" is refused, so
// that lines of another shape (a stored turn, a request) are not silently judged clean.
func decodeCompletion(line []byte) (openai.ChatCompletion, error) {
	var c openai.ChatCompletion
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return c, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, ok := fields["choices"]; !ok {
		return c, errors.New(`not a chat completion: no "choices" field`)
	}
	if err := json.Unmarshal(line, &c); err != nil {
		return c, fmt.Errorf("not a chat completion: %w", err)
	}
	return c, nil
}

// readTools reads the --tools file: a JSON array of tools as a request offers them.
func readTools(path string) ([]openai.Tool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tools: %w", err)
	}
	var tools []openai.Tool
	if err := json.Unmarshal(b, &tools); err != nil {
		return nil, fmt.Errorf("--tools %s: want a JSON array of tools: %w", path, err)
	}
	for i, t := range tools {
		if t.Function.Name == "" {
			return nil, fmt.Errorf("--tools %s: tool %d has no function name", path, i)
		}
	}
	return tools, nil
}

// readableResult renders one response's labels for a person reading a terminal.
func readableResult(line int, corrupted bool, labels []plugins.Label) string {
	if !corrupted {
		return fmt.Sprintf("line %d: clean", line)
	}
	var why []string
	for _, l := range labels {
		if l.Corrupted {
			why = append(why, l.Detector+": "+l.Reason)
		}
	}
	return fmt.Sprintf("line %d: CORRUPTED %s", line, strings.Join(why, " | "))
}
