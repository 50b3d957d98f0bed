package workload

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The driver's collection policy while a workload runs. A collection stops every
// goroutine for a moment, and on a loaded host that moment is milliseconds: the tokens
// that arrive in it are read late, and the lateness is the driver's, not the engine's.
// So while a workload runs (Run, and every benchmark that measures the driver), the
// collector runs rarely, at RunGCPercent, and the heap is bounded instead by a memory
// limit: the live heap at the start, plus RunMemoryHeadroom for the turns in flight and
// the recorder's queue (itself bounded in bytes: store.WriterOptions.MaxQueueBytes,
// 64 MiB by default), plus RunMemoryPerSession for each concurrent session. Near the
// limit the runtime collects as often as the limit needs. Both settings are restored
// when the last concurrent run ends. A user who set GOGC or GOMEMLIMIT keeps them: the
// policy is then off.
const (
	RunGCPercent        = 400
	RunMemoryHeadroom   = 256 << 20
	RunMemoryPerSession = 256 << 10
)

var gcPolicy struct {
	mu      sync.Mutex
	runs    int
	percent int
	limit   int64
}

// userGCSettings reports whether the environment sets the collector's policy.
func userGCSettings() bool {
	return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""
}

// ApplyRunGCPolicy sets the run's collection policy for concurrency sessions and returns
// the function that restores the settings before it. Runs may overlap: the first sets
// the policy, later ones raise the limit by their sessions' share, and the last to end
// restores what was there before.
func ApplyRunGCPolicy(concurrency int) (restore func()) {
	if userGCSettings() {
		return func() {}
	}
	share := int64(max(concurrency, 1)) * RunMemoryPerSession
	gcPolicy.mu.Lock()
	defer gcPolicy.mu.Unlock()
	if gcPolicy.runs == 0 {
		gcPolicy.limit = debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(liveHeap() + RunMemoryHeadroom + share)
		gcPolicy.percent = debug.SetGCPercent(RunGCPercent)
	} else {
		debug.SetMemoryLimit(debug.SetMemoryLimit(-1) + share)
	}
	gcPolicy.runs++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcPolicy.mu.Lock()
			defer gcPolicy.mu.Unlock()
			gcPolicy.runs--
			if gcPolicy.runs == 0 {
				debug.SetGCPercent(gcPolicy.percent)
				debug.SetMemoryLimit(gcPolicy.limit)
				return
			}
			debug.SetMemoryLimit(debug.SetMemoryLimit(-1) - share)
		})
	}
}

// liveHeap is the heap the last collection found live, read without stopping the world.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}
