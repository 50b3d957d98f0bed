package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/workload"
)

// engine is an in-test OpenAI-compatible server standing in for one launched arm: it
// answers health and streams a short plain answer, and onChat lets a test make it crash,
// wedge or observe load at a chosen request.
type engine struct {
	srv    *httptest.Server
	done   chan struct{}
	once   sync.Once
	chats  atomic.Int64
	onChat func(n int64, e *engine, r *http.Request) (handled bool)
	health atomic.Bool
	// hungPolls is how many health polls, from the first, are held unanswered until the
	// client leaves.
	hungPolls atomic.Int64
	// mux serves the engine's paths; a test adds an engine's own API to it.
	mux *http.ServeMux
	// trickle makes a handled request stream deltas of trickleText (empty by default)
	// until the client leaves or the engine stops, instead of returning at once.
	trickle     bool
	trickleText string
	// halfAnswer makes a handled request get its headers and the start of a completion,
	// then nothing more until the client leaves.
	halfAnswer bool
	// failChat, when set, answers every chat request with HTTP 500 and this body.
	failChat string
	// leak makes every streamed answer carry DSML tool-call markup in content.
	leak bool
	// serverInfoAt, when set, is where /get_server_info redirects.
	serverInfoAt string
	stopped      atomic.Bool
	// lost, when set, is what Exit says when the engine ends on its own: its runtime
	// lost track of it (a node gone), not a crash.
	lost string
	// dieAt, when set, is a path whose first request ends the engine: its connection
	// drops, as when its node goes down under it.
	dieAt atomic.Pointer[string]
}

func newEngine(t *testing.T, onChat func(n int64, e *engine, r *http.Request) bool) *engine {
	e := &engine{done: make(chan struct{}), onChat: onChat}
	e.health.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if e.hungPolls.Add(-1) >= 0 {
			<-r.Context().Done()
			return
		}
		if !e.health.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"fake","object":"model"}]}`)
	})
	mux.HandleFunc("GET /get_server_info", func(w http.ResponseWriter, r *http.Request) {
		if e.serverInfoAt != "" {
			http.Redirect(w, r, e.serverInfoAt, http.StatusTemporaryRedirect)
			return
		}
		io.WriteString(w, `{"engine":"fake"}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		// A crashed engine answers nothing more.
		select {
		case <-e.done:
			panic(http.ErrAbortHandler)
		default:
		}
		// Reading the body first lets the server notice a client that hangs up.
		body, _ := io.ReadAll(r.Body)
		n := e.chats.Add(1)
		if e.failChat != "" {
			http.Error(w, e.failChat, http.StatusInternalServerError)
			return
		}
		if e.onChat != nil && e.onChat(n, e, r) {
			if e.trickle {
				e.streamForever(w, r)
			}
			if e.halfAnswer {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[`)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}
			return
		}
		var req struct {
			Stream bool `json:"stream"`
		}
		json.Unmarshal(body, &req)
		if !req.Stream {
			io.WriteString(w, `{"id":"x","object":"chat.completion","model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"x","object":"chat.completion.chunk","model":"fake","choices":[{"index":0,"delta":{"role":"assistant","content":"` + e.firstWords() + `"}, "finish_reason":null}]}`,
			`{"id":"x","object":"chat.completion.chunk","model":"fake","choices":[{"index":0,"delta":{"content":"done."}, "finish_reason":"stop"}]}`,
			`{"id":"x","object":"chat.completion.chunk","model":"fake","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	e.mux = mux
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if at := e.dieAt.Load(); at != nil && *at == r.URL.Path {
			e.crash()
			panic(http.ErrAbortHandler)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *engine) streamForever(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","model":"fake","choices":[{"index":0,"delta":{"content":"`+e.trickleText+`"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-e.done:
			return
		case <-tick.C:
		}
	}
}

func (e *engine) firstWords() string {
	if e.leak {
		return `<｜DSML｜tool_calls><｜DSML｜invoke name=\"get_weather\"><｜DSML｜parameter name=\"city\" string=\"true\">Par`
	}
	return "All "
}

// crash makes the engine exit on its own.
func (e *engine) crash() { e.once.Do(func() { close(e.done) }) }

func (e *engine) Endpoint() string      { return e.srv.URL }
func (e *engine) Done() <-chan struct{} { return e.done }
func (e *engine) Exit() runtime.Exit {
	select {
	case <-e.done:
		if e.stopped.Load() {
			return runtime.Exit{Stopped: true}
		}
		if e.lost != "" {
			return runtime.Exit{Code: -1, Lost: e.lost}
		}
		return runtime.Exit{Code: 139, LogTail: "segfault in decode"}
	default:
		return runtime.Exit{}
	}
}

func (e *engine) Stop(context.Context) error {
	e.once.Do(func() { e.stopped.Store(true); close(e.done) })
	return nil
}

// runtimeFunc adapts a function to the Runtime interface.
type runtimeFunc func(ctx context.Context, l runtime.Launch) (runtime.Instance, error)

func (f runtimeFunc) Start(ctx context.Context, l runtime.Launch) (runtime.Instance, error) {
	return f(ctx, l)
}

func testSpec(t *testing.T, extra string) *arms.Spec {
	t.Helper()
	src := `version: 1
name: orchestrator-test
engine: {preset: refserve}
arms:
  control:   {env: {BF16_INDEX_K: "0"}}
  treatment: {env: {BF16_INDEX_K: "1"}}
workload: {kind: toolcall-agent, sessions: 6, rounds: 2, concurrency: 3, seed: 1}
detectors: [dsml-leak]
timeouts: {startup: 5s, request: 5s, stall: 2s}
`
	// extra may replace a line of its own (detectors, timeouts) instead of adding one.
	for _, key := range []string{"detectors:", "timeouts:"} {
		if strings.Contains(extra, "\n"+key) || strings.HasPrefix(extra, key) {
			lines := strings.Split(src, "\n")
			lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, key) })
			src = strings.Join(lines, "\n")
		}
	}
	src += extra
	s, err := arms.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// engines launches a fresh engine per arm, built by make(arm name).
