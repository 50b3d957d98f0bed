// Package orchestrator runs an experiment: it plans blocks of runs in a seeded random
// order, launches each arm through a Runtime, waits for real readiness, drives the
// workload while a watchdog checks liveness, labels every turn with the detectors and
// writes everything to the store.
package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/internal/version"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/plugins"
	"github.com/arbiterlab/arbiter/plugins/detectors"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// Options configure one experiment. Spec and DBPath are required; every other zero value
// is a working default.
type Options struct {
	Spec *arms.Spec
	// DBPath is the results database; created if missing.
	DBPath string
	// Runtime, when set, launches the arms of every node (tests, a caller with a
	// runtime of its own). Otherwise NodeRuntime builds one runtime per node.
	Runtime runtime.Runtime
	// CountGPUs says how many GPUs a node whose gpus is "all" has, so that engine.gpus
	// can cut it into slots; 0 when unknown, which leaves it one slot (default
	// NodeGPUs).
	CountGPUs func(spec *arms.Spec, node arms.Node) int
	// NodeRuntime builds the runtime that launches the arms of one node of
	// spec.Nodes(); it is called once per node before anything is recorded, and an
	// error fails the experiment there (default RuntimeFor).
	NodeRuntime func(spec *arms.Spec, node arms.Node) (runtime.Runtime, error)
	// LogDir receives one engine log per run, under LogDir/DB/exp-ID with DB the
	// database's short id (default: "arbiter-logs" beside the database).
	LogDir string
	// Environ reads arbiter's own environment, for secrets (default os.LookupEnv).
	Environ func(string) (string, bool)
	// Logger receives progress and problems (default: slog's default logger).
	Logger *slog.Logger
	// Progress, if set, hears about runs and sessions as they happen.
	Progress Progress
	// ProbeInterval is the longest wait between readiness polls (default 250ms); the
	// polls start 2 ms apart and back off to it by a quarter each time.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one readiness probe: a health poll or the model list (default
	// 30s). The readiness generation is bounded by the startup timeout alone: an engine
	// that loads its model on its first request (ollama) may take minutes to answer it.
	ProbeTimeout time.Duration
	// MetricsInterval is the longest gap between two scrapes of the engine's /metrics
	// while a workload runs (default 2s; the first gaps are shorter, see
	// firstScrapeInterval); negative turns scraping off.
	MetricsInterval time.Duration
	// GPUProbe reads the GPUs a launch runs on while its workload runs (default: NVML,
	// through the driver's libnvidia-ml.so.1, loaded when a launch starts; where there is
	// none the launch's telemetry is recorded as unavailable, and the experiment goes on).
	GPUProbe GPUProbe
	// GPUInterval is the time between two samples of a launch's GPUs (default
	// DefaultGPUInterval); negative turns GPU telemetry off.
	GPUInterval time.Duration
	// Resume, when not 0, continues that recorded experiment instead of starting a new
	// one: launches that finished are kept, the others run again (see Resume).
	Resume int64
	// GPULockDir is where the GPU claims of every arbiter on this host meet (default
	// $ARBITER_GPU_LOCK_DIR, else DefaultGPULockDir); see claimGPUs.
	GPULockDir string
	// LeaseHeartbeat is how often the experiment's lease is renewed (default
	// store.LeaseHeartbeat; it must stay well below store.LeaseExpiry).
	LeaseHeartbeat time.Duration
	// Look, when set, is asked after every block but the last with each arm's
	// cumulative analysed and corrupted sessions, in the spec's arm order; when it
	// returns stop, scheduling ends there as at a crossed sequential boundary, with why
	// recorded as the reason. A caller with a stopping rule of its own (arbiter bisect's
	// clean boundary) stops early through it.
	Look func(block int, counts []ArmCounts) (stop bool, why string)
}

// ArmCounts are an arm's sessions that completed every round (those the analysis
// counts, store.Analysed) and the corrupted ones among them.
type ArmCounts struct{ Sessions, Corrupted int }

// Progress hears about an experiment as it runs; the CLI draws progress bars from it.
// Launches of a block may run at the same time, so every call names its arm and block.
type Progress interface {
	RunStarted(arm string, block, sessions int)
	// SessionDone hears of every session that ended, however it ended: status says
	// whether it finished (store.SessionOK) or was lost.
	SessionDone(arm string, block int, status store.SessionStatus, corrupted bool)
	RunEnded(arm string, block int, status store.RunStatus)
}

// LaunchProgress, when a Progress also implements it, hears about a launch before its
// workload runs (a real engine takes 10-30 minutes to start) and about the tokens it
// generates.
type LaunchProgress interface {
	// EngineStarting is called before the engine is launched.
	EngineStarting(l LaunchInfo)
	// EngineReady is called once the engine generates.
	EngineReady(arm string, block int)
	// EngineFailed is called when the engine did not become ready (it exited, or the
	// startup timeout passed), with why and the last lines of its log.
	EngineFailed(arm string, block int, why, logTail string)
	// EngineRefused is called when the engine was ready but reported a pin not in
	// effect (or could not be checked): no traffic is sent to it.
	EngineRefused(arm string, block int, why string)
	// TurnDone is called for every completed turn with the tokens it generated.
	TurnDone(arm string, block, completionTokens int)
}

