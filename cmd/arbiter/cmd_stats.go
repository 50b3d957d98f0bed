package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/verdict"
)

func init() { subcommands = append(subcommands, newStatsCmd) }

func newStatsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Exact tests, intervals and power on counts typed by hand",
		Long: "stats runs arbiter's statistical judge on counts you type: compare two arms, plan how many " +
			"sessions an experiment needs, pool strata, or test matched pairs. Counts are EVENTS/N, " +
			"for example 0/60 (no corrupted sessions of 60).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return withCode(exitUsage, fmt.Errorf("stats: unknown subcommand %q (want compare, power, cmh or mcnemar)", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return withCode(exitUsage, fmt.Errorf("stats: choose a subcommand: compare, power, cmh or mcnemar"))
		},
	}
	cmd.AddCommand(newStatsCompareCmd(g), newStatsPowerCmd(g), newStatsCMHCmd(g), newStatsMcNemarCmd(g))
	return cmd
}

// statsOptions are the flags every stats subcommand shares.
type statsOptions struct {
	alpha float64 // significance level (default 0.05)
	conf  float64 // confidence level of intervals (default 0.95)
}

func (o *statsOptions) bind(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&o.alpha, "alpha", 0.05, "significance level")
	cmd.Flags().Float64Var(&o.conf, "conf", 0.95, "confidence level of intervals")
}

func (o *statsOptions) check() error {
	if !(o.alpha > 0 && o.alpha < 1) {
		return withCode(exitUsage, fmt.Errorf("--alpha %v: want a level in (0, 1)", o.alpha))
	}
	if !(o.conf > 0 && o.conf < 1) {
		return withCode(exitUsage, fmt.Errorf("--conf %v: want a level in (0, 1)", o.conf))
	}
	return nil
}

// statsCount is one arm's EVENTS/N as typed on the command line.
type statsCount struct{ events, n int }

// parseStatsCount reads EVENTS/N with 0 <= EVENTS <= N and N >= 1.
func parseStatsCount(s string) (statsCount, error) {
	ev, n, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return statsCount{}, fmt.Errorf("%q: want EVENTS/N, for example 3/60", s)
	}
	x, err1 := strconv.Atoi(ev)
	m, err2 := strconv.Atoi(n)
	switch {
	case err1 != nil:
		return statsCount{}, fmt.Errorf("%q: events %q is not a whole number", s, ev)
	case err2 != nil:
		return statsCount{}, fmt.Errorf("%q: size %q is not a whole number", s, n)
	case m < 1:
		return statsCount{}, fmt.Errorf("%q: an arm needs at least one observation", s)
	case x < 0 || x > m:
		return statsCount{}, fmt.Errorf("%q: events must be between 0 and %d", s, m)
	}
	return statsCount{x, m}, nil
}

func statsWriteJSON(w io.Writer, v any) error {
	// Compact, one document per line, as every command's --json (pipe to jq to read).
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return fmt.Errorf("stats: writing JSON: %w", err)
	}
	return nil
}

func statsWarnings(w io.Writer, ws []stats.Warning) {
	for _, x := range ws {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
}

func newStatsCompareCmd(g *globals) *cobra.Command {
	var o statsOptions
	cmd := &cobra.Command{
		Use:   "compare A/N B/N",
		Short: "Compare arm B's event rate with the baseline arm A",
		Long: "compare prints both rates with Wilson and Clopper-Pearson intervals, the difference B-A with " +
			"Newcombe's interval, the ratio B/A, Fisher's exact test (two-sided and Fay's mid-p) and, up to " +
			"200 per arm, Boschloo's exact unconditional test.",
		Example: "  arbiter stats compare 0/60 11/60",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return withCode(exitUsage, fmt.Errorf("compare takes two counts, baseline first (A/N B/N), got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			a, err := parseStatsCount(args[0])
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("compare: arm A: %w", err))
			}
			b, err := parseStatsCount(args[1])
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("compare: arm B: %w", err))
			}
			return statsCompare(g, o, a, b)
		},
	}
	o.bind(cmd)
	return cmd
}

// statsCompareOutput is compare's JSON: the stats.Comparison plus the decision at alpha.
type statsCompareOutput struct {
	stats.Comparison
	Alpha       float64 `json:"alpha"`
	Significant bool    `json:"significant"` // stats.Reject(Fisher two-sided p, alpha)
}