func engines(make func(arm string) *engine) runtime.Runtime {
	return runtimeFunc(func(ctx context.Context, l runtime.Launch) (runtime.Instance, error) {
		arm := strings.Split(l.Name, "-")[1]
		return make(arm), nil
	})
}

// wantNoData checks that an experiment in which an arm completed no session failed: there
// is nothing to compare, and a CI gate must not pass on it. What was recorded stays.
func wantNoData(t *testing.T, res Result, err error) {
	t.Helper()
	if !errors.Is(err, ErrNoData) || res.Status != "failed" {
		t.Fatalf("err = %v, status %q; want ErrNoData and failed", err, res.Status)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func runStatuses(t *testing.T, db string, exp int64) map[string]store.RunStatus {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var rows []struct {
		Arm    string          `db:"name"`
		Status store.RunStatus `db:"status"`
	}
	ro.Select(&rows, `SELECT a.name, r.status FROM runs r JOIN arms a ON a.id = r.arm_id WHERE r.experiment_id = ?`, exp)
	out := map[string]store.RunStatus{}
	for _, r := range rows {
		out[r.Arm] = r.Status
	}
	return out
}

func TestHealthyArmsRecordEverySession(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "done" || len(res.Runs) != 2 {
		t.Fatalf("result = %+v", res)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunDone || r.Sessions != 6 {
			t.Errorf("run %+v", r)
		}
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var turns, labels int
	ro.Get(&turns, "SELECT count(*) FROM turns")
	ro.Get(&labels, "SELECT count(*) FROM labels")
	if turns != 2*6*2 || labels != turns {
		t.Errorf("turns = %d, labels = %d; want %d each", turns, labels, 2*6*2)
	}
}

func TestCrashDuringWorkloadIsRecordedAndTheNextArmRuns(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	// The first request after the readiness probe kills the engine, so no session of
	// the arm completes.
	crashAt := func(n int64, e *engine, r *http.Request) bool {
		if n >= 2 {
			e.crash()
			// A dying engine drops the connection.
			panic(http.ErrAbortHandler)
		}
		return false
	}
	res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			if arm == "treatment" {
				return newEngine(t, crashAt)
			}
			return newEngine(t, nil)
		})})
	wantNoData(t, res, err)
	st := runStatuses(t, db, res.ExperimentID)
	if st["treatment"] != store.RunCrashed || st["control"] != store.RunDone {
		t.Fatalf("run statuses = %v", st)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var errText, tail string
	ro.Get(&errText, "SELECT error FROM runs WHERE status = 'crashed'")
	ro.Get(&tail, "SELECT log_tail FROM runs WHERE status = 'crashed'")
	if !strings.Contains(errText, "exit code 139") || !strings.Contains(tail, "segfault") {
		t.Errorf("crash recorded as %q with tail %q", errText, tail)
	}
	var lost int
	ro.Get(&lost, "SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'treatment' AND s.status != 'ok'")
	if lost == 0 {
		t.Error("no treatment session was recorded as lost after the crash")
	}
}

