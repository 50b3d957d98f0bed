package verdict

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// The analyses in this file follow the experiment's design: the unit of analysis, blocks
// (strata), identical sessions in every arm (pairs), factors, a non-inferiority margin,
// lost sessions and sequential looks. Each is a section of the verdict that appears only
// when the design calls for it.

// UnitView is the primary comparison when the unit is not the session.
type UnitView struct {
	Unit     string // "response" or "launch"
	Events   []int  // per arm
	N        []int
	Clusters []int // sessions (response unit) or launches (launch unit) per arm
	// P is the unit's test's p against the baseline, per arm (NaN for the baseline, and
	// for an arm whose launches cannot reach alpha): Donner's adjusted chi-square for
	// responses, the randomization test on launch rates for launches. Decisions are the
	// launch family's (Verdict.Claims).
	P []float64
	// NaiveP is what counting the items as independent would give: the Pearson
	// chi-square on responses, or Fisher's exact test on the sessions of all launches.
	NaiveP []float64
	ICC    []float64 // pooled intra-cluster correlation against the baseline
	DE     []float64 // design effect against the baseline
	// Test names the unit's test: "Donner's adjusted chi-square" or the randomization
	// test on launches.
	Test string
	// Launch is, per arm, the randomization test of its launches' corruption rates
	// against the baseline's (nil for the baseline and for the response unit).
	Launch []*stats.LaunchPermutationTest
	// Inconclusive is true when some arm has too few launches with analysed sessions
	// for the randomization test to reach alpha at all.
	Inconclusive bool
	// MinLaunchesPerArm is the fewest launches per arm with which it can.
	MinLaunchesPerArm int
	Fallback          string // why the unit's test could not decide, in words
}

// StrataView pools each arm against the baseline over blocks.
type StrataView struct {
	Arm    string
	Result stats.StratifiedResult
}

// PairView is the matched-session analysis of one arm against the baseline.
type PairView struct {
	Arm    string
	Pairs  int
	Result stats.PairedResult
}

// FactorialView is the Firth model of a 2^k factorial experiment, the interactions of
// every pair of factors on the risk-difference scale, and the family of claims the
// verdict may headline.
type FactorialView struct {
	Result stats.FactorialResult
	// Reference names each factor's reference (first) and other level.
	Reference map[string][2]string
	Additive  []AdditiveInteraction
	// Family is every claim a factorial verdict can headline, Holm-adjusted together
	// (stats.FactorialFamily): each arm against the baseline (arms judged by a
	// sequential boundary are left out: they spend their own alpha), each factor's main
	// effect (log odds), and each two-factor interaction on the risk-difference and the
	// log-odds scale. A claim may be headlined only when its Reject is true; the
	// headline quotes its AdjustedP and says it is adjusted, naming Family.Description.
	// The arms' Comparison.AdjustedP and Significant are set from it.
	Family stats.Family
}

// Claim returns the family's claim of the given kind, name ("A x B" for an
// interaction, in the model's factor order, as in Result.Terms) and scale.
func (f *FactorialView) Claim(kind stats.ClaimKind, name, scale string) (stats.Claim, bool) {
	return f.Family.Find(kind, name, scale)
}

// AdditiveInteraction is how much factor A's effect on the corruption rate changes with
// factor B, pooled over the other factors.
type AdditiveInteraction struct {
	A, B   string
	Result stats.InteractionResult
	// AdjustedP is the interaction's risk-difference p (Result.P) adjusted in the
	// factorial family, and Reject whether it may be headlined. Result.Significant is
	// the unadjusted reading of its interval and must not decide a headline.
	AdjustedP float64
	Reject    bool
}

// NIView is a non-inferiority judgement of one arm against the baseline.
type NIView struct {
	Arm    string
	Result stats.NonInferiorityResult
	// Launch is the claim as tested on launches, which decides Result.NonInferior and
	// gives Result.Upper.
	Launch *LaunchClaim
}

// LossView compares losses of one arm with the baseline's.
type LossView struct {
	Arm    string
	Result stats.LossResult
}

