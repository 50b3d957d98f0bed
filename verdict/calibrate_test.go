package verdict

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/stats"
)

// calibrate writes the full calibration of the launch family (every cell, 2,000
// simulated experiments each) to a markdown file: `make calibrate`.
var calibrate = flag.String("calibrate", "", "simulate the full launch-heterogeneity calibration and write its table to this file")

// nullCell is one condition of the calibration: launches of one configuration differ in
// corruption rate (intra-launch correlation icc around rate) and in speed (coefficient
// of variation cv), and each arm has launches of them.
type nullCell struct {
	icc, rate, cv float64
	launches      int
}

// verdictShape is one kind of verdict the family decides: its arms, primary outcome,
// groups and margins, as the examples produce them.
type verdictShape struct {
	name      string
	arms      []string
	primary   string
	wedges    bool
	groups    []string
	stability [][2]string
	margin    float64
	looks     int // a sequential design's looks (0: fixed)
}

var shapes = []verdictShape{
	{name: "agent (quickstart)", arms: []string{"control", "treatment"}, primary: OutcomeCorruption, groups: []string{"all sessions"}},
	{name: "factorial 2x2", arms: []string{"a0b0", "a0b1", "a1b0", "a1b1"}, primary: OutcomeCorruption, groups: []string{"all sessions"}},
	{name: "abort cascade", arms: []string{"off", "on"}, primary: OutcomeWedge, wedges: true,
		groups:    []string{"c=1 before", "c=1 after", "c=32 before", "c=32 after"},
		stability: [][2]string{{"c=1 before", "c=1 after"}, {"c=32 before", "c=32 after"}}, margin: 0.05},
	{name: "throughput", arms: []string{"off", "on"}, primary: MetricThroughput, groups: []string{"c=1", "c=32", "poisson 16/s"}, margin: 0.05},
	{name: "sequential (8 looks)", arms: []string{"control", "treatment"}, primary: OutcomeCorruption, groups: []string{"all sessions"}, looks: 8},
}

// simulateLaunches draws one arm's launches: each launch's corruption rate from a beta
// distribution around rate with correlation icc (60 sessions), whether it wedges (with
// probability rate), and per group the medians of its sessions' speed, all scaled by the
// launch's own speed factor (log-normal with cv) and a 0.5% sampling error of the median.
// slow scales tok/s (a true slowdown) and slowAfter the "after" groups' tok/s.
func simulateLaunches(rng *rand.Rand, c nullCell, launches int, rate float64, groups []string, slow, slowAfter float64) []launchSample {
	out := make([]launchSample, launches)
	for k := range out {
		speed := 1.0
		if c.cv > 0 {
			speed = math.Exp(c.cv * rng.NormFloat64())
		}
		s := launchSample{block: k, sessions: 60, corrupt: stats.BetaBinomialDraw(rng, 60, rate, c.icc), judged: true,
			faulted: rng.Float64() < rate, metrics: map[string]map[string]float64{}}
		for _, g := range groups {
			noise := func() float64 { return 1 + 0.005*rng.NormFloat64() }
			tps := 100 / speed * noise() * slow
			if strings.HasSuffix(g, " after") {
				tps *= slowAfter
			}
			s.metrics[g] = map[string]float64{MetricThroughput: tps, MetricTTFT: 200 * speed * noise(),
				MetricITL: 10 * speed * noise(), MetricLatency: 300 * speed * noise()}
		}
		out[k] = s
	}
	return out
}

// simulateVerdict draws one experiment of shape under cell and decides its family. With
// effect > 0 the last arm corrupts at rate + effect; with marginNull the last arm's
// tok/s is slower by exactly the margin, and every arm's "after" groups too.
func simulateVerdict(rng *rand.Rand, sh verdictShape, c nullCell, effect float64, marginNull bool) *LaunchFamily {
	launches := c.launches
	if sh.looks > 0 {
		launches = sh.looks
	}
	in := familyInput{Alpha: 0.05, MinEffect: 0.02, Margin: sh.margin, Arms: sh.arms, Primary: sh.primary, Wedges: sh.wedges,
		Groups: sh.groups, Stability: sh.stability, Looks: make([]int, len(sh.arms)), NoIntervals: true}
	for i, arm := range sh.arms {
		rate, slow, slowAfter := c.rate, 1.0, 1.0
		if i == len(sh.arms)-1 {
			rate = math.Min(1, rate+effect)
			if marginNull {
				slow = 1 - sh.margin
			}
		}
		if marginNull {
			slowAfter = 1 - sh.margin
		}
		in.Samples = append(in.Samples, simulateLaunches(rng, c, launches, rate, sh.groups, slow, slowAfter))
		if sh.looks > 0 && arm != sh.arms[0] {
			in.Looks[i] = sh.looks
		}
	}
	if sh.looks == 0 {
		return decideFamily(in)
	}
	// A sequential design stops at the first look whose launches reject at the
	// corruption claim's level over the looks (the orchestrator's rule), and the verdict
	// judges the launches run by then.
	level := stats.PrimaryLevel(in.Alpha, len(sh.arms)-1) / float64(sh.looks)
	full := in.Samples
	for k := 1; k <= sh.looks; k++ {
		rates := func(ss []launchSample) []float64 {
			var r []float64
			for _, s := range ss[:k] {
				r = append(r, float64(s.corrupt)/float64(s.sessions))
			}
			return r
		}
		r, _ := stats.LaunchPermutation(rates(full[0]), rates(full[1]), 0)
		if k == sh.looks || (stats.Reject(r.MinP, level) && stats.Reject(r.P, level)) {
			in.Samples = [][]launchSample{full[0][:k], full[1][:k]}
			break
		}
	}
	return decideFamily(in)
}