func statsCompare(g *globals, o statsOptions, a, b statsCount) error {
	c := stats.Compare(a.events, a.n, b.events, b.n, o.conf)
	if g.json {
		return statsWriteJSON(g.stdout, statsCompareOutput{c, o.alpha, stats.Reject(c.Fisher.PTwoSided, o.alpha)})
	}
	w := g.stdout
	lvl := fmt.Sprintf("%g%%", 100*c.Conf)
	for _, r := range []struct {
		name string
		est  stats.RateEstimate
	}{{"A (baseline)", c.A}, {"B", c.B}} {
		fmt.Fprintf(w, "arm %-13s %d/%d = %s, %s interval %s-%s (Clopper-Pearson), %s-%s (Wilson)\n",
			r.name, r.est.Events, r.est.N, verdict.FormatRate(r.est.Rate), lvl,
			verdict.FormatRate(r.est.ClopperPearson.Lo), verdict.FormatRate(r.est.ClopperPearson.Hi),
			verdict.FormatRate(r.est.Wilson.Lo), verdict.FormatRate(r.est.Wilson.Hi))
	}
	d := c.Difference
	fmt.Fprintf(w, "difference B-A    %+.3g points, %s interval %+.3g to %+.3g (Newcombe)\n",
		100*d.Estimate, lvl, 100*d.Newcombe.Lo, 100*d.Newcombe.Hi)
	fmt.Fprintf(w, "ratio B/A         %s, %s interval %s to %s (%s)\n",
		verdict.FormatNumber(c.Ratio.Estimate), lvl, verdict.FormatNumber(c.Ratio.CI.Lo), verdict.FormatNumber(c.Ratio.CI.Hi), c.Ratio.Method)
	fmt.Fprintf(w, "Fisher exact      %s\n", verdict.PValueWords(c.Fisher.PTwoSided, o.alpha))
	mid := "mid-p " + verdict.FormatP(c.Fisher.MidP) + " (Fay)"
	if !c.Fisher.MidPDefined() {
		mid = "no mid-p (these margins allow a single table)"
	}
	fmt.Fprintf(w, "                  %s; one-sided: B higher p %s, B lower p %s\n",
		mid, verdict.FormatPEq(c.Fisher.PLess), verdict.FormatPEq(c.Fisher.PGreater))
	if c.Boschloo != nil {
		fmt.Fprintf(w, "Boschloo exact    p %s (two-sided, unconditional)\n", verdict.FormatPEq(c.Boschloo.PTwoSided))
	}
	statsWarnings(w, c.Warnings)
	return nil
}

