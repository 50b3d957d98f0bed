package verdict

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/jmoiron/sqlx"
)

// The invariants every verdict keeps, whatever was recorded, checked over simulated
// records of every shape a verdict judges: crashed, wedged, erroring and interrupted
// launches, lost sessions, launches that agree exactly, one launch per arm, factorial and
// sequential designs, divergence against an A/A floor, abort cascades and throughput
// phases. TestVerdictInvariants runs a
// short pass in `make test`; FuzzVerdictInvariants searches further in `make fuzz`.

// invariantRecords is how many simulated records the short pass judges.
const invariantRecords = 100

// simulated records the experiment seed draws and says what it drew.
func simulated(t *testing.T, seed uint64) (*sqlx.DB, int64, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	switch rng.IntN(6) {
	case 0:
		return simulatedCascade(t, rng, "deadlock")
	case 1:
		return simulatedCascade(t, rng, "abort-wedge")
	case 2:
		return simulatedThroughput(t, rng)
	}
	return simulatedAgent(t, rng)
}

// noisy scales x by a launch's own factor: none, small, or wild enough that its
// interval is worth nothing.
func noisy(rng *rand.Rand, spread float64) float64 {
	return math.Exp(spread * rng.NormFloat64())
}

var spreads = []float64{0, 0, 0.01, 0.05, 0.5, 3}

// simulatedAgent is an agent workload's record: an example's arms over 1 to 5 blocks,
// each arm with its own corruption rate, each launch ending as launches do.
func simulatedAgent(t *testing.T, rng *rand.Rand) (*sqlx.DB, int64, string) {
	examples := []string{"quickstart-launches", "quickstart", "aa", "factorial", "sequential", "ollama-kv-cache", "ollama-parallel"}
	example := examples[rng.IntN(len(examples))]
	spec, err := arms.Load(filepath.Join("..", "examples", example+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := spec.Expand()
	if err != nil {
		t.Fatal(err)
	}
	blocks := 1 + rng.IntN(5)
	rounds := max(spec.Workload.Rounds, 1)
	rate := map[string]float64{}
	flat := map[string]bool{} // every launch of the arm alike
	for _, a := range list {
		rate[a.Name] = []float64{0, 0, 0.02, 0.15, 0.5, 1}[rng.IntN(6)]
		flat[a.Name] = rng.IntN(3) == 0
	}
	statuses := []string{"done", "done", "done", "done", "done", "done", "crashed", "wedged", "erroring", "timed-out", "interrupted", "failed"}
	// The examples with an A/A floor of divergence record their divergence pass too.
	f := fixture{example: example, divergence: strings.HasPrefix(example, "ollama-")}
	interrupted := false
	for b := range blocks {
		order := rng.Perm(len(list))
		for _, k := range order {
			a := list[k]
			l := launch{arm: a.Name, block: b, status: statuses[rng.IntN(len(statuses))]}
			if rng.IntN(2) == 0 {
				l.status = "done" // most launches finish
			}
			n := 60
			corrupted := 0
			if flat[a.Name] {
				corrupted = int(rate[a.Name] * float64(n))
			} else {
				for range n {
					if rng.Float64() < rate[a.Name] {
						corrupted++
					}
				}
			}
			bad := make([]int, corrupted)
			for i := range bad {
				bad[i] = rng.IntN(rounds)
			}
			switch l.status {
			case "done":
				l.sessions = finished(n, bad...)
			case "failed":
			default:
				kept := rng.IntN(n + 1)
				lostStatus := map[string]string{"erroring": "error", "timed-out": "timeout"}[l.status]
				if lostStatus == "" {
					lostStatus = "aborted"
				}
				l.sessions = join(finished(kept, bad[:min(len(bad), kept)]...), lostAt(lostStatus, n-kept, rng.IntN(n-kept+1), rng.IntN(rounds)))
				l.err = "engine " + l.status
				interrupted = interrupted || l.status == "interrupted"
			}
			f.runs = append(f.runs, l)
		}
	}
	if interrupted {
		f.status = "interrupted"
	}
	db, id := recordFixture(t, f)
	return db, id, fmt.Sprintf("%s, %d blocks, rates %v, alike %v, runs %v", example, blocks, rate, flat, runStatuses(f.runs))
}

func runStatuses(ls []launch) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s/b%d %s (%d sessions)", l.arm, l.block, l.status, len(l.sessions)))
	}
	return out
}