// LaunchInfo describes a launch to a LaunchProgress.
type LaunchInfo struct {
	Arm   string
	Block int
	// Position is the arm's place in its block's order, from 1, of Arms; Blocks is the
	// number of blocks planned.
	Position, Arms, Blocks int
	// Sessions is how many sessions the launch will run.
	Sessions int
	// LogPath is the engine's log file.
	LogPath string
}

// Result summarises a finished (or interrupted) experiment.
type Result struct {
	ExperimentID int64
	Name         string
	Status       store.ExperimentStatus // done, interrupted or failed
	Runs         []RunResult
	Elapsed      time.Duration
	// StoppedEarly says why scheduling stopped before the planned blocks, when a
	// sequential boundary was crossed; empty otherwise.
	StoppedEarly string
}

// RunResult is one launch of one arm.
type RunResult struct {
	// RunID is the run's id in the database; 0 for a launch kept from before a resume.
	RunID     int64
	Arm       string
	Block     int
	Status    store.RunStatus
	Sessions  int
	Corrupted int
	Err       string
	// Kept is true for a launch that finished before a resume and was not run again.
	Kept bool
	// Node, Slot and GPUs are where the run ran, Wave its wave within the block, and
	// Instance what the runtime started ("container …", "pid …").
	Node     string
	Slot     int
	GPUs     string
	Wave     int
	Instance string
	// WorkloadStarted and WorkloadEnded bound the workload; zero when it never ran.
	WorkloadStarted, WorkloadEnded time.Time
}

// Sentinel errors the CLI maps to messages and exit codes.
var (
	// ErrWedged reports an engine that stopped making progress while it still ran.
	ErrWedged = errors.New("engine wedged: it runs but completes no turn")
	// ErrNotReady reports an engine that did not become ready within the startup timeout.
	ErrNotReady = errors.New("engine not ready within the startup timeout")
)