// SequentialView is the group-sequential judgement of one arm against the baseline, on
// launches: at every look (after each block) the randomization test on the launches so
// far, against the per-look level (the claim's share of alpha over the looks), as the
// orchestrator took it to decide whether to stop.
type SequentialView struct {
	Arm   string
	Looks int     // the design's looks
	Level float64 // the per-look level
	// Taken are the looks the data allow, in order; Stopped is the 1-based look whose
	// test rejected (0: none did).
	Taken   []SequentialLook
	Stopped int
}

// SequentialLook is one look of a sequential arm.
type SequentialLook struct {
	Look                      int
	LaunchesArm, LaunchesBase int
	P, MinP                   float64
	Crossed                   bool
}

// analyseDesign runs every design-dependent analysis; it runs after the session-level
// comparisons and may replace their decisions (sequential designs, other units).
func (v *Verdict) analyseDesign(sessions []store.SessionOutcome, index map[int64]int) {
	v.strata(sessions, index)
	v.pairs(sessions, index)
	v.nonInferiority()
	v.losses(sessions, index)
	v.sequential(sessions, index)
	v.unitView(sessions, index)
	// Last: the factorial family adjusts the p-values that decide the arms, which the
	// sequential and unit views may have replaced.
	v.factorial()
}

func (v *Verdict) others() []int {
	var out []int
	for i, a := range v.Arms {
		if i != v.Baseline && a.Compare != nil {
			out = append(out, i)
		}
	}
	return out
}

func (v *Verdict) strata(sessions []store.SessionOutcome, index map[int64]int) {
	if v.Design.Blocks < 2 && len(v.nodes()) < 2 {
		return
	}
	// Strata are blocks (and nodes, when arms ran on several).
	type key struct {
		block int
		node  string
	}
	counts := map[key][]armCounts{}
	for _, s := range sessions {
		if !analysed(s) {
			continue
		}
		k := key{s.Block, s.Node}
		if counts[k] == nil {
			counts[k] = make([]armCounts, len(v.Arms))
		}
		c := &counts[k][index[s.ArmID]]
		c.n++
		if s.Corrupted {
			c.events++
		}
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].block != keys[j].block {
			return keys[i].block < keys[j].block
		}
		return keys[i].node < keys[j].node
	})
	if len(keys) < 2 {
		return
	}
	byNode := v.strataName() != "block"
	// A block whose launch of an arm was cut short has no sessions of that arm in the
	// analysis: expected, and said by the caveat on launches cut short.
	cut := map[[2]int]bool{}
	for _, r := range v.Runs {
		if r.cutShort() {
			cut[[2]int{r.Block, v.armIndex(r.Arm)}] = true
		}
	}
	for _, i := range v.others() {
		var st []stats.Stratum
		baseEvents, armEvents := 0, 0
		for _, k := range keys {
			b, a := counts[k][v.Baseline], counts[k][i]
			if a.n == 0 && cut[[2]int{k.block, i}] || b.n == 0 && cut[[2]int{k.block, v.Baseline}] {
				continue
			}
			st = append(st, stats.Stratum{A: b.events, N1: b.n, B: a.events, N2: a.n})
			baseEvents, armEvents = baseEvents+b.events, armEvents+a.events
		}
		r := stats.Stratified(st, 1-v.Alpha)
		v.Strata = append(v.Strata, StrataView{Arm: v.Arms[i].Name, Result: r})
		if baseEvents+armEvents == 0 {
			// Nothing corrupted on either side: the stratified test has nothing to say, and
			// the caveat on arms without a corrupted session says what there is.
			continue
		}
		for _, w := range r.Warnings {
			if byNode && strings.Contains(string(w), "has an empty arm") {
				continue // expected across nodes, and said where the strata are shown
			}
			if (baseEvents == 0 || armEvents == 0) && strings.HasPrefix(string(w), "common odds ratio is") {
				// An arm with no corrupted session at all: the table's odds ratio says
				// it (∞ or 0), and the caveat on arms without one bounds the rate.
				continue
			}
			// The statistics name the baseline arm A and the compared arm B.
			named := strings.NewReplacer("arm A", v.Arms[v.Baseline].Name, "arm B", v.Arms[i].Name).Replace(string(w))
			v.note(CaveatDesign, "%s, stratified by %s: %s", v.Arms[i].Name, v.strataName(), named)
		}
		if stats.Reject(r.BreslowDayP, v.Alpha) {
			v.note(CaveatDesign, "%s: the effect differs between strata (%ss; Breslow-Day p %s); read the pooled figures with care.", v.Arms[i].Name, v.strataName(), pEq(r.BreslowDayP))
		}
	}
}