// simulatedCascade is an abort-cascade example's record: each launch of each arm wedges
// at its arm's rate, and its speed varies from launch to launch by one of spreads.
func simulatedCascade(t *testing.T, rng *rand.Rand, example string) (*sqlx.DB, int64, string) {
	names := map[string][2]string{"deadlock": {"overlap-on", "overlap-off"}, "abort-wedge": {"no-handler", "handler"}}[example]
	blocks := 1 + rng.IntN(4)
	wedges := [2]float64{[]float64{0, 0.5, 1}[rng.IntN(3)], []float64{0, 0.5, 1}[rng.IntN(3)]}
	spread := spreads[rng.IntN(len(spreads))]
	base := perf{tps: 20 + 500*rng.Float64(), ttft: 2 + 50*rng.Float64()}
	var launches []outcomeLaunch
	for b := range blocks {
		for _, k := range rng.Perm(2) {
			p := perf{tps: base.tps * noisy(rng, spread), ttft: base.ttft * noisy(rng, spread)}
			l := cascadeLaunches(names[k], names[1-k], 1, p, p)
			one := l[0] // the wedging one
			if rng.Float64() >= wedges[k] {
				one = l[1]
			}
			one.block = b
			launches = append(launches, one)
		}
	}
	db, id := recordOutcomes(t, example, launches)
	return db, id, fmt.Sprintf("%s, %d blocks, wedge rates %v, spread %g", example, blocks, wedges, spread)
}

// simulatedThroughput is the throughput example's record: 1 to 4 blocks, the arms a
// little apart, each launch's speed varying by one of spreads; now and then a launch
// crashed after its first phase.
func simulatedThroughput(t *testing.T, rng *rand.Rand) (*sqlx.DB, int64, string) {
	blocks := 1 + rng.IntN(4)
	spread := spreads[rng.IntN(len(spreads))]
	ratio := []float64{1, 1, 0.97, 0.8, 1.1}[rng.IntN(5)]
	phases := func(p perf) []phaseRun {
		return []phaseRun{{name: "c=1", kind: "closed", concurrency: 1, sessions: 32, perf: p},
			{name: "c=32", kind: "closed", concurrency: 32, sessions: 32, perf: perf{p.tps * 0.3, p.ttft * 5}},
			{name: "poisson 16/s", kind: "open", sessions: 32, perf: perf{p.tps * 0.8, p.ttft * 2}}}
	}
	var launches []outcomeLaunch
	for b := range blocks {
		for _, k := range rng.Perm(2) {
			arm, r := "hicache=off", 1.0
			if k == 1 {
				arm, r = "hicache=on", ratio
			}
			l := outcomeLaunch{arm: arm, block: b, phases: phases(perf{54 * r * noisy(rng, spread), 40 * noisy(rng, spread)})}
			if rng.IntN(8) == 0 {
				l.status, l.err, l.phases = "crashed", "engine exited on its own", l.phases[:1]
			}
			launches = append(launches, l)
		}
	}
	db, id := recordOutcomes(t, "throughput", launches)
	return db, id, fmt.Sprintf("throughput, %d blocks, ratio %g, spread %g", blocks, ratio, spread)
}

// judgeSimulated judges the record seed draws and checks every invariant on it.
func judgeSimulated(t *testing.T, seed uint64) {
	db, id, what := simulated(t, seed)
	var v *Verdict
	var md, js string
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("seed %d (%s): judging panics: %v", seed, what, r)
			}
		}()
		var err error
		v, err = Build(context.Background(), db, id)
		if err != nil {
			t.Fatalf("seed %d (%s): %v", seed, what, err)
		}
		var b bytes.Buffer
		if err := v.Markdown(&b); err != nil {
			t.Fatalf("seed %d (%s): the markdown: %v", seed, what, err)
		}
		md = b.String()
		j, err := json.Marshal(v.Summary())
		if err != nil {
			t.Fatalf("seed %d (%s): the JSON summary: %v", seed, what, err)
		}
		js = string(j)
		_ = v.Headline()
		for i := range v.Arms {
			_ = v.DecisionWords(i)
		}
	}()
	for _, problem := range invariantProblems(v, md, js) {
		t.Errorf("seed %d (%s): %s", seed, what, problem)
	}
	if t.Failed() {
		t.Logf("the verdict:\n%s", md)
	}
}

