// Package bisect finds which of the changes between a good and a bad configuration of
// an engine makes it corrupt responses: an adaptive group test on noisy outcomes whose
// every step is an arbiter experiment (the good configuration against the good one with
// some of the changes applied), judged by a three-way group-sequential exact test, with
// the error of the whole search held to a declared budget.
package bisect

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// The search.
//
// The model: applying a set S of the changes to the good configuration corrupts (its
// corruption rate exceeds good's by at least the effect) exactly when S contains a
// culprit, a set of changes that corrupt together; any other S is clean (good's rate).
// A culprit may be one change or a combination (bf16 index-K corrupts only with HiCache
// on): with the pair {A, B}, the subset with A and not B is clean, and so is the one with
// B and not A. Halving the changes and following the half that corrupts, as git bisect
// does, would find neither half corrupting and stop.
//
// What works for combinations is what ddmin's complement step does, made economical by
// monotonicity: test growing prefixes of the candidate list instead of halves. With the
// culprit so far R (empty at first) and the candidates L, in a fixed order, R ∪ L is
// known to corrupt. Binary search on the prefix length finds the shortest prefix L[:m]
// with R ∪ L[:m] corrupting and R ∪ L[:m−1] clean: then L[m] belongs to every culprit
// inside R ∪ L[:m], so it joins R, and only L[:m−1] stays a candidate (whatever comes
// after L[m] was not needed). Each round then asks first whether R alone corrupts: that
// is the confirmation A/B of good + R against good, and when it corrupts, R is the
// culprit, minimal (every member was shown necessary) and confirmed.
//
// Steps (one step is one experiment, one verdict): 1 reproduction (all changes against
// good) + ceil(log2 n) to find the first member + for every further member 1
// confirmation attempt and ceil(log2 |L|) + 1 final confirmation. For n = 8: a single
// change in at most 5 steps (1 + 3 + 1), a pair in at most 9, three changes in 13
// (MaxSteps).
//
// A step that could not decide (inconclusive, or corrupting less than good) ends the
// search: its answer would steer every later step, and guessing it would make the
// error budget meaningless. So does an answer that contradicts an earlier one (R alone
// clean although R was seen corrupting). The conclusion then says what is known: the
// members found, and where the next one lies.

// Role is what a step asks.
type Role = store.StepRole

// Probe is one step the search asks for.
type Probe struct {
	// Step numbers the probe from 1.
	Step int
	Role Role
	// Changes are the indexes of the changes applied to the good configuration,
	// ascending.
	Changes []int
}

// Conclusion is what a search found, in the form the store keeps.
type Conclusion = store.BisectionConclusion

// MaxSteps is the most steps the search takes to find and confirm a culprit of k of n
// changes, the reproduction included: 1 + ceil(log2 n) + sum over the further members i
// = 2..k of (1 + ceil(log2 (n − i + 1))) + 1.
func MaxSteps(n, k int) int {
	if n < 1 || k < 1 {
		return 0
	}
	k = min(k, n)
	steps := 1 + ceilLog2(n) + 1
	for i := 2; i <= k; i++ {
		steps += 1 + ceilLog2(n-i+1)
	}
	return steps
}