// Run executes the experiment the spec describes and returns once every run has ended.
// Cancelling ctx stops scheduling, stops the running arms and keeps what was recorded; the
// experiment is then marked interrupted and ctx.Err() is returned with the result.
func Run(ctx context.Context, opts Options) (Result, error) {
	start := time.Now()
	spec := opts.Spec
	if spec == nil {
		return Result{}, errors.New("orchestrator: no spec")
	}
	armList, err := spec.Expand()
	if err != nil {
		return Result{}, err
	}
	trace, err := LoadTrace(spec)
	if err != nil {
		return Result{}, err
	}
	environ := opts.Environ
	if environ == nil {
		environ = os.LookupEnv
	}
	redactor := spec.Redactor(environ)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = slog.New(redactingHandler{next: log.Handler(), redact: redactor.Redact})
	runtimes, err := nodeRuntimes(spec, opts)
	if err != nil {
		return Result{}, err
	}
	countGPUs := opts.CountGPUs
	if countGPUs == nil {
		countGPUs = NodeGPUs
	}
	slots, err := spec.SlotsOn(func(n arms.Node) int { return countGPUs(spec, n) })
	if err != nil {
		return Result{}, err
	}
	self, _ := runtime.Self() // zero where processes cannot be identified: nothing recorded
	// Every launch environment is built before anything is stored, so a missing secret
	// fails the experiment before it starts.
	envs := make([][]string, len(armList))
	for i, a := range armList {
		if envs[i], err = a.LaunchEnv(environ); err != nil {
			return Result{}, fmt.Errorf("arm %s: %w", a.Name, err)
		}
	}

	// A plugin gets arbiter's environment without its credentials, but for those
	// detector_secrets grants it: what it writes goes through the redactor.
	pluginEnv, err := spec.PluginEnv(os.Environ(), environ)
	if err != nil {
		return Result{}, err
	}
	pluginCtx := plugins.WithEnv(plugins.WithOutput(ctx, plugins.Output{W: os.Stderr, Redact: redactor.Redact}), pluginEnv)
	dets, closeDets, err := resolveDetectors(pluginCtx, spec.Detectors)
	if err != nil {
		return Result{}, err
	}
	defer closeDets()

	// The GPUs are claimed before anything is recorded: an arbiter that waits for
	// another to finish has nothing in the database yet.
	claim, err := claimSlots(ctx, gpuLockDir(opts.GPULockDir), spec, slots, holderText(spec, opts.DBPath), log)
	if err != nil {
		return Result{}, err
	}
	defer claim.release()

	// The preflight, before anything is recorded: a node that cannot take its arms
	// leaves no experiment behind. A caller with runtimes of its own checks its own.
	var unverified []string
	if opts.Runtime == nil && opts.NodeRuntime == nil && opts.Resume == 0 {
		// Another program's database is the first thing to hear about.
		if err := store.Identify(opts.DBPath); err != nil {
			return Result{}, err
		}
		pf, err := RunPreflight(ctx, spec)
		if err == nil {
			err = pf.Err()
		}
		if err != nil {
			return Result{}, err
		}
		unverified = pf.Unverified
		for _, u := range unverified {
			log.Warn("pin not verified", "pin", u)
		}
	}

	st, err := store.Open(opts.DBPath, store.Options{Redact: redactor.Redact})
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	dbID, err := store.DatabaseID(ctx, st.DB())
	if err != nil {
		return Result{}, err
	}
	if opts.Resume != 0 {
		// Engines an earlier arbiter left running hold ports and GPUs the resumed
		// launches need.
		reapOrphans(ctx, st, log)
		if spec.Runtime.Kind == arms.RuntimeSlurm {
			cancelSlurmLeftovers(ctx, dbID, opts.Resume, log)
		}
	}

	// This process owns the experiment from here to its end: a second arbiter that
	// tries to run or resume it is refused while the lease is renewed.
	owner := store.ThisProcess()
	var expID int64
	var armIDs []int64
	var prior map[runKey]priorRun
	var lease *store.Lease
	if opts.Resume != 0 {
		// Containers a killed arbiter left hold their slots' GPUs and ports.
		leftovers := func(ctx context.Context) error {
			return removeLeftoverContainers(ctx, runtimes, dbID, opts.Resume, log)
		}
		if expID, armIDs, prior, lease, err = reopen(ctx, st, opts.Resume, spec, armList, owner, leftovers); err != nil {
			return Result{}, err
		}
	} else if expID, armIDs, lease, err = create(ctx, st, spec, armList, start, owner, unverified); err != nil {
		return Result{}, err
	}
	logDir := opts.LogDir
	if logDir == "" {
		logDir = filepath.Join(filepath.Dir(opts.DBPath), "arbiter-logs")
	}
	// Experiment ids restart in every database: the database's own id keeps the logs of
	// two databases in one folder apart.
	logDir = filepath.Join(logDir, store.ShortID(dbID))
	e := &experiment{
		opts: opts, spec: spec, arms: armList, armIDs: armIDs, envs: envs, id: expID, store: st,
		detectors: dets, redact: redactor.Redact, redactor: redactor, log: log.With("experiment", expID, "name", spec.Name), runtimes: runtimes,
		logDir: filepath.Join(logDir, fmt.Sprintf("exp-%d", expID)), counts: make([]armCounts, len(armList)), positions: map[runKey]int{},
		prior: prior, slots: slots, lostNodes: map[string]string{}, dbID: dbID, self: self, trace: trace,
	}
	// The heartbeat outlives an interrupt: tearing the arms down after Ctrl-C may take a
	// while, and the lease must stay live until the experiment's end is recorded.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	stopHeartbeat, heartbeatDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(heartbeatDone)
		e.heartbeat(lease, stopHeartbeat, cancelRun)
	}()

	res := Result{ExperimentID: expID, Name: spec.Name}
	runErr := e.run(runCtx, &res)
	// What the arms wrote is copied into the database file while the divergence pass
	// reads it, rather than when the store closes.
	checkpointed := st.StartCheckpoint()
	defer func() {
		if err := checkpointed(); err != nil {
			log.Debug("checkpoint beside the divergence pass", "err", err)
		}
	}()
	if runErr == nil && runCtx.Err() == nil {
		runErr = errors.Join(e.checkData(res.Runs), e.labelDivergence(runCtx))
	}
	res.Elapsed = time.Since(start)
	close(stopHeartbeat)
	<-heartbeatDone

	bg := context.WithoutCancel(ctx)
	if cause := context.Cause(runCtx); ctx.Err() == nil && errors.Is(cause, store.ErrLeaseLost) {
		// Another arbiter owns the experiment now; what it records is not to be
		// overwritten, so this one neither finishes the experiment nor judges it.
		res.Status = store.ExperimentInterrupted
		return res, fmt.Errorf("%w; this arbiter stopped its arms and keeps what it recorded (its unfinished launches are left out of the analysis)", cause)
	}
	status, errText := store.ExperimentDone, ""
	switch {
	case ctx.Err() != nil:
		status = store.ExperimentInterrupted
	case runErr != nil:
		status, errText = store.ExperimentFailed, runErr.Error()
	}
	res.Status = status
	// The experiment's end is recorded even after an interrupt, hence a fresh context;
	// the lease goes with it.
	if err := lease.Finish(bg, status, errText, time.Now()); err != nil && runErr == nil {
		runErr = err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if runErr != nil {
		// The error is printed; an engine's words inside it may quote a secret.
		runErr = &redactedError{err: runErr, msg: redactor.Redact(runErr.Error())}
	}
	return res, runErr
}

// heartbeat renews the experiment's lease every Options.LeaseHeartbeat until stop is
// closed. When another arbiter has taken the experiment over (this one stalled past the
// lease expiry), it stops the experiment with store.ErrLeaseLost as the cause. A renewal
// that fails for another reason (a busy database) is retried at the next beat.
func (e *experiment) heartbeat(lease *store.Lease, stop <-chan struct{}, cancel context.CancelCauseFunc) {
	store.KeepRenewed(lease, e.opts.LeaseHeartbeat, stop, func(err error) {
		e.log.Error("another arbiter took this experiment over; stopping", "err", err)
		cancel(err)
	}, func(err error) { e.log.Warn("lease heartbeat failed; retrying", "err", err) })
}

// redactedError is an error whose text went through the redactor; errors.Is still sees
// what it wraps.
type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Version is arbiter's version as the build recorded it (see internal/version); it is
// stored with every experiment.
func Version() string { return version.String() }

