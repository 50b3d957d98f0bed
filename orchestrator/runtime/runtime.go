// Package runtime launches one arm of an experiment: as a local process (this file's
// sibling process.go) or as a container. The orchestrator talks to a Runtime only.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/arbiterlab/arbiter/arms"
)

// Launch is everything a runtime needs to start one arm once.
type Launch struct {
	// Name identifies the launch in logs and container names, e.g. "exp3-control-b0".
	Name string
	// ExperimentID and RunID are the launch's experiment and run in the results
	// database, and DatabaseID that database's unique id (store.DatabaseID): a runtime
	// labels what it starts with them, so that nothing has to read them back out of a
	// name. Zero or empty when the launch belongs to no recorded run.
	ExperimentID, RunID int64
	DatabaseID          string
	// Command is the engine command line without the port flag.
	Command []string
	// Env holds KEY=VALUE pairs the engine gets on top of a minimal base environment;
	// secrets are already included.
	Env []string
	// Listen is how the engine takes its address: a port flag (the zero Listen is
	// --port), a variable, or {host} and {port} in the command.
	Listen arms.Listen
	// LogPath is the file that receives the engine's stdout and stderr.
	LogPath string
	// Redact rewrites every log line before it reaches LogPath or the log tail; nil keeps
	// lines as they are.
	Redact func(string) string
	// RedactCut rewrites a line that was cut at MaxLogLine: like Redact, and it also
	// hides the start of a secret left at the very end of the cut line. Nil uses Redact.
	RedactCut func(string) string
	// GPUs are the devices pinned to this arm ("0-3"); empty for none.
	GPUs string
	// Image is the container image (docker runtime).
	Image string
	// BaseURL is where an arm that already runs is reached (external runtime).
	BaseURL string
}

// Runtime starts engines.
type Runtime interface {
	// Start launches the engine and returns once it has been started (not once it is
	// ready: readiness is the orchestrator's to judge). Cancelling ctx does not stop a
	// started engine; Instance.Stop does.
	Start(ctx context.Context, l Launch) (Instance, error)
}

// Instance is one started engine.
type Instance interface {
	// Endpoint is the engine's base URL, e.g. "http://127.0.0.1:40123".
	Endpoint() string
	// Done is closed when the engine has exited, for whatever reason.
	Done() <-chan struct{}
	// Exit describes how the engine ended; valid once Done is closed.
	Exit() Exit
	// Stop asks the engine to exit (SIGTERM), and forces it (SIGKILL) after the grace
	// period or when ctx ends. It returns once the engine is gone.
	Stop(ctx context.Context) error
}

// Identified is an Instance that can say what it is on its node, for the store
// (runs.instance) and the verdict: "container 3f2a9c1b…", "pid 4242". Runtimes
// implement it; the orchestrator records "" for an Instance that does not.
type Identified interface {
	InstanceID() string
}

// InstanceID is inst's InstanceID, or "" when it has none.
func InstanceID(inst Instance) string {
	if id, ok := inst.(Identified); ok {
		return id.InstanceID()
	}
	return ""
}

// Exit is how an engine ended.
type Exit struct {
	Code    int    // exit code; -1 when killed by a signal
	Signal  string // the signal that ended it, if any
	Stopped bool   // true when Stop asked for the exit
	LogTail string // the last lines of its log
	// Lost, when not empty, says that the runtime lost track of the engine rather than
	// saw it end: its node stopped answering (a Docker daemon went away). The run is
	// recorded lost (store.RunLost), not crashed: the engine is not to blame. It may come
	// with Stopped, where the node failed before the stop, which found the end unseen.
	Lost string
	// Reason is the runtime's own account of the end, when it has one (a Slurm job's
	// state and why).
	Reason string
}

// Crashed reports whether the engine ended on its own, not because it was asked to
// and not with its node.
func (e Exit) Crashed() bool { return !e.Stopped && e.Lost == "" }

// String says how the engine ended in a few words.
func (e Exit) String() string {
	switch {
	case e.Reason != "":
		return e.Reason
	case e.Lost != "":
		return "lost with its node (" + e.Lost + ")"
	case e.Signal != "":
		return fmt.Sprintf("killed by %s", e.Signal)
	default:
		return fmt.Sprintf("exit code %d", e.Code)
	}
}

// ErrCrashed is wrapped by errors that report an engine that exited on its own.
var ErrCrashed = errors.New("engine exited")

// ErrNodeLost is wrapped by Start errors that mean the node itself cannot be reached (a
// Docker daemon that does not answer; for Slurm, a job its node's failure or a cancel
// ended before it ran), as opposed to an engine that fails: the run is recorded lost
// and run again, and (but under Slurm, which places the next job itself) the node gets
// no further arms.
var ErrNodeLost = errors.New("node unreachable")

// address is the launch's command line after its program (none without a command: a
// container image's entrypoint), and the variables it adds,
// once the engine is told to listen at host:port by its Listen: the port flag and its
// value appended (hostFlag and host too, unless hostFlag is "" or "-" or the command
// gives the flag itself), the variable set to its value, or the command's {host} and
// {port} filled in.
func (l Launch) address(host string, port int, hostFlag string) (args, env []string) {
	args = slices.Clone(l.Command[min(1, len(l.Command)):])
	switch ls := l.Listen; {
	case ls.Placeholder:
		args = arms.FillAddress(args, host, port)
	case ls.Env != "":
		env = []string{ls.Env + "=" + arms.FillAddress([]string{ls.EnvValue}, host, port)[0]}
	default:
		flag := ls.Flag
		if flag == "" {
			flag = "--port"
		}
		if hostFlag != "" && hostFlag != "-" && !hasFlag(args, hostFlag) {
			args = append(args, hostFlag, host)
		}
		args = append(args, flag, strconv.Itoa(port))
	}
	return args, env
}
