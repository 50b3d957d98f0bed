package verdict

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/store"
)

// nodes are the nodes the analysed launches ran on, in name order; launches recorded
// before placement was stored (no node) count as none.
func (v *Verdict) nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range v.Runs {
		if !r.Superseded && r.Node != "" && !seen[r.Node] {
			seen[r.Node] = true
			out = append(out, r.Node)
		}
	}
	sort.Strings(out)
	return out
}

// strataName says what the strata are: blocks, or blocks and nodes when arms ran on
// several nodes.
func (v *Verdict) strataName() string {
	if len(v.nodes()) > 1 {
		return "block and node"
	}
	return "block"
}

// waveGroup is the launches of one wave of one block.
type waveGroup struct {
	block, wave int
	runs        []RunFact
}

// waves groups the launches by block and wave, in that order. Launches run again on
// resume are left out; those lost with their node stay: they held a slot.
func (v *Verdict) waves() []waveGroup {
	idx := map[[2]int]int{}
	var out []waveGroup
	for _, r := range v.Runs {
		if r.Superseded && r.Status != store.RunLost {
			continue
		}
		k := [2]int{r.Block, r.Wave}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, waveGroup{block: r.Block, wave: r.Wave})
		}
		out[i].runs = append(out[i].runs, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].block != out[j].block {
			return out[i].block < out[j].block
		}
		return out[i].wave < out[j].wave
	})
	return out
}

// overlap is how much the workload windows of runs overlap, as a share of the shortest
// window: 1 when every workload ran while all the others did, 0 when two never ran at
// the same time. ok is false when fewer than two runs had a workload window.
func overlap(runs []RunFact) (share float64, ok bool) {
	var lastStart, firstEnd time.Time
	var shortest time.Duration
	n := 0
	for _, r := range runs {
		if r.WorkloadStart.IsZero() || r.WorkloadEnd.IsZero() {
			continue
		}
		n++
		if r.WorkloadStart.After(lastStart) {
			lastStart = r.WorkloadStart
		}
		if firstEnd.IsZero() || r.WorkloadEnd.Before(firstEnd) {
			firstEnd = r.WorkloadEnd
		}
		if d := r.WorkloadEnd.Sub(r.WorkloadStart); n == 1 || d < shortest {
			shortest = d
		}
	}
	if n < 2 {
		return 0, false
	}
	if shortest <= 0 {
		return 1, true
	}
	return max(0, min(1, float64(firstEnd.Sub(lastStart))/float64(shortest))), true
}

// placementLines say, under the Runs table, where the arms ran and how much their
// workloads overlapped in time, block by block; nothing for launches recorded before
// placement was stored.
func (v *Verdict) placementLines() []string {
	blocks, byBlock := groupInOrder(v.waves(), func(w waveGroup) int { return w.block })
	var lines []string
	for _, b := range blocks {
		ws := byBlock[b]
		var parts []string
		slots := map[string]bool{}
		nodes := map[string]bool{}
		arms := 0
		for _, w := range ws {
			for _, r := range w.runs {
				arms++
				slots[fmt.Sprint(r.Node, "/", r.Slot)] = true
				nodes[r.Node] = true
			}
		}
		if _, placed := nodes[""]; placed && len(nodes) == 1 {
			continue
		}
		where := fmt.Sprintf("%d launches on %d slot%s of %d node%s", arms, len(slots), plural(len(slots)), len(nodes), plural(len(nodes)))
		if len(ws) == 1 {
			parts = append(parts, where+", all at once")
			if share, ok := overlap(ws[0].runs); ok {
				parts = append(parts, fmt.Sprintf("workload windows overlap: %.0f%% of the shortest window", 100*share))
			}
		} else {
			parts = append(parts, fmt.Sprintf("%s, in %d waves: arms of different waves ran at different times", where, len(ws)))
			for _, w := range ws {
				if share, ok := overlap(w.runs); ok {
					parts = append(parts, fmt.Sprintf("wave %d's windows overlap %.0f%%", w.wave, 100*share))
				}
			}
		}
		lines = append(lines, fmt.Sprintf("- Block %d: %s.", b, strings.Join(parts, "; ")))
	}
	return lines
}

// placementCaveats note launches lost with their node, blocks run in waves, and arms
// whose node differed from the baseline's throughout.
func (v *Verdict) placementCaveats(add func(CaveatKind, string, ...any)) {
	lost := map[string][]string{}
	var lostNodes []string
	for _, r := range v.Runs {
		if r.Status != store.RunLost {
			continue
		}
		if _, ok := lost[r.Node]; !ok {
			lostNodes = append(lostNodes, r.Node)
		}
		lost[r.Node] = append(lost[r.Node], store.LaunchName(r.Arm, r.Block))
	}
	for _, n := range lostNodes {
		why := ""
		for _, r := range v.Runs {
			if r.Node == n && r.Status == store.RunLost && r.Error != "" {
				why = " (" + strings.TrimSuffix(r.Error, " "+lostNote) + ")"
				break
			}
		}
		if strings.Contains(why, "Slurm job") {
			// The slurm runtime: the cluster ended a job, and placed the next one itself.
			add(CaveatProblem, "Slurm ended the job%s of %s on node %s%s: lost and left out of the analysis (the engine is not to blame); each lost arm ran again in a later wave of its block, as a new job.",
				map[bool]string{true: "s", false: ""}[len(lost[n]) > 1], strings.Join(lost[n], ", "), dash(n), why)
			continue
		}
		add(CaveatProblem, "Node %s stopped answering%s: its launch%s %s %s lost and left out of the analysis (the engine is not to blame); the experiment went on on the other nodes, where each lost arm ran again in a later wave of its block.",
			dash(n), why, map[bool]string{true: "es", false: ""}[len(lost[n]) > 1], strings.Join(lost[n], ", "), map[bool]string{true: "were", false: "was"}[len(lost[n]) > 1])
	}
	var waved []string
	for _, w := range v.waves() {
		if w.wave == 1 {
			waved = append(waved, fmt.Sprint(w.block))
		}
	}
	if len(waved) > 0 {
		add(CaveatDesign, "Block%s %s ran in waves (fewer slots than arms, or an arm ran again after its node was lost): arms of different waves ran at different times, so a drift between waves could pass for an arm effect; enough slots (runtime.nodes, engine.gpus) run every arm of a block at once.",
			plural(len(waved)), strings.Join(waved, ", "))
	}
}

// lostNote ends the note of a launch lost with its node and run again.
const lostNote = "(run again on another slot; left out of the analysis)"

// groupInOrder groups items by key, and gives the keys in the order they first came.
func groupInOrder[K comparable, V any](items []V, key func(V) K) ([]K, map[K][]V) {
	var keys []K
	groups := map[K][]V{}
	for _, it := range items {
		k := key(it)
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], it)
	}
	return keys, groups
}

// placementCell says where a launch ran: "node-a/1 (GPUs 2,3)".
func placementCell(r RunFact) string {
	if r.Node == "" {
		return "–"
	}
	s := fmt.Sprintf("%s/%d", r.Node, r.Slot)
	if r.GPUs != "" {
		s += " (GPUs " + r.GPUs + ")"
	}
	return s
}