// RuntimeFor is the default Options.NodeRuntime: the runtime of the spec's kind for one
// node. The process runtime runs on this machine (slots get their GPUs through
// CUDA_VISIBLE_DEVICES); the docker runtime talks to the node's daemon (its host, or
// the local daemon when empty or "local").
func RuntimeFor(spec *arms.Spec, node arms.Node) (runtime.Runtime, error) {
	switch spec.Runtime.Kind {
	case "", arms.RuntimeProcess:
		return runtime.Process{}, nil
	case arms.RuntimeDocker:
		return DockerFor(spec, node), nil
	case arms.RuntimeExternal:
		return runtime.External{}, nil
	case arms.RuntimeSlurm:
		sl := spec.Runtime.Slurm
		// A job still queued when the startup timeout ends is given up, with Slurm's reason.
		rt := runtime.Slurm{Partition: sl.Partition, Account: sl.Account, QOS: sl.QOS, TimeLimit: sl.Time,
			Options: sl.Options, HostFlag: sl.HostFlag, GPUs: spec.Engine.GPUs, Pending: spec.Timeouts.Startup}
		if sl.REST != "" {
			rt.REST, rt.Token, rt.User = sl.REST, os.Getenv("SLURM_JWT"), os.Getenv("SLURM_USER_NAME")
			if rt.User == "" {
				rt.User = os.Getenv("USER")
			}
			if rt.Token == "" {
				return nil, fmt.Errorf("runtime.rest: slurmrestd needs a token: set $SLURM_JWT (scontrol token prints one)")
			}
		}
		return rt, nil
	}
	return nil, fmt.Errorf("orchestrator: runtime %q needs Options.Runtime or Options.NodeRuntime", spec.Runtime.Kind)
}

// NodeGPUs is how many GPUs node n of spec has when its gpus is "all": this machine's
// (LocalGPUs) for the process runtime on this machine; 0, unknown, for any other node,
// whose runtime is not asked before a run.
func NodeGPUs(spec *arms.Spec, n arms.Node) int {
	if spec.Runtime.Kind == arms.RuntimeProcess && arms.IsLocalHost(n.Host) {
		return LocalGPUs()
	}
	return 0
}

// Slots are the slots the arms of spec run on, a node's "all" GPUs counted as a run
// counts them (NodeGPUs).
func Slots(spec *arms.Spec) ([]arms.Slot, error) {
	return spec.SlotsOn(func(n arms.Node) int { return NodeGPUs(spec, n) })
}

// LocalGPUs counts this machine's NVIDIA GPUs by their device files (/dev/nvidia0,
// /dev/nvidia1, ...), whatever CUDA_VISIBLE_DEVICES says; 0 when there are none.
func LocalGPUs() int {
	matches, _ := filepath.Glob("/dev/nvidia[0-9]*")
	n := 0
	for _, m := range matches {
		if _, err := strconv.Atoi(strings.TrimPrefix(m, "/dev/nvidia")); err == nil {
			n++
		}
	}
	return n
}

// nodeRuntimes builds one runtime per node of spec.Nodes(), by name.
func nodeRuntimes(spec *arms.Spec, opts Options) (map[string]runtime.Runtime, error) {
	build := opts.NodeRuntime
	if build == nil {
		build = RuntimeFor
	}
	out := map[string]runtime.Runtime{}
	for _, n := range spec.Nodes() {
		if opts.Runtime != nil {
			out[n.Name] = opts.Runtime
			continue
		}
		rt, err := build(spec, n)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		out[n.Name] = rt
	}
	return out, nil
}

// create records a new experiment, owned by owner, and its arms.
func create(ctx context.Context, st *store.Store, spec *arms.Spec, armList []arms.Arm, start time.Time,
	owner store.Owner, unverified []string) (int64, []int64, *store.Lease, error) {
	host, _ := os.Hostname()
	baseline := spec.Analysis.Baseline
	if baseline == "" {
		baseline = armList[0].Name
	}
	expID, lease, err := st.StartExperiment(ctx, store.Experiment{
		Name: spec.Name, SpecPath: spec.Path, Spec: string(spec.RedactedSource()), Seed: spec.Workload.Seed,
		Unit: spec.Analysis.Unit, Alpha: spec.Analysis.Alpha, Baseline: baseline, Version: Version(), Host: host,
		Created: start, Design: designJSON(spec, unverified),
	}, owner)
	if err != nil {
		return 0, nil, nil, err
	}
	fail := func(err error) (int64, []int64, *store.Lease, error) {
		// The experiment stays recorded, but nobody runs it.
		bg := context.WithoutCancel(ctx)
		_ = lease.Finish(bg, store.ExperimentFailed, err.Error(), time.Now())
		return 0, nil, nil, err
	}
	armIDs := make([]int64, len(armList))
	for i, a := range armList {
		// Credential-named values are hidden by name, whatever their length, before the
		// store's redactor sees the text.
		pins, _ := json.Marshal(map[string]any{"env": nonNilMap(spec.RedactEnv(a.Pins.Env)),
			"args": nonNilSlice(arms.RedactArgs(a.Pins.Args))})
		var levels []byte
		if a.Levels != nil {
			levels, _ = json.Marshal(a.Levels)
		}
		command, _ := json.Marshal(arms.RedactArgs(a.Command))
		env, _ := json.Marshal(nonNilMap(spec.RedactEnv(a.Env)))
		armIDs[i], err = st.AddArm(ctx, store.Arm{ExperimentID: expID, Name: a.Name, Position: i, Pins: string(pins),
			Levels: string(levels), Command: string(command), Env: string(env)})
		if err != nil {
			return fail(err)
		}
	}
	return expID, armIDs, lease, nil
}

