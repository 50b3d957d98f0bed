package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Slurm runs each arm as one Slurm batch job, through the Slurm commands (sbatch,
// scontrol, squeue, scancel) of the machine arbiter runs on. The zero value submits to
// the cluster's default partition with no GPUs.
//
// The job is a small shell script that prints one line saying where it landed (node, the
// CUDA_VISIBLE_DEVICES Slurm exported, the port), sets the engine's environment and execs
// the engine on a port arbiter chose, listening on every address of its node. Arbiter
// waits for the job to leave the queue, reads its node and GPU indices back from
// `scontrol show job -d`, and drives the workload against the node's address (NodeAddr)
// and that port. The engine's log is the job's output file, so LogPath must be on a
// filesystem the nodes share with arbiter's machine.
type Slurm struct {
	// Partition, Account and QOS are sbatch's --partition, --account and --qos; empty
	// leaves each to the cluster's default.
	Partition, Account, QOS string
	// TimeLimit is sbatch's --time (e.g. "2:00:00"); empty leaves the partition's.
	TimeLimit string
	// GPUs is the GPUs every job asks for (--gres=gpu:N); 0 asks for none.
	GPUs int
	// Options are more sbatch options, passed through as given (a site's container
	// options such as pyxis's --container-image, --constraint, --reservation).
	Options []string
	// HostFlag is the engine's flag that sets the address it listens on (default
	// "--host"); the engine gets 0.0.0.0, so that arbiter reaches it from outside the node.
	HostFlag string
	// PortMin and PortMax bound the engine ports arbiter picks (default 20000-39999).
	PortMin, PortMax int
	// Pending is how long a job may wait in the queue before arbiter gives up on it
	// (default 30m); the error carries the reason Slurm gives for the wait.
	Pending time.Duration
	// Poll is how often a job's state is read (default 1s).
	Poll time.Duration
	// TailLines is how many log lines an Exit keeps (default 40).
	TailLines int
	// REST, when set, is the base URL of the cluster's slurmrestd (e.g.
	// "http://slurm-rest:6820"): jobs are submitted, watched and cancelled through its
	// API (v0.0.38) instead of the commands, authenticated with Token (a JWT, as
	// `scontrol token` prints) as User. Options cannot be passed that way.
	REST, Token, User string
}

// SlurmJobPrefix begins the name of every job arbiter submits; the job's comment carries
// the database and experiment it belongs to (SlurmComment).
const SlurmJobPrefix = "arbiter-"

// SlurmComment is the comment of a job that runs a launch: what `arbiter gc` reads back.
func SlurmComment(databaseID string, experimentID, runID int64) string {
	return fmt.Sprintf("arbiter:db=%s,exp=%d,run=%d", databaseID, experimentID, runID)
}

// ParseSlurmComment reads a job comment written by SlurmComment; ok is false for any other.
func ParseSlurmComment(c string) (databaseID string, experimentID, runID int64, ok bool) {
	rest, found := strings.CutPrefix(c, "arbiter:")
	if !found {
		return "", 0, 0, false
	}
	var haveDB, haveExp bool
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "db":
			databaseID, haveDB = v, v != ""
		case "exp":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", 0, 0, false
			}
			experimentID, haveExp = n, true
		case "run":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return "", 0, 0, false
			}
			runID = n
		}
	}
	return databaseID, experimentID, runID, haveDB && haveExp
}

// Errors of a job that never ran.
var (
	// ErrSlurmRejected wraps sbatch's refusal of a job (no such partition, a request no
	// node can satisfy, a limit of the account or QoS).
	ErrSlurmRejected = errors.New("slurm rejected the job")
	// ErrSlurmPending reports a job still queued when its wait ran out.
	ErrSlurmPending = errors.New("slurm job still pending")
)

// Placement says where a launch landed; a runtime whose instances know it implements
// Placed.
type Placement struct {
	Job       string    // the scheduler's job id, e.g. "slurm:123"
	Node      string    // the node it runs on
	GPUs      string    // the GPU indices it was given, e.g. "0,1"
	Visible   string    // CUDA_VISIBLE_DEVICES as the job saw it; empty if not seen
	Submitted time.Time // when the job was submitted
	Started   time.Time // when it left the queue
}

