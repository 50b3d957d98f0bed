package verdict

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// GPU telemetry: what each launch's GPUs did while its workload ran, read through NVML by
// the orchestrator (store.gpu_samples). Two launches of one arm on a cool card and on one
// whose clocks were held down did not run under the same conditions: their rates and
// speeds are shown beside their clocks, temperatures and throttle reasons, so that a
// launch that ran hot or throttled is seen.

// hardThrottles are the throttle reasons of a GPU held down by heat or by its board: a
// caveat names the launches they touched. sw_power_cap is left out: a GPU under full load
// reaches its power limit as a matter of course.
var hardThrottles = []string{"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake"}

// LaunchTelemetry is what one launch's GPUs did while its workload ran, beside the
// launch's own rate and speed.
type LaunchTelemetry struct {
	RunID int64
	Arm   string
	Block int
	// Status is store.GPUSampled or store.GPUUnavailable; Reason says why for the latter.
	Status store.GPUTelemetryStatus
	Reason string
	// Devices are the GPUs read, as NVML numbers them; GPUName their model ("" when
	// unknown, several joined by " + ").
	Devices, GPUName string
	// Samples counts the GPU samples (one per GPU per sample time).
	Samples int
	// SMClock and MemClock are the median clocks over every GPU sample (MHz); TempMax the
	// hottest GPU sample (°C); Power the mean draw of a GPU (W); MemUsedPeak the most
	// memory one GPU held (bytes); Util the mean utilization (%). NaN where no sample
	// had the reading.
	SMClock, MemClock, TempMax, Power, MemUsedPeak, Util float64
	// Throttled is, per throttle reason other than idle, the share of the GPU samples
	// (of those that read the reasons) in which it held the clocks down.
	Throttled map[string]float64
	// Sessions and Corrupted are the launch's analysed sessions and the corrupted ones
	// among them; TokPerSec the median over its sessions of their tok/s per request
	// (NaN when none was measured).
	Sessions, Corrupted int
	TokPerSec           float64
}

// ThrottleNames lists the reasons that held a launch's clocks down: those NVML names in
// the order of store.ThrottleReasons, then any newer bits.
func (l LaunchTelemetry) ThrottleNames() []string {
	var known, newer []string
	for _, r := range store.ThrottleReasons {
		if l.Throttled[r.Name] > 0 {
			known = append(known, r.Name)
		}
	}
	for name, x := range l.Throttled {
		if strings.HasPrefix(name, "bit ") && x > 0 {
			newer = append(newer, name)
		}
	}
	sort.Strings(newer)
	return append(known, newer...)
}

