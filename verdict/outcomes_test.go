package verdict

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// The outcome examples' verdicts are rendered, like the others, from databases written
// through the store API from fixed outcomes: phases, per-session timings and how each
// launch ended, as a run of the example against refserve gives them.

// perf is how fast an arm serves: tokens per second of one request and TTFT, with a
// spread that varies from session to session but never with the clock.
type perf struct {
	tps, ttft float64 // per request: tokens per second, ms
}

// phaseRun is one phase of a fixture launch.
type phaseRun struct {
	name, kind  string
	concurrency int
	sessions    int
	perf        perf
	// A cascade: whether a canary completed, and when.
	recovered bool
	recovery  time.Duration
}

// outcomeLaunch is one launch of an outcome fixture.
type outcomeLaunch struct {
	arm    string
	block  int
	status string
	err    string
	phases []phaseRun
}

// recordOutcomes writes the launches of an example into a fresh database and returns it
// opened read-only.
func recordOutcomes(t *testing.T, example string, launches []outcomeLaunch) (*sqlx.DB, int64) {
	t.Helper()
	spec, err := arms.Load(filepath.Join("..", "examples", example+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	armList, err := spec.Expand()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "o.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The example with as many blocks as the fixture records launches of an arm.
	blocks := 0
	for _, l := range launches {
		blocks = max(blocks, l.block+1)
	}
	spec.Blocks = min(max(spec.Blocks, 1), blocks)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dj, _ := json.Marshal(orchestrator.DesignOf(spec))
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: spec.Name, SpecPath: "examples/" + example + ".yaml", Spec: "version: 1",
		Seed: spec.Workload.Seed, Unit: spec.Analysis.Unit, Alpha: spec.Analysis.Alpha, Baseline: spec.Analysis.Baseline,
		Version: "test", Host: "h", Created: t0, Design: string(dj)})
	if err != nil {
		t.Fatal(err)
	}
	armIDs := map[string]int64{}
	for i, a := range armList {
		pins, _ := json.Marshal(map[string]any{"env": a.Pins.Env, "args": append([]string{}, a.Pins.Args...)})
		var levels []byte
		if a.Levels != nil {
			levels, _ = json.Marshal(a.Levels)
		}
		if armIDs[a.Name], err = s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: a.Name, Position: i, Pins: string(pins),
			Levels: string(levels), Command: `["refserve"]`, Env: "{}"}); err != nil {
			t.Fatal(err)
		}
	}
	w := s.NewWriter(store.WriterOptions{})
	for k, l := range launches {
		armID, ok := armIDs[l.arm]
		if !ok {
			t.Fatalf("fixture names arm %q, which the example does not have", l.arm)
		}
		start := t0.Add(time.Duration(k) * time.Minute)
		runID, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: armID, Block: l.block, Runtime: "process", Status: "starting", Started: start})
		if err != nil {
			t.Fatal(err)
		}
		status := l.status
		if status == "" {
			status = "done"
		}
		code := 0
		if err := s.UpdateRun(ctx, store.Run{ID: runID, Status: store.RunStatus(status), Error: l.err, Started: start, Ready: start.Add(300 * time.Millisecond),
			Ended: start.Add(30 * time.Second), ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		session := l.block * spec.Workload.Sessions
		at := start.Add(time.Second)
		for pos, p := range l.phases {
			ph := store.Phase{ExperimentID: exp, RunID: runID, ArmID: armID, Name: p.name, Kind: p.kind, Position: pos,
				Concurrency: p.concurrency, FirstSession: session, Sessions: p.sessions, Started: at, TokensPerSecond: math.NaN()}
			tokens := 0
			for i := range p.sessions {
				idx := session + i
				turn := store.Turn{ExperimentID: exp, RunID: runID, ArmID: armID, Session: idx, StatusCode: 200,
					FinishReason: "length", Started: at, Request: "{}", Response: "{}", CompletionTokens: 64, Deltas: 64}
				sess := store.Session{ExperimentID: exp, RunID: runID, ArmID: armID, Index: idx, Block: l.block, Status: "ok", Turns: 1}
				switch {
				case p.kind == "cascade" && i == p.sessions-1: // the canary
					turn.CompletionTokens, turn.Latency, turn.TTFT = 8, p.recovery, p.recovery/2
					if !p.recovered {
						turn.Error, turn.StatusCode, turn.CompletionTokens = "no event for 10s: stream stalled", 200, 0
						sess.Status, sess.Error = "timeout", "no canary completed within 10s of the abort"
					}
				case p.kind == "cascade": // cut by the abort
					turn.FinishReason, turn.CompletionTokens, turn.Latency, turn.TTFT = "abort", 20, 80*time.Millisecond, 10*time.Millisecond
				default:
					// Spread of a few percent, a function of the session alone.
					f := 1 + 0.03*math.Sin(float64(idx)*1.7)
					g := 1 + 0.05*math.Cos(float64(idx)*0.9)
					decode := time.Duration(63 / (p.perf.tps * f) * float64(time.Second))
					turn.TTFT = time.Duration(p.perf.ttft * g * float64(time.Millisecond))
					turn.DecodeTime = decode
					turn.Latency = turn.TTFT + decode
					// One token per event, a steady pace with every 16th gap doubled: the
					// per-token table's p99 sees the stalls the mean hides.
					step := decode / 67
					at := turn.TTFT
					for k := range 64 {
						turn.TokenTimes = append(turn.TokenTimes, at)
						at += step
						if k%16 == 15 {
							at += step
						}
					}
					tokens += turn.CompletionTokens
				}
				w.Turn(turn)
				w.Session(sess)
			}
			ph.Requests, ph.Completed, ph.Tokens = p.sessions, p.sessions, tokens
			dur := time.Duration(p.sessions/max(p.concurrency, 1)) * time.Duration(64/p.perf.tps*float64(time.Second))
			if p.kind == "cascade" {
				ph.Abort, ph.Aborted, ph.Canaries = "abort_all", p.sessions-1, 1
				ph.AbortedAt = at.Add(200 * time.Millisecond)
				rec := p.recovered
				ph.Recovered, ph.Recovery = &rec, p.recovery
				dur = 200*time.Millisecond + p.recovery
				if !p.recovered {
					dur = 200*time.Millisecond + 10*time.Second + 80*time.Millisecond
				}
				ph.Requests = p.sessions
			}
			ph.Ended = at.Add(dur)
			if p.kind != "cascade" && dur > 0 {
				ph.TokensPerSecond = float64(tokens) / dur.Seconds()
			}
			if err := s.AddPhase(ctx, ph); err != nil {
				t.Fatal(err)
			}
			at, session = ph.Ended, session+p.sessions
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s.FinishExperiment(ctx, exp, "done", "", t0.Add(time.Hour))
	s.Close()
	db, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, exp
}

// cascadeLaunches is an abort cascade example's launches: the live arm runs every phase
// and recovers after each cascade; the wedging arm's first canary never completes.
func cascadeLaunches(wedging, live string, blocks int, fast, slow perf) []outcomeLaunch {
	before := func(p perf) []phaseRun {
		return []phaseRun{{name: "c=1 before", kind: "closed", concurrency: 1, sessions: 32, perf: p},
			{name: "c=32 before", kind: "closed", concurrency: 32, sessions: 32, perf: perf{p.tps * 0.31, p.ttft * 4}}}
	}
	var out []outcomeLaunch
	for b := range blocks {
		w := outcomeLaunch{arm: wedging, block: b, status: "wedged",
			err:    "workload: cascade 1 (abort_all, 60 requests cut): engine wedged: no canary request completed after the abort within 10s",
			phases: append(before(slow), phaseRun{name: "cascade 1", kind: "cascade", concurrency: 60, sessions: 61})}
		l := outcomeLaunch{arm: live, block: b, phases: append(before(fast),
			phaseRun{name: "cascade 1", kind: "cascade", concurrency: 60, sessions: 61, recovered: true, recovery: time.Duration(18+7*b) * time.Millisecond},
			phaseRun{name: "cascade 2", kind: "cascade", concurrency: 60, sessions: 61, recovered: true, recovery: time.Duration(25+5*b) * time.Millisecond},
			phaseRun{name: "c=1 after", kind: "closed", concurrency: 1, sessions: 32, perf: perf{fast.tps * 0.998, fast.ttft}},
			phaseRun{name: "c=32 after", kind: "closed", concurrency: 32, sessions: 32, perf: perf{fast.tps * 0.31 * 1.002, fast.ttft * 4}})}
		if b%2 == 0 {
			out = append(out, w, l)
		} else {
			out = append(out, l, w)
		}
	}
	return out
}

var outcomeExamples = map[string]func(t *testing.T) (*sqlx.DB, int64){
	"deadlock": func(t *testing.T) (*sqlx.DB, int64) {
		return recordOutcomes(t, "deadlock", cascadeLaunches("overlap-on", "overlap-off", 4, perf{500, 3}, perf{500, 3}))
	},
	"abort-wedge": func(t *testing.T) (*sqlx.DB, int64) {
		return recordOutcomes(t, "abort-wedge", cascadeLaunches("no-handler", "handler", 4, perf{54, 40}, perf{54.2, 40}))
	},
	"throughput": func(t *testing.T) (*sqlx.DB, int64) {
		phases := func(p perf) []phaseRun {
			return []phaseRun{{name: "c=1", kind: "closed", concurrency: 1, sessions: 32, perf: p},
				{name: "c=32", kind: "closed", concurrency: 32, sessions: 32, perf: perf{p.tps * 0.3, p.ttft * 5}},
				{name: "poisson 16/s", kind: "open", sessions: 32, perf: perf{p.tps * 0.8, p.ttft * 2}}}
		}
		return recordOutcomes(t, "throughput", []outcomeLaunch{
			{arm: "hicache=on", block: 0, phases: phases(perf{53.8, 41})},
			{arm: "hicache=off", block: 0, phases: phases(perf{54, 40})},
			{arm: "hicache=off", block: 1, phases: phases(perf{54.1, 40})},
			{arm: "hicache=on", block: 1, phases: phases(perf{53.7, 41})},
		})
	},
}

func buildOutcomes(t *testing.T, name string) *Verdict {
	t.Helper()
	db, ref := outcomeExamples[name](t)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOutcomeExampleVerdicts pins the outcome examples' verdicts to their golden files and
// checks the structure every verdict must have.
func TestOutcomeExampleVerdicts(t *testing.T) {
	for _, name := range []string{"deadlock", "abort-wedge", "throughput"} {
		t.Run(name, func(t *testing.T) {
			v := buildOutcomes(t, name)
			dir := t.TempDir()
			path := filepath.Join(dir, name+".md")
			if err := v.WriteFiles(path, outfile.Guard{}); err != nil {
				t.Fatal(err)
			}
			md, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, md, filepath.Join("testdata", name+".golden.md"))
			checkStructure(t, string(md))
			// An abort-cascade verdict draws its own outcome: launches wedged by arm.
			svg, err := os.ReadFile(filepath.Join(dir, name+"-wedges.svg"))
			if cascades := name != "throughput"; cascades != (err == nil) ||
				cascades && (!strings.Contains(string(svg), "4 of 4 launches wedged") || !strings.Contains(string(svg), "0 of 4 launches wedged")) {
				t.Errorf("wedges chart (%v):\n%.600s", err, svg)
			}
			// Every phased workload draws its engines' throughput, phase by phase, launch
			// by launch.
			tp, err := os.ReadFile(filepath.Join(dir, name+"-throughput.svg"))
			if err != nil || !strings.Contains(string(tp), "Engine throughput by phase") || !strings.Contains(string(tp), " launches from ") {
				t.Errorf("throughput chart (%v):\n%.600s", err, tp)
			}
		})
	}
}

func TestDeadlockHeadlineSaysWhichArmWedgedWithTheExactTestOnLaunches(t *testing.T) {
	v := buildOutcomes(t, "deadlock")
	head := v.Headline()[0]
	for _, want := range []string{
		"The engine wedged under the abort cascade (no canary completed after the abort): overlap-on in 4 of 4 launches, against overlap-off in 0 of 4 (randomization test on launches: p = 0.029).",
		"overlap-off served a canary within 40 ms of every abort (8 cascades, median 31 ms)",
	} {
		if !strings.Contains(head, want) {
			t.Errorf("headline lacks %q:\n%s", want, head)
		}
	}
	if !strings.HasSuffix(head, "Decision: overlap-off wedges significantly less often than overlap-on.") {
		t.Errorf("headline does not end with the wedge decision:\n%s", head)
	}
	if n := len(sentences(head)); n > 3 {
		t.Errorf("%d sentences", n)
	}
	if fail, why := v.Gate("wedge"); !fail || !strings.Contains(why, "overlap-on") {
		t.Errorf("the wedge gate: %v %q", fail, why)
	}
	c := v.Outcomes.Cascades
	if c[0].Wedged != 4 || c[1].Wedged != 0 || c[1].Recovered != 8 || len(c[0].WedgedAfter) != 4 {
		t.Fatalf("cascades %+v", c)
	}
	for _, d := range c[0].WedgedAfter {
		if d < 10000 || d > 20000 {
			t.Errorf("declared wedged %v ms after the abort, want within stall + 10 s", d)
		}
	}
	// The wedged arm's lost sessions make its corruption inconclusive, not clean.
	if v.Arms[0].Compare != nil || v.Arms[1].Compare == nil || !v.Arms[1].Compare.Inconclusive {
		t.Errorf("corruption comparison: %+v", v.Arms[1].Compare)
	}
	// One decision, said alike everywhere: show's column and the JSON give the wedge
	// decision the headline gives, and the regression gate, whose question is wedging,
	// passes an arm whose only fault is the baseline's wedging.
	if got := v.DecisionWords(1); got != "wedges lower (launch p = 0.029 ≤ 0.03)" {
		t.Errorf("show's decision for overlap-off: %q", got)
	}
	arms := v.Summary()["arms"].([]map[string]any)
	if w, ok := arms[1]["wedges_vs_baseline"].(map[string]any); !ok || w["decision"] != "lower" {
		t.Errorf("JSON wedge decision: %v", arms[1]["wedges_vs_baseline"])
	}
	if fail, why := v.Gate("regression"); fail {
		t.Errorf("the regression gate fails the arm that did not wedge: %s", why)
	}
	// The wedge claim was decided: the undecided gate does not ask for the corruption
	// the wedged baseline left without a fair sample, and difference says which way.
	if g, why := v.CheckGate("undecided", GateOptions{}); g != GatePass {
		t.Errorf("the undecided gate on a decided wedge claim: %v %q", g, why)
	}
	if fail, why := v.Gate("difference"); !fail || !strings.HasPrefix(why, "overlap-off wedged less often than overlap-on (-100.0 points") {
		t.Errorf("the difference gate on an arm that wedges less: %v %q", fail, why)
	}
	// The same launches with the arms' roles swapped: the arm that wedges is the
	// regression.
	swapped := buildOutcomes(t, "deadlock")
	for _, c := range swapped.Claims.Claims {
		if c.Outcome == OutcomeWedge {
			c.Estimate, c.Decision = -c.Estimate, "higher"
		}
	}
	if fail, why := swapped.Gate("regression"); !fail || !strings.Contains(why, "overlap-off wedged more often than overlap-on") {
		t.Errorf("the regression gate on an arm that wedges more: %v %q", fail, why)
	}
}

func TestAbortWedgeVerdictSaysNonInferior(t *testing.T) {
	v := buildOutcomes(t, "abort-wedge")
	head := v.Headline()[0]
	for _, want := range []string{"no-handler in 4 of 4 launches, against handler in 0 of 4", "p = 0.029",
		"its throughput after them was non-inferior to before within the 5% margin", "handler's throughput is non-inferior to no-handler's within the 5% margin"} {
		if !strings.Contains(head, want) {
			t.Errorf("headline lacks %q:\n%s", want, head)
		}
	}
	for _, ni := range append(v.Outcomes.Throughput, v.Outcomes.Stability...) {
		if !ni.Result.NonInferior {
			t.Errorf("%s at %s against %s: not non-inferior (%+v)", ni.Arm, ni.Group, ni.Against, ni.Result)
		}
	}
	if len(v.Outcomes.Stability) != 2 {
		t.Errorf("%d after-versus-before judgements, want one per concurrency", len(v.Outcomes.Stability))
	}
	// Loads that the table decides differently are said differently: one non-inferior,
	// the other not shown so, with how much it may cost.
	st := slices.Clone(v.Outcomes.Stability)
	st[0].Result.NonInferior, st[0].Result.Bound = false, 0.931
	if got := v.stabilityClause(st); !strings.Contains(got, "non-inferior to before within the 5% margin at c=32 (") ||
		!strings.Contains(got, "not shown so at c=1 (it may be up to 6.9% lower)") {
		t.Errorf("mixed stability: %s", got)
	}
	if fail, why := v.Gate("throughput"); fail {
		t.Errorf("the throughput gate failed: %s", why)
	}
	for _, r := range v.Outcomes.Cascades[1].Recoveries {
		if r >= 300 {
			t.Errorf("recovery %v ms", r)
		}
	}
}

func TestThroughputVerdictComparesLatencyAndThroughputByRanks(t *testing.T) {
	v := buildOutcomes(t, "throughput")
	head := v.Headline()[0]
	// The headline answers the question the margin asks, with the bound that decides it,
	// and quotes no figure that no test stands behind.
	if !strings.HasPrefix(head, "Decision: hicache=on's throughput is non-inferior to hicache=off's within the 5% margin at c=1, c=32 and poisson 16/s: it costs at most 2.2% (one-sided 99% bound, over 2 and 2 launches, lowest at poisson 16/s).") ||
		strings.Contains(head, "differ by") {
		t.Errorf("headline:\n%s", head)
	}
	// show's decision column gives the speed claim's decision, load by load, not
	// corruption's, which a throughput experiment does not ask.
	on := v.armIndex("hicache=on")
	if got := v.DecisionWords(on); got != "tok/s non-inferior at c=1, c=32 and poisson 16/s" {
		t.Errorf("show's decision for hicache=on: %q", got)
	}
	// --json gives the same decisions, load by load.
	arms := v.Summary()["arms"].([]map[string]any)
	loads, _ := arms[on]["speed_vs_baseline"].([]map[string]any)
	if len(loads) != 3 {
		t.Fatalf("speed_vs_baseline: %v", arms[on]["speed_vs_baseline"])
	}
	for i, want := range []string{"c=1", "c=32", "poisson 16/s"} {
		if l := loads[i]; l["load"] != want || l["decision"] != "non-inferior" || l["claim"] != OutcomeNonInferiority {
			t.Errorf("speed_vs_baseline[%d] = %v; want %s non-inferior", i, l, want)
		}
	}
	if _, ok := arms[v.Baseline]["speed_vs_baseline"]; ok {
		t.Errorf("the baseline has a speed decision against itself")
	}
	words := func(change func(c *LaunchClaim)) string {
		w := *v
		claims := *v.Claims
		claims.Claims = nil
		for _, c := range v.Claims.Claims {
			d := *c
			if d.Primary {
				change(&d)
			}
			claims.Claims = append(claims.Claims, &d)
		}
		w.Claims = &claims
		return w.DecisionWords(on)
	}
	if got := words(func(c *LaunchClaim) {
		if c.Group == "poisson 16/s" {
			c.Claimed, c.Decision = false, ""
		}
	}); got != "tok/s non-inferior at c=1 and c=32; not shown at poisson 16/s" {
		t.Errorf("show's decision with a load not shown: %q", got)
	}
	if got := words(func(c *LaunchClaim) { c.Testable, c.Claimed, c.Decision, c.Needed = false, false, "", 2 }); got != "tok/s not attributable at c=1, c=32 and poisson 16/s (2 can test it)" {
		t.Errorf("show's decision with no load testable: %q", got)
	}
	// A load left undecided does not hide the ones decided: they are said first, with
	// the most they cost, then the one not shown and how much it may cost.
	mixed := poissonNotShown(v, 0.852)
	if got := mixed.niClauses(""); !strings.HasPrefix(got, "hicache=on's throughput is non-inferior to hicache=off's within the 5% margin at c=1 and c=32 (it costs at most") ||
		!strings.Contains(got, "but not shown so at poisson 16/s, where its tok/s per request may be up to 14.8% lower") {
		t.Errorf("mixed throughput: %s", got)
	}
	// It ends with the command that says how many launches would show it, once.
	mixed.Experiment.SpecPath, mixed.DB = "examples/throughput.yaml", "/tmp/r.db"
	plan := "`arbiter plan examples/throughput.yaml --from " + strconv.FormatInt(v.Experiment.ID, 10) + " --db /tmp/r.db` says how many"
	if got := mixed.niClauses(""); strings.Count(got, plan) != 1 || !strings.HasSuffix(got, "says how many would show it") {
		t.Errorf("mixed throughput does not say, once, how to plan the launches that would decide it: %s", got)
	}
	if strings.Contains(head, "arbiter plan") {
		t.Errorf("a throughput verdict that decided every load sends its reader to plan: %s", head)
	}
	// One launch per arm weighed against a noise floor measured no spread of its own: the
	// plan reads the floor's.
	claims := *mixed.Claims
	claims.Claims = nil
	for _, c := range v.Claims.Claims {
		d := *c
		d.Spread = math.NaN()
		claims.Claims = append(claims.Claims, &d)
	}
	floored := mixed
	floored.Claims, floored.Floor = &claims, &Floor{Experiment: 3, Name: "throughput-aa"}
	if got := floored.niClauses(""); !strings.Contains(got, "`arbiter plan examples/throughput.yaml --noise-floor 3 --db /tmp/r.db` says how many") {
		t.Errorf("against a floor, with no spread of its own: %s", got)
	}
	// Every group, metric and arm has a row with an interval and a p.
	if got := len(v.Outcomes.Metrics); got != 3*4 {
		t.Fatalf("%d comparisons, want 12", got)
	}
	for _, r := range v.Outcomes.Metrics {
		if math.IsNaN(r.Result.P) || math.IsInf(r.Result.RatioCI.Lo, 0) || r.Result.N1 != 64 || r.Result.N2 != 64 {
			t.Errorf("%s %s: %+v", r.Group, r.Metric, r.Result)
		}
	}
	// hicache=on is 2.5% slower to the first token (41 against 40 ms at c=1): with 64
	// sessions a side and a 5% spread the rank test sees it.
	if r := v.metricRow("c=1", MetricTTFT, "hicache=on"); r == nil || math.Abs(r.Result.Ratio-1.025) > 0.005 ||
		!(r.Result.P < 0.05) {
		t.Errorf("TTFT at c=1: %+v", r)
	}
	// Nothing was corrupted in either arm: the stratified corruption test has nothing to
	// say, and no caveat about its strata may crowd the ones that matter.
	for _, c := range v.Caveats {
		if strings.Contains(c.Text, "stratified by") {
			t.Errorf("a caveat on strata without a corrupted session: %s", c)
		}
	}
	md := markdown(t, v)
	for _, want := range []string{"<summary>Latency and throughput</summary>", "<summary>Throughput non-inferiority (margin 5%)</summary>", "| poisson 16/s |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	sum := v.Summary()["outcomes"].(map[string]any)
	if b, err := json.Marshal(sum); err != nil || !strings.Contains(string(b), `"non_inferior":true`) {
		t.Errorf("summary %s (%v)", b, err)
	}
}

// poissonNotShown is a copy of v whose throughput at poisson 16/s is not shown
// non-inferior, its lower bound at bound.
func poissonNotShown(v *Verdict, bound float64) Verdict {
	w, outcomes := *v, *v.Outcomes
	w.Outcomes = &outcomes
	w.Outcomes.Throughput = slices.Clone(v.Outcomes.Throughput)
	for i := range w.Outcomes.Throughput {
		if ni := &w.Outcomes.Throughput[i]; ni.Group == "poisson 16/s" {
			ni.Result.NonInferior, ni.Result.Bound = false, bound
		}
	}
	return w
}

// TestThroughputThatFlipsBetweenBlocksIsNamed: a difference that follows the launches
// (faster in one block, slower in the next) is said to.
func TestThroughputThatFlipsBetweenBlocksIsNamed(t *testing.T) {
	phases := func(p perf) []phaseRun {
		return []phaseRun{{name: "c=1", kind: "closed", concurrency: 1, sessions: 32, perf: p},
			{name: "c=32", kind: "closed", concurrency: 32, sessions: 32, perf: perf{p.tps * 0.3, p.ttft * 5}}}
	}
	db, ref := recordOutcomes(t, "throughput", []outcomeLaunch{
		{arm: "hicache=on", block: 0, phases: phases(perf{60, 40})},
		{arm: "hicache=off", block: 0, phases: phases(perf{54, 40})},
		{arm: "hicache=off", block: 1, phases: phases(perf{54, 40})},
		{arm: "hicache=on", block: 1, phases: phases(perf{48, 40})},
	})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range v.Caveats {
		if c.Kind == CaveatDesign && strings.Contains(c.Text, "At c=1, hicache=on's median tok/s per request against hicache=off's changes direction from block to block (block 0 +") {
			found = true
		}
	}
	if !found {
		t.Errorf("no caveat names the flip: %+v", v.Caveats)
	}
}

// min_effect is an interval rule: a change is called better or worse only when its
// whole interval lies beyond the negligible zone, negligible only when it lies inside.
func TestMinEffectIsAnIntervalRule(t *testing.T) {
	for _, c := range []struct {
		metric    string
		lo, hi    float64
		minEffect float64
		want      string
	}{
		{MetricITL, 0.995, 1.004, 0.02, "negligible"},
		{MetricITL, 0.97, 1.004, 0.02, ""}, // significant or not, it may still be 3% better
		{MetricITL, 1.001, 1.03, 0.02, ""}, // excludes no change, but not the zone
		{MetricITL, 1.025, 1.06, 0.02, "worse"},
		{MetricITL, 0.9, 0.97, 0.02, "better"},
		{MetricThroughput, 0.9, 0.97, 0.02, "worse"},
		{MetricThroughput, 1.001, 1.004, 0, "better"}, // min_effect 0: any change shown is called
		{MetricThroughput, 0.999, 1.004, 0, ""},
	} {
		if got := speedDecision(c.metric, stats.Interval{Lo: c.lo, Hi: c.hi}, c.minEffect); got != c.want {
			t.Errorf("%s [%g, %g], min_effect %g: %q, want %q", c.metric, c.lo, c.hi, c.minEffect, got, c.want)
		}
	}
	// On launches: four launches per arm whose ITL medians differ by 0.2% with a spread
	// of 0.1% read negligible; by 5%, worse; with one launch per arm, nothing.
	launches := func(n int, itl ...float64) []launchSample {
		var out []launchSample
		for k := range n {
			out = append(out, launchSample{block: k, metrics: map[string]map[string]float64{"all sessions": {MetricITL: itl[k%len(itl)]}}})
		}
		return out
	}
	for _, c := range []struct {
		n     int
		shift float64
		want  string
	}{{4, 1.002, "negligible"}, {4, 1.05, "worse"}, {1, 1.05, ""}} {
		base := launches(c.n, 10, 10.01, 9.99, 10.005)
		arm := launches(c.n, 10*c.shift, 10.01*c.shift, 9.99*c.shift, 10.005*c.shift)
		f := decideFamily(familyInput{Alpha: 0.05, MinEffect: 0.02, Arms: []string{"control", "treatment"}, Primary: OutcomeCorruption,
			Groups: []string{"all sessions"}, Looks: []int{1, 1}, Samples: [][]launchSample{base, arm}})
		cl := f.claim(MetricITL, "treatment", "all sessions")
		if cl == nil || cl.Decision != c.want || cl.Testable != (c.n > 1) {
			t.Errorf("%d launches, shift %g: %+v, want %q", c.n, c.shift, cl, c.want)
		}
	}
}

// TestDeadlockCallsNothingAboutTheFixInconclusive: in the deadlock example the baseline
// (overlap on) wedged in all 4 of its launches. The fix is not in doubt, it has nothing
// fair to be compared with: its corruption is "not compared", never "inconclusive", and
// no claim against the wedged baseline is given a launch count, which more launches that
// wedge alike could never meet (the verdict once advised "7 launches per arm can test
// each of them" for comparisons 4 against 0 launches).
func TestDeadlockCallsNothingAboutTheFixInconclusive(t *testing.T) {
	v := buildOutcomes(t, "deadlock")
	fix := v.Arms[1]
	if c := fix.Compare; c == nil || !c.Inconclusive || !c.NoBaseline || c.Decision() != "not compared" {
		t.Fatalf("the fix's comparison: %+v", fix.Compare)
	}
	md := markdown(t, v)
	for _, line := range strings.Split(md, "\n") {
		// The one sentence that defines the word, in "What was compared", may use it.
		if strings.Contains(line, "inconclusive") && !strings.HasPrefix(line, "- A session is analysed") {
			t.Errorf("the deadlock verdict calls something inconclusive: %q", line)
		}
	}
	for _, c := range v.Claims.Claims {
		if c.Against == v.Arms[v.Baseline].Name && (c.LaunchesBase == 0 || c.Outcome == OutcomeCorruption) {
			if c.Testable || c.Needed != 0 || c.Faulted != "overlap-on" || claimDecision(c) != "not compared: overlap-on faulted" {
				t.Errorf("claim %s at %q against the wedged baseline: %+v", c.Outcome, c.Group, c)
			}
		}
	}
	for _, advice := range []string{"To decide them", "To decide it,", "launches per arm can test", "can test it"} {
		if strings.Contains(md, advice) || strings.Contains(strings.Join(caveatTexts(v.Caveats), " "), advice) {
			t.Errorf("the deadlock verdict gives advice it cannot follow (%q):\n%s", advice, md)
		}
	}
	if !strings.Contains(md, "Not compared, because overlap-on wedged in every launch (4 of 4) and leaves nothing fair to compare: corruption;") {
		t.Errorf("the first screen does not say why the rest is not compared:\n%s", md)
	}
	arms := v.Summary()["arms"].([]map[string]any)
	if d := arms[1]["vs_baseline"].(map[string]any)["decision"]; d != "not compared" {
		t.Errorf("JSON decision %v, want not compared", d)
	}
}

// An A/A check of a throughput workload says first how the check ended, as one of
// corruption does: passed when no difference is claimed between its identical arms,
// FAILED when one is.
func TestAnAAThroughputHeadlineSaysHowTheCheckEnded(t *testing.T) {
	v := buildOutcomes(t, "throughput")
	v.Design.AA = true
	diffs := v.Claims.Differences()
	head := v.Headline()[0]
	switch {
	case len(diffs) == 0 && !strings.HasPrefix(head, "A/A check passed: no difference is claimed between the identical arms. Decision: hicache=on's throughput is non-inferior"):
		t.Errorf("no difference claimed, headline:\n%s", head)
	case len(diffs) > 0 && !strings.HasPrefix(head, "A/A check FAILED: "):
		t.Errorf("%d differences claimed, headline:\n%s", len(diffs), head)
	}
	// A claimed difference fails it.
	claims := *v.Claims
	claims.Claims = slices.Clone(claims.Claims)
	for i, c := range claims.Claims {
		if c.Outcome == MetricTTFT && !c.Claimed {
			d := *c
			d.Claimed, d.Decision = true, "worse"
			claims.Claims[i] = &d
			break
		}
	}
	failed := *v
	failed.Claims = &claims
	if len(failed.Claims.Differences()) == 0 {
		t.Fatal("no TTFT claim to make a difference of")
	}
	if head := failed.Headline()[0]; !strings.HasPrefix(head, "A/A check FAILED: the pipeline claims a difference between identical arms (hicache=on's TTFT worse). Decision: ") {
		t.Errorf("a claimed difference, headline:\n%s", head)
	}
	// ... and so do the gates a CI job runs an A/A check with.
	for _, gate := range []string{"difference", "regression"} {
		if g, why := failed.CheckGate(gate, GateOptions{}); g != GateFail || !strings.HasPrefix(why, "hicache=on's TTFT at ") {
			t.Errorf("a claimed difference, gate %s = %v: %s", gate, g, why)
		}
	}
}

// An A/A check of corruption whose family claims a latency difference between its
// identical arms fails the difference gate, as its verdict says the check failed.
func TestAnAACheckFailsTheDifferenceGateOnAnyClaimedDifference(t *testing.T) {
	v := buildExample(t, "aa")
	if !v.Design.AA || len(v.Claims.Differences()) != 0 {
		t.Fatalf("the aa example: A/A %v, differences %v", v.Design.AA, v.Claims.Differences())
	}
	if g, why := v.CheckGate("difference", GateOptions{}); g != GatePass {
		t.Fatalf("the aa example fails the difference gate: %s", why)
	}
	claims := *v.Claims
	claims.Claims = slices.Clone(claims.Claims)
	for i, c := range claims.Claims {
		if c.Outcome != OutcomeCorruption {
			d := *c
			d.Testable, d.Claimed, d.Decision, d.P = true, true, "better", d.Level/2
			claims.Claims[i] = &d
			break
		}
	}
	failed := *v
	failed.Claims = &claims
	if aa, outcome := failed.aaOutcome(); !aa || outcome != aaFailed || len(failed.Claims.Differences()) != 1 {
		t.Fatalf("no latency claim to make a difference of: %s, %v", outcome, failed.Claims.Differences())
	}
	if g, why := failed.CheckGate("difference", GateOptions{}); g != GateFail || !strings.Contains(why, " is better: ") {
		t.Errorf("a claimed latency difference, gate difference = %v: %s", g, why)
	}
	if g, why := failed.CheckGate("regression", GateOptions{}); g == GateFail {
		t.Errorf("a latency shown better failed the regression gate: %s", why)
	}
}

// Wedges the launches could not tell apart end with the plan that says how many would,
// at the shares of launches that wedged.
func TestUndecidedWedgesSayHowToPlanTheLaunches(t *testing.T) {
	v := buildOutcomes(t, "deadlock")
	c := &v.Outcomes.Cascades[1]
	if v.Baseline != 0 || c.Launch == nil || c.Launches != 4 {
		t.Fatalf("cascades %+v, baseline %d", v.Outcomes.Cascades, v.Baseline)
	}
	undecided := *c.Launch
	undecided.Claimed, undecided.Testable, undecided.Decision = false, true, ""
	c.Launch, c.Wedged = &undecided, 3
	want := "(3 of 4 against 4 of 4 launches; more launches, as blocks, would tell, and `arbiter plan examples/deadlock.yaml --p0 1 --p1 0.75` says how many)"
	if got := v.cascadeDecision(""); !strings.Contains(got, want) {
		t.Errorf("undecided wedges:\n%s\nwant %q", got, want)
	}
}

// Launches of one arm that ended alike are said once; one that ended otherwise is said
// on its own.
func TestLaunchesThatEndedAlikeAreSaidOnce(t *testing.T) {
	v := buildOutcomes(t, "deadlock")
	if got := v.faultedLaunches(); len(got) != 1 || !strings.HasPrefix(got[0], "overlap-on/b0, b1, b2 and b3 wedged (workload: cascade 1") {
		t.Errorf("four launches wedged alike: %q", got)
	}
	for i := range v.Runs {
		if v.Runs[i].Arm == "overlap-on" && v.Runs[i].Block == 2 {
			v.Runs[i].Error = "engine wedged: no canary request completed after the abort within 20s"
		}
	}
	got := v.faultedLaunches()
	if len(got) != 2 || !strings.HasPrefix(got[0], "overlap-on/b0, b1 and b3 wedged (") || !strings.HasPrefix(got[1], "overlap-on/b2 wedged (engine wedged: no canary request completed after the abort within 20s)") {
		t.Errorf("one launch wedged otherwise: %q", got)
	}
}

// The regression, difference and undecided gates of a throughput experiment weigh the
// claims its headline and show decide: speeds and latencies, load by load, on launches,
// not corruption's sessions, which a throughput experiment does not ask about.
func TestThroughputGatesWeighTheSpeedClaims(t *testing.T) {
	v := buildOutcomes(t, "throughput")
	if len(v.Claims.Differences()) != 0 {
		t.Fatalf("the fixture claims differences already: %v", v.Claims.Differences())
	}
	for _, gate := range []string{"regression", "difference", "undecided"} {
		if g, why := v.CheckGate(gate, GateOptions{}); g != GatePass {
			t.Errorf("gate %s = %v (%s); want a pass: every load was tested and none differs", gate, g, why)
		}
	}
	with := func(change func(c *LaunchClaim) bool) *Verdict {
		w := *v
		claims := *v.Claims
		claims.Claims = nil
		changed := false
		for _, c := range v.Claims.Claims {
			d := *c
			if !changed {
				changed = change(&d)
			}
			claims.Claims = append(claims.Claims, &d)
		}
		if !changed {
			t.Fatal("no claim to change")
		}
		w.Claims = &claims
		return &w
	}
	ttft := func(decision string) *Verdict {
		return with(func(c *LaunchClaim) bool {
			if c.Outcome != MetricTTFT || c.Group != "c=32" {
				return false
			}
			c.Claimed, c.Decision = true, decision
			return true
		})
	}
	worse := ttft("worse")
	for _, gate := range []string{"regression", "difference"} {
		g, why := worse.CheckGate(gate, GateOptions{})
		if g != GateFail || !strings.HasPrefix(why, "hicache=on's TTFT at c=32 against hicache=off is worse: ") || !strings.Contains(why, "launch p = ") {
			t.Errorf("TTFT shown worse, gate %s = %v: %s", gate, g, why)
		}
	}
	better := ttft("better")
	if g, why := better.CheckGate("regression", GateOptions{}); g != GatePass {
		t.Errorf("TTFT shown better failed the regression gate: %s", why)
	}
	if g, why := better.CheckGate("difference", GateOptions{}); g != GateFail || !strings.Contains(why, "is better") {
		t.Errorf("TTFT shown better, gate difference = %v: %s", g, why)
	}
	// One launch per arm and no floor: the speed claims are untested, which the
	// undecided gate says in their own terms.
	single := with(func(c *LaunchClaim) bool {
		if !c.Primary || c.Group != "poisson 16/s" {
			return false
		}
		c.Testable, c.Claimed, c.Decision, c.Needed, c.LaunchesArm, c.LaunchesBase, c.FloorWouldTest = false, false, "", 2, 1, 1, true
		return true
	})
	g, why := single.CheckGate("undecided", GateOptions{})
	if g != GateUndecided || why != "hicache=on's tok/s against hicache=off could not be tested at poisson 16/s: 1 launch per arm (2 can test it, or one per arm weighed against an A/A noise floor, `--noise-floor`)" {
		t.Errorf("an untested load, gate undecided = %v: %s", g, why)
	}
	for _, gate := range []string{"regression", "difference"} {
		if g, why := single.CheckGate(gate, GateOptions{}); g != GatePass {
			t.Errorf("an untested load, gate %s = %v: %s", gate, g, why)
		}
	}
	// A load not shown non-inferior, nor below the margin, leaves the throughput gate
	// undecided, which says the bound is what falls short, and how many launches would
	// narrow it.
	wide := poissonNotShown(v, 0.852)
	wide.Experiment.SpecPath, wide.DB = "examples/throughput.yaml", "/tmp/r.db"
	g, why = wide.CheckGate("throughput", GateOptions{})
	if g != GateUndecided || !strings.HasPrefix(why, "hicache=on's tok/s per request at poisson 16/s is neither shown non-inferior to hicache=off's within the 5% margin nor shown below it: ") ||
		!strings.Contains(why, "one-sided lower bound -14.8%; more launches per arm narrow the bound: `arbiter plan examples/throughput.yaml --from ") {
		t.Errorf("a load not shown non-inferior, gate throughput = %v: %s", g, why)
	}
	// One shown below the margin fails it.
	for i := range wide.Outcomes.Throughput {
		if ni := &wide.Outcomes.Throughput[i]; ni.Group == "poisson 16/s" {
			lc := *ni.Launch
			lc.Estimate, lc.CI, lc.P = 0.88, stats.Interval{Lo: 0.85, Hi: 0.91}, 0.9999
			ni.Launch = &lc
		}
	}
	g, why = wide.CheckGate("throughput", GateOptions{})
	if g != GateFail || why != "hicache=on's tok/s per request at poisson 16/s is shown lower than hicache=off's by more than the 5% margin: -12.0%, one-sided upper bound -9.0% (launch p = 1.0e-04)" {
		t.Errorf("a load shown below the margin, gate throughput = %v: %s", g, why)
	}
}
