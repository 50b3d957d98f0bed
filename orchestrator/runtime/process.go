package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process runs each arm as a local process on a free loopback port. The zero value is
// valid.
//
// Every engine runs in a process group of its own, led by a tiny supervisor (/bin/sh)
// that arbiter starts first: Stop sends SIGTERM to the whole group, waits until every
// engine process has exited or the grace period ends, then sends SIGKILL to the group, so
// that no worker an engine spawned outlives it. The supervisor reads a pipe only arbiter
// writes to; when arbiter dies by any means (kill -9 included) the pipe closes and the
// supervisor does the same: SIGTERM to the group, the grace period, SIGKILL. As the
// group's leader it also keeps the group's id from being reused while anything of the
// engine lives, so a signal to the group never reaches a stranger.
type Process struct {
	// Grace is how long Stop (and the supervisor, after arbiter's death) waits after
	// SIGTERM before SIGKILL (default 10s).
	Grace time.Duration
	// TailLines is how many log lines an Exit keeps (default 40; see MaxTail).
	TailLines int
	// BaseEnv is the environment every engine starts from; nil gives PATH, HOME, TMPDIR,
	// LANG and the CUDA/NVIDIA variables of arbiter's own environment, so that nothing
	// else of the caller's environment (tokens included) leaks into the engine.
	BaseEnv []string
}

// DefaultGrace is how long an engine gets between SIGTERM and SIGKILL when the runtime
// does not say.
const DefaultGrace = 10 * time.Second

// baseEnvKeys are copied from arbiter's environment when Process.BaseEnv is nil.
var baseEnvKeys = []string{"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH",
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "ARBITER_KERNELS_LIB"}

// supervisorScript leads an engine's process group. Its stdin is a pipe whose only
// writer is arbiter: read returns at end of file once arbiter is gone, and the script
// then ends the group as Stop would. It ignores the polite signals sent to its group; the
// final SIGKILL, from Stop or from itself, ends it with the rest.
const supervisorScript = `trap '' TERM INT HUP
while read -r _line; do :; done
kill -TERM 0
sleep "$1"
kill -KILL 0`

// Start launches l.Command told to listen on a free loopback port.
func (p Process) Start(ctx context.Context, l Launch) (Instance, error) {
	if len(l.Command) == 0 {
		return nil, errors.New("process runtime: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.LogPath == "" {
		return nil, errors.New("process runtime: no log path")
	}
	port, releasePort, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	started := false
	defer func() {
		if !started {
			releasePort()
		}
	}()
	args, listenEnv := l.address("127.0.0.1", port, "")
	bin, err := LookCommand(l.Command[0])
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	grace := p.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if err := os.MkdirAll(filepath.Dir(l.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	logFile, err := os.OpenFile(l.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}

	sup, guard, err := startSupervisor(grace)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	pgid := sup.Process.Pid
	supDone := make(chan struct{})
	go func() {
		sup.Wait()
		close(supDone)
	}()
	// killSupervisor ends a supervisor whose engine never started.
	killSupervisor := func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-supDone
		guard.Close()
	}

	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(p.baseEnv(), l.Env...), listenEnv...)
	if l.GPUs != "" {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+l.GPUs)
	}
	// The supervisor's process group, so that Stop (or the supervisor) reaches every
	// process the engine spawned.
	cmd.SysProcAttr = engineProcAttr(pgid)

	tailLines := p.TailLines
	if tailLines <= 0 {
		tailLines = 40
	}
	log := newLogSink(logFile, l, tailLines)
	// An OS pipe, not an io.Pipe: Wait then returns when the engine exits, even while a
	// worker it left behind still holds the pipe open.
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		killSupervisor()
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	cmd.Stdout = pw
	cmd.Stderr = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		logFile.Close()
		killSupervisor()
		return nil, fmt.Errorf("process runtime: start %s: %w", l.Command[0], err)
	}
	leader, _ := identify(pgid)
	inst := &processInstance{cmd: cmd, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), grace: grace,
		done: make(chan struct{}), log: log, pgid: pgid, supervisor: leader, supDone: supDone, guard: guard}
	copied := make(chan struct{})
	go func() {
		// The log ends when the last process of the group holding the pipe has exited.
		log.copyFrom(pr)
		pr.Close()
		logFile.Close()
		close(copied)
	}()
	go func() {
		err := cmd.Wait()
		// The engine's last words are usually in the pipe already; a worker that
		// keeps it open must not hold the exit back.
		select {
		case <-copied:
		case <-time.After(500 * time.Millisecond):
		}
		inst.finish(err)
		releasePort()
	}()
	started = true
	return inst, nil
}

// startSupervisor starts the leader of a new process group and returns it with the
// write end of its guard pipe, which must stay open for as long as the engine should run.
func startSupervisor(grace time.Duration) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("engine supervisor: %w", err)
	}
	secs := int((grace + time.Second - 1) / time.Second)
	sup := exec.Command("/bin/sh", "-c", supervisorScript, "arbiter-engine-supervisor", strconv.Itoa(secs))
	sup.Stdin = r
	// Its own group, not arbiter's: a Ctrl-C at the terminal is arbiter's to handle,
	// and the supervisor must outlive arbiter.
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = sup.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("engine supervisor (/bin/sh): %w", err)
	}
	return sup, w, nil
}

