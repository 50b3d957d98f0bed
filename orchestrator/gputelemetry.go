package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

// GPU telemetry: while a launch's workload runs, the GPUs it runs on are read about once a
// second (clocks, power, temperature, throttle reasons, memory) and stored
// (store.gpu_samples), so that a verdict shows a launch that ran hot or had its clocks
// held down: two launches of one arm on a cool and a throttled card are not the same
// conditions. The GPUs are read on this host only; a launch on a Slurm node, a remote
// Docker daemon or an external engine is recorded as unavailable, with why, as is one on a
// host without an NVIDIA driver. Telemetry never fails or slows a launch.

// DefaultGPUInterval is the time between two samples of a launch's GPUs.
const DefaultGPUInterval = time.Second

// gpuStopWait bounds how long a launch's end waits for a sample in progress: a driver
// that hangs in a read keeps its sampler, not the experiment.
const gpuStopWait = 5 * time.Second

// GPUProbe opens a host's GPUs for reading (NVML; a fake in tests).
type GPUProbe interface {
	// Open readies the devices, numbered as NVML numbers them (nil: every GPU the host
	// has). Its error says why they cannot be read: it is recorded with the launch.
	Open(devices []int) (GPUReader, error)
}

// GPUReader reads the GPUs a probe opened. One goroutine uses it at a time.
type GPUReader interface {
	// Devices are the GPUs it reads, as NVML numbers them.
	Devices() []int
	// Read samples every device once; ElapsedMS is left for the caller. A reading a
	// device does not give is left invalid; an error means nothing could be read.
	Read() ([]store.GPUSample, error)
	// Close releases the devices.
	Close()
}

// telemetryDevices says which of this host's GPUs a launch on node runs on: the
// devices of its slot, nil for every GPU the host has, or why its GPUs cannot be read
// here.
func telemetryDevices(kind arms.RuntimeKind, node arms.Node, slotGPUs string) (devices []int, why string) {
	switch kind {
	case arms.RuntimeExternal:
		return nil, "the engine runs outside arbiter (external runtime): its GPUs may not be on this host"
	case arms.RuntimeSlurm:
		return nil, "the launch ran on a Slurm node: its GPUs are not on this host"
	case arms.RuntimeDocker:
		if !dockerOnThisHost(node.Host) {
			return nil, fmt.Sprintf("the launch ran on node %s (%s): its GPUs are not on this host", node.Name, node.Host)
		}
	}
	if slotGPUs == "" {
		return nil, ""
	}
	ids, err := arms.ExpandGPUs(slotGPUs)
	if err != nil {
		return nil, fmt.Sprintf("the launch's GPUs %q: %v", slotGPUs, err)
	}
	for _, id := range ids {
		n, _ := strconv.Atoi(id) // ExpandGPUs gives numbers only
		devices = append(devices, n)
	}
	return devices, ""
}

// dockerOnThisHost says whether a Docker daemon's containers run on this machine: the
// local socket, or a TCP address of this machine. An ssh:// daemon is another host's. A
// node without a host is $DOCKER_HOST's, as for the docker runtime.
func dockerOnThisHost(host string) bool {
	if arms.IsLocalHost(host) {
		if host = os.Getenv("DOCKER_HOST"); host == "" {
			return true
		}
	}
	u, err := url.Parse(host)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "unix", "npipe":
		return true
	case "tcp", "http", "https":
		switch u.Hostname() {
		case "localhost", "127.0.0.1", "::1":
			return true
		}
	}
	return false
}

// gpuSampler reads one launch's GPUs until it is stopped.
type gpuSampler struct {
	reader   GPUReader
	interval time.Duration
	start    time.Time // the workload's start: ElapsedMS counts from it
	record   func(ctx context.Context, samples []store.GPUSample) error
	log      *slog.Logger
	// Written by run, read once run has returned.
	read, failed int
	firstErr     error
}

// run samples at once and then every interval until ctx ends.
func (g *gpuSampler) run(ctx context.Context) {
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		g.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample reads the GPUs once and records what it read.
func (g *gpuSampler) sample(ctx context.Context) {
	at := time.Since(g.start)
	samples, err := g.reader.Read()
	if err == nil && len(samples) == 0 {
		err = errors.New("no GPU answered")
	}
	if err != nil {
		if g.failed++; g.failed == 1 {
			g.firstErr = err
			g.log.Warn("could not read the launch's GPUs", "err", err)
		}
		return
	}
	for i := range samples {
		samples[i].ElapsedMS = float64(at.Microseconds()) / 1000
	}
	if err := g.record(context.WithoutCancel(ctx), samples); err != nil {
		g.log.Warn("could not record a sample of the launch's GPUs", "err", err)
		return
	}
	g.read++
}

// sampleGPUs starts reading the GPUs a launch runs on, from its workload's start, and
// records whether they can be read; the function it returns stops the sampler (at the
// latest after gpuStopWait) and records why, if no sample could be read at all. Nothing
// here fails the launch: a store that refuses telemetry is logged.
func (e *experiment) sampleGPUs(ctx context.Context, at placement, runID, armID int64, start time.Time, log *slog.Logger) (stop func()) {
	interval := e.opts.GPUInterval
	if interval < 0 {
		return func() {}
	}
	if interval == 0 {
		interval = DefaultGPUInterval
	}
	bg := context.WithoutCancel(ctx)
	status := store.GPUTelemetry{ExperimentID: e.id, RunID: runID, ArmID: armID, Status: store.GPUUnavailable}
	set := func() {
		if err := e.store.SetGPUTelemetry(bg, status); err != nil {
			log.Warn("could not record the launch's GPU telemetry", "err", err)
		}
	}
	var node arms.Node
	if nodes := e.spec.Nodes(); at.slot.NodeIndex >= 0 && at.slot.NodeIndex < len(nodes) {
		node = nodes[at.slot.NodeIndex]
	}
	devices, why := telemetryDevices(e.spec.Runtime.Kind, node, at.slot.GPUs)
	if why != "" {
		status.Reason = why
		set()
		return func() {}
	}
	probe := e.opts.GPUProbe
	if probe == nil {
		probe = nvmlProbe{}
	}
	reader, err := probe.Open(devices)
	if err != nil {
		log.Info("no GPU telemetry for this launch", "why", err)
		status.Reason = err.Error()
		set()
		return func() {}
	}
	var names []string
	for _, d := range reader.Devices() {
		names = append(names, strconv.Itoa(d))
	}
	status.Status, status.Devices, status.IntervalMS = store.GPUSampled, strings.Join(names, ","), interval.Milliseconds()
	set()
	g := &gpuSampler{reader: reader, interval: interval, start: start, log: log,
		record: func(ctx context.Context, samples []store.GPUSample) error {
			return e.store.AddGPUSamples(ctx, e.id, runID, armID, samples)
		}}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(sctx)
	}()
	return func() {
		cancel()
		t := time.NewTimer(gpuStopWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			// The reader is still in the driver: it is left to it, not closed under it.
			log.Warn("a read of the launch's GPUs did not return; left behind", "waited", gpuStopWait)
			return
		}
		reader.Close()
		if g.read == 0 && g.failed > 0 {
			status.Status, status.Reason = store.GPUUnavailable, fmt.Sprintf("no sample could be read: %v", g.firstErr)
			set()
		}
	}
}
