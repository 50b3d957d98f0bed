// Package kernels loads arbiter's GPU testbed (libarbiter_kernels.so, built by
// kernels/build.sh) through purego, without cgo, so every arbiter binary can carry the
// loader and only machines with a GPU need the library.
//
// The testbed is a small sparse-attention indexer path: a paged device pool of index-K,
// a pinned host backup, restores on a non-blocking load stream, a score + top-512 selection
// on the compute stream, and a gate (cudaStreamWaitEvent) that can be switched off. Each
// decode step reports, per request, whether its selection differed from the selection on
// canonical bytes (corrupted), how many page reads saw a restore that had not landed
// (stale), and the Jaccard overlap of the two selections.
package kernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// LibName is the file name of the testbed library.
const LibName = "libarbiter_kernels.so"

// EnvLib names the environment variable that points at the library; it is searched first.
const EnvLib = "ARBITER_KERNELS_LIB"

// abiVersion must equal ARB_ABI_VERSION in arbiter_kernels.h.
const abiVersion = 2

// ErrNoLibrary means no library file was found on the search path.
var ErrNoLibrary = errors.New("kernels: " + LibName + " not found")

// ErrNoDevice means the library loaded but CUDA reports no usable device.
var ErrNoDevice = errors.New("kernels: no CUDA device")

// Dtype is how index-K is stored in the pool and the host backup.
type Dtype int32

const (
	// FP8 stores 128 e4m3 bytes and one fp32 scale per token: 132 B/token.
	FP8 Dtype = 0
	// BF16 stores 128 bf16 values per token: 256 B/token.
	BF16 Dtype = 1
)

// String returns "fp8" or "bf16".
func (d Dtype) String() string {
	if d == BF16 {
		return "bf16"
	}
	return "fp8"
}

// TokenBytes is the index-K size of one token in this dtype.
func (d Dtype) TokenBytes() int {
	if d == BF16 {
		return 256
	}
	return 132
}

// TokensPerPage is the pool's page size in tokens.
const TokensPerPage = 64

// Config describes a testbed. The zero value is valid: fp8, no HiCache, no gate, and the
// defaults written on each field.
type Config struct {
	Seed    uint64 // content and query seed
	Dtype   Dtype
	HiCache bool // pages that left the pool are restored from the pinned host backup
	Gate    bool // the compute stream waits on each layer's restore event before reading
	// PoolPages is the device pool's capacity in pages of 64 tokens (default 2048).
	PoolPages int
	// ContextLen is the longest context a request may have, in tokens (default 4096, max 32768).
	ContextLen int
	Heads      int // indexer heads (default 4)
	Layers     int // indexer layers (default 4)
	// MaxSessions is how many sessions the host backup holds at once (default 128).
	MaxSessions int
	// MaxBatch is how many requests one GPU pass takes; larger steps take several (default 64).
	MaxBatch int
	// LayerWorkUS bounds the other work of a layer that runs ahead of its indexer read,
	// drawn uniformly from [0, LayerWorkUS] microseconds (default 40; negative: none).
	LayerWorkUS int
	Device      int // CUDA device ordinal
}

// Request is one running request in a decode step.
type Request struct {
	Session uint64 // any stable id of the request's session
	// ContextTokens is the request's context length; 0 or more than Config.ContextLen
	// means Config.ContextLen.
	ContextTokens int
}

// Result is one request's outcome of one decode step.
type Result struct {
	Corrupted       bool    // the top-k selection differed from the one on canonical bytes
	StalePages      int     // page reads, over all layers, that saw a restore not yet landed
	RestoredPages   int     // pages restored from the host backup in this step
	RecomputedPages int     // pages computed on the compute stream in this step
	Jaccard         float64 // smallest over layers of the two selections' Jaccard overlap
}

// Stats are a testbed's totals since it was created.
type Stats struct {
	Steps           uint64
	RequestSteps    uint64
	CorruptedSteps  uint64
	StalePages      uint64
	RestoredPages   uint64
	RecomputedPages uint64
	Evictions       uint64
	Passes          uint64
	JaccardSum      float64
}

// PassTiming is what Testbed.BenchPass measured.
type PassTiming struct {
	MedianMS    float64 // median time of score + top-k over all requests, one layer
	ScoreMS     float64 // median time of the score kernel alone
	SelectMS    float64 // median time of the top-k selection alone
	IndexKBytes float64 // index-K bytes the pass reads
	TotalBytes  float64 // index-K + scores written and read back + selections written
}