// DesignOf is how the spec lays the experiment out, as the store records it for
// verdicts rebuilt later.
func DesignOf(spec *arms.Spec) store.Design {
	maxLoss, minEffect := spec.Analysis.MaxLoss, spec.Analysis.MinEffect
	d := store.Design{Blocks: max(spec.Blocks, 1), Looks: spec.Analysis.Sequential.Looks, Margin: spec.Analysis.Margin,
		AA: spec.Analysis.AA, Sessions: spec.Workload.Sessions, Rounds: spec.Workload.Rounds,
		Concurrency: spec.Workload.Concurrency, MaxLoss: &maxLoss, MinEffect: &minEffect,
		Workload: spec.Workload.Describe(), ThroughputMargin: spec.Analysis.ThroughputMargin,
		DivergenceFloor: spec.Analysis.DivergenceFloor, NoiseFloor: spec.Analysis.NoiseFloorID}
	if spec.Workload.Kind != arms.DefaultWorkload {
		d.Kind = spec.Workload.Kind
	}
	if spec.Runtime.Kind == arms.RuntimeExternal {
		d.Runtime = string(spec.Runtime.Kind)
	}
	if p := spec.Analysis.Plan; p.P0 != p.P1 {
		d.Plan = &store.DesignPlan{P0: p.P0, P1: p.P1, Power: p.Power}
	}
	for _, f := range spec.Factors {
		df := store.DesignFactor{Name: f.Name}
		for _, l := range f.Levels {
			df.Levels = append(df.Levels, l.Name)
		}
		d.Factors = append(d.Factors, df)
	}
	return d
}

func designJSON(spec *arms.Spec, unverified []string) string {
	d := DesignOf(spec)
	d.PinsUnverified = unverified
	b, _ := json.Marshal(d)
	return string(b)
}

func resolveDetectors(ctx context.Context, names []string) ([]plugins.Detector, func(), error) {
	ds, release, err := detectors.ResolveAll(ctx, names)
	if err != nil {
		return nil, func() {}, err
	}
	return ds, release, nil
}

type experiment struct {
	opts      Options
	spec      *arms.Spec
	arms      []arms.Arm
	armIDs    []int64
	envs      [][]string
	id        int64
	store     *store.Store
	detectors []plugins.Detector
	redact    func(string) string
	log       *slog.Logger
	// runtimes launch the arms of each node, by node name.
	runtimes map[string]runtime.Runtime
	logDir   string

	// positions are each launch's place in its block's order, from 1, for the progress
	// display.
	positions map[runKey]int
	// counts are each arm's cumulative completed and corrupted sessions, for the
	// sequential looks; an arm runs once per block, so each entry has one writer at a
	// time, and the looks read them between blocks.
	counts []armCounts
	// wavesSaid is the number of waves the last warning about waves named; only
	// runBlock, one block at a time, reads and writes it.
	wavesSaid int
	// prior are the launches recorded before a resume; nil for a new experiment.
	prior map[runKey]priorRun
	// slots are where arms run (Spec.Slots); lostNodes the nodes taken out of the
	// schedule, with why, guarded by placeMu.
	slots     []arms.Slot
	placeMu   sync.Mutex
	lostNodes map[string]string
	// dbID is the database's unique id, which launches carry (runtime.Launch).
	dbID string
	// self is this arbiter's process, recorded with every engine process group so that a
	// later arbiter can tell whether the engine's arbiter still runs.
	self runtime.ProcessID

	// redactor is what redact applies; it also finds secrets that an engine streamed
	// in pieces (see sessionTracker.Turn).
	redactor *arms.Redactor
	// refused is set, before it reaches its wave's start barrier, by an arm whose engine
	// did not hold its pins: the wave's other arms then send no traffic either.
	refused atomic.Pointer[string]
	// model is the GGUF file a preset that keeps models is given (models.go).
	model modelFile
	// trace is the index of a trace workload, checked once before any launch.
	trace *workload.TraceIndex
}

// armCounts are an arm's sessions that completed every round, and the corrupted ones.
type armCounts struct{ sessions, corrupted int }

// plan returns, for each block, the order in which arms run, which is also the order in
// which they take slots and waves: randomized and balanced, so that no arm owns a time,
// a slot, a node or a wave. Blocks come in cycles of as many blocks as arms; a cycle
// draws a random order of the arms and gives each of its blocks a different rotation of
// it, in a random sequence (a Latin square with random rows), so that over a cycle every
// arm takes every position exactly once. The draws come from the workload seed, so a
// resumed experiment reruns the same plan.
func plan(nArms, blocks int, seed int64) [][]int {
	if blocks < 1 {
		blocks = 1
	}
	out := make([][]int, blocks)
	var base, shifts []int
	for b := range out {
		k := b % max(nArms, 1)
		if k == 0 {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(b/max(nArms, 1))+0x9e3779b97f4a7c15))
			base, shifts = r.Perm(nArms), r.Perm(nArms)
		}
		order := make([]int, nArms)
		for j := range order {
			order[j] = base[(j+shifts[k])%nArms]
		}
		out[b] = order
	}
	return out
}