// claimTally counts, over simulated verdicts, those that claimed anything and which
// outcomes they claimed.
type claimTally struct {
	reps, any  int
	byOutcome  map[string]int
	falseClaim func(*LaunchClaim) bool
}

func (t *claimTally) add(f *LaunchFamily) {
	t.reps++
	hit := false
	seen := map[string]bool{}
	for _, c := range f.Claims {
		if t.falseClaim(c) {
			hit = true
			if !seen[c.Outcome] {
				seen[c.Outcome] = true
				t.byOutcome[c.Outcome]++
			}
		}
	}
	if hit {
		t.any++
	}
}

func (t *claimTally) rate() float64 { return float64(t.any) / float64(t.reps) }

// A difference claimed under a null; non-inferiority claimed at the margin.
func differenceClaim(c *LaunchClaim) bool {
	switch c.Decision {
	case "higher", "lower", "better", "worse":
		return true
	}
	return false
}

func marginClaim(c *LaunchClaim) bool {
	return (c.Outcome == OutcomeNonInferiority || c.Outcome == OutcomeStability) && c.Decision == "non-inferior"
}

type calibrationRow struct {
	shape string
	cell  nullCell
	null  string // "no effect" or "at the margin"
	tally claimTally
}

func runCalibration(cells []nullCell, reps int, seed uint64) []calibrationRow {
	var rows []calibrationRow
	for si, sh := range shapes {
		for ci, c := range cells {
			if sh.looks > 0 && c.launches != 8 {
				continue // a sequential design runs up to its looks
			}
			rng := rand.New(rand.NewPCG(seed+uint64(si), uint64(ci)))
			row := calibrationRow{shape: sh.name, cell: c, null: "no effect", tally: claimTally{byOutcome: map[string]int{}, falseClaim: differenceClaim}}
			for range reps {
				row.tally.add(simulateVerdict(rng, sh, c, 0, false))
			}
			rows = append(rows, row)
			if sh.margin > 0 && c.icc == 0.05 && c.rate == 0.02 {
				m := calibrationRow{shape: sh.name, cell: c, null: "at the margin", tally: claimTally{byOutcome: map[string]int{}, falseClaim: marginClaim}}
				for range reps {
					m.tally.add(simulateVerdict(rng, sh, c, 0, true))
				}
				rows = append(rows, m)
			}
		}
	}
	return rows
}

// limitFor is the most claims a family at size 0.05 can show over reps experiments
// without evidence against its size: three binomial standard errors above 0.05.
func limitFor(reps int) float64 { return 0.05 + 3*math.Sqrt(0.05*0.95/float64(reps)) }

