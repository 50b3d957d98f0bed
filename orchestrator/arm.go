package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/enginehttp"
	"github.com/arbiterlab/arbiter/internal/inert"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// runArm launches arm ai for block b on its slot, waits at the wave's start barrier
// until every arm of the wave is ready (or out), drives the workload against it and
// records it. An error means the experiment cannot go on (the store failed); an arm that
// crashes or wedges is data, recorded in the run's status, and the experiment continues.
func (e *experiment) runArm(ctx context.Context, ai, b int, at placement, bar *barrierMember) (RunResult, error) {
	// Every way out of here before the workload counts as arriving at the barrier, so
	// that the wave's other arms never wait for an arm that is out.
	defer bar.arrive()
	arm := e.arms[ai]
	preset := e.spec.Preset()
	rr := RunResult{Arm: arm.Name, Block: b, Node: at.slot.Node, Slot: at.slot.Index, GPUs: at.slot.GPUs, Wave: at.wave}
	log := e.log.With("arm", arm.Name, "block", b, "slot", at.slot.String())
	name := fmt.Sprintf("exp%d-%s-b%d", e.id, arm.Name, b)
	if _, rerun := e.prior[runKey{ai, b}]; rerun {
		name += "-rerun" // its own log, beside the one of the launch it replaces
	}
	if at.replaces != 0 {
		name += fmt.Sprintf("-w%d", at.wave) // beside the log of the launch its node lost
	}
	run := store.Run{ExperimentID: e.id, ArmID: e.armIDs[ai], Block: b, Runtime: runtimeName(e.spec),
		Status: store.RunStarting, Started: time.Now(), LogPath: filepath.Join(e.logDir, name+".log"),
		Node: at.slot.Node, GPUs: at.slot.GPUs, Slot: at.slot.Index, Wave: at.wave}
	var err error
	if run.ID, err = e.store.StartRun(ctx, run); err != nil {
		return rr, err
	}
	rr.RunID = run.ID
	if p, ok := e.prior[runKey{ai, b}]; ok && at.replaces == 0 {
		// A launch that did not finish before a resume: this run replaces it.
		if err := e.store.Supersede(ctx, p.id, run.ID); err != nil {
			return rr, err
		}
	}
	if at.replaces != 0 {
		// A launch lost with its node: this run, on a live slot, replaces it.
		if err := e.store.Supersede(ctx, at.replaces, run.ID); err != nil {
			return rr, err
		}
	}
	// From here on the run's row is always closed, also after an interrupt.
	bg := context.WithoutCancel(ctx)
	finish := func(status store.RunStatus, errText string) (RunResult, error) {
		run.Status, run.Error, run.Ended = status, errText, time.Now()
		rr.Status, rr.Err, rr.Instance = status, errText, run.Instance
		if status == store.RunLost && e.spec.Runtime.Kind != arms.RuntimeSlurm {
			// A Slurm job lost (cancelled, its node failed) takes no node out: the
			// cluster places the next job on a node that works.
			e.nodeLost(at.slot.Node, errText)
		}
		if p := e.opts.Progress; p != nil {
			p.RunEnded(arm.Name, b, status)
		}
		log.Info("run ended", "status", status, "sessions", rr.Sessions, "corrupted", rr.Corrupted, "err", errText)
		return rr, e.store.UpdateRun(bg, run)
	}

	lp, _ := e.opts.Progress.(LaunchProgress)
	if lp != nil {
		lp.EngineStarting(LaunchInfo{Arm: arm.Name, Block: b, Position: e.positions[runKey{ai, b}], Arms: len(e.arms),
			Blocks: max(e.spec.Blocks, 1), Sessions: e.spec.Workload.Sessions, LogPath: run.LogPath})
	}
	log.Info("launching", "command", fmt.Sprint(arms.RedactArgs(arm.Command)))
	env := e.envs[ai]
	if storeEnv, dir := e.modelStore(name); dir != "" {
		env = append(slices.Clone(env), storeEnv...)
		defer os.RemoveAll(dir) // after stop: the engine no longer writes there
	}
	inst, err := e.runtimes[at.slot.Node].Start(ctx, runtime.Launch{Name: name, ExperimentID: e.id, RunID: run.ID,
		DatabaseID: e.dbID, Command: arm.Command, Env: env, Listen: preset.Listen, LogPath: run.LogPath,
		Redact: e.redact, RedactCut: e.redactor.RedactCut, Image: e.spec.Engine.Image, GPUs: at.slot.GPUs, BaseURL: arm.BaseURL})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return finish(store.RunInterrupted, "")
		case errors.Is(err, runtime.ErrNodeLost):
			return finish(store.RunLost, fmt.Sprintf("node %s: %v", at.slot.Node, err))
		}
		if lp != nil {
			lp.EngineFailed(arm.Name, b, err.Error(), "")
		}
		return finish(store.RunFailed, err.Error())
	}
	run.Endpoint, run.Instance = inst.Endpoint(), runtime.InstanceID(inst)
	if p, ok := inst.(runtime.Placed); ok {
		// A scheduler chose the node and the GPUs; the run records its choice.
		pl := p.Placement()
		run.Node, run.GPUs = pl.Node, pl.GPUs
		rr.Node, rr.GPUs = pl.Node, pl.GPUs
		log.Info("placed", "job", pl.Job, "node", pl.Node, "gpus", pl.GPUs, "cuda_visible_devices", pl.Visible,
			"queued", pl.Started.Sub(pl.Submitted).Round(time.Second), "endpoint", run.Endpoint)
	}
	recorded := e.recordEngineProcess(bg, inst, run.ID, log)
	stop := func() {
		stopCtx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		inst.Stop(stopCtx)
		x := inst.Exit()
		run.LogTail = x.LogTail
		code := x.Code
		run.ExitCode = &code
		if recorded {
			if err := e.store.EngineProcessEnded(bg, run.ID, time.Now()); err != nil {
				log.Warn("could not record that the engine ended", "err", err)
			}
		}
	}

	model, err := e.waitReady(ctx, inst, preset)
	if err != nil {
		crashed := ctx.Err() == nil && endedByItself(ctx, inst)
		stop()
		why := err.Error()
		if crashed {
			why = fmt.Sprintf("%v before it was ready (%s)", runtime.ErrCrashed, inst.Exit())
		}
		if lp != nil && ctx.Err() == nil {
			lp.EngineFailed(arm.Name, b, why, run.LogTail)
		}
		switch {
		case ctx.Err() != nil:
			return finish(store.RunInterrupted, "")
		case crashed && inst.Exit().Lost != "":
			return finish(store.RunLost, fmt.Sprintf("node %s: %s before the engine was ready", at.slot.Node, inst.Exit().Lost))
		case crashed:
			return finish(store.RunCrashed, why)
		}
		return finish(store.RunFailed, why)
	}
	run.Status, run.Ready = store.RunReady, time.Now()
	run.ServerInfo = e.serverInfo(ctx, inst.Endpoint(), preset)
	if err := e.attestRun(ctx, inst, preset, ai, run, log); err != nil {
		if errors.Is(err, errEndedUnderCheck) {
			stop()
			if lost := inst.Exit().Lost; lost != "" {
				return finish(store.RunLost, fmt.Sprintf("node %s: %s before the workload", at.slot.Node, lost))
			}
			return finish(store.RunCrashed, fmt.Sprintf("%v before the workload (%s)", runtime.ErrCrashed, inst.Exit()))
		}
		stop()
		status := store.RunFailed
		if errors.Is(err, ErrPinsNotHeld) || errors.Is(err, ErrPinsUncheckable) {
			status = store.RunRefused
		}
		if lp != nil {
			lp.EngineRefused(arm.Name, b, err.Error())
		}
		finish(status, err.Error())
		return rr, fmt.Errorf("arm %s: %w", arm.Name, err)
	}
	if err := e.store.UpdateRun(ctx, run); err != nil {
		stop()
		return rr, err
	}
	log.Info("ready", "endpoint", inst.Endpoint(), "startup", run.Ready.Sub(run.Started).Round(time.Millisecond))
	if lp != nil {
		lp.EngineReady(arm.Name, b)
	}

	// The start barrier: the workload starts on every arm of the wave at once, once all
	// of them are ready, so that the arms meet the same conditions at the same time.
	bar.arrive()
	bar.wait()
	if ctx.Err() != nil {
		stop()
		return finish(store.RunInterrupted, "")
	}
	if why := e.refused.Load(); why != nil {
		stop()
		return finish(store.RunFailed, "not driven: "+*why)
	}
	run.WorkloadStarted = time.Now()
	stopGPUs := e.sampleGPUs(ctx, at, run.ID, e.armIDs[ai], run.WorkloadStarted, log)
	var completed armCounts
	status, errText, werr := e.drive(ctx, inst, preset, arm, ai, b, run.ID, model, &rr, &completed)
	run.WorkloadEnded = time.Now()
	stopGPUs()
	rr.WorkloadStarted, rr.WorkloadEnded = run.WorkloadStarted, run.WorkloadEnded
	stop()
	if lost := inst.Exit().Lost; lost != "" && status != store.RunDone && status != store.RunInterrupted {
		status, errText = store.RunLost, fmt.Sprintf("node %s: %s", at.slot.Node, lost)
	}
	if status != store.RunLost {
		// A lost launch is run again elsewhere and left out of the analysis; its
		// sessions must not count twice in the sequential looks.
		e.counts[ai].sessions += completed.sessions
		e.counts[ai].corrupted += completed.corrupted
	}
	if werr != nil {
		finish(store.RunFailed, werr.Error())
		return rr, werr
	}
	return finish(status, errText)
}

