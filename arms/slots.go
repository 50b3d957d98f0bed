package arms

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSlots is the most slots one node may declare.
const MaxSlots = 256

// LocalNode is the node a spec without runtime.nodes runs on: this machine, one slot.
const LocalNode = "local"

// Slot is the share of one node that one arm runs on at a time: engine.gpus of the
// node's GPUs, or, on a node that declares no GPUs, one of its `slots`.
type Slot struct {
	// Node is the node's name; NodeIndex its position in runtime.nodes.
	Node      string
	NodeIndex int
	// Index numbers the slots of one node from 0.
	Index int
	// GPUs are the slot's devices ("0,1"); empty when the node pins none, which leaves
	// the engine every device it sees.
	GPUs string
}

// String names a slot for people: "node-a/1 (GPUs 2,3)".
func (s Slot) String() string {
	if s.GPUs == "" {
		return fmt.Sprintf("%s/%d", s.Node, s.Index)
	}
	return fmt.Sprintf("%s/%d (GPUs %s)", s.Node, s.Index, s.GPUs)
}

// SlurmNode is the one node of the slurm runtime: the cluster, whose scheduler places
// each arm's job itself. SlotsOn gives it a slot per arm, so that all the arms of a block
// are submitted together, and pins no GPUs (Slurm assigns them).
const SlurmNode = "slurm"

// Nodes are the spec's nodes; a spec that lists none runs on LocalNode, this machine,
// with one slot.
func (s *Spec) Nodes() []Node {
	if s.Runtime.Kind == RuntimeSlurm {
		return []Node{{Name: SlurmNode}}
	}
	if len(s.Runtime.Nodes) == 0 {
		return []Node{{Name: LocalNode}}
	}
	return s.Runtime.Nodes
}

// Slots cuts every node into slots: a node whose gpus list devices gets one slot per
// engine.gpus of them (all of them in one slot when engine.gpus is 0), at most its
// `slots` when given; a node with no gpus (or "all") gets `slots` slots (default 1),
// each pinned to devices 0..engine.gpus-1 when it has one slot and engine.gpus is set,
// unpinned otherwise. Slots are ordered round-robin across nodes (slot 0 of every node,
// then slot 1, ...) so that the first arms of a block spread over the nodes.
func (s *Spec) Slots() ([]Slot, error) { return s.SlotsOn(nil) }

// SlotsOn is Slots with the GPUs of "all" counted: a node whose gpus is "all" and whose
// count is at least engine.gpus is cut as if it listed devices 0..count-1. count may be
// nil, and returns 0 for a node it cannot count.
func (s *Spec) SlotsOn(count func(Node) int) ([]Slot, error) {
	if s.Runtime.Kind == RuntimeSlurm {
		// Slurm gives each job its node and GPUs: the slots pin nothing, and there is
		// one per arm, so that a block's arms are all submitted at once.
		n, over := s.armCount()
		if over || n > MaxArms {
			n = MaxArms
		}
		out := make([]Slot, max(n, 1))
		for i := range out {
			out[i] = Slot{Node: SlurmNode, Index: i}
		}
		return out, nil
	}
	var perNode [][]Slot
	for ni, n := range s.Nodes() {
		if strings.TrimSpace(n.GPUs) == "all" && s.Engine.GPUs > 0 && count != nil {
			if c := count(n); c >= s.Engine.GPUs {
				n.GPUs = fmt.Sprintf("0-%d", c-1)
			}
		}
		ss, err := nodeSlots(n, ni, s.Engine.GPUs)
		if err != nil {
			return nil, fmt.Errorf("runtime.nodes[%d] (%s): %w", ni, n.Name, err)
		}
		perNode = append(perNode, ss)
	}
	var out []Slot
	for i := 0; ; i++ {
		added := false
		for _, ss := range perNode {
			if i < len(ss) {
				out = append(out, ss[i])
				added = true
			}
		}
		if !added {
			return out, nil
		}
	}
}

func nodeSlots(n Node, ni, perArm int) ([]Slot, error) {
	list := strings.TrimSpace(n.GPUs)
	if list == "" || list == "all" {
		k := max(n.Slots, 1)
		if k > 1 && perArm > 0 {
			return nil, fmt.Errorf("slots: %d slots of %d GPUs each need the node's gpus listed (e.g. gpus: \"0-%d\")", k, perArm, k*perArm-1)
		}
		var out []Slot
		for i := range k {
			sl := Slot{Node: n.Name, NodeIndex: ni, Index: i}
			if perArm > 0 {
				ids := make([]string, perArm)
				for j := range ids {
					ids[j] = strconv.Itoa(j)
				}
				sl.GPUs = strings.Join(ids, ",")
			}
			out = append(out, sl)
		}
		return out, nil
	}
	ids, err := ExpandGPUs(list)
	if err != nil {
		return nil, fmt.Errorf("gpus: %w", err)
	}
	size := perArm
	if size == 0 {
		size = len(ids)
	}
	if size > len(ids) {
		return nil, fmt.Errorf("gpus: engine.gpus is %d GPUs per arm, but the node has %d (%s)", size, len(ids), list)
	}
	k := len(ids) / size
	if n.Slots > k {
		return nil, fmt.Errorf("slots: %d slots of %d GPUs need %d GPUs, but the node lists %d (%s)", n.Slots, size, n.Slots*size, len(ids), list)
	}
	if n.Slots > 0 {
		k = n.Slots
	}
	out := make([]Slot, k)
	for i := range out {
		out[i] = Slot{Node: n.Name, NodeIndex: ni, Index: i, GPUs: strings.Join(ids[i*size:(i+1)*size], ",")}
	}
	return out, nil
}

// ExpandGPUs lists the devices of a GPU list such as "0-3,6", each once, in the order
// written.
func ExpandGPUs(s string) ([]string, error) {
	var ids []string
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a device number or range", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range low-high", part)
			}
		}
		if b-a > MaxGPUs {
			return nil, fmt.Errorf("range %q is wider than %d devices", part, MaxGPUs)
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				ids = append(ids, strconv.Itoa(i))
			}
		}
	}
	return ids, nil
}

// IsLocalHost reports whether a node's host means this machine's process runtime or
// local Docker daemon: empty or "local".
func IsLocalHost(host string) bool { return host == "" || host == LocalNode }