func (e *experiment) run(ctx context.Context, res *Result) error {
	blocks := e.spec.Blocks
	names := make([]string, len(e.arms))
	for i, a := range e.arms {
		names[i] = a.Name
	}
	seq, err := newSequentialPlan(e.spec, names)
	if err != nil {
		return err
	}
	for b, order := range plan(len(e.arms), blocks, e.spec.Workload.Seed) {
		if ctx.Err() != nil {
			return nil
		}
		var pending []int
		for k, ai := range order {
			// Written before the block's arms start, read by them.
			e.positions[runKey{ai, b}] = k + 1
			if p, ok := e.prior[runKey{ai, b}]; ok && p.done {
				// Finished before the resume: kept as it is.
				e.counts[ai].sessions += p.counts.sessions
				e.counts[ai].corrupted += p.counts.corrupted
				res.Runs = append(res.Runs, RunResult{Arm: e.arms[ai].Name, Block: b, Status: store.RunDone,
					Sessions: p.counts.sessions, Corrupted: p.counts.corrupted, Kept: true})
				continue
			}
			pending = append(pending, ai)
		}
		if err := e.runBlock(ctx, b, pending, res); err != nil {
			return err
		}
		if b == blocks-1 || ctx.Err() != nil {
			continue
		}
		stop, why := false, ""
		if seq != nil {
			stop, why = seq.look(e.counts, e.baselineIndex())
		}
		if look := e.opts.Look; !stop && look != nil {
			counts := make([]ArmCounts, len(e.counts))
			for i, c := range e.counts {
				counts[i] = ArmCounts{Sessions: c.sessions, Corrupted: c.corrupted}
			}
			stop, why = look(b, counts)
		}
		if stop {
			e.log.Info("stopping early", "after_block", b, "why", why)
			res.StoppedEarly = why
			return e.store.StopEarly(ctx, e.id, why)
		}
	}
	return nil
}

// ErrNoData reports an experiment in which an arm completed no session at all: there is
// nothing to compare, and a CI gate must not pass on it.
var ErrNoData = errors.New("no completed session")

// checkData fails the experiment when an arm has no session to analyse.
func (e *experiment) checkData(runs []RunResult) error {
	var errs []error
	for i, a := range e.arms {
		if e.counts[i].sessions > 0 {
			continue
		}
		// Blocks that ended alike are named together: an engine that cannot start fails
		// every block with the same words.
		var ends []string
		blocks := map[string][]string{}
		for _, r := range runs {
			if r.Arm == a.Name {
				end := string(r.Status)
				if r.Err != "" {
					end += ": " + r.Err
				}
				if _, seen := blocks[end]; !seen {
					ends = append(ends, end)
				}
				blocks[end] = append(blocks[end], strconv.Itoa(r.Block))
			}
		}
		what := make([]string, len(ends))
		for k, end := range ends {
			word := "block "
			if len(blocks[end]) > 1 {
				word = "blocks "
			}
			what[k] = word + strings.Join(blocks[end], ", ") + " " + end
		}
		errs = append(errs, fmt.Errorf("arm %s: %w (%s)", a.Name, ErrNoData, strings.Join(what, "; ")))
	}
	return errors.Join(errs...)
}

func (e *experiment) baselineIndex() int {
	for i, a := range e.arms {
		if a.Name == e.spec.Analysis.Baseline {
			return i
		}
	}
	return 0
}

// sessionTracker turns the workload's stream of turns into labelled store rows and
// per-session outcomes.
type sessionTracker struct {
	e     *experiment
	w     *store.Writer
	runID int64
	armID int64
	arm   string
	block int
	// ended hears every turn end, completed or not; it feeds the watchdog.
	ended func(f workload.Failure, errText string)
	// phaseEnded, if set, hears every phase end; it nudges the metrics scraper.
	phaseEnded func()

	mu        sync.Mutex
	firstBad  map[int]int
	sessions  int
	corrupted int
	completed armCounts // the sessions the analysis counts (store.Analysed)

	// Turns are labelled and stored by a few workers, off the sessions' goroutines,
	// so that a detector's time never sits between a response and the session's next
	// request. The queue is bounded: a session whose turn finds it full waits, which
	// bounds the turns held in memory, and tells the watchdog (hold) that it waits on
	// the detectors, not on the engine. pending counts each session's turns not yet
	// labelled (guarded by mu); its SessionDone waits for them.
	startPool sync.Once
	jobs      chan labelJob
	workers   sync.WaitGroup
	pending   map[int]*sync.WaitGroup
	// hold, if set, hears that the workload waits on the labelling (+1) or no longer
	// (-1): the watchdog does not count that time as the engine's silence.
	hold func(delta int)
	// health is how each detector fares in this launch, and givenUp the detectors that
	// ran past their time in it (guarded by mu).
	health  map[string]*store.DetectorRun
	givenUp map[string]bool
	// tools is the JSON of the tool sets the launch's turns offered, by their tools'
	// names (guarded by mu): a session offers the same tools every turn and sessions
	// draw theirs from one set, and encoding them for every turn was a twentieth of a
	// run's CPU.
	tools map[string]toolsText
}

// toolsText is a set of tools, copied, and their JSON.
type toolsText struct {
	tools []openai.Tool
	text  string
}

