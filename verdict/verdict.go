// Package verdict turns a recorded experiment into its judgement: counts per arm, exact
// tests and intervals against the baseline, corruption by round and by detector, run
// facts and caveats, as markdown with SVG charts, and a gate a CI job can fail on.
package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/stats"
	"github.com/arbiterlab/arbiter/store"
)

// Verdict is the judged experiment. Build makes one; Markdown and WriteFiles render it.
type Verdict struct {
	Experiment store.ExperimentRow
	// DB is the results database as the user named it (--db); the commands a verdict
	// suggests name it, so that they read this database and not the default one, where
	// experiment ids start from 1 again. Empty: the default database, named by none.
	DB        string
	Arms      []ArmResult
	Baseline  int // index into Arms
	Alpha     float64
	Unit      string
	Runs      []RunFact
	Rounds    []RoundRow
	Detectors []DetectorRow
	// DetectorHealth is how each detector fared: responses judged, failed, not asked.
	DetectorHealth []DetectorHealth
	// Divergence is, per non-baseline arm, how its outputs departed from the baseline's
	// at temperature 0; empty when the divergence pass did not run.
	Divergence []DivergenceRow
	Responses  *ResponseView // the response-level view, when turns were recorded
	// Caveats are ranked by kind, what can overturn the verdict first.
	Caveats []Caveat
	// notes are the caveats of the design's analyses, before caveats ranks them.
	notes []Caveat

	// Design is how the experiment was laid out (blocks, looks, margin, factors).
	Design store.Design
	// MaxLoss is the share of an arm's sessions it may lose before its decision becomes
	// inconclusive (analysis.max_loss).
	MaxLoss float64
	// MinEffect is the smallest change of latency or tok/s called better or worse
	// (analysis.min_effect).
	MinEffect float64
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
	// Outcomes are the judgements beyond corruption: latency and throughput per session,
	// per phase, and abort cascades.
	Outcomes *Outcomes
	// Claims are every claim of the verdict as tested on launches, the experimental
	// unit; they decide the comparisons, rows and gates above.
	Claims *LaunchFamily
	// Floor is the noise floor the claims were weighed against (see Floor.Used); nil
	// when the experiment names none.
	Floor *Floor
	// Conditions are, per arm, the load its engine carried (from its scraped /metrics);
	// empty when no metrics were recorded.
	Conditions []ArmConditions
	// Telemetry is, per launch, what its GPUs did while its workload ran (or why that
	// is unknown), in block order; empty when nothing was recorded.
	Telemetry []LaunchTelemetry
	// Pins are what every launch's engine reported about its pins once it was ready;
	// empty for experiments recorded before engines were attested.
	Pins []PinView
	// Verify is a verify workload's scores against the reference arm; nil for others.
	Verify *VerifyView

	sessions []store.SessionOutcome
	index    map[int64]int
}

// ArmResult is one arm's outcome and, for arms other than the baseline, its comparison.
type ArmResult struct {
	Name   string
	Pins   string // "BF16_INDEX_K=1 --enable-hierarchical-cache"
	Levels map[string]string
	// Sessions are the analysed sessions: those that finished (store.Analysed).
	Sessions int
	// Corrupted are the corrupted sessions among the analysed ones.
	Corrupted int
	// Planned is every session the arm's launches were to run; Started those recorded.
	Planned, Started int
	// Lost is every planned session that did not finish: ended by an error, a timeout, a
	// crash or a wedge, or never started because its launch died first.
	Lost int
	// CorruptedThenLost are lost sessions that had a corrupted response before they
	// were lost. They are not analysed (that would count only the corrupted ones of the
	// lost sessions); the verdict reports them beside the analysis.
	CorruptedThenLost int
	// CutShort tallies the sessions of the arm's launches cut short (the user's interrupt,
	// a node lost, an arbiter killed): left out of the analysis whole (store.InAnalysis),
	// the sessions they finished too, which need not be a fair sample of theirs.
	CutShort store.SessionCounts
	// Launches are the arm's launches (resumed-over ones left out), by how they ended.
	Launches LaunchCounts
	// Problems say why the arm's corruption cannot be judged (a crash, a wedge, a failed
	// launch, losses above analysis.max_loss); empty when it can.
	Problems []string
	// faults names, per way a launch can fail ("crashed", "wedged", "failed to start"),
	// the blocks it happened in; lossOver is true when Lost exceeds analysis.max_loss.
	faults   map[string]string
	lossOver bool
	Rate     float64
	Wilson   stats.Interval
	Exact    stats.Interval // Clopper-Pearson
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
	DiffCI     stats.Interval // Newcombe hybrid score; the repeated confidence interval for sequential arms
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
	// Inconclusive is true when the arm or the baseline crashed, wedged, failed to
	// launch or lost more than analysis.max_loss of its sessions: what survived is not a
	// fair sample, so no corruption decision is made, whatever the test says. Why names
	// the arms and what happened to them.
	Inconclusive bool
	Why          string
	// NoBaseline is true when the comparison is inconclusive only through the baseline
	// (it crashed, wedged or lost too much) while the arm itself ran clean: the arm is not
	// in doubt, it has nothing fair to be compared with.
	NoBaseline bool
	// Tipping is how many lost sessions, labelled against the decision, would change it;
	// nil when no session was lost on either side.
	Tipping *TippingPoint
	// Faults compares crashed or wedged launches with the baseline's.
	Faults LaunchComparison
	// Launch is the corruption claim as tested on launches: it decides Significant and
	// Direction, and AdjustedP is its p (NaN when the launches could not test it).
	Launch *LaunchClaim
}