// The c* types mirror arbiter_kernels.h field for field.
type cConfig struct {
	Seed                                        uint64
	Dtype, HiCache, Gate, PoolPages, ContextLen int32
	Heads, Layers, MaxSessions, MaxBatch        int32
	LayerWorkUS, Device, Reserved               int32
}

type cResult struct {
	Corrupted, Stale, Restored, Recomputed int32
	Jaccard                                float32
	Reserved                               int32
}

type cStats struct {
	Steps, RequestSteps, CorruptedSteps, StalePages, RestoredPages, RecomputedPages, Evictions, Passes uint64
	JaccardSum                                                                                         float64
}

type cPassTiming struct {
	MedianMS, ScoreMS, SelectMS, IndexKBytes, TotalBytes float64
}

// Lib is a loaded testbed library.
type Lib struct {
	path string

	abiVersion  func() int32
	lastError   func() string
	deviceCount func() int32
	deviceName  func(int32, *byte, int32) int32
	create      func(*cConfig) uintptr
	destroy     func(uintptr)
	step        func(uintptr, *uint64, *int32, int32, *cResult) int32
	getStats    func(uintptr, *cStats) int32
	benchCopy   func(int64, int32, *float64) int32
	benchPass   func(uintptr, int32, int32, *cPassTiming) int32
}

// Candidates lists where Open looks when given no path, in order: $ARBITER_KERNELS_LIB,
// next to the executable, kernels/build/ under the working directory.
func Candidates() []string {
	var c []string
	if p := os.Getenv(EnvLib); p != "" {
		c = append(c, p)
	}
	if exe, err := os.Executable(); err == nil {
		c = append(c, filepath.Join(filepath.Dir(exe), LibName))
	}
	return append(c, filepath.Join("kernels", "build", LibName))
}

// Open loads the library at path, or the first of Candidates that exists when path is "",
// and checks that CUDA sees a device. The errors wrap ErrNoLibrary or ErrNoDevice.
func Open(path string) (*Lib, error) {
	if Static {
		return nil, fmt.Errorf("kernels: %w", dlopenRefused)
	}
	if path == "" {
		tried := Candidates()
		for _, c := range tried {
			if _, err := os.Stat(c); err == nil {
				path = c
				break
			}
		}
		if path == "" {
			return nil, fmt.Errorf("%w (looked in %s); build it with kernels/build.sh on a machine with nvcc, or set %s",
				ErrNoLibrary, strings.Join(tried, ", "), EnvLib)
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoLibrary, path, err)
	}
	h, err := dlopen(path)
	if err != nil {
		return nil, fmt.Errorf("kernels: load %s: %w", path, err)
	}
	l := &Lib{path: path}
	syms := []struct {
		name string
		fn   any
	}{
		{"arb_abi_version", &l.abiVersion},
		{"arb_last_error", &l.lastError},
		{"arb_device_count", &l.deviceCount},
		{"arb_device_name", &l.deviceName},
		{"arb_testbed_create", &l.create},
		{"arb_testbed_destroy", &l.destroy},
		{"arb_step", &l.step},
		{"arb_get_stats", &l.getStats},
		{"arb_bench_copy", &l.benchCopy},
		{"arb_bench_pass", &l.benchPass},
	}
	for _, s := range syms {
		if err := bind(h, s.name, s.fn); err != nil {
			return nil, fmt.Errorf("kernels: %s lacks %s (built from another version?): %w", path, s.name, err)
		}
	}
	if v := l.abiVersion(); v != abiVersion {
		return nil, fmt.Errorf("kernels: %s has ABI version %d, this arbiter needs %d: rebuild it", path, v, abiVersion)
	}
	n, err := l.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: cudaGetDeviceCount returned 0 (library %s)", ErrNoDevice, path)
	}
	return l, nil
}

// Path is the file the library was loaded from.
func (l *Lib) Path() string { return l.path }

// call runs f on a locked OS thread, because the library keeps its last error per thread.
func (l *Lib) call(what string, f func() int32) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if rc := f(); rc != 0 {
		return fmt.Errorf("kernels: %s: %s", what, l.lastError())
	}
	return nil
}

// DeviceCount returns how many CUDA devices the library sees.
func (l *Lib) DeviceCount() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := l.deviceCount()
	if n < 0 {
		return 0, fmt.Errorf("kernels: device count: %s", l.lastError())
	}
	return int(n), nil
}

// DeviceName returns the name CUDA gives device dev, e.g. "NVIDIA H200".
func (l *Lib) DeviceName(dev int) (string, error) {
	buf := make([]byte, 256)
	if err := l.call("device name", func() int32 { return l.deviceName(int32(dev), &buf[0], int32(len(buf))) }); err != nil {
		return "", err
	}
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), nil
}

