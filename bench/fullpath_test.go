package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/verdict"
)

// The size of one whole-path iteration: two arms of 600 tool-calling sessions x 4 rounds
// at 64 concurrent, the run whose rate fell to 0.42 of vegeta's.
var (
	fullpathSessions    = flag.Int("fullpath.sessions", 600, "sessions per arm in BenchmarkFullPathVsVegeta")
	fullpathRounds      = flag.Int("fullpath.rounds", 4, "rounds per session in BenchmarkFullPathVsVegeta")
	fullpathConcurrency = flag.Int("fullpath.concurrency", 64, "concurrent sessions per arm in BenchmarkFullPathVsVegeta")
	fullpathProfileDir  = flag.String("fullpath.profiledir", "", "where BenchmarkFullPathVsVegeta writes the CPU profile of arbiter's side (default $TMPDIR)")
	fullpathLog         = flag.Bool("fullpath.log", false, "log BenchmarkFullPathVsVegeta's arbiter runs to stderr at debug level: when each arm started and ended, the divergence pass")
	fullpathKeepDB      = flag.String("fullpath.db", "", "where BenchmarkFullPathVsVegeta's last arbiter run leaves its database, to compare what it stored (default: removed)")
)

// engineServer is a fast OpenAI-compatible engine on loopback, as the custom preset
// describes one: /health, /v1/models, /metrics, and chat completions answered at once
// with the stream body or the whole body, as the request asks. It counts the chat
// completions it answers, which is what both sides' rates are counted in.
func engineServer(tb testing.TB, stream, whole []byte, served *atomic.Int64) *httptest.Server {
	metrics := []byte("# TYPE num_requests_running gauge\nnum_requests_running 0\n# TYPE num_requests_waiting gauge\nnum_requests_waiting 0\n")
	models, _ := json.Marshal(openai.ModelList{Object: "list", Data: []openai.Model{{ID: "bench", Object: "model"}}})
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(models)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(metrics)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		req, _ := io.ReadAll(r.Body)
		body, ct := whole, "application/json"
		// A byte search, not a decode, so that the server's own cost stays small and the
		// same for both clients.
		if bytes.Contains(req, []byte(`"stream":true`)) {
			body, ct = stream, "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
		served.Add(1)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

// fullpathSpec is a whole experiment: two arms, each on its engine (a deployment that
// already runs, so that nothing is launched but the experiment's own work is all there),
// tool-calling sessions, the built-in response detectors.
func fullpathSpec(tb testing.TB, bases [2]string, stream bool) *arms.Spec {
	src := fmt.Sprintf(`version: 1
name: fullpath-bench
engine: {preset: custom, command: [bench-engine]}
runtime: {kind: external}
arms:
  control:   {env: {BENCH_ARM: "a"}, base_url: %q}
  treatment: {env: {BENCH_ARM: "b"}, base_url: %q}
workload: {kind: toolcall-agent, sessions: %d, rounds: %d, concurrency: %d, seed: 7, temperature: 0, model: bench, stream: %t}
detectors: [dsml-leak, toolcall-schema, repetition, finish-anomaly]
timeouts: {startup: 30s, request: 30s, stall: 20s}
`, bases[0], bases[1], *fullpathSessions, *fullpathRounds, *fullpathConcurrency, stream)
	s, err := arms.Parse("fullpath.yaml", []byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// arbiterFullPath runs one whole experiment into a fresh database and returns the chat
// completions the engine answered during it, how long Run took and the database, with
// the CPU profile of the run written to profile when it is not empty.
func arbiterFullPath(tb testing.TB, spec *arms.Spec, served *atomic.Int64, profile string) (int64, time.Duration, string) {
	dir := tb.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *fullpathLog {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			tb.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			tb.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	db := filepath.Join(dir, "bench.db")
	if *fullpathKeepDB != "" {
		db = *fullpathKeepDB
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(db + suffix)
		}
	}
	n0 := served.Load()
	start := time.Now()
	res, err := orchestrator.Run(context.Background(), orchestrator.Options{Spec: spec, DBPath: db,
		Logger: quiet, GPULockDir: dir, LogDir: filepath.Join(dir, "logs")})
	if err != nil {
		tb.Fatal(err)
	}
	// arbiter run ends with the verdict, its markdown and charts written beside.
	if err := writeVerdict(db, res.ExperimentID, filepath.Join(dir, "verdict.md")); err != nil {
		tb.Fatal(err)
	}
	elapsed := time.Since(start)
	n := served.Load() - n0
	for _, r := range res.Runs {
		if r.Status != store.RunDone || r.Sessions != *fullpathSessions {
			tb.Fatalf("run %+v: want done with %d sessions", r, *fullpathSessions)
		}
	}
	return n, elapsed, db
}

// writeVerdict builds experiment id's verdict from the database at path and writes it
// to out, as arbiter run does when its experiment ends.
func writeVerdict(path string, id int64, out string) error {
	db, err := store.OpenReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := verdict.Build(context.Background(), db, id)
	if err != nil {
		return err
	}
	return v.WriteFiles(out, outfile.Guard{Database: path})
}

// smallRequest is the one request vegeta sends again and again: benchRequest, as a
// client that does not keep a session's history would send it.
func smallRequest(stream bool) [][]byte {
	req := benchRequest()
	req.Model = "bench"
	req.Stream = stream
	if stream {
		req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	body, _ := json.Marshal(req)
	return [][]byte{body}
}

// storedRequests are the request bodies an arbiter run sent, as its database keeps them,
// in memory mapped outside the Go heap: tens of megabytes held on the heap would make
// the collector run less often for every side measured after it, vegeta's most of all.
func storedRequests(tb testing.TB, path string) [][]byte {
	db, err := store.OpenReadOnly(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var total int
	if err := db.Get(&total, "SELECT coalesce(sum(length(CAST(request AS BLOB))), 0) FROM turns"); err != nil {
		tb.Fatal(err)
	}
	mem, err := syscall.Mmap(-1, 0, max(total, 1), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	rows, err := db.Query("SELECT CAST(request AS BLOB) FROM turns ORDER BY rowid")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var bodies [][]byte
	for rows.Next() {
		var b sql.RawBytes
		if err := rows.Scan(&b); err != nil {
			tb.Fatal(err)
		}
		n := copy(mem, b)
		bodies = append(bodies, mem[:n:n])
		mem = mem[n:]
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return bodies
}

// vegetaCount sends n requests with vegeta at its maximum rate over workers connections,
// the bodies in turn, to the two engines in turn, and returns how long they took.
func vegetaCount(tb testing.TB, bases [2]string, bodies [][]byte, n, workers int) time.Duration {
	hdr := http.Header{"Content-Type": {"application/json"}}
	var sent atomic.Int64
	targeter := func(t *vegeta.Target) error {
		k := sent.Add(1)
		if k > int64(n) {
			return vegeta.ErrNoTargets
		}
		*t = vegeta.Target{Method: http.MethodPost, URL: bases[k%2] + "/v1/chat/completions", Body: bodies[int(k-1)%len(bodies)], Header: hdr}
		return nil
	}
	atk := vegeta.NewAttacker(vegeta.Workers(uint64(workers)), vegeta.MaxWorkers(uint64(workers)),
		vegeta.Connections(workers), vegeta.KeepAlive(true))
	start := time.Now()
	got := 0
	for r := range atk.Attack(targeter, vegeta.Rate{}, 0, "bench") {
		// A worker that finds the targets spent says so in a result of its own.
		if r.Error == vegeta.ErrNoTargets.Error() {
			continue
		}
		if r.Code != 200 {
			tb.Fatalf("vegeta: %d %s", r.Code, r.Error)
		}
		got++
	}
	elapsed := time.Since(start)
	if got != n {
		tb.Fatalf("vegeta answered %d of %d requests", got, n)
	}
	return elapsed
}

// cpuTime is the process's user and system CPU time so far: the engines' included, which
// serve both sides alike.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFullPathVsVegeta: requests per second of a whole arbiter run (orchestrator.Run:
// preflight, the database, readiness and attestation of each arm, its tool-calling
// sessions, every response labelled by the built-in detectors, turns, labels and token
// times into SQLite, metrics scrapes, the divergence pass) and of vegeta sending the same
// number of requests over as many connections to the same engines, in one run. Arms that
// already run share one slot, so arbiter drives them one after the other: at most
// -fullpath.concurrency sessions are in flight, and vegeta gets as many connections.
// Vegeta sends one small request again and again; arbiter's requests carry the tools and
// grow with the session's history, as an agent's do. The order alternates from one iteration to the next (run an even
// -benchtime, e.g. 2x), each side on a freshly collected heap. The CPU profile of the
// last iteration's arbiter side is written beside the figures (its path is logged).
// On a shared machine the wall-clock rates swing with the neighbours' load; the CPU
// time each side spends per request (the engines' time included in both) swings less,
// and cpu-ratio compares those.
func BenchmarkFullPathVsVegeta(b *testing.B) {
	for _, c := range []struct {
		name   string
		chunks int
		stream bool
		target float64
	}{
		{"nonstream-64tok", 64, false, 1.0},
		{"stream-64", 64, true, 0.8},
		{"stream-512", 512, true, 0.5},
	} {
		b.Run(c.name, func(b *testing.B) {
			var served atomic.Int64
			sb, wb := streamBody(c.chunks), renderWhole(c.chunks)
			bases := [2]string{engineServer(b, sb, wb, &served).URL, engineServer(b, sb, wb, &served).URL}
			spec := fullpathSpec(b, bases, c.stream)
			dir := *fullpathProfileDir
			if dir == "" {
				dir = os.TempDir()
			}
			profile := filepath.Join(dir, "arbiter-fullpath-"+c.name+".pprof")
			var arbN, vegN, sameN, last int64
			var arbT, vegT, sameT, arbCPU, vegCPU, sameCPU time.Duration
			small := smallRequest(c.stream)
			var sent [][]byte
			for i := range b.N {
				prof := ""
				if i == b.N-1 {
					prof = profile
				}
				arbiter := func() {
					runtime.GC()
					c0 := cpuTime()
					n, d, db := arbiterFullPath(b, spec, &served, prof)
					arbCPU += cpuTime() - c0
					arbN += n
					arbT += d
					last = n
					if sent == nil {
						sent = storedRequests(b, db)
					}
				}
				// Vegeta sends as many requests as arbiter's last run sent (before the
				// first, as many as the sessions send), over as many connections as one
				// arm's sessions hold at once: the small request again and again, then
				// the very requests arbiter's first run sent, which cost the engines
				// what arbiter's cost them.
				peer := func() {
					n := int(last)
					if n == 0 {
						n = 2 * *fullpathSessions * *fullpathRounds
					}
					runtime.GC()
					c0 := cpuTime()
					vegT += vegetaCount(b, bases, small, n, *fullpathConcurrency)
					vegCPU += cpuTime() - c0
					vegN += int64(n)
					if sent == nil {
						return
					}
					runtime.GC()
					c0 = cpuTime()
					sameT += vegetaCount(b, bases, sent, n, *fullpathConcurrency)
					sameCPU += cpuTime() - c0
					sameN += int64(n)
				}
				if i%2 == 0 {
					arbiter()
					peer()
				} else {
					peer()
					arbiter()
				}
			}
			arbRate := float64(arbN) / arbT.Seconds()
			vegRate := float64(vegN) / vegT.Seconds()
			b.ReportMetric(arbRate, "arbiter-req/s")
			b.ReportMetric(vegRate, "vegeta-req/s")
			b.ReportMetric(arbRate/vegRate, "ratio")
			arbPer := arbCPU.Seconds() * 1e6 / float64(arbN)
			vegPer := vegCPU.Seconds() * 1e6 / float64(vegN)
			b.ReportMetric(arbPer, "arbiter-cpu-µs/req")
			b.ReportMetric(vegPer, "vegeta-cpu-µs/req")
			b.ReportMetric(vegPer/arbPer, "cpu-ratio")
			if sameN > 0 {
				// The same comparison with vegeta sending arbiter's own requests: what
				// is left is arbiter's work beyond sending them and reading the answers.
				sameRate := float64(sameN) / sameT.Seconds()
				b.ReportMetric(arbRate/sameRate, "ratio-same-requests")
				b.ReportMetric(sameCPU.Seconds()*1e6/float64(sameN)/arbPer, "cpu-ratio-same-requests")
			}
			b.ReportMetric(c.target, "target-ratio")
			b.Logf("CPU profile of arbiter's side: %s", profile)
			if parts, err := cpuParts(profile); err != nil {
				b.Logf("where the CPU went: %v", err)
			} else {
				b.Logf("where arbiter's CPU went (last iteration): %s", parts)
			}
		})
	}
}

// pathParts are the parts of a run a CPU sample is counted in, by the first of them whose
// function is on its stack, looked for in this order: a detector's work and a session's
// requests are their own, whatever goroutine does them.
var pathParts = []struct{ name, fn string }{
	{"store", "store.(*Writer).loop"},
	{"labelling", "orchestrator.(*sessionTracker).label"},
	{"client", "workload.(*agentSession).run"},
	{"client", "net/http.(*persistConn)."},
	{"engines", "net/http.(*conn).serve"},
	{"collector", "runtime.gcBgMarkWorker"},
	{"collector", "runtime.bgsweep"},
	{"collector", "runtime.bgscavenge"},
}

// cpuParts reads a CPU profile and says what share of its samples each part of the path
// took: the store's writer (SQLite), the labelling (detectors and the turn's row), the
// client (sessions, requests, reading the answers), the fake engines, the collector's
// background work, and the rest (setup, the divergence pass, the scheduler).
func cpuParts(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return "", err
	}
	value := len(p.SampleType) - 1 // cpu nanoseconds, after the sample count
	by := map[string]int64{}
	var total int64
	for _, smp := range p.Sample {
		v := smp.Value[value]
		total += v
		by[samplePart(smp)] += v
	}
	if total == 0 {
		return "", fmt.Errorf("no samples in %s", path)
	}
	var out []string
	for _, name := range []string{"store", "labelling", "client", "engines", "collector", "other"} {
		out = append(out, fmt.Sprintf("%s %.0f%%", name, 100*float64(by[name])/float64(total)))
	}
	return fmt.Sprintf("%s of %v", strings.Join(out, ", "), time.Duration(total).Round(time.Millisecond)), nil
}

// samplePart is the part of the path a sample's stack belongs to.
func samplePart(smp *profile.Sample) string {
	for _, part := range pathParts {
		for _, loc := range smp.Location {
			for _, line := range loc.Line {
				if line.Function != nil && strings.Contains(line.Function.Name, part.fn) {
					return part.name
				}
			}
		}
	}
	return "other"
}
