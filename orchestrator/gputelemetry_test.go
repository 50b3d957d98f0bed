package orchestrator

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/store"
)

func TestTelemetryReadsTheLaunchsGPUsOnThisHostOnly(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	for _, c := range []struct {
		kind    arms.RuntimeKind
		host    string
		gpus    string
		devices []int
		why     string
	}{
		{kind: arms.RuntimeProcess, gpus: "2,3", devices: []int{2, 3}},
		{kind: arms.RuntimeProcess, gpus: "4-5", devices: []int{4, 5}},
		{kind: arms.RuntimeProcess}, // nothing pinned: every GPU the host has
		{kind: arms.RuntimeDocker, host: "local", gpus: "0", devices: []int{0}},
		{kind: arms.RuntimeDocker, host: "unix:///run/docker.sock", gpus: "1", devices: []int{1}},
		{kind: arms.RuntimeDocker, host: "tcp://127.0.0.1:2375", gpus: "1", devices: []int{1}},
		{kind: arms.RuntimeDocker, host: "tcp://node-b:2376", gpus: "0", why: "ran on node n (tcp://node-b:2376): its GPUs are not on this host"},
		{kind: arms.RuntimeDocker, host: "ssh://ops@node-a", gpus: "0", why: "ran on node n (ssh://ops@node-a): its GPUs are not on this host"},
		{kind: arms.RuntimeSlurm, gpus: "0", why: "Slurm node: its GPUs are not on this host"},
		{kind: arms.RuntimeExternal, why: "external runtime"},
	} {
		devices, why := telemetryDevices(c.kind, arms.Node{Name: "n", Host: c.host}, c.gpus)
		if !slices.Equal(devices, c.devices) || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s %q GPUs %q: devices %v, why %q; want %v, %q", c.kind, c.host, c.gpus, devices, why, c.devices, c.why)
		}
	}
	// A node without a host is $DOCKER_HOST's.
	t.Setenv("DOCKER_HOST", "ssh://ops@node-c")
	if _, why := telemetryDevices(arms.RuntimeDocker, arms.Node{Name: "local"}, "0"); why == "" {
		t.Errorf("a launch on $DOCKER_HOST=ssh://ops@node-c had its GPUs read here")
	}
}

// nvmlOnThisHost says whether the driver's library loads here, as NVML would load it.
func nvmlOnThisHost() bool {
	h, err := purego.Dlopen("libnvidia-ml.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return false
	}
	purego.Dlclose(h)
	return true
}

// TestNVMLWithoutADriverSaysSo opens the real NVML on a host without the driver's
// library: the reason is what the verdict will print.
func TestNVMLWithoutADriverSaysSo(t *testing.T) {
	if nvmlOnThisHost() {
		t.Skip("this host has libnvidia-ml.so.1: the path without a driver cannot be taken here")
	}
	r, err := nvmlProbe{}.Open(nil)
	if err == nil {
		r.Close()
		t.Fatal("NVML opened without libnvidia-ml.so.1")
	}
	if want := "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// telemetryRows reads every launch's telemetry status and its samples.
func telemetryRows(t *testing.T, db string, exp int64) ([]store.GPUTelemetry, []store.GPUSampleRow) {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tel, err := store.GPUTelemetries(context.Background(), ro, exp)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := store.GPUSamples(context.Background(), ro, exp)
	if err != nil {
		t.Fatal(err)
	}
	return tel, samples
}

// TestLaunchesWithoutNVMLRecordTelemetryUnavailable runs an experiment on this host
// with NVML as arbiter uses it: without a driver every launch says why it has no
// telemetry, and the experiment is done all the same.
func TestLaunchesWithoutNVMLRecordTelemetryUnavailable(t *testing.T) {
	t.Parallel()
	if nvmlOnThisHost() {
		t.Skip("this host has libnvidia-ml.so.1: the path without a driver cannot be taken here")
	}
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil || res.Status != "done" {
		t.Fatalf("status %q, err %v", res.Status, err)
	}
	tel, samples := telemetryRows(t, db, res.ExperimentID)
	if len(tel) != 2 || len(samples) != 0 {
		t.Fatalf("telemetry %+v, %d samples; want two launches unavailable, no sample", tel, len(samples))
	}
	for _, g := range tel {
		if g.Status != store.GPUUnavailable || g.Reason != "libnvidia-ml.so.1 not found (no NVIDIA driver on this host)" {
			t.Errorf("launch %d: %+v", g.RunID, g)
		}
	}
}

// fakeGPUs is a GPUProbe of a host's two H100s that read back a counter, or fail every read.
type fakeGPUs struct {
	mu     sync.Mutex
	opened [][]int
	reads  int
	fail   error
}

func (f *fakeGPUs) Open(devices []int) (GPUReader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, devices)
	if devices == nil {
		devices = []int{0, 1} // every GPU of the host
	}
	return &fakeReader{f: f, devices: devices}, nil
}

type fakeReader struct {
	f       *fakeGPUs
	devices []int
}