var (
	// An interval's bounds as the verdict prints them: of a change, of a difference of rates.
	pctFigure = regexp.MustCompile(`(?:≥ |[+−-]?\d+(?:\.\d+)?% to )[+−-]?\d+(?:\.\d+)?%`)
	ptsFigure = regexp.MustCompile(`[+−-]?\d+(?:\.\d+)? to [+−-]?\d+(?:\.\d+)? pts`)
	// Advice that names a count of launches.
	launchAdvice  = regexp.MustCompile(`run (\d+) launches per arm|(\d+) launches per arm (?:can|\(` + "`" + `launches)|; (\d+) can test it`)
	significantly = regexp.MustCompile(`significantly (higher|lower|less often|more often|better|worse)`)
	boldDecision  = regexp.MustCompile(`\*\*(higher|lower|better|worse|non-inferior)\*\*`)
)

// invariantProblems lists how a verdict breaks the invariants; none when it keeps them.
func invariantProblems(v *Verdict, md, js string) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	// No p is written "p = < 1e-300".
	for _, text := range []string{md, js, strings.Join(v.Headline(), " ")} {
		if strings.Contains(text, "= <") {
			bad("a p-value reads \"= <\"")
		}
		// A count of one is said in the singular.
		if strings.Contains(text, "the other 1,") {
			bad("\"the other 1\" in the plural")
		}
	}

	// The corruption decision is one: the comparison's, the claim's, the JSON's.
	var claimed []*LaunchClaim
	if v.Claims != nil {
		for _, c := range v.Claims.Claims {
			// "negligible" is decided by the interval lying within the negligible zone, and
			// is written plain.
			if c.Claimed && c.Decision != "negligible" {
				claimed = append(claimed, c)
			}
			if c.Claimed && !c.Testable {
				bad("claim %s of %s at %q is %s without being tested", c.Outcome, c.Arm, c.Group, c.Decision)
			}
			if c.Claimed && !stats.Reject(c.P, c.Level) && slices.Contains([]string{"higher", "lower", "better", "worse"}, c.Decision) {
				bad("claim %s of %s at %q is %s without its test rejecting at its level (p %g, level %g)", c.Outcome, c.Arm, c.Group, c.Decision, c.P, c.Level)
			}
		}
	}
	for _, a := range v.Arms {
		c := a.Compare
		if c == nil || c.Launch == nil {
			continue
		}
		decided := c.Significant && !c.Inconclusive
		if decided != c.Launch.Claimed && !c.Inconclusive {
			bad("%s: the comparison decides %v, its claim on launches %v (%s)", a.Name, decided, c.Launch.Claimed, c.Launch.Decision)
		}
		if decided && c.Direction != c.Launch.Decision {
			bad("%s: the comparison says %s, its claim %s", a.Name, c.Direction, c.Launch.Decision)
		}
		if !strings.Contains(js, fmt.Sprintf(`"decision":%q`, c.Decision())) {
			bad("%s: the JSON lacks the decision %q", a.Name, c.Decision())
		}
	}

	// The headline decides only what a claim decided at its level.
	head := strings.Join(v.Headline(), " ")

	// A headline judged against an A/A floor of divergence leads with it, in at most three
	// sentences (an interrupted experiment's says so before them).
	if floor := v.floorHeadline(""); floor != "" {
		judged := strings.TrimPrefix(head, strings.TrimSuffix(head, v.uninterruptedHeadline("")))
		if n := len(sentences(judged)); n > 3 {
			bad("the divergence headline has %d sentences: %s", n, judged)
		}
		if lead := sentences(floor)[0]; !strings.Contains(judged, lead) {
			bad("the divergence headline lacks the floor's sentence: %s", judged)
		}
	}
	for word, decisions := range map[string][]string{
		"significantly higher": {"higher"}, "significantly lower": {"lower"},
		"significantly less often": {"lower"}, "significantly more often": {"higher"},
	} {
		if strings.Contains(head, word) && !slices.ContainsFunc(claimed, func(c *LaunchClaim) bool { return slices.Contains(decisions, c.Decision) }) {
			bad("the headline says %q, but no claim was decided so", word)
		}
	}

	// A bold decision stands only beside a claim decided at its level: the first
	// screen's table bolds exactly the claims that were decided.
	first := md
	if i := strings.Index(md, "<details>"); i >= 0 {
		first = md[:i]
	}
	if n := strings.Count(first, "\n"); n > firstScreen {
		bad("%d lines before the first folded section", n)
	}
	if n := len(boldDecision.FindAllString(first, -1)); n != len(claimed) {
		bad("the first screen bolds %d decisions, the claims decided are %d", n, len(claimed))
	}
	if strings.Contains(md, "**inconclusive**") || strings.Contains(md, "**not compared**") {
		bad("an undecided comparison is bolded")
	}
	if len(claimed) == 0 && significantly.MatchString(first) {
		bad("the first screen says %q with no claim decided", significantly.FindString(first))
	}

	// Intervals are finite and informative: no figure beyond ±10000%, no difference of
	// rates beyond ±100 points, no infinite bound.
	for _, m := range pctFigure.FindAllString(md+head, -1) {
		for _, f := range strings.Fields(strings.NewReplacer("≥", "", "to", "", "%", "", "−", "-").Replace(m)) {
			if x, err := strconv.ParseFloat(f, 64); err == nil && math.Abs(x) > 10000 {
				bad("an interval %s is printed", m)
			}
		}
	}
	// (An interaction, a difference of two differences, may reach ±200 points.)
	for _, m := range ptsFigure.FindAllString(md+head, -1) {
		for _, f := range strings.Fields(strings.TrimSuffix(m, " pts")) {
			if x, err := strconv.ParseFloat(strings.Replace(f, "−", "-", 1), 64); err == nil && math.Abs(x) > 200.05 {
				bad("an interval of %s is printed", m)
			}
		}
	}
	for _, inf := range []string{"to +∞", "to −∞", "−∞ to", "+∞ to", "NaN", "Inf"} {
		if strings.Contains(md, inf) {
			bad("an interval reads %q", inf)
		}
	}

	// The gates agree with each other and with the claims: a regression is a difference;
	// a throughput experiment or an A/A check fails the gates on every difference its
	// family claims, so that an A/A headline that says FAILED on a claimed difference
	// never exits 0 under --fail-on difference.
	gate := map[string]GateResult{}
	for _, name := range Gates() {
		gate[name], _ = v.CheckGate(name, GateOptions{})
	}
	if gate["regression"] == GateFail && gate["difference"] != GateFail {
		bad("the regression gate fails and the difference gate does not (%v)", gate["difference"])
	}
	if v.speedPrimary() || v.Design.AA {
		for _, c := range v.Claims.Differences() {
			if gate["difference"] != GateFail {
				bad("claim %s of %s at %q is %s, and the difference gate does not fail (%v)", c.Outcome, c.Arm, c.Group, c.Decision, gate["difference"])
			}
			if (c.Decision == "worse" || c.Decision == "higher") && gate["regression"] != GateFail {
				bad("claim %s of %s at %q is %s, and the regression gate does not fail (%v)", c.Outcome, c.Arm, c.Group, c.Decision, gate["regression"])
			}
		}
	}
	if aa, outcome := v.aaOutcome(); aa && outcome == aaFailed && len(v.Claims.Differences()) > 0 && !strings.Contains(head, "A/A check FAILED") && v.outcomeKind() {
		bad("an A/A check that claims a difference does not say it FAILED: %s", head)
	}

	// Every launch count advised is one the experiment can follow: the count a claim
	// not yet tested needs, more than it had, on sides that do not fault every time.
	needs := map[int]bool{}
	if v.Claims != nil {
		for _, c := range v.Claims.Claims {
			if c.Testable || c.Needed == 0 {
				continue
			}
			if c.Faulted != "" {
				bad("claim %s of %s at %q against a faulted side is advised %d launches", c.Outcome, c.Arm, c.Group, c.Needed)
			}
			// A baseline that faulted in every launch supplies no fair corruption, and a
			// side that faulted in every launch before a group supplies no speed there:
			// more launches that fault alike would not either.
			if everyLaunchFaulted(v, c.Against) && (c.Outcome == OutcomeCorruption || c.LaunchesBase == 0) ||
				everyLaunchFaulted(v, c.Arm) && c.LaunchesArm == 0 {
				bad("claim %s of %s at %q against %s, whose launches all faulted, is advised %d launches", c.Outcome, c.Arm, c.Group, c.Against, c.Needed)
			}
			if c.Needed <= min(c.LaunchesArm, c.LaunchesBase) && c.Outcome != OutcomeWedge {
				bad("claim %s of %s at %q had %d vs %d launches and is advised %d", c.Outcome, c.Arm, c.Group, c.LaunchesArm, c.LaunchesBase, c.Needed)
			}
			needs[c.Needed] = true
		}
	}
	for _, m := range launchAdvice.FindAllStringSubmatch(md+head, -1) {
		for _, g := range m[1:] {
			if n, err := strconv.Atoi(g); err == nil && !needs[n] {
				bad("advice %q names a count no untested claim needs (%v)", m[0], needs)
			}
		}
	}
	return out
}