// maxToolSets bounds the tool sets a launch keeps encoded; past it they are encoded again.
const maxToolSets = 1024

// toolsJSON is the JSON of the tools a turn offered: that of an earlier turn that offered
// the same tools, so that each set is encoded once.
func (t *sessionTracker) toolsJSON(tools []openai.Tool) string {
	var key strings.Builder
	for _, tl := range tools {
		key.WriteString(tl.Function.Name)
		key.WriteByte(0)
	}
	t.mu.Lock()
	c, ok := t.tools[key.String()]
	t.mu.Unlock()
	if ok && sameTools(c.tools, tools) {
		return c.text
	}
	b, _ := json.Marshal(tools)
	// A copy that shares no bytes with the turn's, so that the comparison above holds
	// whatever becomes of the workload's slice.
	own := make([]openai.Tool, len(tools))
	for i, tl := range tools {
		own[i] = tl
		own[i].Function.Parameters = bytes.Clone(tl.Function.Parameters)
	}
	t.mu.Lock()
	if t.tools == nil || len(t.tools) >= maxToolSets {
		t.tools = map[string]toolsText{}
	}
	t.tools[key.String()] = toolsText{own, string(b)}
	t.mu.Unlock()
	return string(b)
}

// sameTools says whether a and b encode to the same JSON: every field of every tool equal,
// whatever fields openai.Tool comes to have.
func sameTools(a, b []openai.Tool) bool { return reflect.DeepEqual(a, b) }

// labelQueue is how many turns may wait for their labels before a session waits.
func labelQueue(w arms.Workload) int {
	return min(max(4*w.Concurrency, 4*goruntime.GOMAXPROCS(0), 16), 1024)
}

func (t *sessionTracker) Turn(turn workload.Turn) {
	// The engine answered: that is the engine's progress, whatever the detectors take.
	t.ended(turn.Failure, turn.Err)
	if lp, ok := t.e.opts.Progress.(LaunchProgress); ok && turn.Err == "" {
		lp.TurnDone(t.arm, t.block, turn.CompletionTokens)
	}
	t.startPool.Do(func() {
		// A plugin's time is mostly waiting on its process: more workers than cores let
		// a slow one judge several turns at once.
		n := max(goruntime.GOMAXPROCS(0), min(t.e.spec.Workload.Concurrency, 16))
		t.jobs = make(chan labelJob, labelQueue(t.e.spec.Workload))
		for range n {
			t.workers.Go(func() {
				for j := range t.jobs {
					t.label(j.turn)
					j.done.Done()
				}
			})
		}
	})
	t.mu.Lock()
	if t.pending == nil {
		t.pending = map[int]*sync.WaitGroup{}
	}
	wg := t.pending[turn.Session]
	if wg == nil {
		wg = &sync.WaitGroup{}
		t.pending[turn.Session] = wg
	}
	wg.Add(1)
	t.mu.Unlock()
	select {
	case t.jobs <- labelJob{turn, wg}:
	default:
		t.held(1)
		t.jobs <- labelJob{turn, wg}
		t.held(-1)
	}
}

func (t *sessionTracker) held(delta int) {
	if t.hold != nil {
		t.hold(delta)
	}
}

// labelJob is a turn to label and its session's count of turns pending.
type labelJob struct {
	turn workload.Turn
	done *sync.WaitGroup
}

// drain waits until every turn handed over is stored; no Turn may come after it.
func (t *sessionTracker) drain() {
	t.startPool.Do(func() {}) // a run without turns started no pool
	if t.jobs != nil {
		close(t.jobs)
		t.workers.Wait()
	}
}