func newStatsPowerCmd(g *globals) *cobra.Command {
	var o statsOptions
	var (
		p0, p1, target, deff float64
		n1, n2               int
	)
	cmd := &cobra.Command{
		Use:   "power --p0 RATE --p1 RATE (--n N | --power TARGET)",
		Short: "Exact power of Fisher's test, or the sessions an experiment needs",
		Long: "power computes the exact power of the two-sided Fisher test at --alpha when the baseline " +
			"has rate --p0 and the other arm --p1, with --n per arm (--n2 for an unequal second arm). " +
			"With --power it finds the smallest sessions per arm reaching that power instead, " +
			"multiplied by --design-effect when planning in correlated responses.",
		Example: "  arbiter stats power --p0 0 --p1 0.12 --n 60\n  arbiter stats power --p0 0 --p1 0.12 --power 0.8",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return withCode(exitUsage, fmt.Errorf("power takes flags only, got %q", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			for name, p := range map[string]float64{"--p0": p0, "--p1": p1} {
				if !(p >= 0 && p <= 1) {
					return withCode(exitUsage, fmt.Errorf("%s %v: want a rate in [0, 1]", name, p))
				}
			}
			if !cmd.Flags().Changed("p0") || !cmd.Flags().Changed("p1") {
				return withCode(exitUsage, fmt.Errorf("power needs both --p0 and --p1"))
			}
			hasN, hasTarget := cmd.Flags().Changed("n"), cmd.Flags().Changed("power")
			if !hasN && !hasTarget {
				return withCode(exitUsage, fmt.Errorf("power needs --n (to compute power) or --power (to find the sessions needed)"))
			}
			if hasN && n1 < 1 || cmd.Flags().Changed("n2") && n2 < 1 {
				return withCode(exitUsage, fmt.Errorf("--n and --n2 must be at least 1"))
			}
			if hasTarget && !(target > 0 && target < 1) {
				return withCode(exitUsage, fmt.Errorf("--power %v: want a target in (0, 1)", target))
			}
			if deff < 1 {
				return withCode(exitUsage, fmt.Errorf("--design-effect %v: want at least 1", deff))
			}
			if !cmd.Flags().Changed("n2") {
				n2 = n1
			}
			return statsPower(g, statsPowerQuery{P0: p0, P1: p1, Alpha: o.alpha, N1: n1, N2: n2, hasN: hasN, Target: target, DesignEffect: deff})
		},
	}
	o.bind(cmd)
	cmd.Flags().Float64Var(&p0, "p0", 0, "event rate of the baseline arm A")
	cmd.Flags().Float64Var(&p1, "p1", 0, "event rate of arm B")
	cmd.Flags().IntVar(&n1, "n", 0, "sessions per arm (arm A when --n2 is given)")
	cmd.Flags().IntVar(&n2, "n2", 0, "sessions in arm B (default --n)")
	cmd.Flags().Float64Var(&target, "power", 0, "target power: print the sessions per arm needed to reach it")
	cmd.Flags().Float64Var(&deff, "design-effect", 1, "inflate the sessions needed by this factor (responses as the unit)")
	return cmd
}

// statsPowerQuery is one power question and, after statsPower, its answers.
type statsPowerQuery struct {
	P0    float64  `json:"p0"`
	P1    float64  `json:"p1"`
	Alpha float64  `json:"alpha"`
	N1    int      `json:"n1,omitempty"`
	N2    int      `json:"n2,omitempty"`
	Power *float64 `json:"power,omitempty"` // exact power at N1, N2; absent without --n
	hasN  bool

	Target       float64 `json:"target_power,omitempty"`
	DesignEffect float64 `json:"design_effect,omitempty"`
	// SessionsPerArm is the smallest number of independent units per arm reaching
	// Target; 0 means unreachable.
	SessionsPerArm *int `json:"sessions_per_arm,omitempty"`
	// ResponsesPerArm is SessionsPerArm inflated by a design effect above 1.
	ResponsesPerArm int     `json:"responses_per_arm,omitempty"`
	AchievedPower   float64 `json:"achieved_power,omitempty"` // exact power at SessionsPerArm
}

func statsPower(g *globals, q statsPowerQuery) error {
	if q.hasN {
		pw := stats.FisherPower(q.P0, q.P1, q.N1, q.N2, q.Alpha)
		q.Power = &pw
	} else {
		q.N1, q.N2 = 0, 0
	}
	if q.Target > 0 {
		n := stats.SessionsFor(q.P0, q.P1, q.Alpha, q.Target, 1)
		q.SessionsPerArm = &n
		if n > 0 {
			q.AchievedPower = stats.FisherPower(q.P0, q.P1, n, n, q.Alpha)
			if q.DesignEffect > 1 {
				q.ResponsesPerArm = stats.SessionsFor(q.P0, q.P1, q.Alpha, q.Target, q.DesignEffect)
			}
		}
	} else {
		q.DesignEffect = 0
	}
	if g.json {
		return statsWriteJSON(g.stdout, q)
	}
	w := g.stdout
	if q.hasN {
		fmt.Fprintf(w, "power %.3f: with %d vs %d sessions, rates %s vs %s, the two-sided Fisher test at alpha %g finds the difference %.0f times in 100\n",
			*q.Power, q.N1, q.N2, verdict.FormatRate(q.P0), verdict.FormatRate(q.P1), q.Alpha, 100*(*q.Power))
	}
	if q.SessionsPerArm != nil {
		if *q.SessionsPerArm == 0 {
			fmt.Fprintf(w, "power %.2f cannot be reached for rates %s vs %s (equal rates, or more than %d per arm needed)\n",
				q.Target, verdict.FormatRate(q.P0), verdict.FormatRate(q.P1), stats.SessionsCap)
			return nil
		}
		fmt.Fprintf(w, "%d sessions per arm reach power %.2f for rates %s vs %s at alpha %g (exact power there: %.3f)\n",
			*q.SessionsPerArm, q.Target, verdict.FormatRate(q.P0), verdict.FormatRate(q.P1), q.Alpha, q.AchievedPower)
		if q.ResponsesPerArm > 0 {
			fmt.Fprintf(w, "%d responses per arm when responses are the unit (design effect %g)\n", q.ResponsesPerArm, q.DesignEffect)
		}
	}
	return nil
}

func newStatsCMHCmd(g *globals) *cobra.Command {
	var o statsOptions
	cmd := &cobra.Command{
		Use:   "cmh A/N:B/N [A/N:B/N ...]",
		Short: "Pool arm B against arm A over strata (Cochran-Mantel-Haenszel)",
		Long: "cmh takes one stratum per argument (a block, a node, a GPU slot), baseline first, and prints " +
			"the CMH test, the Mantel-Haenszel odds ratio and risk difference with intervals, and the " +
			"Breslow-Day test that the odds ratio is the same in every stratum.",
		Example: "  arbiter stats cmh 0/30:4/30 1/30:6/30",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return withCode(exitUsage, fmt.Errorf("cmh needs at least one stratum A/N:B/N"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			strata := make([]stats.Stratum, 0, len(args))
			for i, arg := range args {
				left, right, ok := strings.Cut(arg, ":")
				if !ok {
					return withCode(exitUsage, fmt.Errorf("cmh: stratum %d %q: want A/N:B/N, for example 0/30:4/30", i+1, arg))
				}
				a, err := parseStatsCount(left)
				if err != nil {
					return withCode(exitUsage, fmt.Errorf("cmh: stratum %d, arm A: %w", i+1, err))
				}
				b, err := parseStatsCount(right)
				if err != nil {
					return withCode(exitUsage, fmt.Errorf("cmh: stratum %d, arm B: %w", i+1, err))
				}
				strata = append(strata, stats.Stratum{A: a.events, N1: a.n, B: b.events, N2: b.n})
			}
			return statsCMH(g, o, strata)
		},
	}
	o.bind(cmd)
	return cmd
}

func statsCMH(g *globals, o statsOptions, strata []stats.Stratum) error {
	r := stats.Stratified(strata, o.conf)
	if g.json {
		return statsWriteJSON(g.stdout, r)
	}
	w := g.stdout
	lvl := fmt.Sprintf("%g%%", 100*r.Conf)
	fmt.Fprintf(w, "strata used       %d\n", r.Strata)
	fmt.Fprintf(w, "CMH test          %s\n", verdict.PValueWords(r.CMHP, o.alpha))
	fmt.Fprintf(w, "                  with continuity correction p %s\n", verdict.FormatPEq(r.CMHCorrectedP))
	fmt.Fprintf(w, "odds ratio B/A    %s, %s interval %s to %s (Mantel-Haenszel, Robins-Breslow-Greenland)\n",
		verdict.FormatNumber(r.OddsRatio), lvl, verdict.FormatNumber(r.OddsRatioCI.Lo), verdict.FormatNumber(r.OddsRatioCI.Hi))
	fmt.Fprintf(w, "difference B-A    %+.3g points, %s interval %+.3g to %+.3g (Mantel-Haenszel, Sato variance)\n",
		100*r.RiskDifference, lvl, 100*r.RiskDifferenceCI.Lo, 100*r.RiskDifferenceCI.Hi)
	if !math.IsNaN(r.BreslowDayP) {
		fmt.Fprintf(w, "same odds ratio in every stratum? Breslow-Day p %s, Tarone p %s (%d df); a small p means the strata disagree\n",
			verdict.FormatPEq(r.BreslowDayP), verdict.FormatPEq(r.TaroneP), r.DF)
	}
	statsWarnings(w, r.Warnings)
	return nil
}

func newStatsMcNemarCmd(g *globals) *cobra.Command {
	var o statsOptions
	var b, c int
	cmd := &cobra.Command{
		Use:   "mcnemar --b N --c N",
		Short: "Exact McNemar test on matched pairs",
		Long: "mcnemar tests paired outcomes (the same session replayed on both arms) from the discordant " +
			"pairs only: --b pairs where only the baseline arm A had the event, --c pairs where only arm B had it.",
		Example: "  arbiter stats mcnemar --b 1 --c 9",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return withCode(exitUsage, fmt.Errorf("mcnemar takes flags only, got %q", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if !cmd.Flags().Changed("b") || !cmd.Flags().Changed("c") {
				return withCode(exitUsage, fmt.Errorf("mcnemar needs both --b and --c"))
			}
			if b < 0 || c < 0 {
				return withCode(exitUsage, fmt.Errorf("mcnemar: discordant counts must not be negative (--b %d --c %d)", b, c))
			}
			r := stats.McNemar(b, c, o.conf)
			if g.json {
				return statsWriteJSON(g.stdout, r)
			}
			w := g.stdout
			fmt.Fprintf(w, "discordant pairs  %d only in arm A, %d only in arm B\n", r.AOnly, r.BOnly)
			fmt.Fprintf(w, "McNemar exact     %s\n", verdict.PValueWords(r.P, o.alpha))
			fmt.Fprintf(w, "odds ratio B/A    %s, %g%% interval %s to %s (conditional, exact)\n",
				verdict.FormatNumber(r.OddsRatio), 100*r.Conf, verdict.FormatNumber(r.OddsRatioCI.Lo), verdict.FormatNumber(r.OddsRatioCI.Hi))
			statsWarnings(w, r.Warnings)
			return nil
		},
	}
	o.bind(cmd)
	cmd.Flags().IntVar(&b, "b", 0, "pairs where only the baseline arm A had the event")
	cmd.Flags().IntVar(&c, "c", 0, "pairs where only arm B had the event")
	return cmd
}