func (p Process) baseEnv() []string {
	if p.BaseEnv != nil {
		return append([]string{}, p.BaseEnv...)
	}
	var env []string
	for _, k := range baseEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// LookCommand finds an engine binary: a bare name is looked for beside arbiter's own
// executable first (so bin/arbiter runs bin/refserve of the same build), then on PATH.
func LookCommand(name string) (string, error) {
	if !strings.ContainsRune(name, filepath.Separator) {
		if self, err := os.Executable(); err == nil {
			sibling := filepath.Join(filepath.Dir(self), name)
			if fi, err := os.Stat(sibling); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return sibling, nil
			}
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		hint, ok := installHints[name]
		if !ok {
			hint = "install it, or give engine.command its path"
		}
		return "", fmt.Errorf("%s: not found beside arbiter or on PATH (%s): %w", name, hint, err)
	}
	return p, nil
}

// installHints say how to get an engine binary that is missing, for the engines whose
// build arbiter's repository knows: refserve is its own; ollama is built from source the
// way CI builds it (.ci/run), at the version arbiter is tested against.
var installHints = map[string]string{
	"refserve": "make build puts it in bin/, beside bin/arbiter",
	"ollama":   "GOBIN=DIR go install github.com/ollama/ollama@v0.6.5 builds it, with cgo, a C++ compiler and the headers its module leaves out (Debian: apt-get install nlohmann-json3-dev libstb-dev); then put DIR on PATH",
}

// Grouped is an Instance whose engine runs in a local process group. Group names the
// group's leader (the group's id is the leader's pid); ok is false where the platform
// cannot identify a process across time (Linux can).
type Grouped interface {
	Group() (leader ProcessID, ok bool)
}

type processInstance struct {
	cmd      *exec.Cmd
	endpoint string
	grace    time.Duration
	log      *logSink
	done     chan struct{}

	// pgid is the engine's process group, led by the supervisor; supDone is closed once
	// the supervisor has exited and been reaped; guard is the pipe whose closing tells
	// the supervisor that arbiter is gone.
	pgid       int
	supervisor ProcessID
	supDone    chan struct{}
	guard      *os.File
	stopOnce   sync.Once

	mu      sync.Mutex
	stopped bool
	exit    Exit
}

func (i *processInstance) Endpoint() string { return i.endpoint }

// InstanceID is "pid " and the engine's process id.
func (i *processInstance) InstanceID() string    { return fmt.Sprintf("pid %d", i.cmd.Process.Pid) }
func (i *processInstance) Done() <-chan struct{} { return i.done }

func (i *processInstance) Group() (ProcessID, bool) {
	return i.supervisor, i.supervisor.Start != 0
}

func (i *processInstance) Exit() Exit {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.exit
}

func (i *processInstance) finish(waitErr error) {
	i.mu.Lock()
	e := Exit{Code: 0, Stopped: i.stopped, LogTail: i.log.tail()}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Code = -1
			e.Signal = signalName(ws.Signal())
		} else {
			e.Code = ee.ExitCode()
		}
	} else if waitErr != nil {
		e.Code = -1
	}
	i.exit = e
	i.mu.Unlock()
	close(i.done)
}

// Stop ends the engine's whole process group: SIGTERM, then SIGKILL once every engine
// process has exited, the grace period has passed or ctx ends. An engine that already
// exited on its own still has its group ended, so that a worker it left behind does not
// hold its port or GPUs. Stop returns once the engine and its supervisor are gone.
func (i *processInstance) Stop(ctx context.Context) error {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	i.stopOnce.Do(func() { i.endGroup(ctx) })
	<-i.done
	return nil
}

func (i *processInstance) endGroup(ctx context.Context) {
	defer i.guard.Close()
	if !i.signalGroup(syscall.SIGTERM) {
		<-i.done
		return
	}
	timer := time.NewTimer(i.grace)
	defer timer.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	exited := i.done
wait:
	for !i.engineGone() {
		select {
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-exited:
			exited = nil // from now on only its workers are waited for
		case <-poll.C:
		}
	}
	i.signalGroup(syscall.SIGKILL)
	<-i.done
	<-i.supDone
}

// signalGroup sends sig to the engine's group while that is safe: while the supervisor
// or the engine is not yet reaped, the group's id cannot have been given to anyone else.
// It reports whether it sent.
func (i *processInstance) signalGroup(sig syscall.Signal) bool {
	select {
	case <-i.supDone:
		select {
		case <-i.done:
			return false
		default:
		}
	default:
	}
	_ = syscall.Kill(-i.pgid, sig)
	return true
}

// engineGone reports whether the engine and everything it spawned in its group have
// exited: where processes can be listed, the group holds nothing but the supervisor;
// elsewhere the engine itself has exited.
func (i *processInstance) engineGone() bool {
	select {
	case <-i.done:
	default:
		return false
	}
	members, err := groupMembers(i.pgid)
	if err != nil {
		return true
	}
	for _, pid := range members {
		if pid != i.pgid {
			return false
		}
	}
	return true
}
