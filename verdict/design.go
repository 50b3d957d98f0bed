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
	Clusters []int     // sessions (response unit) or launches (launch unit) per arm
	P        []float64 // Rao-Scott p against the baseline; NaN for the baseline
	NaiveP   []float64
	ICC      []float64
	DE       []float64
	Fallback string // why the session-level test decides instead, if it does
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

// FactorialView is the Firth model of a 2^k factorial experiment, and the interactions
// of every pair of factors on the risk-difference scale.
type FactorialView struct {
	Result stats.FactorialResult
	// Reference names each factor's reference (first) and other level.
	Reference map[string][2]string
	Additive  []AdditiveInteraction
}

// AdditiveInteraction is how much factor A's effect on the corruption rate changes with
// factor B, pooled over the other factors.
type AdditiveInteraction struct {
	A, B   string
	Result stats.InteractionResult
}

// NIView is a non-inferiority judgement of one arm against the baseline.
type NIView struct {
	Arm    string
	Result stats.NonInferiorityResult
}

// LossView compares losses of one arm with the baseline's.
type LossView struct {
	Arm    string
	Result stats.LossResult
}

// SequentialView is the group-sequential decision of one arm against the baseline.
type SequentialView struct {
	Arm    string
	Design []stats.Boundary
	Result stats.SequentialResult
}

