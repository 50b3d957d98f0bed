package stats

// A verdict tests several claims at once, some at several looks, and must claim anything
// falsely at most alpha of the time. Bonferroni over claims and looks keeps that bound
// whatever the claims' dependence, and it loses nothing on a claim that could never be
// made: a test that cannot give a p below its level rejects with probability 0, so charging
// it a share of alpha only takes that share from the claims that can. The levels here are
// therefore given only where a test can reach them, from what the design fixes before any
// outcome is seen (the tests and the launches each arm has), never from the outcomes
// themselves: a claim whose launches cannot reach its share passes it on to the others,
// and a look whose launches cannot reach its level is not charged.
//
// AllotAlpha is the one place that says what level each claim and each look is tested at:
// the verdict, the orchestrator's sequential looks, the plan and the bisection all ask it.

// Reach is what a claim's test can reach with its design: MinP[k] is the smallest p the
// test can give at all at look k+1, one entry for a fixed design. A test that needs no
// minimum (a t or z test) reaches 0; one that cannot be run at all (one launch per arm
// and nothing to weigh it against) reaches 1.
type Reach struct {
	// Primary marks a claim on the workload's primary outcome (corruption for agents and
	// traces, wedged launches for abort cascades, tok/s for throughput runs).
	Primary bool
	MinP    []float64
}

// Allotment is the alpha a claim is given and how its looks spend it.
type Allotment struct {
	// Share is the claim's share of alpha; 0 when no share it could be given would let
	// its test reach it (the claim is then not tested, and costs the others nothing).
	Share float64
	// Looks is the level of each look: Share split evenly over the looks from FirstLook
	// on, 0 at the looks before it, whose launches cannot reach it.
	Looks []float64
	// FirstLook is the first look (1-based) whose test can reach its level; 0 when none.
	FirstLook int
}

// Level is the level of the claim's last look: a fixed design's one level.
func (a Allotment) Level() float64 {
	if len(a.Looks) == 0 {
		return 0
	}
	return a.Looks[len(a.Looks)-1]
}

// Testable reports whether the claim was given a level its test can reach.
func (a Allotment) Testable() bool { return a.FirstLook > 0 }

// LookLevels spreads share over the looks whose tests can reach their level: the fewest
// looks charged from the end such that the first of them reaches share divided by their
// number. minP must not grow from one look to the next (more launches never make a test
// weaker). first is 0, and every level 0, when no look can reach even the whole share.
func LookLevels(share float64, minP []float64) (levels []float64, first int) {
	looks := len(minP)
	levels = make([]float64, looks)
	for k := 1; k <= looks; k++ {
		if per := share / float64(looks-k+1); Reject(minP[k-1], per) {
			for j := k; j <= looks; j++ {
				levels[j-1] = per
			}
			return levels, k
		}
	}
	return levels, 0
}

// AllotAlpha shares alpha between claims (weighted Bonferroni): the primary claims split
// PrimaryShare of it and the others the rest, or either group all of it when the other
// has no claim that can be tested. A claim whose test cannot reach its share is dropped,
// the one furthest from it first, and the shares are dealt again, until every claim left
// reaches its own; the levels sum to at most alpha.
func AllotAlpha(alpha float64, claims []Reach) []Allotment {
	out := make([]Allotment, len(claims))
	active := make([]bool, len(claims))
	for i, c := range claims {
		active[i] = len(c.MinP) > 0
		out[i].Looks = make([]float64, len(c.MinP))
	}
	for {
		nP, nO := 0, 0
		for i, c := range claims {
			switch {
			case !active[i]:
			case c.Primary:
				nP++
			default:
				nO++
			}
		}
		if nP+nO == 0 {
			return out
		}
		share := map[bool]float64{true: alpha * PrimaryShare, false: alpha * (1 - PrimaryShare)}
		switch {
		case nO == 0:
			share[true] = alpha
		case nP == 0:
			share[false] = alpha
		}
		worst, worstGap := -1, 0.0
		for i, c := range claims {
			if !active[i] {
				continue
			}
			n := nO
			if c.Primary {
				n = nP
			}
			s := share[c.Primary] / float64(n)
			levels, first := LookLevels(s, c.MinP)
			out[i] = Allotment{Share: s, Looks: levels, FirstLook: first}
			if first == 0 {
				// How far the claim is from reaching its share: its best look's minimum over it.
				if gap := c.MinP[len(c.MinP)-1] / s; worst < 0 || gap > worstGap {
					worst, worstGap = i, gap
				}
			}
		}
		if worst < 0 {
			return out
		}
		active[worst] = false
		out[worst] = Allotment{Looks: make([]float64, len(claims[worst].MinP))}
	}
}

// FixedReach is the reach of a claim tested once, whose test's smallest p is minP.
func FixedReach(primary bool, minP float64) Reach {
	return Reach{Primary: primary, MinP: []float64{minP}}
}

// SequentialShare is the share of alpha each primary claim of a group-sequential design
// is given, whatever else the verdict tests: the orchestrator decides its stops on it
// before the other claims exist, so it cannot depend on them. LookLevels spreads it over
// the looks that can reach it.
func SequentialShare(alpha float64, comparisons int) float64 {
	return alpha * PrimaryShare / float64(max(comparisons, 1))
}

// SequentialLookLevels are the levels of a group-sequential design's looks, one launch
// per arm added at each: each primary claim's SequentialShare spread over the looks whose
// randomization test can reach it (0 at the looks before).
func SequentialLookLevels(alpha float64, comparisons, looks int) []float64 {
	minP := make([]float64, looks)
	for k := range minP {
		minP[k] = MinAttainableP(k+1, k+1)
	}
	levels, _ := LookLevels(SequentialShare(alpha, comparisons), minP)
	return levels
}