type armCounts struct{ events, n int }

func (v *Verdict) pairs(sessions []store.SessionOutcome, index map[int64]int) {
	// Session i of block b is the same seeded conversation in every arm.
	type key struct{ block, index int }
	outcome := map[key][]int8{} // per arm: -1 missing, 0 clean, 1 corrupted
	for _, s := range sessions {
		k := key{s.Block, s.Index}
		if outcome[k] == nil {
			outcome[k] = make([]int8, len(v.Arms))
			for i := range outcome[k] {
				outcome[k][i] = -1
			}
		}
		if analysed(s) {
			outcome[k][index[s.ArmID]] = map[bool]int8{false: 0, true: 1}[s.Corrupted]
		}
	}
	for _, i := range v.others() {
		pv := PairView{Arm: v.Arms[i].Name}
		aOnly, bOnly := 0, 0
		for _, o := range outcome {
			b, a := o[v.Baseline], o[i]
			if a < 0 || b < 0 {
				continue
			}
			pv.Pairs++
			switch {
			case b == 1 && a == 0:
				aOnly++
			case b == 0 && a == 1:
				bOnly++
			}
		}
		if pv.Pairs == 0 {
			continue
		}
		pv.Result = stats.McNemar(aOnly, bOnly, 1-v.Alpha)
		v.Pairs = append(v.Pairs, pv)
	}
}

func (v *Verdict) factorial() {
	f := v.Design.Factors
	if len(f) < 2 {
		return
	}
	ref := map[string][2]string{}
	for _, fac := range f {
		if len(fac.Levels) != 2 {
			return // the model is for two-level factors
		}
		ref[fac.Name] = [2]string{fac.Levels[0], fac.Levels[1]}
	}
	var cells []stats.FactorialCell
	var names []string
	for _, a := range v.Arms {
		if a.Levels == nil || a.Sessions == 0 {
			return
		}
		c := stats.FactorialCell{Levels: map[string]int{}, Events: a.Corrupted, N: a.Sessions}
		for _, fac := range f {
			lvl, ok := a.Levels[fac.Name]
			if !ok {
				return
			}
			c.Levels[fac.Name] = 0
			if lvl == fac.Levels[1] {
				c.Levels[fac.Name] = 1
			}
		}
		cells = append(cells, c)
		names = append(names, a.Name)
	}
	res := stats.Factorial(cells)
	if len(res.Terms) == 0 {
		return
	}
	// Each arm enters the family with the p that decides it: Fisher's on sessions, or
	// the unit's test; an arm judged by a sequential boundary stays out.
	armP := make([]float64, len(v.Arms))
	armTest := "Fisher exact"
	for i, a := range v.Arms {
		c := a.Compare
		switch {
		case i == v.Baseline || c == nil || c.Sequential:
			armP[i] = math.NaN()
		default:
			armP[i] = c.FisherP
		}
	}
	family, err := stats.FactorialFamily(stats.FactorialFamilyInput{Cells: cells, Arms: names, Baseline: v.Baseline,
		Alpha: v.Alpha, Model: &res, ArmP: armP, ArmTest: armTest})
	if err != nil {
		v.note(CaveatDesign, "The factorial claims could not be adjusted together: %v", err)
		return
	}
	v.Factorial = &FactorialView{Result: res, Reference: ref, Family: family}
	for i := 0; i < len(f); i++ {
		for j := i + 1; j < len(f); j++ {
			var t [2][2]stats.Cell
			for _, c := range cells {
				cell := &t[c.Levels[f[i].Name]][c.Levels[f[j].Name]]
				cell.Events += c.Events
				cell.N += c.N
			}
			ai := AdditiveInteraction{A: f[i].Name, B: f[j].Name, Result: stats.Interaction(t, 1-v.Alpha), AdjustedP: math.NaN()}
			// The family names an interaction in the model's (sorted) factor order.
			a, b := f[i].Name, f[j].Name
			if b < a {
				a, b = b, a
			}
			if cl, ok := family.Find(stats.ClaimInteraction, a+" x "+b, stats.ScaleRiskDifference); ok {
				ai.AdjustedP, ai.Reject = cl.AdjustedP, cl.Reject
			}
			v.Factorial.Additive = append(v.Factorial.Additive, ai)
		}
	}
	for _, w := range res.Warnings {
		v.note(CaveatDesign, "Factorial model: %s", w)
	}
}

