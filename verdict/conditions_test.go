package verdict

import (
	"math"
	"testing"

	"github.com/arbiterlab/arbiter/store"
)

// TestConditionsOfVLLM: vLLM's names are read too; requests of two engines (data
// parallel ranks) add up, their KV usage is averaged, and the prefix cache hit rate and
// throughput come from the counters' growth.
func TestConditionsOfVLLM(t *testing.T) {
	var rows []store.ServerMetricRow
	add := func(at float64, name, labels string, v float64) {
		rows = append(rows, store.ServerMetricRow{ArmID: 7, RunID: 1, ElapsedMS: at, Name: name, Labels: labels, Value: v})
	}
	for k, at := range []float64{0, 1000, 2000} {
		for _, e := range []string{`{engine="0"}`, `{engine="1"}`} {
			add(at, "vllm:num_requests_running", e, 10)
			add(at, "vllm:num_requests_waiting", e, 1)
			add(at, "vllm:kv_cache_usage_perc", e, 0.2)
			add(at, "vllm:prefix_cache_queries_total", e, float64(1000*k))
			add(at, "vllm:prefix_cache_hits_total", e, float64(250*k))
			add(at, "vllm:generation_tokens_total", e, float64(3000*k))
		}
	}
	c := conditionsOf(rows, map[int64]int{7: 0}, 1)[0]
	for name, want := range map[string]float64{CondRunning: 20, CondQueued: 2, CondTokenUsage: 0.2, CondCacheHit: 0.25, CondThroughput: 6000} {
		if got := c.Values[name]; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	if c.Scrapes != 3 || c.RunningMax != 20 {
		t.Errorf("%d scrapes, at most %v running; want 3 and 20", c.Scrapes, c.RunningMax)
	}
}

// TestConditionsDifferRule: the relative tolerance and the floors, on both sides.
func TestConditionsDifferRule(t *testing.T) {
	base := map[string]float64{CondRunning: 58, CondQueued: 0, CondTokenUsage: 0.30, CondCacheHit: 0.40, CondThroughput: 5000}
	for _, c := range []struct {
		arm  map[string]float64
		want int
	}{
		{map[string]float64{CondRunning: 45, CondQueued: 1, CondTokenUsage: 0.34, CondCacheHit: 0.48, CondThroughput: 3800}, 0}, // within 25%, or under the floors
		{map[string]float64{CondRunning: 40, CondQueued: 3, CondTokenUsage: 0.30, CondCacheHit: 0.40, CondThroughput: 5000}, 2}, // 31% fewer running; 3 queued against none
		{map[string]float64{CondRunning: 58, CondQueued: 0, CondTokenUsage: math.NaN(), CondCacheHit: 0.40, CondThroughput: 3700}, 1},
	} {
		if got := conditionsDiffer(base, c.arm); len(got) != c.want {
			t.Errorf("%v against %v: differs in %v; want %d conditions", c.arm, base, got, c.want)
		}
	}
}

// An engine's impossible readings are no readings: a counter that falls was reset and
// its increase goes on from the new value (never negative throughput), values that are
// not finite and negative gauges are left out, so that +Inf never reads as the
// baseline's own load.
func TestConditionsRejectImpossibleReadings(t *testing.T) {
	var rows []store.ServerMetricRow
	add := func(at float64, name string, v float64) {
		rows = append(rows, store.ServerMetricRow{ArmID: 7, RunID: 1, ElapsedMS: at, Name: name, Value: v})
	}
	// 1000 tokens a second; the counter is reset to 0 at 2 s and counts on.
	for k, tokens := range []float64{0, 1000, 0, 1000, 2000} {
		at := float64(1000 * k)
		add(at, "sglang:generation_tokens_total", tokens)
		add(at, "sglang:num_running_reqs", []float64{8, math.Inf(1), 8, -3, 8}[k])
		add(at, "sglang:num_queue_reqs", math.NaN())
	}
	c := conditionsOf(rows, map[int64]int{7: 0}, 1)[0]
	if got := c.Values[CondThroughput]; math.Abs(got-750) > 1e-9 {
		// 3000 tokens counted over the 4 s between the first scrape and the last.
		t.Errorf("throughput over a counter reset: %v tok/s, want 750", got)
	}
	if got := c.Values[CondRunning]; got != 8 {
		t.Errorf("running with +Inf and negative readings among them: %v, want 8", got)
	}
	if got := c.Values[CondQueued]; !math.IsNaN(got) {
		t.Errorf("a queue read only as NaN: %v, want not measured", got)
	}
}