// Decision is the comparison's outcome in one word: "higher", "lower", "none" (no
// difference shown), "inconclusive", or "not compared" (NoBaseline).
func (c *Comparison) Decision() string {
	switch {
	case c.Inconclusive && c.NoBaseline:
		return "not compared"
	case c.Inconclusive:
		return "inconclusive"
	case c.Significant:
		return c.Direction
	}
	return "none"
}

// CorruptedThenCut are the sessions of the arm's launches cut short, finished or not,
// with a corrupted response: neither analysed nor lost (the engine did not lose them),
// but a corrupted response was seen, and the corruption gate counts it.
func (a ArmResult) CorruptedThenCut() int { return a.CutShort.Corrupted + a.CutShort.CorruptedThenLost }

// cutShort reports whether the launch was cut short and not run again: left out of the
// analysis, and named by the caveat that says so.
func (r RunFact) cutShort() bool { return !r.Superseded && r.Status.CutShort() }

// LaunchCounts tallies an arm's launches by how they ended.
type LaunchCounts struct {
	Total, Done, Crashed, Wedged, Erroring, TimedOut, Failed, Interrupted int
	// NodeLost are launches whose node stopped answering: like an interrupt, not the
	// engine's doing, so they are left out of the fault comparison.
	NodeLost int
	// Unfinished are launches still starting or running when the verdict was built: their
	// arbiter was killed (an abandoned experiment), or it runs them still.
	Unfinished int
}

// Judged are the launches the fault comparison counts: all but those cut short (the
// user's interrupt, a node lost, unfinished).
func (l LaunchCounts) Judged() int { return l.Total - l.CutShort() }

// CutShort are the launches left out of the analysis for something other than their
// engine stopping them: interrupted, lost with their node, or unfinished.
func (l LaunchCounts) CutShort() int { return l.Interrupted + l.NodeLost + l.Unfinished }

// Faulted are the launches whose engine crashed, wedged, kept failing requests or let
// them time out under the workload: the faults arbiter exists to find, compared between
// arms like corruption.
func (l LaunchCounts) Faulted() int { return l.Crashed + l.Wedged + l.Erroring + l.TimedOut }

// LaunchComparison is an exact test of faulted (crashed or wedged) launches of an arm
// against the baseline's. With one launch per arm it cannot show a difference; it says
// how often an arm's engine dies, which blocks and resumes accumulate.
type LaunchComparison struct {
	Faulted, Launches         int // the arm's
	BaseFaulted, BaseLaunches int
	FisherP                   float64
	Significant               bool
}