// direction names the sign of a difference for a significant comparison.
func direction(d float64) string {
	if d < 0 {
		return "lower"
	}
	return "higher"
}

func (v *Verdict) nonInferiority() {
	if v.Design.Margin <= 0 {
		return
	}
	base := v.Arms[v.Baseline]
	for _, i := range v.others() {
		a := v.Arms[i]
		r, err := stats.NonInferiority(base.Corrupted, base.Sessions, a.Corrupted, a.Sessions, v.Design.Margin, v.Alpha)
		if err != nil {
			v.note(CaveatDesign, "Non-inferiority of %s could not be judged: %v", a.Name, err)
			continue
		}
		v.NonInferiority = append(v.NonInferiority, NIView{Arm: a.Name, Result: r})
	}
}

func (v *Verdict) losses(sessions []store.SessionOutcome, index map[int64]int) {
	out := make([]stats.ArmOutcome, len(v.Arms))
	lost := false
	for _, s := range sessions {
		o := &out[index[s.ArmID]]
		switch {
		case analysed(s):
			o.Completed++
			if s.Corrupted {
				o.Corrupted++
			}
		case s.Status == store.SessionTimeout:
			o.TimedOut++
			lost = true
		case s.Status == store.SessionAborted:
			// A session cut off mid-run: its engine crashed, wedged or was stopped.
			o.Crashed++
			lost = true
		default:
			o.Errored++
			lost = true
		}
	}
	if !lost {
		return
	}
	for _, i := range v.others() {
		r, err := stats.Losses(out[v.Baseline], out[i], v.Alpha)
		if err != nil {
			continue
		}
		v.Losses = append(v.Losses, LossView{Arm: v.Arms[i].Name, Result: r})
	}
}

func (v *Verdict) sequential(sessions []store.SessionOutcome, index map[int64]int) {
	looks := v.Design.Looks
	if looks < 2 {
		return
	}
	others := v.others()
	if len(others) == 0 {
		return
	}
	levels := stats.SequentialLookLevels(v.Alpha, len(others), looks)
	// Each block's launch rate per arm, in block order.
	type cell struct{ n, events int }
	perBlock := map[int][]cell{}
	maxBlock := -1
	for _, s := range sessions {
		if !analysed(s) {
			continue
		}
		if perBlock[s.Block] == nil {
			perBlock[s.Block] = make([]cell, len(v.Arms))
		}
		maxBlock = max(maxBlock, s.Block)
		c := &perBlock[s.Block][index[s.ArmID]]
		c.n++
		if s.Corrupted {
			c.events++
		}
	}
	for _, i := range others {
		sv := SequentialView{Arm: v.Arms[i].Name, Looks: looks, Level: levels[looks-1]}
		var a, b []float64
		for blk := 0; blk <= maxBlock && blk < looks; blk++ {
			for k, c := range perBlock[blk] {
				if c.n == 0 {
					continue
				}
				switch k {
				case v.Baseline:
					a = append(a, float64(c.events)/float64(c.n))
				case i:
					b = append(b, float64(c.events)/float64(c.n))
				}
			}
			r, err := stats.LaunchPermutation(a, b, 0)
			if err != nil {
				break
			}
			level := levels[blk]
			look := SequentialLook{Look: blk + 1, LaunchesArm: len(b), LaunchesBase: len(a), P: r.P, MinP: r.MinP,
				Crossed: len(a) > 0 && len(b) > 0 && level > 0 && stats.Reject(r.MinP, level) && stats.Reject(r.P, level)}
			sv.Taken = append(sv.Taken, look)
			if look.Crossed && sv.Stopped == 0 {
				sv.Stopped = look.Look
			}
		}
		v.Sequential = append(v.Sequential, sv)
		v.Arms[i].Compare.Sequential = true
	}
}

