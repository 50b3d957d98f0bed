package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
type Process struct {
	// Grace is how long Stop waits after SIGTERM before SIGKILL (default 10s).
	Grace time.Duration
	// TailLines is how many log lines an Exit keeps (default 40).
	TailLines int
	// BaseEnv is the environment every engine starts from; nil gives PATH, HOME, TMPDIR,
	// LANG and the CUDA/NVIDIA variables of arbiter's own environment, so that nothing
	// else of the caller's environment (tokens included) leaks into the engine.
	BaseEnv []string
}

// baseEnvKeys are copied from arbiter's environment when Process.BaseEnv is nil.
var baseEnvKeys = []string{"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH",
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "ARBITER_KERNELS_LIB"}

// Start launches l.Command with l.PortFlag set to a free loopback port.
func (p Process) Start(ctx context.Context, l Launch) (Instance, error) {
	if len(l.Command) == 0 {
		return nil, errors.New("process runtime: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	portFlag := l.PortFlag
	if portFlag == "" {
		portFlag = "--port"
	}
	args := append(append([]string{}, l.Command[1:]...), portFlag, strconv.Itoa(port))
	bin, err := lookCommand(l.Command[0])
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(p.baseEnv(), l.Env...)
	if l.GPUs != "" {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+l.GPUs)
	}
	// Its own process group, and on Linux told to exit when arbiter dies (see
	// engineProcAttr).
	cmd.SysProcAttr = engineProcAttr()
	// A grandchild that keeps the output pipe open must not keep Wait from returning.
	cmd.WaitDelay = 5 * time.Second

	if l.LogPath == "" {
		return nil, errors.New("process runtime: no log path")
	}
	if err := os.MkdirAll(filepath.Dir(l.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	logFile, err := os.OpenFile(l.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	tailLines := p.TailLines
	if tailLines <= 0 {
		tailLines = 40
	}
	log := newLogSink(logFile, l.Redact, tailLines)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		logFile.Close()
		return nil, fmt.Errorf("process runtime: start %s: %w", l.Command[0], err)
	}
	grace := p.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	inst := &processInstance{cmd: cmd, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), grace: grace,
		done: make(chan struct{}), log: log}
	copied := make(chan struct{})
	go func() {
		log.copyFrom(pr)
		close(copied)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-copied
		logFile.Close()
		inst.finish(err)
	}()
	return inst, nil
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

// lookCommand finds an engine binary: a bare name is looked for beside arbiter's own
// executable first (so bin/arbiter runs bin/refserve of the same build), then on PATH.
func lookCommand(name string) (string, error) {
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
		return "", fmt.Errorf("%s: not found beside arbiter or on PATH (build it with make build): %w", name, err)
	}
	return p, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type processInstance struct {
	cmd      *exec.Cmd
	endpoint string
	grace    time.Duration
	log      *logSink
	done     chan struct{}

	mu      sync.Mutex
	stopped bool
	exit    Exit
}

func (i *processInstance) Endpoint() string      { return i.endpoint }
func (i *processInstance) Done() <-chan struct{} { return i.done }

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
			e.Signal = ws.Signal().String()
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

func (i *processInstance) Stop(ctx context.Context) error {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	select {
	case <-i.done:
		return nil
	default:
	}
	pgid := -i.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	timer := time.NewTimer(i.grace)
	defer timer.Stop()
	select {
	case <-i.done:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	<-i.done
	return nil
}

// logSink writes an engine's output line by line, redacted, to its log file and keeps
// the last lines for crash reports.
type logSink struct {
	w      io.Writer
	redact func(string) string
	max    int

	mu    sync.Mutex
	lines []string
}

func newLogSink(w io.Writer, redact func(string) string, max int) *logSink {
	if redact == nil {
		redact = func(s string) string { return s }
	}
	return &logSink{w: w, redact: redact, max: max}
}

func (s *logSink) copyFrom(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			s.writeLine(line)
		}
		if err != nil {
			return
		}
	}
}

func (s *logSink) writeLine(line string) {
	// Redact whole lines: a secret split across two writes is still one line.
	red := s.redact(line)
	io.WriteString(s.w, red)
	s.mu.Lock()
	s.lines = append(s.lines, strings.TrimRight(red, "\r\n"))
	if len(s.lines) > s.max {
		s.lines = s.lines[len(s.lines)-s.max:]
	}
	s.mu.Unlock()
}

func (s *logSink) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}