// endedByItself says whether the engine has ended without arbiter stopping it (crashed,
// or lost with its node). An engine whose end its runtime polls for (runtime.Refresher)
// is looked at now: a failure to reach it may come before the poll has seen it go.
func endedByItself(ctx context.Context, inst runtime.Instance) bool {
	if r, ok := inst.(runtime.Refresher); ok {
		r.Refresh(ctx)
	}
	select {
	case <-inst.Done():
		return !inst.Exit().Stopped
	default:
		return false
	}
}

// drive runs the workload against a ready engine under the liveness watchdog.
func (e *experiment) drive(ctx context.Context, inst runtime.Instance, preset arms.Preset, arm arms.Arm, ai, b int,
	runID int64, model string, rr *RunResult, completed *armCounts) (status store.RunStatus, errText string, err error) {
	w := e.store.NewWriter(store.WriterOptions{})
	dog := newWatchdog(e.spec.Timeouts, e.spec.Workload)
	tracker := &sessionTracker{e: e, w: w, runID: runID, armID: e.armIDs[ai], arm: arm.Name, block: b,
		firstBad: map[int]int{}, ended: dog.turn, hold: dog.hold}

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		e.watch(wctx, inst, dog, preset, cancel)
	}()

	ws := e.spec.Workload
	if p := e.opts.Progress; p != nil {
		p.RunStarted(arm.Name, b, ws.Sessions)
	}
	cfg := e.workloadConfig(model, arm.Name, b)
	cfg.OnToken = dog.token
	finishScrape, phaseEnded := e.scrapeServerMetrics(wctx, inst.Endpoint(), preset, runID, e.armIDs[ai])
	tracker.phaseEnded = phaseEnded
	runErr := workload.Run(wctx, cfg, inst.Endpoint(), tracker)
	dog.freeze() // the engine's part is over; labelling its last turns is the detectors'
	tracker.drain()
	if err := e.store.RecordDetectorRuns(context.WithoutCancel(ctx), tracker.detectorRuns()); err != nil {
		e.log.Warn("could not record how the detectors fared", "err", err)
	}
	finishScrape()
	if context.Cause(wctx) == nil && endedByItself(ctx, inst) {
		// An engine whose end is polled for may have ended under the workload's last
		// turns without being seen yet: endedByItself looks now, before the turns are judged.
		cancel(crashedDuringWorkload(inst))
	}
	if runErr == nil && context.Cause(wctx) == nil {
		// Every session ended by itself; whether they ended well is the watchdog's to say.
		if c := e.judgeEnd(ctx, inst, dog, preset); c != nil {
			cancel(c)
		}
	}
	cancel(nil)
	<-watchDone
	if cerr := w.Close(); cerr != nil {
		return store.RunFailed, "", cerr
	}
	rr.Sessions, rr.Corrupted = tracker.sessions, tracker.corrupted
	*completed = tracker.completed

	cause := context.Cause(wctx)
	var stopped *stopCause
	switch {
	case ctx.Err() != nil:
		return store.RunInterrupted, "", nil
	case errors.Is(cause, runtime.ErrCrashed):
		return store.RunCrashed, cause.Error(), nil
	case errors.As(cause, &stopped):
		return stopped.status, cause.Error(), nil
	case errors.Is(runErr, workload.ErrNoLiveness):
		// The workload's own liveness check (a canary after an abort cascade) failed.
		return store.RunWedged, runErr.Error(), nil
	case runErr != nil:
		return store.RunFailed, runErr.Error(), nil
	}
	return store.RunDone, "", nil
}