// detectorRuns is how each detector fared in the launch, for the store.
func (t *sessionTracker) detectorRuns() []store.DetectorRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []store.DetectorRun
	for _, d := range t.e.detectors {
		if r := t.health[d.Name()]; r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// judging returns the detectors to ask about the next response: those that have not run
// past their time in this launch. A detector that hangs is given up once, not waited on
// for every turn; the responses it is not asked about count as skipped.
func (t *sessionTracker) judging() []plugins.Detector {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.health == nil {
		t.health = map[string]*store.DetectorRun{}
	}
	ds := make([]plugins.Detector, 0, len(t.e.detectors))
	for _, d := range t.e.detectors {
		if detectors.IsCrossArm(d.Name()) {
			continue
		}
		h := t.health[d.Name()]
		if h == nil {
			h = &store.DetectorRun{ExperimentID: t.e.id, RunID: t.runID, Detector: d.Name()}
			t.health[d.Name()] = h
		}
		if t.givenUp[d.Name()] {
			h.Skipped++
			continue
		}
		ds = append(ds, d)
	}
	return ds
}

// judged records what the detectors said of one response.
func (t *sessionTracker) judged(out []detectors.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range out {
		h := t.health[o.Detector]
		if o.Err == nil {
			h.Judged++
			continue
		}
		h.Failed++
		why := inert.Text(o.Err.Error(), detectors.MaxReasonBytes)
		if errors.Is(o.Err, context.DeadlineExceeded) && !t.givenUp[o.Detector] {
			if t.givenUp == nil {
				t.givenUp = map[string]bool{}
			}
			t.givenUp[o.Detector] = true
			why = fmt.Sprintf("ran past timeouts.detector (%v) and was not asked again in the launch: %s", t.e.spec.Timeouts.Detector, why)
			if h.Error != "" {
				why = h.Error + "; then it " + why
			}
			h.Error = why
		}
		if h.Error == "" {
			h.Error = why
		}
	}
}

// label runs the detectors on a turn and queues its row.
func (t *sessionTracker) label(turn workload.Turn) {
	out := detectors.Judge(context.Background(), t.judging(),
		plugins.Response{Completion: turn.Response, Tools: turn.Tools, ToolChoice: turn.ToolChoice}, t.e.spec.Timeouts.Detector)
	t.judged(out)
	var labels []plugins.Label
	corrupted := false
	for _, o := range out {
		if o.Err != nil {
			// The turn keeps the labels that were given; the verdict reports how many
			// responses each detector judged, failed on and skipped.
			t.e.log.Warn("detector failed", "arm", t.arm, "session", turn.Session, "turn", turn.Index, "detector", o.Detector,
				"err", inert.Text(o.Err.Error(), detectors.MaxReasonBytes))
			continue
		}
		labels = append(labels, o.Label)
		corrupted = corrupted || o.Label.Corrupted
	}
	row := store.Turn{
		ExperimentID: t.e.id, RunID: t.runID, ArmID: t.armID, Session: turn.Session, Index: turn.Index,
		Round: turn.Round, Started: turn.Started, StatusCode: turn.StatusCode, FinishReason: turn.FinishReason,
		TTFT: turn.TTFT, Latency: turn.Latency, DecodeTime: turn.DecodeTime, Deltas: turn.Deltas, PromptTokens: turn.PromptTokens,
		CompletionTokens: turn.CompletionTokens, Corrupted: corrupted, Error: turn.Err, TokenTimes: turn.DeltaTimes,
		// Views, not copies: the workload never writes a turn's bytes again, and a copy
		// of every body was most of a long run's memory.
		Request: bytesView(turn.Request), Raw: bytesView(turn.Raw),
	}
	resp := turn.Response
	if t.e.redactor.Active() {
		// The store hides secrets written whole; one streamed in pieces across events
		// is whole only in the assembled text, so the raw stream is rewritten here,
		// once the detectors have read the response as it came. A response cut short
		// may end with the start of a secret.
		row.Raw = bytesView(workload.RedactRaw(turn.Raw, t.e.redactor))
		if turn.Err != "" {
			resp = workload.RedactCutCompletion(resp, t.e.redactor)
		}
	}
	if len(resp.Choices) > 0 {
		msg := resp.Choices[0].Message
		row.Content = msg.Content
		if len(msg.ToolCalls) > 0 {
			b, _ := json.Marshal(msg.ToolCalls)
			row.ToolCalls = string(b)
		}
	}
	if b, err := json.Marshal(resp); err == nil {
		row.Response = string(b)
	}
	if len(turn.Tools) > 0 {
		row.Tools = t.toolsJSON(turn.Tools)
	}
	for _, l := range labels {
		row.Labels = append(row.Labels, store.Label{Detector: l.Detector, Corrupted: l.Corrupted, Reason: l.Reason})
	}
	if corrupted {
		t.mu.Lock()
		if first, ok := t.firstBad[turn.Session]; !ok || turn.Index < first {
			t.firstBad[turn.Session] = turn.Index
		}
		t.mu.Unlock()
	}
	t.w.Turn(row)
}

func (t *sessionTracker) SessionDone(s workload.SessionResult) {
	t.mu.Lock()
	wg := t.pending[s.Session]
	delete(t.pending, s.Session)
	t.mu.Unlock()
	if wg != nil {
		// Its turns are labelled: whether it was corrupted is known. The session's
		// slot waits on the detectors meanwhile, not on the engine.
		t.held(1)
		wg.Wait()
		t.held(-1)
	}
	t.mu.Lock()
	first, corrupted := t.firstBad[s.Session]
	t.sessions++
	if corrupted {
		t.corrupted++
	}
	// The sequential looks count what the verdict analyses: store.Analysed is the one
	// rule (a session corrupted and then lost is not analysed).
	status := sessionStatus(s.Status)
	if store.Analysed(status) {
		t.completed.sessions++
		if corrupted {
			t.completed.corrupted++
		}
	}
	t.mu.Unlock()
	row := store.Session{ExperimentID: t.e.id, RunID: t.runID, ArmID: t.armID, Index: s.Session, Block: t.block,
		Status: status, Turns: s.Turns, Corrupted: corrupted, Error: s.Err}
	if corrupted {
		row.FirstCorruptedTurn = &first
	}
	t.w.Session(row)
	if p := t.e.opts.Progress; p != nil {
		p.SessionDone(t.arm, t.block, status, corrupted)
	}
}

// sessionStatus is the stored word for how the workload says a session ended. The
// workload keeps its own words (it imports nothing of the store); each maps to one here.
func sessionStatus(w string) store.SessionStatus {
	switch w {
	case workload.SessionOK:
		return store.SessionOK
	case workload.SessionTimeout:
		return store.SessionTimeout
	case workload.SessionAborted:
		return store.SessionAborted
	}
	return store.SessionError
}

// bytesView is b as a string without a copy; b must not change afterwards.
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNilSlice(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