func TestWedgedEngineIsCaughtByProgressNotHealth(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	// After the readiness probe the engine keeps every new stream open, trickling empty
	// deltas that never finish a turn, while /health keeps saying OK. Per-request stall
	// timers see traffic; only the progress watchdog sees that nothing completes.
	trickle := func(n int64, e *engine, r *http.Request) bool { return n > 1 }
	spec := testSpec(t, "")
	// A silence shorter than a request's deadline: the stall decides before the request
	// timeout could.
	spec.Timeouts.Request, spec.Timeouts.Stall = time.Second, 300*time.Millisecond
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			if arm == "control" {
				e := newEngine(t, trickle)
				e.trickle = true
				return e
			}
			return newEngine(t, nil)
		})})
	wantNoData(t, res, err)
	st := runStatuses(t, db, res.ExperimentID)
	if st["control"] != store.RunWedged || st["treatment"] != store.RunDone {
		t.Fatalf("run statuses = %v, want control wedged and treatment done", st)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var okSessions, lost int
	ro.Get(&okSessions, "SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'control' AND s.status = 'ok'")
	ro.Get(&lost, "SELECT count(*) FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE a.name = 'control' AND s.status != 'ok'")
	if okSessions != 0 || lost != 6 {
		t.Errorf("control on a wedged engine: %d sessions ok, %d lost", okSessions, lost)
	}
	var errText string
	ro.Get(&errText, "SELECT error FROM runs WHERE status = 'wedged'")
	if !strings.Contains(errText, "completes no turn") {
		t.Errorf("wedged run error = %q", errText)
	}
}

func TestInterruptKeepsWhatWasRecorded(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interruptAt := func(n int64, e *engine, r *http.Request) bool {
		if n == 5 {
			cancel()
		}
		return false
	}
	res, err := Run(ctx, Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(string) *engine { return newEngine(t, interruptAt) })})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res.Status != "interrupted" || res.ExperimentID == 0 {
		t.Fatalf("result = %+v", res)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var status string
	var turns, runs int
	ro.Get(&status, "SELECT status FROM experiments")
	ro.Get(&turns, "SELECT count(*) FROM turns")
	ro.Get(&runs, "SELECT count(*) FROM runs WHERE status = 'interrupted'")
	if status != "interrupted" || turns < 4 || runs != 1 {
		t.Errorf("after interrupt: experiment %q, %d turns, %d interrupted runs", status, turns, runs)
	}
	// The lease goes with the recorded end: a resume may start at once.
	var leases int
	ro.Get(&leases, "SELECT count(*) FROM leases")
	if leases != 0 {
		t.Errorf("%d leases held after the interrupt, want none", leases)
	}
}

func TestEngineThatNeverBecomesReadyFailsItsRun(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	spec.Timeouts.Startup = 300e6 // 300ms
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), ProbeInterval: 20e6,
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.health.Store(arm != "control")
			return e
		})})
	wantNoData(t, res, err)
	st := runStatuses(t, db, res.ExperimentID)
	if st["control"] != store.RunFailed || st["treatment"] != store.RunDone {
		t.Fatalf("statuses = %v", st)
	}
	for _, r := range res.Runs {
		if r.Arm == "control" && !strings.Contains(r.Err, "not ready") {
			t.Errorf("control error = %q", r.Err)
		}
	}
}

