package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/repro"
	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newReproCmd) }

func newReproCmd(g *globals) *cobra.Command {
	var out, replay, baseURL, bisection string
	var cases, concurrency, rounds int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "repro [EXP | --bisection B] | repro --replay BUNDLE --base-url URL",
		Short: "Write a bundle that reproduces an experiment's finding for the engine's maintainers, or replay one",
		Long: `Write a self-contained bundle for an upstream issue from a recorded experiment (default: the
newest): each arm's launch (command, environment with secrets redacted, the engine's reported
version and settings), the seeds and the load, the shortest failing requests (the first
corrupted turn of each corrupted session) with their raw responses and where they departed
from the baseline, and README.md, a summary to paste into the issue.

With --replay, send a bundle's failing requests to a running engine at the experiment's load
(the cases are sent again and again to fill it) and say which reproduce, by the bundle's
built-in detectors.`,
		Example: `  arbiter repro 3 -o repro-3
  arbiter repro --bisection 1 -o culprit
  arbiter repro --replay repro-3 --base-url http://127.0.0.1:30000`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if replay != "" {
				if len(args) > 0 || baseURL == "" {
					return withCode(exitUsage, fmt.Errorf("--replay BUNDLE needs --base-url URL and no experiment"))
				}
				return replayBundle(cmd, g, replay, repro.ReplayOptions{BaseURL: baseURL, Concurrency: concurrency, Rounds: rounds, Timeout: timeout})
			}
			ref := ""
			if len(args) == 1 {
				ref = args[0]
			}
			if ref != "" && bisection != "" {
				return withCode(exitUsage, fmt.Errorf("give an experiment or --bisection, not both"))
			}
			db, err := store.OpenReadOnly(g.dbPath())
			if err != nil {
				return err
			}
			defer db.Close()
			var id int64
			if bisection != "" {
				// The culprit's configuration against good, as the bisection's step ran it.
				if id, err = repro.CulpritExperiment(cmd.Context(), db, bisection); err != nil {
					return err
				}
			} else {
				e, err := store.FindExperiment(cmd.Context(), db, ref)
				if err != nil {
					return err
				}
				id = e.ID
			}
			dir := out
			if dir == "" {
				dir = fmt.Sprintf("repro-%d", id)
			}
			b, err := repro.Write(cmd.Context(), db, id, dir, cases, outfile.Guard{Database: g.dbPath()})
			if err != nil {
				return err
			}
			if g.json {
				return json.NewEncoder(g.stdout).Encode(map[string]any{"bundle": dir, "experiment": b.Experiment, "cases": len(b.Cases)})
			}
			fmt.Fprintf(g.stdout, "bundle of experiment %d (%s): %d failing requests in %s\nreplay: arbiter repro --replay %s --base-url URL\n",
				b.Experiment, b.Name, len(b.Cases), dir, dir)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the bundle's folder (default repro-EXP)")
	cmd.Flags().IntVar(&cases, "cases", repro.DefaultCases, "how many failing requests the bundle keeps, the shortest first")
	cmd.Flags().StringVar(&bisection, "bisection", "", "the bundle of a bisection's culprit: its confirming step's experiment (else its reproduction)")
	cmd.Flags().StringVar(&replay, "replay", "", "replay the bundle in this folder instead")
	cmd.Flags().StringVar(&baseURL, "base-url", "", "with --replay: the running engine, e.g. http://127.0.0.1:30000")
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "with --replay: requests at once (default the experiment's)")
	cmd.Flags().IntVar(&rounds, "rounds", 2, "with --replay: how many times each of those sends a case")
	cmd.Flags().DurationVar(&timeout, "timeout", repro.DefaultReplayTimeout, "with --replay: the longest one request may take, and the longest silence within its answer")
	return experimentArg(addDBFlag(cmd, g), g)
}

// replayBundle sends a bundle's failing requests again and prints which reproduce. It
// exits 0 when one reproduces, 3 (a failed gate) when every one was answered and judged
// and none reproduces, and 1 when none reproduces and some got no answer that could be
// judged: an engine that cannot be reached must not pass for a fixed one.
func replayBundle(cmd *cobra.Command, g *globals, dir string, o repro.ReplayOptions) error {
	b, err := repro.Load(dir)
	if err != nil {
		return err
	}
	results, skipped, err := repro.Replay(cmd.Context(), b, o)
	if err != nil {
		return err
	}
	reproduced, unjudged := 0, 0
	for _, r := range results {
		if r.Reproduced() {
			reproduced++
		}
		if !r.Judged() {
			unjudged++
		}
	}
	outcome := repro.OutcomeOf(results)
	if g.json {
		if err := json.NewEncoder(g.stdout).Encode(map[string]any{"cases": results, "reproduced": reproduced, "unjudged": unjudged,
			"outcome": outcome, "skipped_detectors": skipped}); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			state := "not reproduced"
			if r.Reproduced() {
				state = "REPRODUCED: " + r.Reason
			}
			fmt.Fprintf(g.stdout, "%s: %d of %d answers flagged (%d failed): %s\n", r.ID, r.Corrupted, r.Sent, r.Failed, state)
		}
		if len(skipped) > 0 {
			fmt.Fprintf(g.stdout, "not used in the replay: %v\n", skipped)
		}
		fmt.Fprintf(g.stdout, "%d of %d failing requests reproduced\n", reproduced, len(results))
	}
	switch outcome {
	case repro.Unreached:
		return fmt.Errorf("could not judge the replay at %s: %d of %d failing requests got no answer that could be judged (unreachable, failed, redirected elsewhere or past --timeout)",
			o.BaseURL, unjudged, len(results))
	case repro.NoLongerReproduces:
		return withCode(exitGateFailed, fmt.Errorf("no failing request of %s reproduced at %s", dir, o.BaseURL))
	}
	return nil
}