// unitView describes the comparison on the spec's unit when it is not the session:
// Donner's adjusted chi-square over the responses of sessions, or the randomization test
// on the launches' corruption rates. Decisions are the launch family's (judgeLaunches),
// whatever the unit; this view shows what counting the unit's items would say.
func (v *Verdict) unitView(sessions []store.SessionOutcome, index map[int64]int) {
	if v.Unit != "response" && v.Unit != "launch" {
		return
	}
	clusters := make([][]stats.ClusterCounts, len(v.Arms))
	switch v.Unit {
	case "response":
		for i, a := range v.Arms {
			clusters[i] = a.clusters
		}
	case "launch":
		perRun := map[int64]*stats.ClusterCounts{}
		runArm := map[int64]int{}
		var runs []int64
		for _, s := range sessions {
			if !analysed(s) {
				continue
			}
			c, ok := perRun[s.RunID]
			if !ok {
				c = &stats.ClusterCounts{}
				perRun[s.RunID] = c
				runArm[s.RunID] = index[s.ArmID]
				runs = append(runs, s.RunID)
			}
			c.Responses++
			if s.Corrupted {
				c.Events++
			}
		}
		for _, r := range runs {
			clusters[runArm[r]] = append(clusters[runArm[r]], *perRun[r])
		}
	}
	uv := &UnitView{Unit: v.Unit, Test: "Donner's adjusted chi-square", MinLaunchesPerArm: stats.LaunchesNeeded(v.Alpha)}
	if v.Unit == "launch" {
		uv.Test = testRandomization
		uv.Launch = make([]*stats.LaunchPermutationTest, len(v.Arms))
	}
	for i := range v.Arms {
		ev, n := 0, 0
		for _, c := range clusters[i] {
			ev += c.Events
			n += c.Responses
		}
		uv.Events = append(uv.Events, ev)
		uv.N = append(uv.N, n)
		uv.Clusters = append(uv.Clusters, len(clusters[i]))
		uv.P = append(uv.P, math.NaN())
		uv.NaiveP = append(uv.NaiveP, math.NaN())
		uv.ICC = append(uv.ICC, math.NaN())
		uv.DE = append(uv.DE, math.NaN())
	}
	v.UnitView = uv
	rates := func(cs []stats.ClusterCounts) []float64 {
		var r []float64
		for _, c := range cs {
			if c.Responses > 0 {
				r = append(r, float64(c.Events)/float64(c.Responses))
			}
		}
		return r
	}
	for _, i := range v.others() {
		base, arm := clusters[v.Baseline], clusters[i]
		if v.Unit == "response" && (len(arm) < 2 || len(base) < 2) {
			uv.Fallback = "each arm needs at least two sessions to estimate their correlation"
			return
		}
		if d, err := stats.DonnerAdjusted(base, arm); err == nil {
			uv.ICC[i], uv.DE[i] = d.ICC, d.DesignEffect
			uv.P[i], uv.NaiveP[i] = d.P, d.NaiveP
		} else if v.Unit == "response" {
			uv.Fallback = err.Error()
			return
		}
		if v.Unit == "launch" {
			lt, err := stats.LaunchPermutation(rates(base), rates(arm), 0.95)
			if err != nil {
				uv.Fallback = err.Error()
				return
			}
			uv.Launch[i] = &lt
			uv.P[i], uv.NaiveP[i] = lt.P, v.Arms[i].Compare.FisherP
			if !stats.Reject(lt.MinP, v.Alpha) {
				uv.Inconclusive = true
				uv.P[i] = math.NaN()
			}
		}
	}
	if uv.Inconclusive {
		uv.Fallback = fmt.Sprintf("an arm has too few launches with analysed sessions for the randomization test to reach alpha %g at all (it needs %d per arm)", v.Alpha, uv.MinLaunchesPerArm)
	}
}

// factorLabel names a term for a reader: "bf16_index_k x hicache interaction".
func factorLabel(t stats.FactorialTerm) string {
	if len(t.Factors) > 1 {
		return strings.Join(t.Factors, " x ") + " interaction"
	}
	return strings.Join(t.Factors, "") + " main effect"
}