// waitReady polls the engine's health endpoint until it answers 200, then proves that a
// new request is actually scheduled with one real generation. It returns the model name to
// use.
func (e *experiment) waitReady(ctx context.Context, inst runtime.Instance, preset arms.Preset) (string, error) {
	timeout := e.spec.Timeouts.Startup
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The poll starts fast (an engine that is up within milliseconds costs the arm
	// milliseconds, not a whole interval) and backs off to ProbeInterval, so that a
	// 20-minute startup is not probed thousands of times a minute.
	maxInterval := e.opts.ProbeInterval
	if maxInterval <= 0 {
		maxInterval = 250 * time.Millisecond
	}
	interval := min(2*time.Millisecond, maxInterval)
	probeTimeout := e.opts.ProbeTimeout
	if probeTimeout <= 0 {
		probeTimeout = 30 * time.Second
	}
	client := enginehttp.Client(probeTimeout)
	base := inst.Endpoint()
	healthPath := preset.HealthPath
	if healthPath == "" {
		healthPath = "/health"
	}
	tick := time.NewTimer(interval)
	defer tick.Stop()
	for {
		if ok := probeOK(ctx, client, http.MethodGet, base+healthPath, nil); ok {
			break
		}
		tick.Reset(interval)
		interval = min(interval*5/4, maxInterval)
		select {
		case <-inst.Done():
			return "", fmt.Errorf("%w before it was ready (%s)", runtime.ErrCrashed, inst.Exit())
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return "", fmt.Errorf("%w (%s; health %s never answered 200)", ErrNotReady, timeout, healthPath)
			}
			return "", ctx.Err()
		case <-tick.C:
		}
	}
	// What follows the polls, the model's creation and the readiness generation, is
	// bounded by the startup timeout alone: an engine answers them only once the model
	// is written or loaded, which a probe's timeout says nothing about.
	notReady := func(what string, err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w (%s; %s)", ErrNotReady, timeout, what)
		}
		return err
	}
	if err := e.prepareModel(ctx, base, preset); err != nil {
		return "", notReady("the model's creation did not finish", err)
	}
	model := e.spec.Workload.Model
	if model == "" {
		var err error
		if model, err = firstModel(ctx, client, base); err != nil {
			return "", err
		}
	}
	// One real generation through the scheduler: health passing does not prove that.
	body, _ := json.Marshal(openai.ChatRequest{Model: model, MaxTokens: 1,
		Messages: []openai.Message{{Role: "user", Content: "arbiter readiness probe"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	// An answer begun and never finished runs out the startup deadline too.
	const unanswered = "the readiness generation was not answered"
	resp, err := enginehttp.Client(0).Do(req)
	if err != nil {
		return "", notReady(unanswered, fmt.Errorf("readiness generation: %w", err))
	}
	defer resp.Body.Close()
	var cc openai.ChatCompletion
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", notReady(unanswered, fmt.Errorf("readiness generation: HTTP %d: %s", resp.StatusCode, inert.Text(string(bytes.TrimSpace(b)), 512)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProbeAnswer)).Decode(&cc); err != nil || len(cc.Choices) == 0 {
		return "", notReady(unanswered, fmt.Errorf("readiness generation: no completion in the response (%v)", err))
	}
	return model, nil
}

// maxProbeAnswer bounds what readiness reads of an engine's answer (a one-token
// generation, the model list): an engine that answers without end is not read to its end.
const maxProbeAnswer = 4 << 20

func probeOK(ctx context.Context, client *http.Client, method, url string, body []byte) bool {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func firstModel(ctx context.Context, client *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	var ml openai.ModelList
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProbeAnswer)).Decode(&ml); err != nil || len(ml.Data) == 0 {
		return "", fmt.Errorf("list models: the engine lists no model at /v1/models")
	}
	return ml.Data[0].ID, nil
}

// serverInfo fetches the engine's resolved configuration, when its preset serves one,
// for the run's record.
func (e *experiment) serverInfo(ctx context.Context, base string, preset arms.Preset) string {
	if preset.ServerInfoPath == "" {
		return ""
	}
	_, b, err := fetchServerInfo(ctx, base, preset)
	if err != nil {
		e.log.Warn("server info unavailable", "err", err)
		return ""
	}
	if !json.Valid(b) {
		return ""
	}
	return string(b)
}

func runtimeName(s *arms.Spec) string {
	if s.Runtime.Kind == "" {
		return string(arms.RuntimeProcess)
	}
	return string(s.Runtime.Kind)
}