// Placed is an Instance that knows its Placement.
type Placed interface {
	Placement() Placement
}

// Refresher is an Instance whose end is learned by polling: Refresh looks once, now, so
// that an engine that ended is Done before its caller judges what it saw.
type Refresher interface {
	Refresh(ctx context.Context)
}

// Start submits the job, waits until it runs, and returns it.
func (s Slurm) Start(ctx context.Context, l Launch) (Instance, error) {
	if len(l.Command) == 0 {
		return nil, errors.New("slurm runtime: empty command")
	}
	if l.LogPath == "" {
		return nil, errors.New("slurm runtime: no log path")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lo, hi := s.PortMin, s.PortMax
	if lo <= 0 || hi < lo {
		lo, hi = 20000, 39999
	}
	port := lo + rand.IntN(hi-lo+1)
	if err := os.MkdirAll(filepath.Dir(l.LogPath), 0o755); err != nil {
		return nil, fmt.Errorf("slurm runtime: %w", err)
	}
	script, secrets := s.script(l, port)
	raw := l.LogPath + ".slurm-out"
	// --no-requeue: a job whose node fails must end (NODE_FAIL, recorded lost), not start
	// again elsewhere while arbiter drives the workload at the old node.
	args := []string{"--parsable", "--no-requeue", "--job-name=" + slurmJobName(l), "--output=" + raw, "--open-mode=truncate",
		"--comment=" + SlurmComment(l.DatabaseID, l.ExperimentID, l.RunID), "--chdir=" + filepath.Dir(l.LogPath)}
	for _, o := range []struct{ flag, v string }{{"--partition", s.Partition}, {"--account", s.Account},
		{"--qos", s.QOS}, {"--time", s.TimeLimit}} {
		if o.v != "" {
			args = append(args, o.flag+"="+o.v)
		}
	}
	if s.GPUs > 0 {
		args = append(args, fmt.Sprintf("--gres=gpu:%d", s.GPUs))
	}
	// Only the base environment and the secrets travel through sbatch's environment; the
	// rest of arbiter's environment stays here.
	env := slurmBaseEnv()
	names := []string{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	for _, kv := range secrets {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	env = append(env, secrets...)
	if len(names) == 0 {
		names = []string{"NONE"}
	}
	args = append(args, "--export="+strings.Join(names, ","))
	args = append(args, s.Options...)
	submitted := time.Now()
	var jobID string
	if s.REST != "" {
		var err error
		if jobID, err = s.submitREST(ctx, l, script, env, raw); err != nil {
			return nil, err
		}
	} else {
		out, err := slurmCommand(ctx, env, []byte(script), "sbatch", args...)
		if err != nil {
			return nil, submitError(err, s.Partition)
		}
		jobID, _, _ = strings.Cut(strings.TrimSpace(out), ";")
		if _, err := strconv.ParseUint(jobID, 10, 64); err != nil {
			return nil, fmt.Errorf("slurm runtime: sbatch printed %q, not a job id", out)
		}
	}
	inst := &slurmInstance{s: s, id: jobID, raw: raw, logPath: l.LogPath, launch: l, redact: l.Redact, port: port,
		done: make(chan struct{}), placement: Placement{Job: "slurm:" + jobID, Submitted: submitted}}
	if err := inst.waitRunning(ctx); err != nil {
		s.cancel(jobID, false)
		return nil, err
	}
	go inst.watch()
	return inst, nil
}

// script writes the job's batch script. Environment values that the redactor leaves
// alone are written into the script, where Slurm's own record of the job shows them;
// the secrets are returned to travel through sbatch's environment instead.
func (s Slurm) script(l Launch, port int) (string, []string) {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "# arbiter launch %s: experiment %d, run %d\n", shellComment(l.Name), l.ExperimentID, l.RunID)
	fmt.Fprintf(&b, "echo \"arbiter-slurm: job=$SLURM_JOB_ID node=$SLURMD_NODENAME cuda_visible_devices=${CUDA_VISIBLE_DEVICES-} port=%d\"\n", port)
	var secrets []string
	for _, kv := range l.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !shellName(k) {
			continue
		}
		if l.Redact != nil && l.Redact(kv) != kv {
			secrets = append(secrets, kv)
			continue
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	cmd := l.Command[0]
	if p, err := LookCommand(cmd); err == nil {
		cmd = p
	}
	hostFlag := s.HostFlag
	if hostFlag == "" {
		hostFlag = "--host"
	}
	args, listenEnv := l.address("0.0.0.0", port, hostFlag)
	for _, kv := range listenEnv {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	words := append([]string{cmd}, args...)
	b.WriteString("exec")
	for _, w := range words {
		b.WriteString(" " + shellQuote(w))
	}
	b.WriteString("\n")
	return b.String(), secrets
}

func slurmJobName(l Launch) string {
	db := l.DatabaseID
	if len(db) > 8 {
		db = db[:8]
	}
	name := l.Name
	if name == "" {
		name = fmt.Sprintf("exp%d-run%d", l.ExperimentID, l.RunID)
	}
	return SlurmJobPrefix + db + "-" + name
}

// slurmBaseEnv is what a job gets from arbiter's environment: the same few variables as
// a process engine, less the GPU pins, which are Slurm's to set.
func slurmBaseEnv() []string {
	var env []string
	for _, k := range baseEnvKeys {
		if strings.Contains(k, "VISIBLE_DEVICES") {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// slurmCommand runs a Slurm command; its error carries what the command printed on stderr.
func slurmCommand(ctx context.Context, env []string, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		// SLURM_CONF and the like, which say which cluster the commands talk to.
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "SLURM_CONF=") || strings.HasPrefix(kv, "SLURM_CLUSTERS=") {
				env = append(env, kv)
			}
		}
		cmd.Env = env
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%s not found: install the Slurm client commands (slurm-client) or put them on PATH", name)
		}
		return out.String(), &slurmError{cmd: name, msg: msg, err: err}
	}
	return out.String(), nil
}

type slurmError struct {
	cmd, msg string
	err      error
}

func (e *slurmError) Error() string { return fmt.Sprintf("%s: %s (%v)", e.cmd, e.msg, e.err) }
func (e *slurmError) Unwrap() error { return e.err }

// submitError names the usual reasons sbatch refuses a job.
func submitError(err error, partition string) error {
	var se *slurmError
	if !errors.As(err, &se) {
		return fmt.Errorf("slurm runtime: %w", err)
	}
	msg := strings.ReplaceAll(se.msg, "\n", "; ")
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "invalid partition"):
		return fmt.Errorf("slurm runtime: %w: no such partition %q (%s: %s); see sinfo -s for the partitions", ErrSlurmRejected, partition, se.cmd, msg)
	case strings.Contains(lower, "unable to contact slurm controller"), strings.Contains(lower, "connection refused"):
		return fmt.Errorf("slurm runtime: the Slurm controller does not answer (%s: %s)", se.cmd, msg)
	}
	return fmt.Errorf("slurm runtime: %w (%s: %s)", ErrSlurmRejected, se.cmd, msg)
}

// slurmJob is what `scontrol show job -d -o` says about a job.
type slurmJob map[string]string

// parseSlurmJob reads one line of `scontrol show job -d -o`: space-separated KEY=VALUE
// fields (the -d detail's Nodes=, CPU_IDs= and GRES= included). A value with spaces in
// it (a command line, a path) is cut at the first space; the fields arbiter reads have
// none.
func parseSlurmJob(line string) slurmJob {
	j := slurmJob{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if _, seen := j[k]; !seen {
			j[k] = v
		}
	}
	return j
}

// gpuIndices reads the GPU indices of the job's GRES detail, e.g. "gpu:2(IDX:0-1)" gives
// "0,1"; empty when the job has no GPUs.
func (j slurmJob) gpuIndices() string {
	g := j["GRES"]
	_, idx, ok := strings.Cut(g, "(IDX:")
	if !ok {
		return ""
	}
	idx, _, _ = strings.Cut(idx, ")")
	ids, err := ParseGPUs(idx)
	if err != nil {
		return idx
	}
	return strings.Join(ids, ",")
}

// slurmTerminal lists the states of a job that has ended.
var slurmTerminal = map[string]bool{"COMPLETED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true,
	"NODE_FAIL": true, "PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true, "OUT_OF_MEMORY": true,
	"SPECIAL_EXIT": true, "REVOKED": true}

// slurmEndWords say what Slurm's end states mean for the engine that ran in the job.
var slurmEndWords = map[string]string{
	"CANCELLED":     "cancelled by a user or an administrator (scancel), not by arbiter",
	"NODE_FAIL":     "its node failed",
	"TIMEOUT":       "it reached its time limit (runtime.time)",
	"PREEMPTED":     "preempted for another job",
	"BOOT_FAIL":     "its node failed to boot",
	"DEADLINE":      "it reached its deadline",
	"OUT_OF_MEMORY": "it ran out of memory",
	"REVOKED":       "revoked (a federated sibling ran it)",
}

// slurmLost lists the end states that Slurm, not the engine, caused.
var slurmLost = map[string]bool{"CANCELLED": true, "TIMEOUT": true, "NODE_FAIL": true, "PREEMPTED": true,
	"BOOT_FAIL": true, "DEADLINE": true, "REVOKED": true}

// endedBeforeRunning is the error of a job that ended before it ran. One that Slurm
// ended (its node failed, an administrator cancelled it: slurmLost) wraps ErrNodeLost,
// so that the launch is recorded lost and run again, as when it ends so while running;
// any other end (the job failed) wraps ErrSlurmRejected.
func endedBeforeRunning(id string, j slurmJob, output string) error {
	state := j["JobState"]
	if slurmLost[state] {
		why := slurmEndWords[state]
		if node := j["NodeList"]; node != "" && node != "(null)" {
			why += " (" + node + ")"
		}
		return fmt.Errorf("slurm runtime: Slurm job %s %s before it ran: %s; Reason=%s (%w)", id, state, why, j["Reason"], ErrNodeLost)
	}
	return fmt.Errorf("slurm runtime: %w: job %s ended before it ran: %s (Reason=%s)%s", ErrSlurmRejected, id, state, j["Reason"], output)
}

// show reads a job's state: through slurmrestd when the runtime has one, else scontrol.
func (s Slurm) show(ctx context.Context, id string) (slurmJob, error) {
	if s.REST != "" {
		return s.showREST(ctx, id)
	}
	return showJob(ctx, id)
}

// cancel cancels a job (kill: at once, with SIGKILL).
func (s Slurm) cancel(id string, kill bool) error {
	if s.REST != "" {
		return s.cancelREST(id, kill)
	}
	return cancelJob(id, kill)
}

// nodeAddr is the address a node is reached at (NodeAddr).
func (s Slurm) nodeAddr(ctx context.Context, node string) (string, error) {
	if s.REST != "" {
		return s.nodeAddrREST(ctx, node)
	}
	out, err := slurmCommand(ctx, nil, nil, "scontrol", "show", "node", "-o", node)
	if err != nil {
		return "", err
	}
	return parseSlurmJob(out)["NodeAddr"], nil
}

func showJob(ctx context.Context, id string) (slurmJob, error) {
	out, err := slurmCommand(ctx, nil, nil, "scontrol", "show", "job", "-d", "-o", id)
	if err != nil {
		return nil, err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	j := parseSlurmJob(line)
	if j["JobId"] == "" {
		return nil, fmt.Errorf("scontrol show job %s: no job in %q", id, line)
	}
	return j, nil
}

func cancelJob(id string, kill bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{id}
	if kill {
		args = []string{"--signal=KILL", "--full", id}
	}
	_, err := slurmCommand(ctx, nil, nil, "scancel", args...)
	return err
}

type slurmInstance struct {
	s        Slurm
	id       string
	raw      string
	logPath  string
	launch   Launch
	redact   func(string) string
	port     int
	endpoint string
	done     chan struct{}

	finished  sync.Once
	mu        sync.Mutex
	placement Placement
	exit      Exit
	stopped   bool
}

func (i *slurmInstance) Endpoint() string      { return i.endpoint }
func (i *slurmInstance) Done() <-chan struct{} { return i.done }
func (i *slurmInstance) Exit() Exit {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.exit
}

// Placement says which job, node and GPUs the arm got.
func (i *slurmInstance) Placement() Placement {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.placement
}

func (i *slurmInstance) poll() time.Duration {
	if i.s.Poll > 0 {
		return i.s.Poll
	}
	return time.Second
}

// waitRunning waits until the job runs, then learns its node, address and GPUs.
func (i *slurmInstance) waitRunning(ctx context.Context) error {
	limit := i.s.Pending
	if limit <= 0 {
		limit = 30 * time.Minute
	}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(i.poll())
	defer tick.Stop()
	var j slurmJob
	for {
		var err error
		j, err = i.s.show(ctx, i.id)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("slurm runtime: job %s: %w", i.id, err)
		}
		if err == nil {
			state := j["JobState"]
			if state == "RUNNING" {
				break
			}
			if slurmTerminal[state] {
				return endedBeforeRunning(i.id, j, i.outputTail())
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("slurm runtime: %w after %s: job %s is %s (Reason=%s); it was cancelled", ErrSlurmPending,
					limit, i.id, state, j["Reason"])
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	node := j["BatchHost"]
	addr := node
	if a, err := i.s.nodeAddr(ctx, node); err == nil && a != "" {
		addr = a
	}
	i.endpoint = fmt.Sprintf("http://%s:%d", bracketIPv6(addr), i.port)
	started, _ := time.ParseInLocation("2006-01-02T15:04:05", j["StartTime"], time.Local)
	submitted, err := time.ParseInLocation("2006-01-02T15:04:05", j["SubmitTime"], time.Local)
	i.mu.Lock()
	i.placement.Node, i.placement.GPUs, i.placement.Started = node, j.gpuIndices(), started
	if err == nil && !submitted.IsZero() {
		i.placement.Submitted = submitted
	}
	i.mu.Unlock()
	// The job's first line says what it was given; it is there as soon as the job's
	// output reaches this machine (a shared filesystem), and only read if it does.
	wait := time.Now().Add(10 * time.Second)
	for time.Now().Before(wait) {
		if v, ok := i.header(); ok {
			i.mu.Lock()
			i.placement.Visible = v
			i.mu.Unlock()
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// header reads CUDA_VISIBLE_DEVICES from the line the job prints first.
func (i *slurmInstance) header() (string, bool) {
	f, err := os.Open(i.raw)
	if err != nil {
		return "", false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "arbiter-slurm: ") {
		return "", false
	}
	for _, w := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(w, "cuda_visible_devices="); ok {
			return v, true
		}
	}
	return "", true
}

// watch polls the job until it has ended, then records how.
func (i *slurmInstance) watch() {
	tick := time.NewTicker(i.poll())
	defer tick.Stop()
	misses := 0
	for range tick.C {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		j, err := i.s.show(ctx, i.id)
		cancel()
		if err != nil {
			// Slurm forgets a job MinJobAge after its end; a controller that does not
			// answer for a while is no reason to call the engine dead.
			if misses++; misses < 30 {
				continue
			}
			i.finish(slurmJob{"JobState": "UNKNOWN", "Reason": err.Error()})
			return
		}
		misses = 0
		if slurmTerminal[j["JobState"]] {
			i.finish(j)
			return
		}
		select {
		case <-i.done:
			return // Refresh saw the end first
		default:
		}
	}
}

// Refresh reads the job's state now, and records its end if it has ended. A job Slurm
// is ending (COMPLETING: cancelled, its processes being killed) is waited for, up to a
// minute, since its end state is what tells a lost job from a crashed engine.
func (i *slurmInstance) Refresh(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-i.done:
			return
		default:
		}
		j, err := i.s.show(ctx, i.id)
		if err != nil {
			return
		}
		if slurmTerminal[j["JobState"]] {
			i.finish(j)
			return
		}
		if j["JobState"] != "COMPLETING" || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finish records the job's end and moves its output, redacted, to the launch's log.
func (i *slurmInstance) finish(j slurmJob) {
	i.finished.Do(func() { i.record(j) })
}

func (i *slurmInstance) record(j slurmJob) {
	tail := i.copyLog()
	i.mu.Lock()
	defer i.mu.Unlock()
	state := j["JobState"]
	x := Exit{Stopped: i.stopped, LogTail: tail}
	code, sig, _ := strings.Cut(j["ExitCode"], ":")
	x.Code, _ = strconv.Atoi(code)
	if n, _ := strconv.Atoi(sig); n != 0 {
		x.Code, x.Signal = -1, fmt.Sprintf("signal %d", n)
	}
	why := slurmEndWords[state]
	if r := j["Reason"]; r != "" && r != "None" {
		why = strings.TrimPrefix(why+"; ", "; ") + "Reason=" + r
	}
	if why == "" {
		why = "ExitCode=" + j["ExitCode"]
	}
	x.Reason = fmt.Sprintf("Slurm job %s %s on %s: %s", i.id, state, i.placement.Node, why)
	// A job arbiter stopped ends CANCELLED (or UNKNOWN, the controller gone): that end is
	// arbiter's. Any other end Slurm caused came before the stop, which only found it
	// not yet polled: a node that failed under a run whose engine's replies then failed
	// is lost, not the engine's fault.
	ownStop := i.stopped && (state == "CANCELLED" || state == "UNKNOWN")
	if (slurmLost[state] || state == "UNKNOWN") && !ownStop {
		x.Lost = x.Reason
	}
	i.exit = x
	close(i.done)
}

// copyLog writes the job's output, each line through the redactor, to the launch's log
// and returns its last lines.
func (i *slurmInstance) copyLog() string {
	in, err := os.Open(i.raw)
	if err != nil {
		return ""
	}
	defer in.Close()
	out, err := os.OpenFile(i.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return ""
	}
	defer out.Close()
	lines := i.s.TailLines
	if lines <= 0 {
		lines = 40
	}
	sink := newLogSink(out, i.launch, lines)
	sink.copyFrom(in)
	os.Remove(i.raw)
	return sink.tail()
}

// outputTail is the end of a job's output, for an error about a job that never ran.
func (i *slurmInstance) outputTail() string {
	b, err := os.ReadFile(i.raw)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	s := string(bytes.TrimSpace(b))
	if i.redact != nil {
		s = i.redact(s)
	}
	return "; its output ends: " + s
}

// Stop cancels the job (Slurm sends SIGTERM, then SIGKILL after its KillWait) and waits
// until Slurm says it ended; when ctx ends first it sends SIGKILL itself.
func (i *slurmInstance) Stop(ctx context.Context) error {
	select {
	case <-i.done:
		return nil
	default:
	}
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	err := i.s.cancel(i.id, false)
	select {
	case <-i.done:
		return nil
	case <-ctx.Done():
		i.s.cancel(i.id, true)
		<-i.done
		if err != nil {
			return err
		}
		return ctx.Err()
	}
}

func bracketIPv6(a string) string {
	if strings.Contains(a, ":") && !strings.HasPrefix(a, "[") {
		return "[" + a + "]"
	}
	return a
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellComment(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

func shellName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// InstanceID names the job and how long it waited in the queue, for runs.instance and the
// verdict's placement: "slurm job 123 (queued 4m12s)".
func (i *slurmInstance) InstanceID() string {
	p := i.Placement()
	id := "slurm job " + i.id
	if !p.Started.IsZero() && !p.Submitted.IsZero() {
		id += fmt.Sprintf(" (queued %s)", max(p.Started.Sub(p.Submitted), 0).Round(time.Second))
	}
	return id
}
