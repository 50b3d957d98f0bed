package verdict

import (
	"fmt"
	"math"

	"github.com/arbiterlab/arbiter/stats"
)

// outcomeSections writes the latency and throughput section (and the abort cascades'),
// and reports whether it did; without per-session timings the verdict keeps its plain
// table of medians.
func (v markdownWriter) outcomeSections(charts []chartRef) bool {
	b := v.b
	o := v.Outcomes
	if o == nil || len(o.Groups) == 0 {
		return false
	}
	fmt.Fprintf(b, "\n## Latency and throughput\n\n")
	fmt.Fprintf(b, "The session is the unit: each session is summarised by its tokens per second (its completion tokens over its requests' end-to-end time) and by the median of its requests' TTFT, inter-token latency (from its first streamed token to its last, over the tokens after the first; text replies that came in two events or more) and end-to-end latency. ")
	fmt.Fprintf(b, "Requests cut by an abort cascade, and canaries, are left out.\n\n")
	for _, c := range charts {
		if c.kind == "throughput" {
			fmt.Fprintf(b, "![%s](%s)\n\n", c.title, c.file)
		}
	}

	phased := false
	for _, g := range o.Groups {
		phased = phased || g.Kind != ""
	}
	if phased {
		fmt.Fprintf(b, "Generated tokens per second of the whole engine over each phase (mean over launches, and their range when there were several):\n\n")
		v.armColumns("phase", "---", "")
		for _, g := range o.Groups {
			fmt.Fprintf(b, "| %s |", g.Name)
			for i := range v.Arms {
				cell := tps(g.EngineTPS[i])
				if i < len(g.engine) && len(g.engine[i]) > 1 {
					cell += fmt.Sprintf(" (%s – %s)", tps(stats.Quantile(g.engine[i], 0)), tps(maxOf(g.engine[i])))
				}
				fmt.Fprintf(b, " %s |", cell)
			}
			fmt.Fprintf(b, "\n")
		}
		fmt.Fprintf(b, "\n")
	}

	fmt.Fprintf(b, "Medians of the session summaries:\n\n| %s | arm | sessions | tok/s per request | TTFT | inter-token latency | end-to-end |\n|---|---|---:|---:|---:|---:|---:|\n", groupWord(phased))
	for _, g := range o.Groups {
		for i, a := range v.Arms {
			fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s |\n", g.Name, a.Name, g.Sessions[i],
				tps(stats.Median(g.values(i, MetricThroughput))), ms(stats.Median(g.values(i, MetricTTFT))),
				msFine(stats.Median(g.values(i, MetricITL))), ms(stats.Median(g.values(i, MetricLatency))))
		}
	}

	if anyGaps(o.Groups) {
		fmt.Fprintf(b, "\nInter-token latency from per-token arrival times (every gap between consecutive streamed events that carried text, pooled over the arm's text replies):\n\n| %s | arm | gaps | p50 | p90 | p99 | max |\n|---|---|---:|---:|---:|---:|---:|\n", groupWord(phased))
		for _, g := range o.Groups {
			for i, a := range v.Arms {
				q := g.Gaps[i]
				fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s |\n", g.Name, a.Name, q.N, msFine(q.P50), msFine(q.P90), msFine(q.P99), msFine(q.Max))
			}
		}
	}

	if len(o.Metrics) > 0 {
		fmt.Fprintf(b, "\nAgainst %s, launch by launch: each launch is summarised by the median of its sessions' summaries, and the change is the ratio of the arms' geometric means over launches, with its interval at the level the claim is tested at (the t test on the logs; see Claims). The Hodges-Lehmann change over sessions describes these launches only.\n\n| %s | metric | arm | launches | change | interval | launch p | tested at | change over sessions | decision |\n|---|---|---|---:|---:|---|---:|---:|---:|---|\n",
			v.Arms[v.Baseline].Name, groupWord(phased))
		for _, r := range o.Metrics {
			lc := r.Launch
			if lc == nil {
				continue
			}
			p := "–"
			if lc.Testable {
				p = pval(lc.P)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %d vs %d | %s | %s | %s | %s | %s | %s |\n", r.Group, r.Metric, r.Arm, lc.LaunchesArm, lc.LaunchesBase,
				claimEstimate(lc), claimInterval(lc), p, levelText(lc.Level), signedPct(r.Result.Ratio-1), claimDecision(lc))
		}
		fmt.Fprintf(b, "\n`~`: the interval straddles the edge of the negligible zone (within %s of no change, `analysis.min_effect`): neither a change nor its absence is shown. For tok/s a positive change is faster; for the latencies a negative one is.\n", pctShort(v.MinEffect))
	}

	if len(o.Throughput)+len(o.Stability) > 0 {
		fmt.Fprintf(b, "\n## Throughput non-inferiority (margin %s)\n\n", pctShort(o.Margin))
		fmt.Fprintf(b, "An arm's tok/s per request is non-inferior when the one-sided lower bound of its ratio to what it is compared with stays above 1 − %s: it costs at most %s. The ratio is of geometric means over launches (each launch's median tok/s), and the bound is the t interval's on their logs at the claim's level (see Claims); against itself before its cascades, over each launch's own after/before ratio. \"Not shown\" is not evidence that it is slower.\n\n",
			pctShort(o.Margin), pctShort(o.Margin))
		fmt.Fprintf(b, "| arm | %s | against | launches | change | one-sided lower bound | tested at | decision |\n|---|---|---|---:|---:|---:|---:|---|\n", groupWord(phased))
		for _, set := range [][]ThroughputNI{o.Throughput, o.Stability} {
			for _, t := range set {
				lc := t.Launch
				if lc == nil {
					continue
				}
				d := "not shown"
				switch {
				case !lc.Testable:
					d = claimDecision(lc)
				case t.Result.NonInferior:
					d = "**non-inferior**"
				}
				against := t.Against
				if t.AgainstGroup != t.Group {
					against = fmt.Sprintf("%s at %s", t.Against, t.AgainstGroup)
				}
				bound := "–"
				if lc.Testable {
					bound = changeBound(lc.CI.Lo)
				}
				fmt.Fprintf(b, "| %s | %s | %s | %d vs %d | %s | %s | %s | %s |\n", t.Arm, t.Group, against, lc.LaunchesArm, lc.LaunchesBase,
					claimEstimate(lc), bound, levelText(lc.Level), d)
			}
		}
	}

	if len(o.Cascades) > 0 {
		v.cascadeSection()
	}
	return true
}