// everyLaunchFaulted reports whether every launch of the named arm crashed, wedged or
// kept failing.
func everyLaunchFaulted(v *Verdict, arm string) bool {
	i := v.armIndex(arm)
	if i < 0 {
		return false
	}
	l := v.Arms[i].Launches
	faulted := l.Crashed + l.Wedged + l.Erroring + l.TimedOut
	return faulted > 0 && faulted == l.Total-l.Interrupted-l.NodeLost
}

// TestExampleVerdictsKeepTheInvariants checks every example's verdict, as the goldens
// hold them: the deadlock example once advised "7 launches per arm can test each of
// them" for comparisons its wedged baseline could never supply.
func TestExampleVerdictsKeepTheInvariants(t *testing.T) {
	check := func(t *testing.T, v *Verdict) {
		var b bytes.Buffer
		if err := v.Markdown(&b); err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(v.Summary())
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range invariantProblems(v, b.String(), string(j)) {
			t.Error(problem)
		}
	}
	for name := range examples {
		t.Run(name, func(t *testing.T) { check(t, buildExample(t, name)) })
	}
	for name := range outcomeExamples {
		t.Run(name, func(t *testing.T) { check(t, buildOutcomes(t, name)) })
	}
}

// TestVerdictInvariants judges invariantRecords simulated records and checks every
// invariant on each.
func TestVerdictInvariants(t *testing.T) {
	n := invariantRecords
	if testing.Short() {
		n = 40
	}
	start := time.Now()
	for seed := range uint64(n) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { judgeSimulated(t, seed) })
	}
	t.Logf("%d records in %s", n, time.Since(start).Round(time.Millisecond))
}

