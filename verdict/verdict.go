// Package verdict turns a recorded experiment into its judgement: counts per arm, exact
// tests and intervals against the baseline, corruption by round and by detector, run
// facts and caveats, as markdown with SVG charts, and a gate a CI job can fail on.
package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// Verdict is the judged experiment. Build makes one; Markdown and WriteFiles render it.
type Verdict struct {
	Experiment store.ExperimentRow
	Arms       []ArmResult
	Baseline   int // index into Arms
	Alpha      float64
	Unit       string
	Runs       []RunFact
	Rounds     []RoundRow
	Detectors  []DetectorRow
	Responses  *ResponseView // the response-level view, when turns were recorded
	Caveats    []string

	// Design is how the experiment was laid out (blocks, looks, margin, factors).
	Design store.Design
	// StoppedEarly says why scheduling stopped before the planned blocks; empty if it
	// did not.
	StoppedEarly string
	// The design-dependent analyses; each is empty when the design does not call for it.
	UnitView       *UnitView
	Strata         []StrataView
	Pairs          []PairView
	Factorial      *FactorialView
	NonInferiority []NIView
	Losses         []LossView
	Sequential     []SequentialView

	sessions []store.SessionOutcome
	index    map[int64]int
}

// ArmResult is one arm's outcome and, for arms other than the baseline, its comparison.
type ArmResult struct {
	Name      string
	Pins      string // "BF16_INDEX_K=1 --enable-hierarchical-cache"
	Levels    map[string]string
	Sessions  int // analysed sessions: completed, or corrupted before they were lost
	Lost      int // sessions that ended in an error, a timeout or an abort, uncorrupted
	Corrupted int // corrupted sessions among the analysed ones
	Started   int // every session recorded
	Rate      float64
	Wilson    stats.Interval
	Exact     stats.Interval // Clopper-Pearson
	// Against the baseline; nil for the baseline itself.
	Compare *Comparison
	// Timing over completed turns.
	TTFTp50, TTFTp95       float64 // ms
	Latencyp50, Latencyp95 float64 // ms
	TokensPerSecond        float64 // generated tokens per second per request, median
	Turns, FailedTurns     int
	CorruptedTurns         int
	clusters               []stats.ClusterCounts
}

// Comparison is an arm against the baseline.
type Comparison struct {
	Difference float64
	DiffCI     stats.Interval // Newcombe hybrid score
	FisherP    float64
	MidP       float64
	AdjustedP  float64 // Holm-adjusted over every comparison; equal to FisherP with one
	// FDRQ is the Benjamini-Hochberg adjusted p (false discovery rate) over every
	// comparison, for screening many arms; the decision uses AdjustedP.
	FDRQ        float64
	Significant bool
	Direction   string // "higher", "lower" or "" when not significant
	// Sequential is true when a group-sequential boundary, not FisherP, decides.
	Sequential bool
	// UnitDecides is true when the response- or launch-level test decides.
	UnitDecides bool
}

// RunFact is one launch as the verdict reports it.
type RunFact struct {
	Arm, Status, Error string
	Block              int
	Startup, Duration  string
	ExitCode           string
	Endpoint           string
	ServerInfo         map[string]any
	// Superseded is true for a launch that did not finish and was run again on resume;
	// the analysis leaves it out.
	Superseded bool
}

// RoundRow is corruption by round: for each arm, corrupted sessions of those that reached
// the round.
type RoundRow struct {
	Round     int
	Corrupted []int
	Sessions  []int
}

// DetectorRow is corruption by detector for each arm.
type DetectorRow struct {
	Detector string
	Sessions []int // sessions with at least one turn flagged
	Turns    []int
	Example  string
	// Evaluated counts, per arm, the responses the detector judged.
	Evaluated []int
}

// ResponseView is what the analysis would say if responses were the unit, and why it
// must not be: the turns of a session are correlated.
type ResponseView struct {
	Responses    []int
	Corrupted    []int
	FisherP      float64 // naive, responses as independent
	ICC          float64
	DesignEffect float64
	RaoScottP    float64
	Available    bool
}

// Build judges experiment ref (an id or a name) from a read-only database.
func Build(ctx context.Context, db *sqlx.DB, ref string) (*Verdict, error) {
	exp, err := store.FindExperiment(ctx, db, ref)
	if err != nil {
		return nil, err
	}
	armRows, err := store.Arms(ctx, db, exp.ID)
	if err != nil {
		return nil, err
	}
	if len(armRows) == 0 {
		return nil, fmt.Errorf("experiment %d has no arms", exp.ID)
	}
	v := &Verdict{Experiment: exp, Alpha: exp.Alpha, Unit: exp.Unit, Design: exp.ParsedDesign()}
	if exp.StoppedEarly.Valid {
		v.StoppedEarly = exp.StoppedEarly.String
	}
	if v.Alpha <= 0 || v.Alpha >= 1 {
		v.Alpha = 0.05
	}
	if v.Unit == "" {
		v.Unit = "session"
	}
	index := map[int64]int{}
	for i, a := range armRows {
		index[a.ID] = i
		ar := ArmResult{Name: a.Name, Pins: describePins(a.Pins)}
		if a.Levels.Valid {
			json.Unmarshal([]byte(a.Levels.String), &ar.Levels)
		}
		v.Arms = append(v.Arms, ar)
		if a.Name == exp.Baseline {
			v.Baseline = i
		}
	}

	sessions, err := store.Sessions(ctx, db, exp.ID)
	if err != nil {
		return nil, err
	}
	v.sessions, v.index = sessions, index
	for _, s := range sessions {
		ar := &v.Arms[index[s.ArmID]]
		ar.Started++
		if !analysed(s) {
			ar.Lost++
			continue
		}
		ar.Sessions++
		if s.Corrupted {
			ar.Corrupted++
		}
		ar.clusters = append(ar.clusters, stats.ClusterCounts{Events: s.CorruptedTurns, Responses: s.Turns})
		ar.CorruptedTurns += s.CorruptedTurns
	}
	if err := v.loadTimings(ctx, db, index); err != nil {
		return nil, err
	}
	if err := v.loadRounds(ctx, db, index); err != nil {
		return nil, err
	}
	if err := v.loadDetectors(ctx, db, index); err != nil {
		return nil, err
	}
	if err := v.loadRuns(ctx, db, index); err != nil {
		return nil, err
	}
	v.judge()
	return v, nil
}