// RunFact is one launch as the verdict reports it.
type RunFact struct {
	ID         int64 // the run's id in the database
	Arm, Error string
	Status     store.RunStatus
	Block      int
	// Startup is how long the engine took to be ready and Duration how long the launch
	// lasted, nil where it never got there; ExitCode is the engine's exit status, nil
	// where none was recorded.
	Startup, Duration *time.Duration
	ExitCode          *int64
	Endpoint          string
	ServerInfo        map[string]any
	// Superseded is true for a launch that did not finish and was run again on resume;
	// the analysis leaves it out.
	Superseded bool
	// Node, Slot and GPUs place the launch; Wave is its wave within the block; Instance
	// is what the runtime started ("container …", "pid …").
	Node     string
	Slot     int
	GPUs     string
	Wave     int
	Instance string
	// WorkloadStart and WorkloadEnd bound the workload; zero when it never ran.
	WorkloadStart, WorkloadEnd time.Time
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
	DonnerP      float64
	Available    bool
	// Clustered is true when the responses of a session were correlated enough (a
	// design effect above clusteredDesignEffect) that counting them as independent
	// would overstate the evidence; false when the two views agree.
	Clustered bool
}

// clusteredDesignEffect is the design effect above which responses are judged too
// correlated to count as independent evidence.
const clusteredDesignEffect = 1.05

// Build judges experiment id from a read-only database.
func Build(ctx context.Context, db *sqlx.DB, id int64) (*Verdict, error) {
	return BuildWith(ctx, db, id, Options{})
}

// BuildWith judges experiment id with options (another noise floor, or none).
func BuildWith(ctx context.Context, db *sqlx.DB, id int64, o Options) (*Verdict, error) {
	// A cancellation is seen here; the reads run detached (see store.Detach).
	ctx, err := store.Detach(ctx)
	if err != nil {
		return nil, err
	}
	exp, err := store.ExperimentByID(ctx, db, id)
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
	v.MaxLoss, v.MinEffect = v.Design.LossLimit(), v.Design.EffectFloor()
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

	// The turns are read once; the timings, the rounds, the per-session outcomes and
	// each session's corrupted turns all come from this one pass, the verdict's
	// longest read, which runs on a connection of its own beside the reads that do not
	// need it.
	type turnRead struct {
		metrics []store.TurnMetric
		err     error
	}
	turnsRead := make(chan turnRead, 1)
	go func() {
		m, err := store.TurnMetrics(ctx, db, exp.ID)
		turnsRead <- turnRead{m, err}
	}()
	sessions, err := store.Sessions(ctx, db, exp.ID)
	if err != nil {
		return nil, err
	}
	v.sessions, v.index = sessions, index
	if err := v.loadDetectors(ctx, db, index); err != nil {
		return nil, err
	}
	if err := v.loadDetectorHealth(ctx, db); err != nil {
		return nil, err
	}
	if err := v.loadRuns(ctx, db, index); err != nil {
		return nil, err
	}
	if err := v.loadPins(ctx, db); err != nil {
		return nil, err
	}
	if err := v.loadDivergence(ctx, db, index); err != nil {
		return nil, err
	}
	read := <-turnsRead
	if read.err != nil {
		return nil, read.err
	}
	metrics := read.metrics
	corruptedTurns := map[sessionKey]int{}
	for _, t := range metrics {
		if t.Corrupted {
			corruptedTurns[sessionKey{t.RunID, t.Session}]++
		}
	}
	counts := make([]store.SessionCounts, len(v.Arms))
	for _, s := range sessions {
		i := index[s.ArmID]
		counts[i].Count(s.Status, s.Corrupted)
		if !analysed(s) {
			continue
		}
		ar := &v.Arms[i]
		n := corruptedTurns[sessionKey{s.RunID, s.Index}]
		ar.clusters = append(ar.clusters, stats.ClusterCounts{Events: n, Responses: s.Turns})
		ar.CorruptedTurns += n
	}
	// A launch cut short is left out whole: it did not lose the sessions it left
	// unfinished, and those it finished first need not be a fair sample of its sessions.
	cut, err := store.CutShortSessionCounts(ctx, db, exp.ID)
	if err != nil {
		return nil, err
	}
	for id, c := range cut {
		v.Arms[index[id]].CutShort = c
	}
	for i, c := range counts {
		ar := &v.Arms[i]
		ar.Started, ar.Sessions, ar.Corrupted, ar.CorruptedThenLost = c.Recorded, c.Analysed, c.Corrupted, c.CorruptedThenLost
	}
	v.loadTimings(metrics)
	v.loadRounds(metrics)
	v.account()
	if err := v.loadOutcomes(ctx, db, metrics); err != nil {
		return nil, err
	}
	if err := v.loadConditions(ctx, db); err != nil {
		return nil, err
	}
	if err := v.loadTelemetry(ctx, db); err != nil {
		return nil, err
	}
	if err := v.loadFloor(ctx, db, o); err != nil {
		return nil, err
	}
	if err := v.loadVerify(ctx, db); err != nil {
		return nil, err
	}
	v.judge()
	return v, nil
}

