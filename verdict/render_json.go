package verdict

import (
	"cmp"
	"math"

	"github.com/arbiterlab/arbiter/stats"
)

// The verdict's machine-readable form (`--json`): what the judge decided, as data, in one
// writer beside the markdown (render*.go) and the terminal's headline.

// Summary is the verdict's machine-readable form (`--json`).
func (v *Verdict) Summary() map[string]any {
	arms := []map[string]any{}
	for i, a := range v.Arms {
		m := map[string]any{"name": a.Name, "pins": a.Pins, "sessions": a.Sessions, "planned": a.Planned, "lost": a.Lost,
			"corrupted_then_lost": a.CorruptedThenLost, "corrupted_then_cut_short": a.CorruptedThenCut(), "cut_short_finished": a.CutShort.Analysed, "corrupted": a.Corrupted, "rate": nanNil(a.Rate),
			"wilson95":          []any{nanNil(a.Wilson.Lo), nanNil(a.Wilson.Hi)},
			"clopper_pearson95": []any{nanNil(a.Exact.Lo), nanNil(a.Exact.Hi)}, "baseline": a.Name == v.Arms[v.Baseline].Name,
			"launches": map[string]int{"total": a.Launches.Total, "done": a.Launches.Done, "crashed": a.Launches.Crashed,
				"wedged": a.Launches.Wedged, "erroring": a.Launches.Erroring, "timed_out": a.Launches.TimedOut, "failed": a.Launches.Failed, "interrupted": a.Launches.Interrupted, "lost": a.Launches.NodeLost,
				"unfinished": a.Launches.Unfinished},
			"problems": plainTexts(a.Problems)}
		if a.Levels != nil {
			m["levels"] = a.Levels
		}
		if c := a.Compare; c != nil {
			cm := map[string]any{"difference": c.Difference, "ci95": []any{nanNil(c.DiffCI.Lo), nanNil(c.DiffCI.Hi)}, "ci_method": "Newcombe, on sessions",
				"fisher_p": nanNil(c.FisherP), "launch_p": nanNil(c.AdjustedP), "significant": c.Significant && !c.Inconclusive,
				"direction": c.Direction, "decision": c.Decision(), "launch_faults_p": nanNil(c.Faults.FisherP)}
			if c.Inconclusive {
				cm["direction"] = ""
				cm["why_inconclusive"] = plainText(c.Why)
			}
			if t := c.Tipping; t != nil {
				cm["tipping_point"] = map[string]any{"lost_arm": t.LostArm, "lost_baseline": t.LostBase, "from": t.From,
					"sessions": t.Sessions, "side": t.Side, "to": t.To}
			}
			m["vs_baseline"] = cm
		}
		if w := v.wedgeClaim(i); w != nil {
			// The decision of a wedge experiment, as show and the headline say it.
			decision := "none"
			switch {
			case !w.Testable:
				decision = "not attributable"
			case w.Claimed:
				decision = w.Decision
			}
			m["wedges_vs_baseline"] = map[string]any{"decision": decision, "difference": nanNil(w.Estimate), "launch_p": nanNil(w.P),
				"level": w.Level, "launches": []int{w.LaunchesArm, w.LaunchesBase}}
		}
		if cs := v.speedClaims(i); len(cs) > 0 {
			// The decision of a throughput experiment, load by load, as show says it.
			var loads []map[string]any
			for _, c := range cs {
				d := speedClaimDecision(c)
				if d == "untested" {
					d = "not attributable"
				}
				loads = append(loads, map[string]any{"load": c.Group, "claim": c.Outcome, "decision": d, "ratio": nanNil(c.Estimate),
					"interval": []any{nanNil(c.CI.Lo), nanNil(c.CI.Hi)}, "p": nanNil(c.P), "level": c.Level,
					"launches": []int{c.LaunchesArm, c.LaunchesBase}})
			}
			m["speed_vs_baseline"] = loads
		}
		arms = append(arms, m)
	}
	out := map[string]any{"experiment_id": v.Experiment.ID, "name": v.Experiment.Name, "status": v.Experiment.State(),
		"unit": v.Unit, "alpha": v.Alpha, "max_loss": v.MaxLoss, "min_effect": v.MinEffect, "arms": arms, "headline": plainText(v.headline("")),
		"caveats": caveatTexts(v.Caveats)}
	if aa, outcome := v.aaOutcome(); aa {
		out["aa_passed"] = outcome == aaPassed
		out["aa"] = outcome
	}
	if v.Outcomes != nil {
		out["outcomes"] = v.outcomeSummary()
	}
	if len(v.DetectorHealth) > 0 {
		out["detectors"] = v.detectorSummary()
	}
	if v.Claims != nil {
		out["claims"] = v.claimSummary()
	}
	if len(v.Divergence) > 0 {
		var div []map[string]any
		for _, d := range v.Divergence {
			m := map[string]any{"arm": d.Arm, "compared": d.Compared, "diverged": d.Diverged, "not_compared": d.NotCompared}
			if d.Diverged > 0 {
				m["median_depth"] = d.Depth
			}
			if f := d.Floor; f != nil {
				m["vs_floor"] = map[string]any{"floor": f.Floor, "p": f.P, "level": f.Level, "on_launches": f.OnLaunches, "beyond": f.Beyond}
			}
			div = append(div, m)
		}
		out["divergence"] = div
	}
	if len(v.Pins) > 0 {
		// Every launch's pins as its engine reported them; "refused" when one was not
		// in effect (arbiter run exited 5).
		var pins []map[string]any
		for _, p := range v.Pins {
			pins = append(pins, map[string]any{"arm": p.Arm, "block": p.Block, "pin": p.Pin, "want": p.Want, "got": p.Got,
				"status": p.Status, "source": p.Source, "evidence": p.Evidence, "why": p.Why, "common": p.Common})
		}
		out["pins"] = pins
		out["refused"] = v.Refused()
	}
	out["runs"] = v.runSummary()
	if f := v.Floor; f != nil {
		out["noise_floor"] = map[string]any{"experiment_id": f.Experiment, "name": f.Name, "used": f.Used(),
			"refused": f.Refused, "warnings": f.Warnings, "unused": f.Unused, "launches": f.Launches,
			"icc": nanNil(f.ICC), "icc_upper": nanNil(f.ICCUpper), "conf": f.Conf}
	}
	if lines := v.placementLines(); len(lines) > 0 {
		out["placement"] = lines
	}
	if v.Verify != nil {
		out["verify"] = v.Verify.summary()
	}
	return out
}