func (r *fakeReader) Devices() []int { return r.devices }
func (r *fakeReader) Close()         {}
func (r *fakeReader) Read() ([]store.GPUSample, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.f.fail != nil {
		return nil, r.f.fail
	}
	r.f.reads++
	var out []store.GPUSample
	for _, d := range r.devices {
		out = append(out, store.GPUSample{GPU: d, UUID: "GPU-fake", Name: "NVIDIA H100 80GB HBM3",
			SMClockMHz: sql.NullInt64{Int64: 1980, Valid: true}, TempC: sql.NullInt64{Int64: int64(40 + r.f.reads), Valid: true},
			ThrottleMask: sql.NullInt64{Int64: 4, Valid: true}})
	}
	return out, nil
}

// TestLaunchGPUsAreSampledWhileTheWorkloadRuns: each launch's pinned GPUs are opened and
// read from the workload's start, and the samples land under the launch.
func TestLaunchGPUsAreSampledWhileTheWorkloadRuns(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	gpus := &fakeGPUs{}
	spec := testSpec(t, "runtime: {kind: process, nodes: [{name: local, gpus: \"2,3\"}]}\n")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), GPULockDir: t.TempDir(),
		GPUProbe: gpus, GPUInterval: time.Millisecond,
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil || res.Status != "done" {
		t.Fatalf("status %q, err %v", res.Status, err)
	}
	for _, d := range gpus.opened {
		if !slices.Equal(d, []int{2, 3}) {
			t.Errorf("opened GPUs %v, want the slot's 2,3", d)
		}
	}
	tel, samples := telemetryRows(t, db, res.ExperimentID)
	if len(tel) != 2 {
		t.Fatalf("telemetry %+v, want both launches", tel)
	}
	perRun := map[int64]int{}
	for _, s := range samples {
		perRun[s.RunID]++
		if s.SMClockMHz.Int64 != 1980 || s.ElapsedMS < 0 || (s.GPU != 2 && s.GPU != 3) {
			t.Errorf("sample %+v", s)
		}
	}
	for _, g := range tel {
		if g.Status != store.GPUSampled || g.Devices != "2,3" || g.IntervalMS != 1 || g.Reason != "" {
			t.Errorf("launch %d: %+v", g.RunID, g)
		}
		// The first sample is taken as the workload starts, whatever its length.
		if perRun[g.RunID] < 2 || perRun[g.RunID]%2 != 0 {
			t.Errorf("launch %d: %d samples, want both GPUs at each sample", g.RunID, perRun[g.RunID])
		}
	}
}

// TestGPUsThatCannotBeReadLeaveTheLaunchUnavailable: a launch whose every read failed
// says why, and runs to its end.
func TestGPUsThatCannotBeReadLeaveTheLaunchUnavailable(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	gpus := &fakeGPUs{fail: errors.New("NVML GPU 0 power: ERROR_GPU_IS_LOST")}
	res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		GPUProbe: gpus, GPUInterval: time.Millisecond,
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil || res.Status != "done" {
		t.Fatalf("status %q, err %v", res.Status, err)
	}
	for _, d := range gpus.opened {
		if d != nil {
			t.Errorf("opened GPUs %v; a launch that pins none is read on every GPU of the host (nil)", d)
		}
	}
	tel, samples := telemetryRows(t, db, res.ExperimentID)
	if len(tel) != 2 || len(samples) != 0 {
		t.Fatalf("telemetry %+v, %d samples", tel, len(samples))
	}
	for _, g := range tel {
		if g.Status != store.GPUUnavailable || g.Reason != "no sample could be read: NVML GPU 0 power: ERROR_GPU_IS_LOST" {
			t.Errorf("launch %d: %+v", g.RunID, g)
		}
	}
}

// TestInterruptStopsTheGPUSampler: Ctrl-C in the middle of a workload stops the launch's
// sampler with it; what it read is kept, and nothing reads the GPUs after Run returns.
func TestInterruptStopsTheGPUSampler(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gpus := &fakeGPUs{}
	interruptAt := func(n int64, e *engine, r *http.Request) bool {
		if n == 5 {
			cancel()
		}
		return false
	}
	res, err := Run(ctx, Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(), GPUProbe: gpus,
		GPUInterval: time.Millisecond, Runtime: engines(func(string) *engine { return newEngine(t, interruptAt) })})
	if !errors.Is(err, context.Canceled) || res.Status != "interrupted" {
		t.Fatalf("status %q, err %v; want interrupted", res.Status, err)
	}
	gpus.mu.Lock()
	reads := gpus.reads
	gpus.mu.Unlock()
	// The launch cut short is left out of the verdict's analysis (store.InAnalysis), so
	// its rows are counted here as stored.
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var status []string
	var samples int
	if err := ro.Select(&status, `SELECT status FROM gpu_telemetry WHERE experiment_id = ?`, res.ExperimentID); err != nil {
		t.Fatal(err)
	}
	if err := ro.Get(&samples, `SELECT count(*) FROM gpu_samples WHERE experiment_id = ?`, res.ExperimentID); err != nil {
		t.Fatal(err)
	}
	if len(status) != 1 || status[0] != string(store.GPUSampled) || samples != 2*reads || reads == 0 {
		t.Errorf("telemetry %v, %d samples stored of %d reads", status, samples, reads)
	}
	// The sampler ended with the launch: a read after Run returned would count here.
	gpus.mu.Lock()
	defer gpus.mu.Unlock()
	if gpus.reads != reads {
		t.Errorf("the GPUs were read %d times after Run returned", gpus.reads-reads)
	}
}
