package store

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
	RunRefused     RunStatus = "refused"     // ready, but its engine reported a pin not in effect (pin_checks); no traffic was sent
)

// SessionStatus is how one session ended (sessions.status).
type SessionStatus string

// Session outcomes.
const (
	SessionOK      SessionStatus = "ok"      // every round completed
	SessionError   SessionStatus = "error"   // a request failed (HTTP error, broken stream)
	SessionTimeout SessionStatus = "timeout" // a request ran past the request timeout or stalled
	SessionAborted SessionStatus = "aborted" // the run was cancelled before the session finished
)
