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

// floorHeadline is the one sentence of the headline about divergence against the A/A
// floor: the arms beyond it first (what got worse), each with its rate, p and depth, and
// the floor's own rate beside them; the arms within it last. How the floor was tested,
// and which arm beyond it departs later, are the divergence section's.
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
	byRate := func(a, b DivergenceRow) int { return b.Diverged*a.Compared - a.Diverged*b.Compared }
	slices.SortStableFunc(beyond, byRate)
	slices.SortStableFunc(within, byRate)
	// An arm's name leads its figures only where the sentence names several.
	arms := func(rows []DivergenceRow, named bool) string {
		var parts []string
		for _, d := range rows {
			part := fmt.Sprintf("%s, p %s%s", divergedRate(d), pEq(d.Floor.P), departing(d))
			if named || len(rows) > 1 {
				part = d.Arm + " " + part
			}
			parts = append(parts, part)
		}
		return strings.Join(parts, "; ")
	}
	names := func(rows []DivergenceRow) string {
		var out []string
		for _, d := range rows {
			out = append(out, d.Arm)
		}
		return joinAnd(out)
	}
	fl := append(beyond, within...)[0].Floor
	floor := fmt.Sprintf("the floor, %s, which repeats %s's pins, departed in %s", fl.Floor, base,
		divergedRate(DivergenceRow{Diverged: fl.FloorDiverged, Compared: fl.FloorCompared}))
	if len(beyond) == 0 {
		verb := "does not diverge"
		if len(within) > 1 {
			verb = "do not diverge"
		}
		return fmt.Sprintf("%s %s from %s more than the A/A floor: %s; %s.", bold(names(within), mark), verb, base, arms(within, false), floor)
	}
	verb := "diverges"
	if len(beyond) > 1 {
		verb = "diverge"
	}
	s := fmt.Sprintf("%s %s from %s beyond the A/A floor: %s; %s", bold(names(beyond), mark), verb, base, arms(beyond, false), floor)
	if len(within) > 0 {
		s += fmt.Sprintf("; within it: %s", arms(within, true))
	}
	return s + "."
}

// divergedRate is an arm's diverged sessions: "7 of 40 sessions (17.5%)".
func divergedRate(d DivergenceRow) string {
	return fmt.Sprintf("%d of %d sessions (%s)", d.Diverged, d.Compared, pct(float64(d.Diverged)/float64(max(d.Compared, 1))))
}

// floorTest says how far the floor's departing sessions stayed alike, how the arms were
// tested against it and, of two or more beyond it, which departs later: the divergence
// section's paragraph under the floor's.
func (v *Verdict) floorTest() string {
	var beyond []DivergenceRow
	var onLaunches, onSessions []string
	var fl *FloorComparison
	for _, d := range v.Divergence {
		if d.Floor == nil {
			continue
		}
		fl = d.Floor
		if d.Floor.OnLaunches {
			onLaunches = append(onLaunches, d.Arm)
		} else {
			onSessions = append(onSessions, d.Arm)
		}
		if d.Floor.Beyond {
			beyond = append(beyond, d)
		}
	}
	if fl == nil {
		return ""
	}
	var s []string
	if i := slices.IndexFunc(v.Divergence, func(d DivergenceRow) bool { return d.Arm == fl.Floor }); i >= 0 && v.Divergence[i].Diverged > 0 {
		s = append(s, fmt.Sprintf("The floor's sessions departed%s.", strings.TrimPrefix(departing(v.Divergence[i]), ", departing")))
	}
	var tests []string
	if len(onLaunches) > 0 {
		tests = append(tests, fmt.Sprintf("on launches by a one-sided randomization test (%s)", joinAnd(onLaunches)))
	}
	if len(onSessions) > 0 {
		tests = append(tests, fmt.Sprintf("on sessions by how soon they depart, a one-sided log-rank permutation test (%s)", joinAnd(onSessions)))
	}
	s = append(s, fmt.Sprintf("Each arm was tested against it at %s, %s.", levelText(fl.Level), strings.Join(tests, "; ")))
	if len(beyond) >= 2 {
		s = append(s, v.depthSentence(beyond))
	}
	return strings.TrimSpace(strings.Join(s, " "))
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
