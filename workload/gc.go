package workload

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The driver's collection policy while a workload runs. A collection stops every
// goroutine for a moment, and on a loaded host that moment is milliseconds: the tokens
// that arrive in it are read late, and the lateness is the driver's, not the engine's.
// So while a workload runs (Run, and every benchmark that measures the driver), the
// collector runs rarely, at RunGCPercent, and the heap is bounded instead by a memory
// limit: the live heap at the start, plus RunMemoryHeadroom for the turns in flight and
// the recorder's queue (itself bounded in bytes: store.WriterOptions.MaxQueueBytes,
// 64 MiB by default), plus RunMemoryPerSession for each concurrent session. Near the
// limit the runtime collects as often as the limit needs, so a live heap that grows
// during the run (long contexts, many sessions, large replies) would have it collect
// over and over: once a second, a limit under twice the live heap is raised to twice
// the live heap plus the headroom. Both settings are restored when the last concurrent
// run ends. A user who set GOGC or GOMEMLIMIT keeps them: the policy is then off.
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
	// stop ends the goroutine that follows the live heap; done closes when it has.
	stop, done chan struct{}
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
		gcPolicy.stop, gcPolicy.done = make(chan struct{}), make(chan struct{})
		go followLiveHeap(gcPolicy.stop, gcPolicy.done)
	} else {
		debug.SetMemoryLimit(debug.SetMemoryLimit(-1) + share)
	}
	gcPolicy.runs++
	var once sync.Once
	return func() {
		once.Do(func() {
			gcPolicy.mu.Lock()
			gcPolicy.runs--
			if gcPolicy.runs > 0 {
				debug.SetMemoryLimit(debug.SetMemoryLimit(-1) - share)
				gcPolicy.mu.Unlock()
				return
			}
			debug.SetGCPercent(gcPolicy.percent)
			debug.SetMemoryLimit(gcPolicy.limit)
			stop, done := gcPolicy.stop, gcPolicy.done
			gcPolicy.stop, gcPolicy.done = nil, nil
			gcPolicy.mu.Unlock()
			// The follower takes the lock for each step, so it is waited for outside
			// it; from now on it finds itself no longer current and changes nothing.
			close(stop)
			<-done
		})
	}
}

// followLiveHeap raises the run's memory limit once a second, when the live heap has
// grown so that it needs to (raisedLimit), until stop closes.
func followLiveHeap(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		gcPolicy.mu.Lock()
		if gcPolicy.stop == stop { // still the runs' follower
			if want := raisedLimit(debug.SetMemoryLimit(-1), liveHeap()); want > 0 {
				debug.SetMemoryLimit(want)
			}
		}
		gcPolicy.mu.Unlock()
	}
}

// raisedLimit is the memory limit a run needs when the last collection found live bytes
// live, or 0 when the current limit cur will do. A limit under twice the live heap has
// every collection free less than it marks, and the collector runs ever more often; it
// is then raised to twice the live heap plus the headroom, so that the run allocates at
// least that much again between collections. A limit above twice the live heap stays:
// it was sized for the sessions in flight, which the live heap already holds.
func raisedLimit(cur, live int64) int64 {
	if 2*live > cur {
		return 2*live + RunMemoryHeadroom
	}
	return 0
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