// analyseDesign runs every design-dependent analysis; it runs after the session-level
// comparisons and may replace their decisions (sequential designs, other units).
func (v *Verdict) analyseDesign(sessions []store.SessionOutcome, index map[int64]int) {
	v.strata(sessions, index)
	v.pairs(sessions, index)
	v.factorial()
	v.nonInferiority()
	v.losses(sessions, index)
	v.sequential(sessions, index)
	v.unitView(sessions, index)
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
	if v.Design.Blocks < 2 {
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
	for _, i := range v.others() {
		var st []stats.Stratum
		for _, k := range keys {
			b, a := counts[k][v.Baseline], counts[k][i]
			st = append(st, stats.Stratum{A: b.events, N1: b.n, B: a.events, N2: a.n})
		}
		r := stats.Stratified(st, 1-v.Alpha)
		v.Strata = append(v.Strata, StrataView{Arm: v.Arms[i].Name, Result: r})
		for _, w := range r.Warnings {
			v.noteOnce(fmt.Sprintf("%s, stratified by block: %s", v.Arms[i].Name, w))
		}
		if r.BreslowDayP < v.Alpha {
			v.noteOnce(fmt.Sprintf("%s: the effect differs between blocks (Breslow-Day p = %s); read the pooled figures with care.", v.Arms[i].Name, pval(r.BreslowDayP)))
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
	}
	res := stats.Factorial(cells)
	if len(res.Terms) == 0 {
		return
	}
	v.Factorial = &FactorialView{Result: res, Reference: ref}
	for i := 0; i < len(f); i++ {
		for j := i + 1; j < len(f); j++ {
			var t [2][2]stats.Cell
			for _, c := range cells {
				cell := &t[c.Levels[f[i].Name]][c.Levels[f[j].Name]]
				cell.Events += c.Events
				cell.N += c.N
			}
			v.Factorial.Additive = append(v.Factorial.Additive, AdditiveInteraction{A: f[i].Name, B: f[j].Name,
				Result: stats.Interaction(t, 1-v.Alpha)})
		}
	}
	for _, w := range res.Warnings {
		v.noteOnce("Factorial model: " + string(w))
	}
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
			v.Caveats = append(v.Caveats, fmt.Sprintf("Non-inferiority of %s could not be judged: %v", a.Name, err))
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
		case s.Status == "timeout":
			o.TimedOut++
			lost = true
		case s.Status == "aborted":
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
		if r.LossP < v.Alpha {
			v.Caveats = append(v.Caveats, fmt.Sprintf("%s lost significantly more or fewer sessions than %s (%s vs %s, Fisher p = %s): the arms are not compared on equal footing.",
				v.Arms[i].Name, v.Arms[v.Baseline].Name, pct(r.LossRateB), pct(r.LossRateA), pval(r.LossP)))
		}
		if r.Straddles {
			v.Caveats = append(v.Caveats, fmt.Sprintf("%s vs %s: had the lost sessions been labelled, the difference could lie anywhere from %+.1f to %+.1f points, which changes the decision: the verdict rests on sessions that carry no label.",
				v.Arms[i].Name, v.Arms[v.Baseline].Name, 100*r.Bounds.Lo, 100*r.Bounds.Hi))
		}
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
	// The orchestrator spends alpha/(arms-1) per comparison; the verdict judges the same.
	design, err := stats.Boundaries(looks, v.Alpha/float64(len(others)), nil)
	if err != nil {
		v.Caveats = append(v.Caveats, fmt.Sprintf("The sequential design could not be rebuilt: %v", err))
		return
	}
	maxBlock := -1
	perBlock := map[int][]armCounts{}
	for _, s := range sessions {
		if perBlock[s.Block] == nil {
			perBlock[s.Block] = make([]armCounts, len(v.Arms))
		}
		maxBlock = max(maxBlock, s.Block)
		if !analysed(s) {
			continue
		}
		c := &perBlock[s.Block][index[s.ArmID]]
		c.n++
		if s.Corrupted {
			c.events++
		}
	}
	for _, i := range others {
		var lc []stats.LookCounts
		cum := make([]armCounts, len(v.Arms))
		for b := 0; b <= maxBlock && b < looks; b++ {
			for k, c := range perBlock[b] {
				cum[k].events += c.events
				cum[k].n += c.n
			}
			lc = append(lc, stats.LookCounts{EventsA: cum[v.Baseline].events, SessionsA: cum[v.Baseline].n,
				EventsB: cum[i].events, SessionsB: cum[i].n})
		}
		if len(lc) == 0 {
			continue
		}
		res, err := stats.SequentialDecision(lc, design)
		if err != nil {
			v.Caveats = append(v.Caveats, fmt.Sprintf("Sequential decision for %s: %v", v.Arms[i].Name, err))
			continue
		}
		v.Sequential = append(v.Sequential, SequentialView{Arm: v.Arms[i].Name, Design: design, Result: res})
		// With repeated looks, a fixed-design p on all the data overstates the evidence:
		// the decision is the boundary's.
		c := v.Arms[i].Compare
		c.Significant = res.Significant
		c.Direction = ""
		if res.Significant {
			c.Direction = "higher"
			if c.Difference < 0 {
				c.Direction = "lower"
			}
		}
		c.Sequential = true
	}
}

// unitView computes the response- or launch-level comparison when the spec chose that
// unit; its Rao-Scott test then decides.
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
	uv := &UnitView{Unit: v.Unit}
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
	var unitPs []float64
	var decided []int
	for _, i := range v.others() {
		if len(clusters[i]) < 2 || len(clusters[v.Baseline]) < 2 {
			uv.Fallback = fmt.Sprintf("each arm needs at least two %ss to estimate their correlation; the session-level test decides", map[string]string{"response": "session", "launch": "launch"}[v.Unit])
			return
		}
		rs, err := stats.DonnerAdjusted(clusters[v.Baseline], clusters[i])
		if err != nil {
			uv.Fallback = err.Error()
			return
		}
		uv.P[i], uv.NaiveP[i], uv.ICC[i], uv.DE[i] = rs.P, rs.NaiveP, rs.ICC, rs.DesignEffect
		if !v.Arms[i].Compare.Sequential {
			unitPs = append(unitPs, rs.P)
			decided = append(decided, i)
		}
	}
	// Several arms against the baseline: Holm over the clustered p-values, as over the
	// exact ones.
	adjusted := holm(unitPs)
	for k, i := range decided {
		c := v.Arms[i].Compare
		c.AdjustedP = adjusted[k]
		c.Significant = c.AdjustedP < v.Alpha
		c.Direction = ""
		if c.Significant {
			c.Direction = "higher"
			if float64(uv.Events[i])/float64(max(uv.N[i], 1)) < float64(uv.Events[v.Baseline])/float64(max(uv.N[v.Baseline], 1)) {
				c.Direction = "lower"
			}
		}
		c.UnitDecides = true
	}
}

// factorLabel names a term for a reader: "bf16_index_k x hicache interaction".
func factorLabel(t stats.FactorialTerm) string {
	if len(t.Factors) > 1 {
		return strings.Join(t.Factors, " x ") + " interaction"
	}
	return strings.Join(t.Factors, "") + " main effect"
}