// runSummary is every launch with its placement and times, for `arbiter show --json`.
func (v *Verdict) runSummary() []map[string]any {
	out := []map[string]any{}
	gpus := map[int64]LaunchTelemetry{}
	for _, l := range v.Telemetry {
		gpus[l.RunID] = l
	}
	for _, r := range v.Runs {
		m := map[string]any{"id": r.ID, "arm": r.Arm, "block": r.Block, "status": r.Status, "node": r.Node, "slot": r.Slot,
			"gpus": r.GPUs, "wave": r.Wave, "instance": r.Instance, "superseded": r.Superseded}
		if !r.WorkloadStart.IsZero() {
			m["workload_started_at"], m["workload_ended_at"] = r.WorkloadStart, r.WorkloadEnd
		}
		if l, ok := gpus[r.ID]; ok {
			m["gpu_telemetry"] = l.summary()
		}
		out = append(out, m)
	}
	return out
}

// nanNil is x, or JSON's null where x is not a finite number.
func nanNil(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

// claimSummary is the family's machine-readable form, in Summary: every claim with what
// it compared, its level and its decision ("" when nothing is claimed).
func (v *Verdict) claimSummary() map[string]any {
	f := v.Claims
	var claims []map[string]any
	for _, c := range f.Claims {
		claims = append(claims, map[string]any{"outcome": c.Outcome, "arm": c.Arm, "against": c.Against, "group": c.Group, "against_group": cmp.Or(c.AgainstGroup, c.Group),
			"primary": c.Primary, "level": c.Level, "launches_arm": c.LaunchesArm, "launches_against": c.LaunchesBase,
			"test": c.Test, "estimate": nanNil(c.Estimate), "interval": []any{nanNil(c.CI.Lo), nanNil(c.CI.Hi)},
			"p": nanNil(c.P), "testable": c.Testable, "launches_needed": c.Needed, "faulted_side": c.Faulted, "launch_spread": nanNil(c.Spread),
			"claimed": c.Claimed, "decision": c.Decision})
	}
	return map[string]any{"alpha": f.Alpha, "primary": f.Primary, "claims": claims}
}

// outcomeSummary is the outcomes' machine-readable form, in Summary.
func (v *Verdict) outcomeSummary() map[string]any {
	o := v.Outcomes
	interval := func(i stats.Interval) []any { return []any{nanNil(i.Lo), nanNil(i.Hi)} }
	var groups, metrics, ni, cascades []map[string]any
	for _, g := range o.Groups {
		arms := map[string]any{}
		for i, a := range v.Arms {
			arms[a.Name] = map[string]any{"sessions": g.Sessions[i], "engine_tokens_per_second": nanNil(g.EngineTPS[i]),
				"median_tokens_per_second": nanNil(stats.Median(g.values(i, MetricThroughput))),
				"median_ttft_ms":           nanNil(stats.Median(g.values(i, MetricTTFT))),
				"median_itl_ms":            nanNil(stats.Median(g.values(i, MetricITL))),
				"median_latency_ms":        nanNil(stats.Median(g.values(i, MetricLatency)))}
			if q := g.Gaps[i]; q.N > 0 {
				arms[a.Name].(map[string]any)["token_gaps"] = map[string]any{"n": q.N, "p50_ms": q.P50, "p90_ms": q.P90,
					"p99_ms": q.P99, "max_ms": q.Max}
			}
		}
		groups = append(groups, map[string]any{"name": g.Name, "kind": g.Kind, "concurrency": g.Concurrency, "rate": g.Rate, "arms": arms})
	}
	for _, r := range o.Metrics {
		metrics = append(metrics, map[string]any{"group": r.Group, "metric": r.Metric, "arm": r.Arm,
			"ratio": nanNil(r.Result.Ratio), "ratio95": interval(r.Result.RatioCI), "shift": r.Result.Shift,
			"shift95": interval(r.Result.ShiftCI), "mann_whitney_p": nanNil(r.Result.P), "exact": r.Result.Exact,
			"launch_p": nanNil(r.AdjustedP), "decision": r.Decision})
	}
	for _, set := range [][]ThroughputNI{o.Throughput, o.Stability} {
		for _, t := range set {
			ni = append(ni, map[string]any{"arm": t.Arm, "group": t.Group, "against": t.Against, "against_group": t.AgainstGroup,
				"ratio": nanNil(t.Result.Ratio), "lower_bound": nanNil(t.Result.Bound), "margin": t.Result.Margin,
				"non_inferior": t.Result.NonInferior})
		}
	}
	for _, c := range o.Cascades {
		m := map[string]any{"arm": c.Arm, "launches": c.Launches, "wedged": c.Wedged, "cascades": c.Cascades,
			"recovered": c.Recovered, "recovery_ms": append([]float64{}, c.Recoveries...), "wedged_after_ms": append([]float64{}, c.WedgedAfter...),
			"requests_cut": c.Aborted, "wedged_fisher_p": nanNil(c.FisherP)}
		cascades = append(cascades, m)
	}
	return map[string]any{"groups": groups, "comparisons": metrics, "throughput_non_inferiority": ni,
		"abort_cascades": cascades, "throughput_margin": o.Margin}
}

// caveatTexts are the caveats' sentences, in rank order: the summary's "caveats".
func caveatTexts(cs []Caveat) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = plainText(c.Text)
	}
	return out
}

func plainTexts(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = plainText(s)
	}
	return out
}