// loadTelemetry reads every launch's GPU telemetry; Telemetry stays empty for an
// experiment recorded before there was any.
func (v *Verdict) loadTelemetry(ctx context.Context, db *sqlx.DB) error {
	status, err := store.GPUTelemetries(ctx, db, v.Experiment.ID)
	if err != nil || len(status) == 0 {
		return err
	}
	samples, err := store.GPUSamples(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	byRun := map[int64][]store.GPUSampleRow{}
	for _, s := range samples {
		byRun[s.RunID] = append(byRun[s.RunID], s)
	}
	facts := map[int64]RunFact{}
	for _, r := range v.Runs {
		facts[r.ID] = r
	}
	speeds := v.launchSpeeds()
	for _, st := range status {
		r := facts[st.RunID]
		l := telemetryOf(byRun[st.RunID])
		l.RunID, l.Arm, l.Block, l.Status, l.Reason, l.Devices = st.RunID, r.Arm, r.Block, st.Status, st.Reason, st.Devices
		l.TokPerSec = math.NaN()
		if xs := speeds[st.RunID]; len(xs) > 0 {
			l.TokPerSec = stats.Median(xs)
		}
		for _, s := range v.sessions {
			if s.RunID == st.RunID && analysed(s) {
				l.Sessions++
				if s.Corrupted {
					l.Corrupted++
				}
			}
		}
		v.Telemetry = append(v.Telemetry, l)
	}
	sort.SliceStable(v.Telemetry, func(i, j int) bool {
		a, b := v.Telemetry[i], v.Telemetry[j]
		if a.Block != b.Block {
			return a.Block < b.Block
		}
		return v.armIndex(a.Arm) < v.armIndex(b.Arm)
	})
	return nil
}

// launchSpeeds are, per run, its sessions' tok/s per request, from the outcomes' session
// summaries of every group.
func (v *Verdict) launchSpeeds() map[int64][]float64 {
	out := map[int64][]float64{}
	if v.Outcomes == nil {
		return out
	}
	for _, g := range v.Outcomes.Groups {
		for _, sums := range g.summaries {
			for _, s := range sums {
				if x := s[MetricThroughput]; !math.IsNaN(x) {
					out[int64(s[runKey])] = append(out[int64(s[runKey])], x)
				}
			}
		}
	}
	return out
}

// telemetryOf summarizes one launch's GPU samples.
func telemetryOf(rows []store.GPUSampleRow) LaunchTelemetry {
	l := LaunchTelemetry{Samples: len(rows), TempMax: math.NaN(), MemUsedPeak: math.NaN(), Throttled: map[string]float64{}}
	var sm, mem, power, util []float64
	names := map[string]bool{}
	var nameList []string
	masks := 0
	counts := map[string]int{}
	for _, r := range rows {
		if r.Name != "" && !names[r.Name] {
			names[r.Name] = true
			nameList = append(nameList, r.Name)
		}
		if r.SMClockMHz.Valid {
			sm = append(sm, float64(r.SMClockMHz.Int64))
		}
		if r.MemClockMHz.Valid {
			mem = append(mem, float64(r.MemClockMHz.Int64))
		}
		if r.PowerW.Valid && !math.IsNaN(r.PowerW.Float64) && !math.IsInf(r.PowerW.Float64, 0) {
			power = append(power, r.PowerW.Float64)
		}
		if r.UtilPct.Valid {
			util = append(util, float64(r.UtilPct.Int64))
		}
		if r.TempC.Valid && (math.IsNaN(l.TempMax) || float64(r.TempC.Int64) > l.TempMax) {
			l.TempMax = float64(r.TempC.Int64)
		}
		if r.MemUsedBytes.Valid && (math.IsNaN(l.MemUsedPeak) || float64(r.MemUsedBytes.Int64) > l.MemUsedPeak) {
			l.MemUsedPeak = float64(r.MemUsedBytes.Int64)
		}
		if r.ThrottleMask.Valid {
			masks++
			for _, name := range store.ThrottleReasonNames(r.ThrottleMask.Int64) {
				if name != store.ThrottleIdle {
					counts[name]++
				}
			}
		}
	}
	for name, n := range counts {
		l.Throttled[name] = float64(n) / float64(masks)
	}
	l.GPUName = strings.Join(nameList, " + ")
	l.SMClock, l.MemClock, l.Power, l.Util = medianOrNaN(sm), medianOrNaN(mem), meanOrNaN(power), meanOrNaN(util)
	return l
}

func medianOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Median(xs)
}

func meanOrNaN(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var t float64
	for _, x := range xs {
		t += x
	}
	return t / float64(len(xs))
}

// throttleWords says which reasons held a launch's clocks down and in what share of its
// samples ("hw_thermal_slowdown 40%, sw_power_cap 5%"); reasons limits them (nil: all).
func (l LaunchTelemetry) throttleWords(reasons []string) string {
	var parts []string
	for _, name := range l.ThrottleNames() {
		if reasons != nil && !slices.Contains(reasons, name) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", name, pctShort(l.Throttled[name])))
	}
	return strings.Join(parts, ", ")
}