// TestLaunchFamilyCalibration simulates verdicts of every shape under nulls whose
// launches differ, and checks that none claims anything more than alpha of the time.
// The suite runs a few cells; `make calibrate` (-calibrate FILE) runs them all, 2,000
// experiments each, and writes the table.
func TestLaunchFamilyCalibration(t *testing.T) {
	reps := 200
	cells := []nullCell{{0.2, 0.1, 0.05, 1}, {0.2, 0.1, 0.05, 2}, {0.2, 0.1, 0.05, 4}, {0.05, 0.02, 0.05, 8}, {0.2, 0.1, 0.05, 8}}
	if *calibrate != "" {
		reps, cells = 2000, nil
		for _, l := range []int{1, 2, 4, 8} {
			for _, icc := range []float64{0, 0.05, 0.2} {
				for _, rate := range []float64{0, 0.02, 0.1} {
					for _, cv := range []float64{0, 0.02, 0.05} {
						cells = append(cells, nullCell{icc, rate, cv, l})
					}
				}
			}
		}
	} else if testing.Short() {
		reps = 100
	}
	start := time.Now()
	rows := runCalibration(cells, reps, 1)
	worst := 0.0
	for _, r := range rows {
		worst = math.Max(worst, r.tally.rate())
		if r.tally.rate() > limitFor(reps) {
			t.Errorf("%s, %s, ICC %g, rate %g, CV %g, %d launches: claims in %.4f of %d verdicts (%v)",
				r.shape, r.null, r.cell.icc, r.cell.rate, r.cell.cv, r.cell.launches, r.tally.rate(), reps, r.tally.byOutcome)
		}
	}
	t.Logf("%d conditions, %d verdicts each: the highest false-claim rate %.4f (%v)", len(rows), reps, worst, time.Since(start).Round(time.Second))
	power4 := launchPower(4, 2000)
	fisher1 := stats.FisherPower(0, 0.12, 60, 60, 0.05)
	t.Logf("power, 0%% against 12%%, ICC 0.05, 60 sessions per launch: %.3f with 4 launches per arm (the launch family), %.3f with one launch per arm as Fisher's test on sessions decided it", power4, fisher1)
	if power4 < 0.8 {
		t.Errorf("power at 4 launches per arm: %.3f", power4)
	}
	if *calibrate != "" {
		if err := os.WriteFile(*calibrate, []byte(calibrationTable(rows, reps, power4, fisher1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// launchPower is the share of simulated quickstart verdicts with launches per arm that
// claim treatment's higher corruption, at 0% against 12% and ICC 0.05.
func launchPower(launches, reps int) float64 {
	rng := rand.New(rand.NewPCG(7, 12))
	hits := 0
	for range reps {
		f := simulateVerdict(rng, shapes[0], nullCell{icc: 0.05, rate: 0, cv: 0.02, launches: launches}, 0.12, false)
		if c := f.claim(OutcomeCorruption, "treatment", ""); c != nil && c.Decision == "higher" {
			hits++
		}
	}
	return float64(hits) / float64(reps)
}

func calibrationTable(rows []calibrationRow, reps int, power4, fisher1 float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Launch-heterogeneity calibration of the verdict's claims\n\n")
	fmt.Fprintf(&b, "Written by `make calibrate` (`go test ./verdict -run TestLaunchFamilyCalibration -calibrate FILE`). ")
	fmt.Fprintf(&b, "Each row simulates %d verdicts under a null whose launches differ: every launch draws its corruption rate from a beta distribution around the base rate with the given intra-launch correlation (60 sessions per launch), wedges with probability equal to the base rate, and runs at a speed drawn log-normally with the given coefficient of variation (the medians of its sessions then carry a 0.5%% sampling error). ", reps)
	fmt.Fprintf(&b, "Every verdict is decided by the same code as a real one (`decideFamily`): corruption, wedged launches, tok/s, TTFT, inter-token and end-to-end latency against the baseline, and throughput non-inferiority and stability where the shape has a margin. ")
	fmt.Fprintf(&b, "A row counts the verdicts that claim any difference (higher, lower, better, worse); the rows \"at the margin\" make the last arm's tok/s (and every arm's tok/s after its cascades) exactly 5%% slower and count the verdicts that claim non-inferiority. ")
	fmt.Fprintf(&b, "Divergence is reported but never claimed, so it has no row. The sequential shape runs up to 8 looks, stopping at the first look whose launches reject (the orchestrator's rule).\n\n")
	fmt.Fprintf(&b, "The limit a row must stay under is 0.05 plus three binomial standard errors at %d verdicts: %.4f.\n\n", reps, limitFor(reps))
	fmt.Fprintf(&b, "Power, 0%% against 12%%, intra-launch correlation 0.05, 60 sessions per launch: **%.3f** with 4 launches per arm (the launch family, corruption claim at 0.03); %.3f with one launch per arm as Fisher's test on sessions decided before (which, at the same correlation, also claimed differences under the null far more than 5%% of the time).\n\n", power4, fisher1)
	fmt.Fprintf(&b, "| verdict | null | launches per arm | ICC | base rate | speed CV | false-claim rate | claims by outcome |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	worst := 0.0
	for _, r := range rows {
		worst = math.Max(worst, r.tally.rate())
		var parts []string
		for _, o := range append([]string{OutcomeCorruption, OutcomeWedge, OutcomeNonInferiority, OutcomeStability}, metricOrder...) {
			if n := r.tally.byOutcome[o]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", o, n))
			}
		}
		launches := fmt.Sprint(r.cell.launches)
		if strings.HasPrefix(r.shape, "sequential") {
			launches = "up to 8"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %g | %g%% | %g%% | %.4f | %s |\n", r.shape, r.null, launches, r.cell.icc, 100*r.cell.rate, 100*r.cell.cv,
			r.tally.rate(), strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nHighest false-claim rate over the %d rows: %.4f.\n", len(rows), worst)
	return b.String()
}
