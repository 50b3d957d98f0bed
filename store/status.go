package store

import "slices"

// The status words the store keeps. Each is the one home of its word: the orchestrator
// writes them, resume and the verdict read them, and `arbiter query` users see them as
// they are written here.

// ExperimentStatus is an experiment's state (experiments.status).
type ExperimentStatus string

// Experiment states.
const (
	// ExperimentRunning is an experiment whose arbiter is (or was, until it died) running it.
	ExperimentRunning ExperimentStatus = "running"
	// ExperimentDone ran its whole plan, or stopped at a sequential boundary.
	ExperimentDone ExperimentStatus = "done"
	// ExperimentInterrupted was stopped by the user (Ctrl-C) and can be resumed.
	ExperimentInterrupted ExperimentStatus = "interrupted"
	// ExperimentFailed could not go on (the store failed, an arm had no data).
	ExperimentFailed ExperimentStatus = "failed"
	// ExperimentAbandoned is never stored: it is how an experiment recorded as running is
	// shown once its owner's lease has expired (the arbiter running it was killed or its
	// machine went away). `arbiter resume` takes such an experiment over.
	ExperimentAbandoned ExperimentStatus = "abandoned"
)

// RunStatus is the state of one launch of one arm (runs.status).
type RunStatus string

// Run states.
const (
	RunStarting    RunStatus = "starting"
	RunReady       RunStatus = "ready"
	RunDone        RunStatus = "done"
	RunCrashed     RunStatus = "crashed"     // the engine exited on its own
	RunFailed      RunStatus = "failed"      // it never became ready, or arbiter could not drive it
	RunWedged      RunStatus = "wedged"      // alive, but no turn completed and no token arrived for the stall timeout
	RunErroring    RunStatus = "erroring"    // turns in a row failed fast (HTTP errors, broken replies), none completed
	RunTimedOut    RunStatus = "timed-out"   // turns in a row ran past the request timeout, none completed
	RunInterrupted RunStatus = "interrupted" // the user stopped the experiment
	RunLost        RunStatus = "lost"        // its node stopped answering (a Docker daemon went away); not the engine's doing
	RunRefused     RunStatus = "refused"     // ready, but its engine reported a pin not in effect, or its pins could not be checked (pin_checks); no traffic was sent
)

// EngineFault reports whether a launch ended by its engine's doing while it served: it
// crashed, wedged, or kept failing or timing out requests.
func (s RunStatus) EngineFault() bool {
	switch s {
	case RunCrashed, RunWedged, RunErroring, RunTimedOut:
		return true
	}
	return false
}

// cutShortStatuses are the states of a launch that something other than its engine
// stopped: the user's interrupt, the loss of its node, and a launch still starting or
// running when its arbiter was killed (or a verdict read while it runs).
var cutShortStatuses = []RunStatus{RunStarting, RunReady, RunInterrupted, RunLost}

// CutShort reports whether a launch in this state was cut short (cutShortStatuses): it
// did not end on its own, and is left out of the analysis (InAnalysis).
func (s RunStatus) CutShort() bool { return slices.Contains(cutShortStatuses, s) }

// EngineAnswers reports whether how a launch ended says something about its engine: every
// ending but a launch cut short.
func (s RunStatus) EngineAnswers() bool { return !s.CutShort() }

// SessionStatus is how one session ended (sessions.status).
type SessionStatus string

// Session outcomes.
const (
	SessionOK      SessionStatus = "ok"      // every round completed
	SessionError   SessionStatus = "error"   // a request failed (HTTP error, broken stream)
	SessionTimeout SessionStatus = "timeout" // a request ran past the request timeout or stalled
	SessionAborted SessionStatus = "aborted" // the run was cancelled before the session finished
)

// StepRole is what a bisection step asks (bisection_steps.role).
type StepRole string

// Roles of bisection steps.
const (
	// RoleReproduce applies every change: does the bad configuration corrupt at all?
	RoleReproduce StepRole = "reproduce"
	// RoleSearch applies the culprit found so far and a prefix of the candidates.
	RoleSearch StepRole = "search"
	// RoleConfirm applies exactly the culprit found so far: the confirmation A/B.
	RoleConfirm StepRole = "confirm"
	// RoleRevert applies every change but the culprit's: does reverting the culprit
	// alone make the bad configuration clean?
	RoleRevert StepRole = "revert"
)

// ConclusionStatus is how a bisection's search ended (BisectionConclusion.Status).
type ConclusionStatus string

// How a search ends.
const (
	// ConclusionRunning: the search has more steps to ask for.
	ConclusionRunning ConclusionStatus = "running"
	// ConclusionCulprit: a culprit was found and its confirmation corrupts.
	ConclusionCulprit ConclusionStatus = "culprit"
	// ConclusionNotReproduced: the bad configuration is clean against good.
	ConclusionNotReproduced ConclusionStatus = "not-reproduced"
	// ConclusionUncertain: a step could not decide, answers contradicted each other, or
	// the step budget ran out; Known and Candidates say what is known.
	ConclusionUncertain ConclusionStatus = "uncertain"
)
