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
	// floor judges against a noise floor measured by an A/A experiment of floorLaunches
	// launches of the same configuration (drawn afresh for every verdict, at the same
	// icc and cv: the truth at the floor's).
	floor bool
}

// floorLaunches is the size of the simulated A/A floors: 4 launches per arm of two arms.
const floorLaunches = 8

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

// floorSource draws the simulated A/A floors: a fresh one for every floorReuse verdicts
// of one shape and cell (a floor's bound takes a bootstrap; reusing each a few times keeps
// the false-claim rate unbiased, its verdicts only a little correlated).
type floorSource struct {
	key  string
	f    *Floor
	uses int
}

const floorReuse = 10

var floors floorSource

func (s *floorSource) get(rng *rand.Rand, sh verdictShape, c nullCell, rate float64) *Floor {
	key := fmt.Sprint(sh.name, c, rate)
	if s.key != key || s.uses >= floorReuse {
		fs := [][]launchSample{simulateLaunches(rng, c, floorLaunches/2, rate, sh.groups, 1, 1),
			simulateLaunches(rng, c, floorLaunches/2, rate, sh.groups, 1, 1)}
		s.key, s.f, s.uses = key, measureFloor(fs, sh.groups), 0
	}
	s.uses++
	return s.f
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
	if c.floor {
		in.Floor, _ = floorInput(floors.get(rng, sh, c, c.rate), in.Samples, sh.groups)
	}
	if sh.looks == 0 {
		return decideFamily(in)
	}
	// A sequential design stops at the first look whose launches reject at that look's
	// level (the orchestrator's rule), and the verdict judges the launches run by then.
	levels := stats.SequentialLookLevels(in.Alpha, len(sh.arms)-1, sh.looks)
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
		if level := levels[k-1]; k == sh.looks || (level > 0 && stats.Reject(r.MinP, level) && stats.Reject(r.P, level)) {
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
			if sh.looks > 0 && (c.launches != 8 || c.floor) {
				continue // a sequential design runs up to its looks, on its own launches
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
	cells := []nullCell{{0.2, 0.1, 0.05, 1, false}, {0.2, 0.1, 0.05, 2, false}, {0.2, 0.1, 0.05, 3, false}, {0.2, 0.1, 0.05, 4, false},
		{0.05, 0.02, 0.05, 8, false}, {0.2, 0.1, 0.05, 8, false}, {0.02, 0.1, 0.02, 1, true}, {0.1, 0.1, 0.05, 2, true}}
	if *calibrate != "" {
		reps, cells = 2000, nil
		for _, l := range []int{1, 2, 3, 4, 8} {
			for _, icc := range []float64{0, 0.05, 0.2} {
				for _, rate := range []float64{0, 0.02, 0.1} {
					for _, cv := range []float64{0, 0.02, 0.05} {
						cells = append(cells, nullCell{icc, rate, cv, l, false})
					}
				}
			}
		}
		for _, l := range []int{1, 2} {
			for _, icc := range []float64{0.02, 0.1} {
				for _, rate := range []float64{0.02, 0.1} {
					cells = append(cells, nullCell{icc, rate, 0.03, l, true})
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
			t.Errorf("%s, %s, ICC %g, rate %g, CV %g, %d launches, floor %v: claims in %.4f of %d verdicts (%v)",
				r.shape, r.null, r.cell.icc, r.cell.rate, r.cell.cv, r.cell.launches, r.cell.floor, r.tally.rate(), reps, r.tally.byOutcome)
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
		table := calibrationTable(rows, reps, power4, fisher1) + powerTable(1000)
		if err := os.WriteFile(*calibrate, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// powerCase is one alternative of the power table.
type powerCase struct {
	name          string
	rate, effect  float64
	slow          float64 // the treatment's tok/s factor
	claim, metric string  // the claim that detects it, and its decision
}

var powerCases = []powerCase{
	{name: "corruption 0% → 12%", rate: 0, effect: 0.12, slow: 1, claim: OutcomeCorruption, metric: "higher"},
	{name: "corruption 5% → 15%", rate: 0.05, effect: 0.10, slow: 1, claim: OutcomeCorruption, metric: "higher"},
	{name: "tok/s −10%", rate: 0.02, slow: 0.9, claim: MetricThroughput, metric: "worse"},
}

// simulatePower is the share of reps simulated quickstart verdicts with launches per arm
// (and a floor or not) that claim the case's difference, at intra-launch correlation icc
// and speed CV cv.
func simulatePower(pc powerCase, icc, cv float64, launches int, floor bool, reps int, seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, uint64(launches)))
	sh := shapes[0]
	c := nullCell{icc: icc, rate: pc.rate, cv: cv, launches: launches, floor: floor}
	hits := 0
	for range reps {
		in := familyInput{Alpha: 0.05, MinEffect: 0.02, Arms: sh.arms, Primary: sh.primary, Groups: sh.groups,
			Looks: make([]int, len(sh.arms)), NoIntervals: true}
		in.Samples = [][]launchSample{simulateLaunches(rng, c, launches, pc.rate, sh.groups, 1, 1),
			simulateLaunches(rng, c, launches, math.Min(1, pc.rate+pc.effect), sh.groups, pc.slow, 1)}
		if floor {
			// The floor repeats the configuration that corrupts more, whose spread a floor
			// can measure (one that never corrupts says nothing of it).
			in.Floor, _ = floorInput(floors.get(rng, sh, c, math.Max(pc.rate+pc.effect, 0.05)), in.Samples, sh.groups)
		}
		f := decideFamily(in)
		group := ""
		if pc.claim == MetricThroughput {
			group = sh.groups[0]
		}
		if cl := f.claim(pc.claim, "treatment", group); cl != nil && cl.Decision == pc.metric {
			hits++
		}
	}
	return float64(hits) / float64(reps)
}

// powerTable is the power of the quickstart's claims by launches per arm, with and
// without a noise floor of floorLaunches launches.
func powerTable(reps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Power by launches per arm\n\n")
	fmt.Fprintf(&b, "The share of %d simulated two-arm agent verdicts (60 sessions per launch, the quickstart's claims and levels) that claim the difference, by launches per arm, judged on their own launches or against a noise floor: an A/A experiment of %d launches of the configuration that corrupts more (at least 5%%, so that its correlation is measured), drawn afresh for every %d verdicts at the same correlation and speed CV. ", reps, floorLaunches, floorReuse)
	fmt.Fprintf(&b, "Without a floor: nothing at one launch, Welch's t test on launch rates at 2-3, the randomization test from 4; the t test on log speeds from 2. With a floor: the rates' difference on effective counts at the floor's %g%% upper bound of the correlation, and the z test at its bound of the speed spread. The false-claim rows above include the floor's cells.\n\n", 100*stats.FloorConf)
	launches := []int{1, 2, 3, 4, 6, 8}
	fmt.Fprintf(&b, "| difference | ICC | speed CV | floor |")
	for _, l := range launches {
		fmt.Fprintf(&b, " %d |", l)
	}
	fmt.Fprintf(&b, "\n|---|---:|---:|---|%s\n", strings.Repeat("---:|", len(launches)))
	for _, pc := range powerCases {
		for _, icc := range []float64{0.02, 0.1} {
			for _, floor := range []bool{false, true} {
				fmt.Fprintf(&b, "| %s | %g | 3%% | %s |", pc.name, icc, map[bool]string{false: "none", true: "8 launches"}[floor])
				for _, l := range launches {
					fmt.Fprintf(&b, " %.2f |", simulatePower(pc, icc, 0.03, l, floor, reps, 35))
				}
				fmt.Fprintf(&b, "\n")
			}
		}
	}
	return b.String()
}

// With a floor one launch per arm finds a large difference, which it cannot without.
func TestPowerWithAFloor(t *testing.T) {
	big := powerCase{name: "0% → 50%", rate: 0, effect: 0.5, slow: 1, claim: OutcomeCorruption, metric: "higher"}
	if p := simulatePower(big, 0.02, 0.03, 1, true, 200, 1); p < 0.7 {
		t.Errorf("one launch per arm, floor at ICC 0.02: power %.2f for 0%% against 50%%", p)
	}
	if p := simulatePower(big, 0.02, 0.03, 1, false, 50, 1); p != 0 {
		t.Errorf("one launch per arm, no floor: power %.2f; nothing can be claimed", p)
	}
	slow := powerCase{name: "tok/s −30%", rate: 0.02, slow: 0.7, claim: MetricThroughput, metric: "worse"}
	if p := simulatePower(slow, 0.02, 0.03, 1, true, 200, 2); p < 0.8 {
		t.Errorf("one launch per arm, floor: power %.2f for tok/s 30%% lower at CV 3%%", p)
	}
}

// From three launches per arm a floor is not used: the arms' own launches test the claims
// with more power than the floor's bound would (it found 0% against 12% at ICC 0.02 in
// 0.64 of four-launch verdicts, where the launches alone find it in 0.98), so a floor
// added to such an experiment changes no claim; with two launches it decides them.
func TestAFloorWeighsOnlyArmsWithFewLaunches(t *testing.T) {
	pc := powerCases[0]
	sh := shapes[0]
	rng := rand.New(rand.NewPCG(5, 6))
	for _, launches := range []int{2, 3, 4} {
		c := nullCell{icc: 0.02, rate: pc.rate, cv: 0.03, launches: launches, floor: true}
		floorTests := 0
		for range 50 {
			in := familyInput{Alpha: 0.05, MinEffect: 0.02, Arms: sh.arms, Primary: sh.primary, Groups: sh.groups,
				Looks: make([]int, len(sh.arms)), NoIntervals: true}
			in.Samples = [][]launchSample{simulateLaunches(rng, c, launches, pc.rate, sh.groups, 1, 1),
				simulateLaunches(rng, c, launches, pc.rate+pc.effect, sh.groups, 0.9, 1)}
			without := decideFamily(in)
			in.Floor, _ = floorInput(floors.get(rng, sh, c, pc.rate+pc.effect), in.Samples, sh.groups)
			with := decideFamily(in)
			for i, cw := range with.Claims {
				co := without.Claims[i]
				if cw.Test != co.Test {
					floorTests++
				}
				if launches >= 3 && (cw.Test != co.Test || cw.Decision != co.Decision || !sameFloat(cw.P, co.P)) {
					t.Fatalf("%d launches per arm, %s %s: with a floor %s p %g %q, without %s p %g %q; a floor must change nothing",
						launches, cw.Outcome, cw.Group, cw.Test, cw.P, cw.Decision, co.Test, co.P, co.Decision)
				}
			}
		}
		if launches == 2 && floorTests == 0 {
			t.Errorf("%d launches per arm: no claim was weighed against the floor", launches)
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
	fmt.Fprintf(&b, "Rows with a noise floor judge one or two launches per arm against an A/A experiment of %d launches of the same configuration, drawn at the row's correlation and speed CV (the truth at the floor's; a fresh floor every %d verdicts), through its %g%% upper bounds.\n\n", floorLaunches, floorReuse, 100*stats.FloorConf)
	fmt.Fprintf(&b, "| verdict | null | launches per arm | noise floor | ICC | base rate | speed CV | false-claim rate | claims by outcome |\n|---|---|---:|---|---:|---:|---:|---:|---|\n")
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
		floor := "none"
		if r.cell.floor {
			floor = fmt.Sprintf("%d launches", floorLaunches)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %g | %g%% | %g%% | %.4f | %s |\n", r.shape, r.null, launches, floor, r.cell.icc, 100*r.cell.rate, 100*r.cell.cv,
			r.tally.rate(), strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nHighest false-claim rate over the %d rows: %.4f.\n", len(rows), worst)
	return b.String()
}