// BenchCopy measures device-to-device copy bandwidth in TB/s (bytes read plus written)
// over a buffer of the given size, median of iters copies.
func (l *Lib) BenchCopy(bytes int64, iters int) (float64, error) {
	var tbps float64
	err := l.call("bench copy", func() int32 { return l.benchCopy(bytes, int32(iters), &tbps) })
	return tbps, err
}

// Testbed is one GPU testbed. Its methods are safe for concurrent use; steps run one at a time.
type Testbed struct {
	lib *Lib
	cfg Config

	mu sync.Mutex
	h  uintptr
}

// NewTestbed allocates a testbed on the GPU.
func (l *Lib) NewTestbed(cfg Config) (*Testbed, error) {
	c := cConfig{
		Seed: cfg.Seed, Dtype: int32(cfg.Dtype), HiCache: b2i(cfg.HiCache), Gate: b2i(cfg.Gate),
		PoolPages: int32(cfg.PoolPages), ContextLen: int32(cfg.ContextLen), Heads: int32(cfg.Heads),
		Layers: int32(cfg.Layers), MaxSessions: int32(cfg.MaxSessions), MaxBatch: int32(cfg.MaxBatch),
		LayerWorkUS: int32(cfg.LayerWorkUS), Device: int32(cfg.Device),
	}
	var h uintptr
	err := l.call("create testbed", func() int32 {
		h = l.create(&c)
		if h == 0 {
			return -1
		}
		return 0
	})
	if err != nil {
		return nil, err
	}
	return &Testbed{lib: l, cfg: cfg, h: h}, nil
}

// Config returns the configuration the testbed was created with.
func (t *Testbed) Config() Config { return t.cfg }

// Step runs one decode step over the running requests and returns each one's outcome.
func (t *Testbed) Step(reqs []Request) ([]Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	ids := make([]uint64, len(reqs))
	ctx := make([]int32, len(reqs))
	for i, r := range reqs {
		ids[i] = r.Session
		ctx[i] = int32(r.ContextTokens)
	}
	out := make([]cResult, len(reqs))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == 0 {
		return nil, errors.New("kernels: step on a closed testbed")
	}
	if err := t.lib.call("step", func() int32 {
		return t.lib.step(t.h, &ids[0], &ctx[0], int32(len(reqs)), &out[0])
	}); err != nil {
		return nil, err
	}
	res := make([]Result, len(reqs))
	for i, o := range out {
		res[i] = Result{
			Corrupted: o.Corrupted != 0, StalePages: int(o.Stale), RestoredPages: int(o.Restored),
			RecomputedPages: int(o.Recomputed), Jaccard: float64(o.Jaccard),
		}
	}
	return res, nil
}

// Stats returns the testbed's totals.
func (t *Testbed) Stats() (Stats, error) {
	var s cStats
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == 0 {
		return Stats{}, errors.New("kernels: stats of a closed testbed")
	}
	err := t.lib.call("stats", func() int32 { return t.lib.getStats(t.h, &s) })
	return Stats(s), err
}

// BenchPass makes requests contexts of ContextLen tokens resident and times the score +
// top-k pass over them, median of iters runs.
func (t *Testbed) BenchPass(requests, iters int) (PassTiming, error) {
	var p cPassTiming
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == 0 {
		return PassTiming{}, errors.New("kernels: bench on a closed testbed")
	}
	err := t.lib.call("bench pass", func() int32 { return t.lib.benchPass(t.h, int32(requests), int32(iters), &p) })
	return PassTiming(p), err
}

// Close frees the testbed's GPU and pinned memory. Closing twice is harmless.
func (t *Testbed) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h != 0 {
		t.lib.destroy(t.h)
		t.h = 0
	}
	return nil
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// Layout checks at compile time that the mirrors have the C sizes.
var (
	_ [56 - unsafe.Sizeof(cConfig{})]struct{}
	_ [unsafe.Sizeof(cConfig{}) - 56]struct{}
	_ [24 - unsafe.Sizeof(cResult{})]struct{}
	_ [unsafe.Sizeof(cResult{}) - 24]struct{}
	_ [72 - unsafe.Sizeof(cStats{})]struct{}
	_ [unsafe.Sizeof(cStats{}) - 72]struct{}
	_ [40 - unsafe.Sizeof(cPassTiming{})]struct{}
	_ [unsafe.Sizeof(cPassTiming{}) - 40]struct{}
)
