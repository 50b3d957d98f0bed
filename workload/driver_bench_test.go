package workload

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReadPath measures the client's read path alone; the driver against a peer
// (vegeta) is measured by the benchmark module under bench/, which keeps the peer out of
// arbiter's own dependencies.

// renderStream is an SSE body of n content chunks, a finish chunk, a usage chunk and
// [DONE], as SGLang and vLLM send them.
func renderStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"bench","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"bench","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n")
	fmt.Fprintf(&b, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"bench","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", n, n+12)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadPath is the whole read path of one stream on one goroutine: SSE framing,
// chunk decoding and assembly of a 512-chunk body in 32 KiB reads, as readStream does it;
// events/s here is events per second per core.
func BenchmarkReadPath(b *testing.B) {
	body := renderStream(512)
	events := bytes.Count(body, []byte("\n\n"))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		var ex Exchange
		ex.Started = time.Now()
		watch := newRequestWatch(time.Hour, time.Hour, func(error) {})
		readStream(&ex, bytes.NewReader(body), nil, DefaultMaxResponseBytes, 0, nil, watch, nil, nil, nil)
		watch.stop()
		if ex.Err != nil || ex.Deltas != 512 {
			b.Fatalf("%v, %d deltas", ex.Err, ex.Deltas)
		}
	}
	// Wall time on a shared machine counts the neighbours' time too; the process's CPU
	// time (this goroutine, the garbage collector's included) is the per-core figure.
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(events*b.N)/cpu.Seconds(), "events/cpu-s")
	b.ReportMetric(2e6, "target-events/cpu-s")
}