func ceilLog2(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// phase is where the search stands.
type phase int

const (
	phaseReproduce phase = iota
	phaseBinary
	phaseConfirm
	phaseRevert
	phaseDone
)

// Search is the adaptive group test over n changes. Next asks for a step, Record gives
// its outcome; the search is a pure function of the outcomes, so replaying recorded
// outcomes (a resumed bisection) asks for the same steps again.
type Search struct {
	n, maxSteps int
	checkRevert bool

	phase   phase
	probes  []Probe
	pending bool // the last probe awaits its outcome

	// culprit is R, in the order its members were found; cand is L, in search order.
	culprit []int
	cand    []int
	// lo and hi bound the shortest corrupting prefix of cand: R ∪ cand[:lo] is clean
	// and R ∪ cand[:hi] corrupts (seen in a step, or implied by the earlier rounds).
	lo, hi int

	conclusion Conclusion
}

// NewSearch starts a search over n changes that takes at most maxSteps steps (revert
// check included) and, with checkRevert, ends a found culprit with the revert check.
func NewSearch(n, maxSteps int, checkRevert bool) (*Search, error) {
	if n < 1 {
		return nil, fmt.Errorf("bisect: no changes to search")
	}
	if maxSteps < MaxSteps(n, 1) {
		return nil, fmt.Errorf("bisect: %d steps cannot find even a single change of %d (that takes up to %d)", maxSteps, n, MaxSteps(n, 1))
	}
	return &Search{n: n, maxSteps: maxSteps, checkRevert: checkRevert, conclusion: Conclusion{Status: store.ConclusionRunning}}, nil
}

// Next returns the next step to run, or false when the search has ended (Conclusion
// says how). It returns the same probe until Record is called.
func (s *Search) Next() (Probe, bool) {
	if s.phase == phaseDone {
		return Probe{}, false
	}
	if s.pending {
		return s.probes[len(s.probes)-1], true
	}
	p := Probe{Step: len(s.probes) + 1}
	switch s.phase {
	case phaseReproduce:
		p.Role, p.Changes = store.RoleReproduce, s.all()
	case phaseBinary:
		mid := s.lo + (s.hi-s.lo)/2
		p.Role, p.Changes = store.RoleSearch, s.with(s.cand[:mid])
	case phaseConfirm:
		p.Role, p.Changes = store.RoleConfirm, s.with(nil)
	case phaseRevert:
		p.Role = store.RoleRevert
		for i := range s.n {
			if !slices.Contains(s.conclusion.Culprit, i) {
				p.Changes = append(p.Changes, i)
			}
		}
	}
	if p.Step > s.maxSteps {
		if s.phase == phaseRevert {
			s.finishRevert("", 0, fmt.Sprintf("The revert check did not run: the %d steps of the budget were spent.", s.maxSteps))
			return Probe{}, false
		}
		s.stopUncertain(0, fmt.Sprintf("The step budget (%d steps) ran out before the culprit was complete; a culprit of more changes needs more steps (search.max_steps).", s.maxSteps))
		return Probe{}, false
	}
	s.probes = append(s.probes, p)
	s.pending = true
	return p, true
}

// Record gives the outcome of the probe Next returned last.
func (s *Search) Record(o stats.StepOutcome) error {
	if !s.pending {
		return fmt.Errorf("bisect: an outcome without a step to give it to")
	}
	if !o.Decided() {
		return fmt.Errorf("bisect: step %d: %q is not an outcome", len(s.probes), o)
	}
	s.pending = false
	p := s.probes[len(s.probes)-1]
	s.conclusion.Steps = p.Step
	undecided := o == stats.StepInconclusive || o == stats.StepLower
	why := func(what string) string {
		if o == stats.StepLower {
			return fmt.Sprintf("Step %d (%s) corrupted less than good, which no subset of the changes from good to bad can do if the model holds (another difference between the arms?).", p.Step, what)
		}
		return fmt.Sprintf("Step %d (%s) could not decide.", p.Step, what)
	}
	switch s.phase {
	case phaseReproduce:
		switch {
		case undecided:
			s.stopUncertain(p.Step, why("the bad configuration against good"))
		case o == stats.StepClean:
			s.phase = phaseDone
			s.conclusion.Status = store.ConclusionNotReproduced
			s.conclusion.Reason = fmt.Sprintf("Step %d shows the bad configuration clean against good: its excess corruption is below the effect, so there is no culprit to find among these changes.", p.Step)
		default:
			s.cand, s.lo, s.hi = s.all(), 0, s.n
			s.narrow()
		}
	case phaseBinary:
		mid := s.lo + (s.hi-s.lo)/2
		switch {
		case undecided:
			s.conclusion.Known = sorted(s.culprit)
			s.conclusion.Candidates = sorted(s.cand[s.lo:s.hi])
			s.stopUncertain(p.Step, why("a search step"))
		case o == stats.StepCorrupts:
			s.hi = mid
			s.narrow()
		default:
			s.lo = mid
			s.narrow()
		}
	case phaseConfirm:
		switch {
		case undecided:
			s.conclusion.Known = sorted(s.culprit)
			s.conclusion.Candidates = sorted(s.cand)
			s.stopUncertain(p.Step, why("the confirmation of "+changeList(s.culprit)))
		case o == stats.StepCorrupts:
			s.conclusion.Status = store.ConclusionCulprit
			s.conclusion.Culprit = sorted(s.culprit)
			s.conclusion.ConfirmedBy = p.Step
			s.conclusion.Reason = fmt.Sprintf("Step %d confirms the culprit: good with %s applied corrupts against good, and each of its changes was shown necessary.", p.Step, changeList(s.culprit))
			if s.checkRevert && len(s.culprit) < s.n {
				s.phase = phaseRevert
			} else {
				s.phase = phaseDone
			}
		case len(s.cand) == 0:
			// R ∪ nothing was seen corrupting, and now R is clean.
			s.conclusion.Known = sorted(s.culprit)
			s.stopUncertain(p.Step, fmt.Sprintf("Step %d contradicts an earlier step: good with %s applied was seen corrupting, and its confirmation is clean.", p.Step, changeList(s.culprit)))
		default:
			s.lo, s.hi = 0, len(s.cand)
			s.phase = phaseBinary
			s.narrow()
		}
	case phaseRevert:
		switch o {
		case stats.StepClean:
			s.finishRevert(o, p.Step, fmt.Sprintf("Step %d: every change but the culprit's is clean against good, so reverting the culprit's changes alone makes the bad configuration clean.", p.Step))
		case stats.StepCorrupts:
			s.finishRevert(o, p.Step, fmt.Sprintf("Step %d: every change but the culprit's still corrupts against good: another culprit remains among the other changes; bisect them again without the culprit.", p.Step))
		default:
			s.finishRevert(o, p.Step, why("the revert check"))
		}
	}
	return nil
}

// narrow moves the binary search on: once the shortest corrupting prefix is pinned to
// one change, that change joins the culprit and the round ends in a confirmation.
func (s *Search) narrow() {
	if s.hi-s.lo > 1 {
		s.phase = phaseBinary
		return
	}
	x := s.cand[s.hi-1]
	s.culprit = append(s.culprit, x)
	s.cand = s.cand[:s.lo]
	s.lo, s.hi = 0, len(s.cand)
	s.phase = phaseConfirm
}

func (s *Search) finishRevert(o stats.StepOutcome, step int, note string) {
	s.conclusion.Revert, s.conclusion.RevertStep = string(o), step
	s.conclusion.Reason += " " + note
	s.phase = phaseDone
}

func (s *Search) stopUncertain(step int, reason string) {
	s.phase = phaseDone
	s.conclusion.Status = store.ConclusionUncertain
	s.conclusion.StoppedAt = step
	if s.conclusion.Candidates == nil && len(s.cand) > 0 && s.hi > s.lo {
		s.conclusion.Known = sorted(s.culprit)
		s.conclusion.Candidates = sorted(s.cand[s.lo:s.hi])
	}
	s.conclusion.Reason = reason
}

// Conclusion is what the search found so far; its Status is running until it ends.
func (s *Search) Conclusion() Conclusion {
	c := s.conclusion
	c.Culprit, c.Known, c.Candidates = slices.Clone(c.Culprit), slices.Clone(c.Known), slices.Clone(c.Candidates)
	return c
}

func (s *Search) all() []int {
	out := make([]int, s.n)
	for i := range out {
		out[i] = i
	}
	return out
}

// with is the culprit so far plus prefix, ascending.
func (s *Search) with(prefix []int) []int {
	return sorted(append(slices.Clone(s.culprit), prefix...))
}

func sorted(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	if out == nil {
		out = []int{}
	}
	return out
}

// changeList names changes by their 1-based numbers: "change 3", "changes 3 and 6".
func changeList(idx []int) string {
	s := sorted(idx)
	words := make([]string, len(s))
	for i, x := range s {
		words[i] = fmt.Sprint(x + 1)
	}
	switch len(words) {
	case 0:
		return "no change"
	case 1:
		return "change " + words[0]
	}
	return "changes " + strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
