package verdict

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiterlab/arbiter/stats"
)

// A real engine batching at concurrency is not bit-deterministic: the same configuration
// launched twice, or even one launch asked twice, departs from itself now and then. An
// arm that repeats the baseline's pins (analysis.divergence_floor) measures that floor
// in the same experiment, under the same load; every other arm's divergence is judged
// against it, not against zero.

// FloorComparison is one arm's divergence against the A/A floor.
type FloorComparison struct {
	// Floor is the arm that repeats the baseline; FloorDiverged of FloorCompared its
	// sessions departed from the baseline's.
	Floor                        string
	FloorDiverged, FloorCompared int
	// P is the one-sided p that the arm diverges more often than the floor: the launch
	// randomization test when both sides have launches enough to reach Level, else the
	// log-rank test by permutation of how soon the sessions depart, turn by turn
	// (stats.DepartureLogRank; OnLaunches says which). Sooner counts: an arm whose
	// sessions all depart at the first turn is beyond a floor whose sessions depart, if
	// at all, turns later.
	P          float64
	OnLaunches bool
	// Level is the level each arm is tested at: alpha shared by the arms judged.
	Level float64
	// Beyond is true when the arm diverges significantly more often than the floor.
	Beyond bool
}

// judgeFloor judges every arm's divergence against the A/A floor, when the experiment
// declared one and its divergence pass ran.
func (v *Verdict) judgeFloor() {
	floor := v.Design.DivergenceFloor
	fi := slices.IndexFunc(v.Divergence, func(d DivergenceRow) bool { return d.Arm == floor })
	if floor == "" || fi < 0 {
		return
	}
	f := v.Divergence[fi]
	judged := len(v.Divergence) - 1
	level := v.Alpha / float64(max(judged, 1))
	for i := range v.Divergence {
		d := &v.Divergence[i]
		if i == fi || d.Compared == 0 || f.Compared == 0 {
			continue
		}
		c := &FloorComparison{Floor: floor, FloorDiverged: f.Diverged, FloorCompared: f.Compared, Level: level}
		c.P = 1
		if t, err := stats.DepartureLogRank(f.departures, d.departures); err == nil {
			c.P = t.P
		}
		if len(d.launchRates) >= 2 && len(f.launchRates) >= 2 && stats.MinAttainableP(len(d.launchRates), len(f.launchRates)) <= level {
			if t, err := stats.LaunchPermutation(f.launchRates, d.launchRates, 0); err == nil {
				// One-sided: half the two-sided p when the arm lies above the floor.
				c.P, c.OnLaunches = t.P/2, true
				if t.Difference <= 0 {
					c.P = 1 - t.P/2
				}
			}
		}
		c.Beyond = c.P <= level
		d.Floor = c
	}
}

// floorHeadline says which arms diverge beyond the A/A floor, first in the headline of
// an experiment that declared one.
func (v *Verdict) floorHeadline(mark string) string {
	var beyond, within []DivergenceRow
	for _, d := range v.Divergence {
		switch {
		case d.Floor == nil:
		case d.Floor.Beyond:
			beyond = append(beyond, d)
		default:
			within = append(within, d)
		}
	}
	if len(beyond)+len(within) == 0 {
		return ""
	}
	base := v.Arms[v.Baseline].Name
	rate := func(d DivergenceRow) string {
		return fmt.Sprintf("%d of %d sessions (%s)", d.Diverged, d.Compared, pct(float64(d.Diverged)/float64(d.Compared)))
	}
	f := beyond
	if len(f) == 0 {
		f = within
	}
	fl := f[0].Floor
	var s []string
	for _, group := range []struct {
		rows []DivergenceRow
		what string
	}{{beyond, "beyond"}, {within, "within"}} {
		if len(group.rows) == 0 {
			continue
		}
		slices.SortFunc(group.rows, func(a, b DivergenceRow) int { return b.Diverged*a.Compared - a.Diverged*b.Compared })
		var names, parts []string
		for _, d := range group.rows {
			names = append(names, d.Arm)
			part := fmt.Sprintf("%s %s, p %s", d.Arm, rate(d), pEq(d.Floor.P))
			part += departing(d)
			parts = append(parts, part)
		}
		verb := map[bool]string{true: "diverges from %s beyond the A/A floor", false: "does not diverge from %s more than the A/A floor"}[group.what == "beyond"]
		if len(names) > 1 {
			verb = map[bool]string{true: "diverge from %s beyond the A/A floor", false: "do not diverge from %s more than the A/A floor"}[group.what == "beyond"]
		}
		s = append(s, fmt.Sprintf("%s %s: %s.", bold(joinAnd(names), mark), fmt.Sprintf(verb, base), strings.Join(parts, "; ")))
	}
	if len(beyond) >= 2 {
		s = append(s, v.depthSentence(beyond))
	}
	unit := "sessions, by how soon they depart: a one-sided log-rank permutation test"
	if fl.OnLaunches {
		unit = "launches, one-sided randomization test"
	}
	floorRow := v.Divergence[slices.IndexFunc(v.Divergence, func(d DivergenceRow) bool { return d.Arm == fl.Floor })]
	s = append(s, fmt.Sprintf("The floor is %s, which repeats %s's pins: %d of %d sessions (%s) departed from %s's%s (tested on %s at %s each).",
		fl.Floor, base, fl.FloorDiverged, fl.FloorCompared, pct(float64(fl.FloorDiverged)/float64(fl.FloorCompared)), base, strings.Replace(departing(floorRow), ", departing", ",", 1), unit, levelText(fl.Level)))
	return strings.Join(s, " ")
}

// departing says how far into its turn the median departing session stayed alike:
// ", departing a median 46 characters into the turn"; "" when none departed.
func departing(d DivergenceRow) string {
	if d.Diverged == 0 {
		return ""
	}
	unit := "characters"
	if d.Depth == 1 {
		unit = "character"
	}
	return fmt.Sprintf(", departing a median %g %s into the turn", d.Depth, unit)
}

// depthSentence compares, of the arms beyond the floor, the one whose departing turns stay
// alike longest with the one whose depart soonest: how many characters into the turn they
// depart, by the Mann-Whitney test (two-sided). A smaller change of numerics departs later.
func (v *Verdict) depthSentence(beyond []DivergenceRow) string {
	rows := slices.Clone(beyond)
	slices.SortStableFunc(rows, func(a, b DivergenceRow) int { return cmp.Compare(b.Depth, a.Depth) })
	deep, shallow := rows[0], rows[len(rows)-1]
	if len(deep.depths) == 0 || len(shallow.depths) == 0 || deep.Depth == shallow.Depth {
		return ""
	}
	r, err := stats.RankCompare(shallow.depths, deep.depths, 0.95)
	if err != nil {
		return ""
	}
	verdict := "a difference these sessions do not show beyond chance"
	if r.P <= v.Alpha {
		verdict = "so " + deep.Arm + " changes the replies less"
	}
	return fmt.Sprintf("%s's departing turns stay alike longer than %s's (a median %g against %g characters; Mann-Whitney p %s): %s.",
		deep.Arm, shallow.Arm, deep.Depth, shallow.Depth, pEq(r.P), verdict)
}