// telemetryCaveat names the launches whose GPUs were held down by heat or by their
// board: their rates and speeds were measured on slower GPUs than the others'.
func (v *Verdict) telemetryCaveat(add func(CaveatKind, string, ...any)) {
	var parts []string
	for _, l := range v.Telemetry {
		if w := l.throttleWords(hardThrottles); w != "" {
			parts = append(parts, fmt.Sprintf("%s (%s of its GPU samples)", store.LaunchName(l.Arm, l.Block), w))
		}
	}
	switch len(parts) {
	case 0:
	case 1:
		add(CaveatDesign, "GPU clocks were held down by heat or by the board in %s: its rates and speeds were measured on slower GPUs than the other launches' (see Conditions).", parts[0])
	default:
		add(CaveatDesign, "GPU clocks were held down by heat or by the board in %s: their rates and speeds were measured on slower GPUs than the other launches' (see Conditions).", joinAnd(parts))
	}
}

// telemetryText writes the GPU part of the Conditions section: a table of every
// launch's GPUs beside its rate and speed, or one line saying why there is none.
func (v markdownWriter) telemetryText() {
	b := v.b
	if len(v.Telemetry) == 0 {
		return
	}
	sampled := 0
	var reasons []string
	for _, l := range v.Telemetry {
		if l.Status == store.GPUSampled {
			sampled++
		} else if !slices.Contains(reasons, l.Reason) {
			reasons = append(reasons, l.Reason)
		}
	}
	if sampled == 0 {
		fmt.Fprintf(b, "\nGPU telemetry: not available (%s).\n", mdText(strings.Join(reasons, "; ")))
		return
	}
	fmt.Fprintf(b, "\n### GPUs\n\nWhat each launch's GPUs did while its workload ran, read through NVML about once a second: median SM and memory clocks, the hottest reading, the mean power of a GPU, the most memory one GPU held, and the share of samples in which each reason other than idle held the clocks down. Beside them, the launch's corrupted sessions and median tok/s per request.\n\n")
	fmt.Fprintf(b, "| launch | corrupted | tok/s | GPUs | samples | SM clock | memory clock | max temp | mean power | peak memory | throttled |\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, l := range v.Telemetry {
		rate := "–"
		if l.Sessions > 0 {
			rate = fmt.Sprintf("%d/%d", l.Corrupted, l.Sessions)
		}
		if l.Status != store.GPUSampled {
			fmt.Fprintf(b, "| %s | %s | %s | – | – | – | – | – | – | – | not available: %s |\n", store.LaunchName(l.Arm, l.Block), rate,
				tps(l.TokPerSec), mdCell(l.Reason))
			continue
		}
		gpus := l.Devices
		if l.GPUName != "" {
			gpus += " (" + l.GPUName + ")"
		}
		throttled := l.throttleWords(nil)
		if throttled == "" {
			throttled = "none"
		} else if l.throttleWords(hardThrottles) != "" {
			throttled = "**" + throttled + "**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", store.LaunchName(l.Arm, l.Block), rate,
			tps(l.TokPerSec), mdCell(gpus), l.Samples, number(l.SMClock, "%.0f MHz"), number(l.MemClock, "%.0f MHz"),
			number(l.TempMax, "%.0f °C"), number(l.Power, "%.0f W"), number(l.MemUsedPeak/(1<<30), "%.1f GiB"), throttled)
	}
}

// summary is a launch's GPU telemetry for the JSON summary.
func (l LaunchTelemetry) summary() map[string]any {
	m := map[string]any{"status": l.Status}
	if l.Status != store.GPUSampled {
		m["reason"] = plainText(l.Reason)
		return m
	}
	throttled := map[string]float64{}
	for name, x := range l.Throttled {
		throttled[name] = x
	}
	m["devices"], m["gpu_name"], m["samples"] = l.Devices, l.GPUName, l.Samples
	m["sm_clock_mhz_median"], m["mem_clock_mhz_median"] = nanNil(l.SMClock), nanNil(l.MemClock)
	m["temp_c_max"], m["power_w_mean"] = nanNil(l.TempMax), nanNil(l.Power)
	m["mem_used_bytes_peak"], m["util_pct_mean"] = nanNil(l.MemUsedPeak), nanNil(l.Util)
	m["throttled"] = throttled
	return m
}