func anyGaps(groups []OutcomeGroup) bool {
	for _, g := range groups {
		for _, q := range g.Gaps {
			if q.N > 0 {
				return true
			}
		}
	}
	return false
}

func groupWord(phased bool) string {
	if phased {
		return "phase"
	}
	return "group"
}

// msFine prints a short duration with a decimal: inter-token latencies are a few ms.
func msFine(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	if x < 100 {
		return fmt.Sprintf("%.2f ms", x)
	}
	return ms(x)
}

// cascadeSection shows each arm's abort cascades: how often its engine wedged (exact
// test on launches against the baseline) and how fast it served again.
func (v markdownWriter) cascadeSection() {
	b := v.b
	o := v.Outcomes
	base := o.Cascades[v.Baseline]
	fmt.Fprintf(b, "\n## Abort cascades\n\n")
	fmt.Fprintf(b, "After each cascade of aborted sessions, canary requests (small real generations) ask whether the engine serves again; recovery is the time from the abort to the end of the first canary that completed. A launch in which none completed within the recovery timeout is recorded wedged, and each arm's wedged launches are compared with %s's by the randomization test on launches (the claim on wedged launches above; blocks give launches).\n\n", base.Arm)
	fmt.Fprintf(b, "| arm | launches | wedged | launch p vs %s | cascades | recovered | recovery (median) | longest | declared wedged after the abort | requests cut |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", base.Arm)
	for _, c := range o.Cascades {
		p := "–"
		if lc := c.Launch; lc != nil && lc.Testable {
			p = pval(lc.P)
		} else if lc != nil {
			p = "not testable"
		}
		med, longest, wedged := "–", "–", "–"
		if len(c.Recoveries) > 0 {
			med, longest = ms(stats.Quantile(c.Recoveries, 0.5)), ms(maxOf(c.Recoveries))
		}
		if len(c.WedgedAfter) > 0 {
			wedged = ms(stats.Quantile(c.WedgedAfter, 0))
			if hi := ms(maxOf(c.WedgedAfter)); hi != wedged {
				wedged += " – " + hi
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %d | %d | %s | %s | %s | %d |\n", c.Arm, c.Launches, c.Wedged, p, c.Cascades, c.Recovered, med, longest, wedged, c.Aborted)
	}
	for _, c := range o.Cascades {
		if r := c.Recovery; r != nil {
			fmt.Fprintf(b, "\n%s's recovery against %s's: %s (95%% CI %s), Mann-Whitney p %s.\n", c.Arm, base.Arm,
				signedPct(r.Ratio-1), changeInterval(r.RatioCI.Lo, r.RatioCI.Hi), pEq(r.P))
		}
	}
}