// analysed reports whether a session's outcome is known: it completed, or a response was
// corrupted before it was lost (corruption cannot be undone by what did not happen next).
// A lost session without a corrupted response has no outcome and is counted as lost.
func analysed(s store.SessionOutcome) bool { return s.Status == "ok" || s.Corrupted }

func describePins(pinsJSON string) string {
	var p struct {
		Env  map[string]string `json:"env"`
		Args []string          `json:"args"`
	}
	if json.Unmarshal([]byte(pinsJSON), &p) != nil {
		return pinsJSON
	}
	var parts []string
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+p.Env[k])
	}
	parts = append(parts, p.Args...)
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}

func (v *Verdict) loadTimings(ctx context.Context, db *sqlx.DB, index map[int64]int) error {
	timings, err := store.TurnTimings(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	ttft := make([][]float64, len(v.Arms))
	lat := make([][]float64, len(v.Arms))
	tps := make([][]float64, len(v.Arms))
	for _, t := range timings {
		i := index[t.ArmID]
		v.Arms[i].Turns++
		if t.Failed || t.StatusCode != 200 {
			v.Arms[i].FailedTurns++
			continue
		}
		if t.TTFT > 0 {
			ttft[i] = append(ttft[i], t.TTFT)
		}
		lat[i] = append(lat[i], t.Latency)
		if gen := t.Latency - t.TTFT; gen > 0 && t.CompletionTokens > 1 {
			tps[i] = append(tps[i], float64(t.CompletionTokens-1)/(gen/1000))
		}
	}
	for i := range v.Arms {
		a := &v.Arms[i]
		a.TTFTp50, a.TTFTp95 = quantile(ttft[i], 0.5), quantile(ttft[i], 0.95)
		a.Latencyp50, a.Latencyp95 = quantile(lat[i], 0.5), quantile(lat[i], 0.95)
		a.TokensPerSecond = quantile(tps[i], 0.5)
	}
	return nil
}

// quantile is the empirical quantile (type 7, as numpy's default); NaN for no data.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}

func (v *Verdict) loadRounds(ctx context.Context, db *sqlx.DB, index map[int64]int) error {
	counts, err := store.RoundCounts(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	byRound := map[int]*RoundRow{}
	for _, c := range counts {
		r, ok := byRound[c.Round]
		if !ok {
			r = &RoundRow{Round: c.Round, Corrupted: make([]int, len(v.Arms)), Sessions: make([]int, len(v.Arms))}
			byRound[c.Round] = r
		}
		i := index[c.ArmID]
		r.Corrupted[i] += c.Corrupted
		r.Sessions[i] += c.Sessions
	}
	for _, r := range byRound {
		v.Rounds = append(v.Rounds, *r)
	}
	sort.Slice(v.Rounds, func(i, j int) bool { return v.Rounds[i].Round < v.Rounds[j].Round })
	return nil
}

func (v *Verdict) loadDetectors(ctx context.Context, db *sqlx.DB, index map[int64]int) error {
	counts, err := store.DetectorCounts(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	byName := map[string]*DetectorRow{}
	var order []string
	for _, c := range counts {
		r, ok := byName[c.Detector]
		if !ok {
			r = &DetectorRow{Detector: c.Detector, Sessions: make([]int, len(v.Arms)), Turns: make([]int, len(v.Arms)),
				Evaluated: make([]int, len(v.Arms))}
			byName[c.Detector] = r
			order = append(order, c.Detector)
		}
		i := index[c.ArmID]
		r.Sessions[i] += c.Sessions
		r.Turns[i] += c.Turns
		r.Evaluated[i] += c.Evaluated
		if r.Example == "" && c.Example != "" {
			r.Example = c.Example
		}
	}
	sort.Strings(order)
	for _, n := range order {
		v.Detectors = append(v.Detectors, *byName[n])
	}
	return nil
}

func (v *Verdict) loadRuns(ctx context.Context, db *sqlx.DB, index map[int64]int) error {
	runs, err := store.Runs(ctx, db, v.Experiment.ID)
	if err != nil {
		return err
	}
	for _, r := range runs {
		f := RunFact{Arm: v.Arms[index[r.ArmID]].Name, Status: string(r.Status), Block: r.Block, Endpoint: r.Endpoint}
		if r.Error.Valid {
			f.Error = r.Error.String
		}
		if r.ReadyAt.Valid {
			f.Startup = between(r.StartedAt, r.ReadyAt.String)
		}
		if r.EndedAt.Valid {
			f.Duration = between(r.StartedAt, r.EndedAt.String)
		}
		if r.ExitCode.Valid {
			f.ExitCode = fmt.Sprint(r.ExitCode.Int64)
		}
		if r.ServerInfo.Valid {
			json.Unmarshal([]byte(r.ServerInfo.String), &f.ServerInfo)
		}
		if r.SupersededBy.Valid {
			f.Superseded = true
			f.Error = strings.TrimSpace(f.Error + " (run again on resume; left out of the analysis)")
		}
		v.Runs = append(v.Runs, f)
	}
	return nil
}