// The readiness generation may take as long as the startup timeout allows, longer than
// one probe may: an engine that loads its model on the first request answers it late.
// One that never answers it fails its run as not ready, naming the generation.
func TestReadinessGenerationIsBoundedByTheStartupTimeout(t *testing.T) {
	t.Parallel()
	const probeTimeout = 50 * time.Millisecond
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	spec.Timeouts.Startup = 20 * time.Second
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), ProbeTimeout: probeTimeout,
		Runtime: engines(func(arm string) *engine {
			return newEngine(t, func(n int64, e *engine, r *http.Request) bool {
				if n == 1 { // the readiness generation: the model loads
					time.Sleep(6 * probeTimeout)
				}
				return false
			})
		})})
	if err != nil {
		t.Fatal(err)
	}
	if st := runStatuses(t, db, res.ExperimentID); st["control"] != store.RunDone || st["treatment"] != store.RunDone {
		t.Fatalf("a readiness generation slower than a probe failed its run: %v %+v", st, res.Runs)
	}

	db = filepath.Join(t.TempDir(), "b.db")
	spec = testSpec(t, "")
	spec.Timeouts.Startup = 300 * time.Millisecond
	res, err = Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, func(n int64, e *engine, r *http.Request) bool {
				if n != 1 {
					return false
				}
				if !e.halfAnswer {
					<-r.Context().Done() // never answered
				}
				return true
			})
			e.halfAnswer = arm == "treatment" // begun, never finished
			return e
		})})
	if err == nil || len(res.Runs) != 2 {
		t.Fatalf("engines that never answer readiness: %v, %+v", err, res.Runs)
	}
	for _, r := range res.Runs {
		if r.Status != store.RunFailed || !strings.Contains(r.Err, "not ready within the startup timeout (300ms; the readiness generation was not answered)") {
			t.Errorf("%s: %s, %q", r.Arm, r.Status, r.Err)
		}
	}
}

// A health poll is bounded by the probe timeout, not by the startup timeout: an engine
// that holds its first polls unanswered (a server up before its handlers are) is polled
// again, and is ready as soon as a poll is answered.
func TestAHealthPollNeverAnsweredIsMadeAgain(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	spec.Timeouts.Startup = 10 * time.Second
	var held []*engine
	var mu sync.Mutex
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), ProbeTimeout: 50 * time.Millisecond,
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.hungPolls.Store(2)
			mu.Lock()
			held = append(held, e)
			mu.Unlock()
			return e
		})})
	if err != nil {
		t.Fatal(err)
	}
	if st := runStatuses(t, db, res.ExperimentID); st["control"] != store.RunDone || st["treatment"] != store.RunDone {
		t.Fatalf("engines whose first health polls hung: %v %+v", st, res.Runs)
	}
	for _, e := range held {
		if n := e.hungPolls.Load(); n >= 0 {
			t.Errorf("the engine was ready before its held polls were given up (%d left)", n+1)
		}
	}
}

