package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator/runtime"
	"github.com/arbiterlab/arbiter/store"
)

// scriptedEngine answers every chat with a reply that depends only on the session (read
// from the request id the workload sends), like a deterministic engine at temperature 0;
// answer picks the words.
type scriptedEngine struct {
	srv  *httptest.Server
	done chan struct{}
	once sync.Once
}

func newScriptedEngine(t *testing.T, answer func(session int) string) *scriptedEngine {
	return newScriptedEngineEnding(t, answer, func(int) string { return "stop" })
}

// newScriptedEngineEnding is newScriptedEngine whose streamed replies end with the
// finish reason finish gives the session ("abort" for a reply cut by an abort).
func newScriptedEngineEnding(t *testing.T, answer, finish func(session int) string) *scriptedEngine {
	e := &scriptedEngine{done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	// It stands in for refserve, but reports no setting: every pin is unverified.
	mux.HandleFunc("GET /get_server_info", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{}`) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"fake","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			RID    string `json:"rid"`
			Stream bool   `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var seed, session, turn int
		fmt.Sscanf(req.RID, "arb-%d-%d-%d", &seed, &session, &turn)
		words, _ := json.Marshal(answer(session))
		if !req.Stream { // the readiness probe
			fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}]}`, words)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%s},\"finish_reason\":%q}]}\n\n", words, finish(session))
		io.WriteString(w, "data: [DONE]\n\n")
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *scriptedEngine) Endpoint() string      { return e.srv.URL }
func (e *scriptedEngine) Done() <-chan struct{} { return e.done }
func (e *scriptedEngine) Exit() runtime.Exit    { return runtime.Exit{Stopped: true} }
func (e *scriptedEngine) Stop(context.Context) error {
	e.once.Do(func() { close(e.done) })
	return nil
}

// divergingArms run control answering the same words in every session and treatment
// departing from them in every third session.
func divergingArms(t *testing.T) runtime.Runtime {
	return runtimeFunc(func(_ context.Context, l runtime.Launch) (runtime.Instance, error) {
		arm := strings.Split(l.Name, "-")[1]
		return newScriptedEngine(t, func(session int) string {
			if arm == "treatment" && session%3 == 0 {
				return "All done, but differently."
			}
			return "All done, as planned."
		}), nil
	})
}

type sessionFlag struct {
	Arm       string  `db:"name"`
	Session   int     `db:"session_index"`
	Corrupted bool    `db:"corrupted"`
	First     *int    `db:"first_corrupted_turn"`
	Turn      *int    `db:"turn_index"`
	Field     *string `db:"field"`
	Rune      *int    `db:"rune"`
	Compared  *int    `db:"compared_turns"`
	Excerpt   *string `db:"arm_excerpt"`
}

func sessionFlags(t *testing.T, db string, exp int64) []sessionFlag {
	t.Helper()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var out []sessionFlag
	if err := ro.Select(&out, `SELECT a.name, s.session_index, s.corrupted, s.first_corrupted_turn,
			d.turn_index, d.field, d.rune, d.compared_turns, d.arm_excerpt
		FROM sessions s JOIN arms a ON a.id = s.arm_id
		LEFT JOIN divergences d ON d.run_id = s.run_id AND d.session_index = s.session_index
		WHERE s.experiment_id = ? ORDER BY a.name, s.session_index`, exp); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDivergenceIsRecordedAndCountsOnlyWhenListed(t *testing.T) {
	t.Parallel()
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			spec := testSpec(t, "")
			if listed {
				spec.Detectors = append(spec.Detectors, "divergence")
			}
			db := filepath.Join(t.TempDir(), "a.db")
			res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: divergingArms(t)})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range sessionFlags(t, db, res.ExperimentID) {
				diverges := f.Arm == "treatment" && f.Session%3 == 0
				switch {
				case f.Arm == "control":
					if f.Compared != nil || f.Corrupted {
						t.Errorf("baseline session %+v", f)
					}
				case f.Compared == nil || *f.Compared != 2:
					t.Errorf("treatment session %d was not compared over its 2 turns: %+v", f.Session, f)
				case diverges != (f.Turn != nil):
					t.Errorf("session %d: diverged at %v, want %v", f.Session, f.Turn, diverges)
				case diverges && (*f.Turn != 0 || *f.Field != "content" || *f.Rune != 10 || !strings.HasPrefix(*f.Excerpt, "All done, but")):
					t.Errorf("session %d: divergence %d %s %d %q", f.Session, *f.Turn, *f.Field, *f.Rune, *f.Excerpt)
				case f.Corrupted != (listed && diverges):
					t.Errorf("session %d: corrupted = %v with divergence listed=%v", f.Session, f.Corrupted, listed)
				case listed && diverges && (f.First == nil || *f.First != 0):
					t.Errorf("session %d: first corrupted turn %v", f.Session, f.First)
				}
			}
			ro, _ := store.OpenReadOnly(db)
			defer ro.Close()
			var labels, flagged int
			ro.Get(&labels, `SELECT count(*) FROM labels WHERE detector = 'divergence'`)
			ro.Get(&flagged, `SELECT count(*) FROM labels WHERE detector = 'divergence' AND corrupted = 1 AND reason LIKE 'diverges from control at turn 0 content differs at rune 10%'`)
			if want := 0; !listed && labels != want {
				t.Errorf("informational pass wrote %d labels", labels)
			}
			if listed && (labels != 2*6*2 || flagged != 2) {
				t.Errorf("counted pass: %d labels (want one per turn, 24), %d flagged (want 2)", labels, flagged)
			}
		})
	}
}

// Replies aborted mid-stream stop wherever the abort caught them, which differs between
// arms without the engines differing: a session whose replies were aborted is not
// compared, and counts beside; the sessions that were compared diverge as before.
func TestAbortedRepliesAreNotComparedButCountedBeside(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "")
	db := filepath.Join(t.TempDir(), "a.db")
	aborting := runtimeFunc(func(_ context.Context, l runtime.Launch) (runtime.Instance, error) {
		arm := strings.Split(l.Name, "-")[1]
		answer := func(session int) string {
			switch {
			case session%4 == 1 && arm == "treatment":
				return "All do" // cut at another token than control's
			case session%4 == 1:
				return "All done, as"
			case arm == "treatment" && session%3 == 0:
				return "All done, but differently."
			}
			return "All done, as planned."
		}
		finish := func(session int) string {
			if session%4 == 1 {
				return "abort"
			}
			return "stop"
		}
		return newScriptedEngineEnding(t, answer, finish), nil
	})
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: aborting})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	counts, err := store.DivergenceCounts(context.Background(), ro, res.ExperimentID)
	// Six sessions: 1 and 5 aborted, 0 and 3 diverging.
	if err != nil || len(counts) != 1 || counts[0].Sessions != 6 || counts[0].Compared != 4 || counts[0].Diverged != 2 {
		t.Fatalf("divergence counts %+v (%v), want 4 of 6 sessions compared, 2 diverged", counts, err)
	}
}

func TestNoDivergenceAboveTemperatureZero(t *testing.T) {
	t.Parallel()
	spec := testSpec(t, "")
	spec.Workload.Temperature = 0.7
	db := filepath.Join(t.TempDir(), "a.db")
	res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger(), Runtime: divergingArms(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sessionFlags(t, db, res.ExperimentID) {
		if f.Compared != nil {
			t.Fatalf("sampled sessions compared: %+v", f)
		}
	}
}

// TestDivergenceOnRealRefserve runs the decisive BF16_INDEX_K A/B on real refserve
// processes: at temperature 0 refserve's clean replies are the same in every arm, so the
// treatment's sessions that diverge from control are exactly those a corrupted decode
// broke, and control itself never diverges from an identical A/A twin.
func TestDivergenceOnRealRefserve(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds refserve and runs two experiments")
	}
	bin := testbin.Build(t, "github.com/arbiterlab/arbiter/cmd/refserve")
	run := func(t *testing.T, armsYAML string) (string, int64) {
		src := fmt.Sprintf(`version: 1
name: divergence-refserve
engine: {preset: refserve, command: [%q], args: [--enable-hierarchical-cache]}
%s
workload: {kind: toolcall-agent, sessions: 100, rounds: 3, concurrency: 100, seed: 42, temperature: 0}
detectors: [dsml-leak, divergence]
timeouts: {startup: 30s, request: 60s, stall: 20s}
`, bin, armsYAML)
		spec, err := arms.Parse("divergence.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(t.TempDir(), "a.db")
		res, err := Run(context.Background(), Options{Spec: spec, DBPath: db, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return db, res.ExperimentID
	}

	t.Run("A/B", func(t *testing.T) {
		t.Parallel()
		db, exp := run(t, "arms:\n  control: {env: {BF16_INDEX_K: \"0\"}}\n  treatment: {env: {BF16_INDEX_K: \"1\"}}")
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		// Sessions that dsml-leak flagged, and sessions that diverged, per arm.
		var rows []struct {
			Arm      string `db:"name"`
			Session  int    `db:"session_index"`
			Leaked   bool   `db:"leaked"`
			Diverged bool   `db:"diverged"`
		}
		if err := ro.Select(&rows, `SELECT a.name, s.session_index,
			EXISTS (SELECT 1 FROM labels l WHERE l.run_id = s.run_id AND l.session_index = s.session_index
				AND l.detector = 'dsml-leak' AND l.corrupted = 1) AS leaked,
			EXISTS (SELECT 1 FROM divergences d WHERE d.run_id = s.run_id AND d.session_index = s.session_index
				AND d.turn_index IS NOT NULL) AS diverged
		FROM sessions s JOIN arms a ON a.id = s.arm_id WHERE s.experiment_id = ? AND s.status = 'ok'`, exp); err != nil {
			t.Fatal(err)
		}
		leaked, diverged := 0, 0
		for _, r := range rows {
			if r.Arm == "control" && (r.Leaked || r.Diverged) {
				t.Errorf("control session %d: leaked %v, diverged %v", r.Session, r.Leaked, r.Diverged)
			}
			if r.Arm == "treatment" && r.Leaked != r.Diverged {
				t.Errorf("treatment session %d: leaked %v but diverged %v", r.Session, r.Leaked, r.Diverged)
			}
			if r.Leaked {
				leaked++
			}
			if r.Diverged {
				diverged++
			}
		}
		if leaked == 0 || len(rows) != 200 {
			t.Fatalf("%d sessions ok, %d leaked: the experiment did not show the fault it is built for", len(rows), leaked)
		}
		counts, err := store.DivergenceCounts(context.Background(), ro, exp)
		if err != nil || len(counts) != 1 || counts[0].Compared != 100 || counts[0].Diverged != diverged {
			t.Errorf("counts = %+v, %v; want 100 compared, %d diverged", counts, err, diverged)
		}
		t.Logf("treatment: %d of 100 sessions leaked and diverged", diverged)
	})
	t.Run("A/A", func(t *testing.T) {
		t.Parallel()
		db, exp := run(t, "arms:\n  a: {env: {BF16_INDEX_K: \"0\"}}\n  b: {env: {BF16_INDEX_K: \"0\"}}\nanalysis: {aa: true}")
		ro, err := store.OpenReadOnly(db)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		counts, err := store.DivergenceCounts(context.Background(), ro, exp)
		if err != nil || len(counts) != 1 || counts[0].Compared != 100 || counts[0].Diverged != 0 {
			t.Errorf("A/A: counts = %+v, %v; want 100 compared, none diverged", counts, err)
		}
	})
}