// analysed reports whether a session enters the analysis: store.Analysed is the one rule
// (it finished), shared with the orchestrator's sequential looks and resume. The verdict
// reads only the sessions of launches in the analysis (store.InAnalysis).
func analysed(s store.SessionOutcome) bool { return s.Analysed() }

// account counts every arm's planned and lost sessions and its launches, and says why an
// arm's corruption cannot be judged, if it cannot.
func (v *Verdict) account() {
	runsOf := make([][]RunFact, len(v.Arms))
	for _, r := range v.Runs {
		if r.Superseded {
			continue
		}
		i := v.armIndex(r.Arm)
		runsOf[i] = append(runsOf[i], r)
		l := &v.Arms[i].Launches
		l.Total++
		switch r.Status {
		case store.RunDone:
			l.Done++
		case store.RunCrashed:
			l.Crashed++
		case store.RunWedged:
			l.Wedged++
		case store.RunErroring:
			l.Erroring++
		case store.RunTimedOut:
			l.TimedOut++
		case store.RunFailed:
			l.Failed++
		case store.RunInterrupted:
			l.Interrupted++
		case store.RunLost:
			l.NodeLost++
		case store.RunStarting, store.RunReady:
			l.Unfinished++
		}
	}
	startedIn := map[int64]int{}
	for _, s := range v.sessions {
		startedIn[s.RunID]++
	}
	for i := range v.Arms {
		a := &v.Arms[i]
		a.Planned = a.Started
		if per := v.Design.Sessions; per > 0 {
			// A launch cut short planned nothing the analysis counts: it is left out.
			a.Planned = 0
			for _, r := range runsOf[i] {
				if !r.Status.CutShort() {
					a.Planned += max(per, startedIn[r.ID])
				}
			}
			a.Planned = max(a.Planned, a.Sessions)
		}
		a.Lost = a.Planned - a.Sessions
		a.faults = map[string]string{}
		for _, k := range faultKinds {
			if blocks := blocksWith(runsOf[i], k.status); blocks != "" {
				a.faults[k.verb] = blocks
				a.Problems = append(a.Problems, fmt.Sprintf("its engine %s (%s)", k.verb, blocks))
			}
		}
		if a.Planned > 0 && lossShare(a) > v.MaxLoss*(1+1e-9) {
			a.lossOver = true
			a.Problems = append(a.Problems, fmt.Sprintf("it lost %d of %d sessions (%s), more than analysis.max_loss allows (%s)",
				a.Lost, a.Planned, pct(lossShare(a)), pct(v.MaxLoss)))
		}
	}
}

// faultKinds are the ways a launch fails that make its arm's decision inconclusive, by
// run status, in the words a verdict uses.
var faultKinds = []struct {
	status store.RunStatus
	verb   string
}{{store.RunCrashed, "crashed"}, {store.RunWedged, "wedged"}, {store.RunErroring, "kept failing requests"},
	{store.RunTimedOut, "let requests time out"}, {store.RunFailed, "failed to start"}}

func lossShare(a *ArmResult) float64 { return float64(a.Lost) / float64(a.Planned) }

// blocksWith names the blocks of the launches that ended with status: "block 0", "blocks 1
// and 3".
func blocksWith(runs []RunFact, status store.RunStatus) string {
	var bs []string
	for _, r := range runs {
		if r.Status == status {
			bs = append(bs, fmt.Sprint(r.Block))
		}
	}
	switch len(bs) {
	case 0:
		return ""
	case 1:
		return "block " + bs[0]
	}
	return "blocks " + joinAnd(bs)
}