// An engine that keeps models gets the spec's model created before the readiness
// generation; the creation may take as long as the startup timeout allows, and one that
// never finishes fails the run as not ready, naming the creation.
func TestModelCreationIsBoundedByTheStartupTimeout(t *testing.T) {
	t.Parallel()
	const startup = 2 * time.Second
	spec, err := arms.Parse("ollama.yaml", []byte(`version: 1
name: model-creation
engine:
  preset: ollama
  model: {name: tiny, random: {layers: 1, width: 64, seed: 1}, context: 256}
arms:
  control:   {env: {OLLAMA_NUM_PARALLEL: "1"}}
  treatment: {env: {OLLAMA_NUM_PARALLEL: "2"}}
workload: {kind: toolcall-agent, sessions: 4, rounds: 1, concurrency: 2, seed: 1}
timeouts: {startup: 2s, request: 5s, stall: 2s}
`))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	uploaded := map[string]string{} // arm → the digest of the bytes it was sent
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), LogDir: t.TempDir(),
		ProbeTimeout: 50 * time.Millisecond,
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "Ollama is running") })
			e.mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"version":"0.6.5"}`) })
			e.mux.HandleFunc("HEAD /api/blobs/{digest}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
			e.mux.HandleFunc("POST /api/blobs/{digest}", func(w http.ResponseWriter, r *http.Request) {
				h := sha256.New()
				io.Copy(h, r.Body)
				digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
				mu.Lock()
				uploaded[arm] = digest
				mu.Unlock()
				if r.PathValue("digest") != digest {
					http.Error(w, `{"error":"digest mismatch"}`, http.StatusBadRequest)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			e.mux.HandleFunc("POST /api/create", func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body) // so that the server notices a client that hangs up
				if arm == "control" {
					<-r.Context().Done() // the creation never finishes
					return
				}
				io.WriteString(w, `{"status":"success"}`)
			})
			return e
		})})
	if err == nil || len(res.Runs) != 2 {
		t.Fatalf("an engine whose model is never created: %v, %+v", err, res.Runs)
	}
	for _, r := range res.Runs {
		switch {
		case r.Arm == "treatment" && r.Status != store.RunDone:
			t.Errorf("treatment, its model created at once: %s, %q", r.Status, r.Err)
		case r.Arm == "control" && (r.Status != store.RunFailed ||
			!strings.Contains(r.Err, fmt.Sprintf("not ready within the startup timeout (%s; the model's creation did not finish)", startup))):
			t.Errorf("control: %s, %q", r.Status, r.Err)
		}
	}
	if uploaded["control"] == "" || uploaded["control"] != uploaded["treatment"] {
		t.Errorf("the arms were sent different models: %v", uploaded)
	}
}

func TestPlanIsASeededPermutationPerBlock(t *testing.T) {
	t.Parallel()
	a, b := plan(3, 4, 42), plan(3, 4, 42)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed, different plans")
	}
	distinct := map[string]bool{}
	for _, order := range a {
		seen := map[int]bool{}
		for _, i := range order {
			seen[i] = true
		}
		if len(seen) != 3 {
			t.Fatalf("block order %v is not a permutation", order)
		}
		distinct[fmt.Sprint(order)] = true
	}
	// Balanced: over every cycle of as many blocks as arms, each arm takes each position
	// (slot, wave) exactly once.
	for _, c := range []struct{ arms, blocks int }{{2, 4}, {3, 6}, {4, 8}, {3, 7}} {
		p := plan(c.arms, c.blocks, 7)
		for start := 0; start+c.arms <= c.blocks; start += c.arms {
			pos := map[[2]int]int{}
			for _, order := range p[start : start+c.arms] {
				for j, arm := range order {
					pos[[2]int{arm, j}]++
				}
			}
			if len(pos) != c.arms*c.arms {
				t.Errorf("%d arms, blocks %d to %d: %v is not balanced", c.arms, start, start+c.arms-1, p[start:start+c.arms])
			}
		}
	}
	if len(distinct) < 2 {
		t.Errorf("4 blocks all ran arms in the same order %v", a)
	}
}

func TestSequentialDesignStopsSchedulingOnceTheLaunchesReject(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	// The treatment engine garbles every reply into leaked DSML markup; control is clean.
	// With 8 looks the share 0.03 is spread over the looks that can reach their part:
	// looks 6-8 at 0.01 each (5 launches per arm would need 0.03/4 = 0.0075 against
	// 2/252), so scheduling stops after block 6 (12 launches), however clear the sessions
	// were from the first block on. Every launch must complete its sessions for that
	// count, so the timeouts leave room for a loaded machine.
	spec := testSpec(t, "analysis: {baseline: control, sequential: {looks: 8}}\ntimeouts: {startup: 60s, request: 60s, stall: 30s}\n")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.leak = arm == "treatment"
			return e
		})})
	if err != nil {
		t.Fatal(err)
	}
	if res.StoppedEarly == "" || len(res.Runs) != 12 {
		var runs []string
		for _, r := range res.Runs {
			runs = append(runs, fmt.Sprintf("block %d %s: %s, %d sessions %s", r.Block, r.Arm, r.Status, r.Sessions, r.Err))
		}
		t.Fatalf("stopped early %q after %d runs, want a stop after 6 blocks (12 runs); runs:\n%s", res.StoppedEarly, len(res.Runs), strings.Join(runs, "\n"))
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	e, err := store.FindExperiment(context.Background(), ro, fmt.Sprint(res.ExperimentID))
	if err != nil {
		t.Fatal(err)
	}
	if !e.StoppedEarly.Valid || !strings.Contains(e.StoppedEarly.String, "treatment against control: launch p = 0.00216 ≤ 0.01 over 6 and 6 launches") || e.ParsedDesign().Looks != 8 {
		t.Errorf("stored stop = %v, design %+v", e.StoppedEarly, e.ParsedDesign())
	}
}

func TestResumeKeepsFinishedLaunchesAndRerunsTheRest(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "blocks: 2\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first attempt is interrupted during its second launch.
	launches := 0
	interruptSecond := func(arm string) *engine {
		launches++
		if launches == 2 {
			return newEngine(t, func(n int64, e *engine, r *http.Request) bool {
				if n == 3 {
					cancel()
				}
				return false
			})
		}
		return newEngine(t, nil)
	}
	first, err := Run(ctx, Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: engines(interruptSecond)})
	if !errors.Is(err, context.Canceled) || first.Status != "interrupted" {
		t.Fatalf("first attempt: %v, %+v", err, first)
	}

	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: first.ExperimentID,
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExperimentID != first.ExperimentID || res.Status != "done" || len(res.Runs) != 4 {
		t.Fatalf("resume = %+v", res)
	}
	kept := 0
	for _, r := range res.Runs {
		if r.Kept {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("%d launches kept, want the one that finished", kept)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var superseded, active int
	ro.Get(&superseded, "SELECT count(*) FROM runs WHERE superseded_by IS NOT NULL")
	ro.Get(&active, "SELECT count(*) FROM runs WHERE superseded_by IS NULL AND status = 'done'")
	if superseded != 1 || active != 4 {
		t.Errorf("runs: %d superseded, %d done and active; want 1 and 4", superseded, active)
	}
	outs, err := store.Sessions(context.Background(), ro, res.ExperimentID)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 4*6 {
		t.Errorf("sessions in the analysis = %d, want %d (the interrupted launch's left out)", len(outs), 4*6)
	}
	if _, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: first.ExperimentID,
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })}); !errors.Is(err, ErrNothingToResume) {
		t.Errorf("resuming a done experiment: %v", err)
	}
}

func TestLogsAreRedacted(t *testing.T) {
	const secret = "hf_LoggedSecret_7788"
	t.Setenv("ARBITER_TEST_TOKEN", secret)
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	spec.Engine.Secrets = []string{"ARBITER_TEST_TOKEN"}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	// The engine quotes the token in its error, as a careless engine might; the
	// readiness failure that carries it is logged.
	_, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: logger,
		Runtime: engines(func(arm string) *engine {
			e := newEngine(t, nil)
			e.failChat = "upstream refused token " + secret
			return e
		})})
	if err == nil || strings.Contains(err.Error(), secret) || !errors.Is(err, ErrNoData) {
		t.Errorf("returned error %v: want ErrNoData, without the secret", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "upstream refused token [redacted]") {
		t.Fatalf("the engine's error was not logged redacted; logs:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the secret reached the log:\n%s", logs.String())
	}
}

// writerFunc adapts a function to io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestStoredArmsHideCredentialsByName(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	spec.Engine.Env = map[string]string{"API_TOKEN": "k9x"} // too short for value matching
	for i := range spec.Arms {
		spec.Arms[i].Pins.Args = append(spec.Arms[i].Pins.Args, "--api-key", "sk-live-abcdef")
	}
	_, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(),
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	if err != nil {
		t.Fatal(err)
	}
	ro, _ := store.OpenReadOnly(db)
	defer ro.Close()
	var rows []struct {
		Pins    string `db:"pins"`
		Command string `db:"command"`
		Env     string `db:"env"`
	}
	if err := ro.Select(&rows, "SELECT pins, command, env FROM arms"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		all := r.Pins + r.Command + r.Env
		if strings.Contains(all, "k9x") || strings.Contains(all, "sk-live-abcdef") || !strings.Contains(all, "[redacted]") {
			t.Errorf("stored arm shows a credential: %s", all)
		}
	}
}

// blockFirstLaunch is a runtime whose first Start waits until release is closed (after
// closing started): the experiment is then recorded and its lease held, and nothing else
// happens until the test says so.
func blockFirstLaunch(t *testing.T) (rt runtime.Runtime, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	rt = runtimeFunc(func(ctx context.Context, l runtime.Launch) (runtime.Instance, error) {
		once.Do(func() {
			close(started)
			<-release
		})
		return newEngine(t, nil), nil
	})
	return rt, started, release
}

func TestAnExperimentRunsOnceAtATime(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	spec := testSpec(t, "")
	rt, started, release := blockFirstLaunch(t)
	type outcome struct {
		res Result
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: rt})
		first <- outcome{res, err}
	}()
	<-started

	// While the first arbiter runs experiment 1, a resume of it is refused and records
	// nothing.
	_, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Resume: 1,
		Runtime: engines(func(string) *engine { return newEngine(t, nil) })})
	var held *store.LeaseHeldError
	if !errors.As(err, &held) || held.Of != "experiment" || held.ID != 1 || held.Lease.PID != os.Getpid() {
		t.Fatalf("resume during the run: %v; want a LeaseHeldError naming this process", err)
	}
	close(release)
	o := <-first
	if o.err != nil || o.res.Status != store.ExperimentDone {
		t.Fatalf("first run: %+v, %v", o.res, o.err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var runs, leases int
	ro.Get(&runs, "SELECT count(*) FROM runs")
	ro.Get(&leases, "SELECT count(*) FROM leases")
	if runs != 2 || leases != 0 {
		t.Errorf("%d runs (want one per arm) and %d leases left (want the finished run's released)", runs, leases)
	}
}

func TestLosingTheLeaseStopsTheExperimentWithoutFinishingIt(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	rt, started, release := blockFirstLaunch(t)
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(), Runtime: rt,
			LeaseHeartbeat: 10 * time.Millisecond})
		done <- outcome{res, err}
	}()
	<-started
	// Another arbiter finds the lease stale (as if this one had stalled past the expiry)
	// and takes the experiment over.
	other, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	usurper := store.ThisProcess()
	if _, err := other.AcquireLease(context.Background(), 1, usurper, time.Now().Add(store.LeaseExpiry+time.Minute)); err != nil {
		t.Fatal(err)
	}
	close(release)
	o := <-done
	if !errors.Is(o.err, store.ErrLeaseLost) || o.res.ExperimentID != 1 {
		t.Fatalf("run after losing its lease: %+v, %v; want ErrLeaseLost", o.res, o.err)
	}
	e, err := store.FindExperiment(context.Background(), other.DB(), "1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != store.ExperimentRunning || e.Lease == nil || e.Lease.Owner != usurper.ID {
		t.Errorf("after the loss: status %s, lease %+v; want running and the new owner's lease untouched", e.Status, e.Lease)
	}
}

func TestSessionStatusesAreTheStoresWords(t *testing.T) {
	t.Parallel()
	for _, w := range []string{workload.SessionOK, workload.SessionError, workload.SessionTimeout, workload.SessionAborted} {
		if got := sessionStatus(w); string(got) != w {
			t.Errorf("workload's %q is stored as %q", w, got)
		}
	}
}

func TestLaunchesCarryTheDatabaseID(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "a.db")
	var mu sync.Mutex
	var seen []string
	rt := runtimeFunc(func(ctx context.Context, l runtime.Launch) (runtime.Instance, error) {
		mu.Lock()
		seen = append(seen, l.DatabaseID)
		mu.Unlock()
		return newEngine(t, nil), nil
	})
	if _, err := Run(context.Background(), Options{Spec: testSpec(t, ""), DBPath: db, Logger: quietLogger(), Runtime: rt}); err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	id, err := store.DatabaseID(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != id || seen[1] != id {
		t.Errorf("launches carried database ids %q; want %q for each (containers are labelled with it)", seen, id)
	}
}

// An arm whose engine failed every block the same way is told once, with its blocks;
// blocks that ended otherwise are told apart.
func TestNoDataNamesBlocksThatEndedAlikeTogether(t *testing.T) {
	t.Parallel()
	e := &experiment{arms: []arms.Arm{{Name: "control"}, {Name: "treatment"}}, counts: []armCounts{{sessions: 4}, {}}}
	noBinary := "process runtime: refserve: not found"
	err := e.checkData([]RunResult{
		{Arm: "control", Block: 0, Status: "done"},
		{Arm: "treatment", Block: 0, Status: "failed", Err: noBinary},
		{Arm: "treatment", Block: 1, Status: "failed", Err: noBinary},
		{Arm: "treatment", Block: 2, Status: "crashed", Err: "exit status 1"},
		{Arm: "treatment", Block: 3, Status: "failed", Err: noBinary},
	})
	want := "arm treatment: no completed session (blocks 0, 1, 3 failed: " + noBinary + "; block 2 crashed: exit status 1)"
	if !errors.Is(err, ErrNoData) || err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
}