// FuzzVerdictInvariants searches seeds for a record that breaks an invariant.
func FuzzVerdictInvariants(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { judgeSimulated(t, seed) })
}

// TestVerdictInvariantRegressions keeps the records that broke an invariant before it was
// mended, each with what it broke.
func TestVerdictInvariantRegressions(t *testing.T) {
	for _, c := range []struct {
		seed  uint64
		broke string
	}{
		{1, "an abort cascade whose wedge difference is undefined made the JSON summary fail (NaN)"},
		{15, "a throughput after cascades read \"it may be up to NaN% lower\""},
		{22, "two launches per arm that agreed exactly were advised \"0 launches per arm (`launches: 0`)\""},
		{30, "a sequential arm judged at 4 vs 5 launches was advised \"run 4 launches per arm\""},
		{54, "the stratified table printed a risk difference of \"+NaN pts\""},
		{109, "a baseline that crashed in its one launch and was interrupted in the other was advised \"2 launches\" for the corruption claims it cannot supply"},
		{233, "a factorial arm whose one launch timed out before any session finished was advised \"2 launches\" for its corruption claim"},
	} {
		t.Run(fmt.Sprint(c.seed), func(t *testing.T) {
			t.Log(c.broke)
			judgeSimulated(t, c.seed)
		})
	}
}