// joinAnd lists words as a sentence does: "a", "a and b", "a, b and c".
func joinAnd(ws []string) string {
	switch len(ws) {
	case 0:
		return ""
	case 1:
		return ws[0]
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
}

func (v *Verdict) armIndex(name string) int {
	for i, a := range v.Arms {
		if a.Name == name {
			return i
		}
	}
	return 0
}

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

// sessionKey names a session: its launch and its index there.
type sessionKey struct {
	run     int64
	session int
}

// loadTimings counts every arm's turns and failed turns and takes the quantiles of the
// completed turns' timings.
func (v *Verdict) loadTimings(metrics []store.TurnMetric) {
	ttft := make([][]float64, len(v.Arms))
	lat := make([][]float64, len(v.Arms))
	tps := make([][]float64, len(v.Arms))
	for _, t := range metrics {
		i := v.index[t.ArmID]
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
		a.TTFTp50, a.TTFTp95 = stats.Quantile(ttft[i], 0.5), stats.Quantile(ttft[i], 0.95)
		a.Latencyp50, a.Latencyp95 = stats.Quantile(lat[i], 0.5), stats.Quantile(lat[i], 0.95)
		a.TokensPerSecond = stats.Quantile(tps[i], 0.5)
	}
}

// loadRounds counts, per round and arm, the sessions that reached the round and those
// with a corrupted turn in it.
func (v *Verdict) loadRounds(metrics []store.TurnMetric) {
	type roundKey struct {
		sessionKey
		round int
	}
	corrupted := map[roundKey]bool{}
	var order []roundKey
	arm := map[roundKey]int{}
	for _, t := range metrics {
		k := roundKey{sessionKey{t.RunID, t.Session}, t.Round}
		c, seen := corrupted[k]
		if !seen {
			order = append(order, k)
			arm[k] = v.index[t.ArmID]
		}
		corrupted[k] = c || t.Corrupted
	}
	byRound := map[int]*RoundRow{}
	for _, k := range order {
		r, ok := byRound[k.round]
		if !ok {
			r = &RoundRow{Round: k.round, Corrupted: make([]int, len(v.Arms)), Sessions: make([]int, len(v.Arms))}
			byRound[k.round] = r
		}
		i := arm[k]
		r.Sessions[i]++
		if corrupted[k] {
			r.Corrupted[i]++
		}
	}
	for _, r := range byRound {
		v.Rounds = append(v.Rounds, *r)
	}
	sort.Slice(v.Rounds, func(i, j int) bool { return v.Rounds[i].Round < v.Rounds[j].Round })
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
		f := RunFact{ID: r.ID, Arm: v.Arms[index[r.ArmID]].Name, Status: r.Status, Block: r.Block, Endpoint: r.Endpoint,
			Node: r.Node, Slot: r.Slot, GPUs: r.GPUs, Wave: r.Wave, Instance: r.Instance}
		if r.WorkloadStartedAt.Valid && r.WorkloadEndedAt.Valid {
			f.WorkloadStart, _ = time.Parse(time.RFC3339Nano, r.WorkloadStartedAt.String)
			f.WorkloadEnd, _ = time.Parse(time.RFC3339Nano, r.WorkloadEndedAt.String)
		}
		if r.Error.Valid {
			f.Error = r.Error.String
		}
		if r.ReadyAt.Valid {
			f.Startup = elapsed(r.StartedAt, r.ReadyAt.String)
		}
		if r.EndedAt.Valid {
			f.Duration = elapsed(r.StartedAt, r.EndedAt.String)
		}
		if r.ExitCode.Valid {
			f.ExitCode = &r.ExitCode.Int64
		}
		if r.ServerInfo.Valid {
			json.Unmarshal([]byte(r.ServerInfo.String), &f.ServerInfo)
		}
		switch {
		case r.SupersededBy.Valid && r.Status == store.RunLost:
			f.Superseded = true
			f.Error = strings.TrimSpace(f.Error + " " + lostNote)
		case r.SupersededBy.Valid:
			f.Superseded = true
			f.Error = strings.TrimSpace(f.Error + " (run again on resume; left out of the analysis)")
		}
		v.Runs = append(v.Runs, f)
	}
	return nil
}

// elapsed is the time from one stored timestamp to another; nil where either does not
// parse.
func elapsed(from, to string) *time.Duration {
	a, err1 := time.Parse(time.RFC3339Nano, from)
	b, err2 := time.Parse(time.RFC3339Nano, to)
	if err1 != nil || err2 != nil {
		return nil
	}
	d := b.Sub(a)
	return &d
}
