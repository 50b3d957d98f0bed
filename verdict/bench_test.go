package verdict

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
)

// BenchmarkVerdictStreams builds and renders the verdict of a recorded streaming run,
// as `arbiter verdict` does: two arms, 600 sessions x 4 rounds each, every reply a
// stream of 64 or 512 tokens stored whole (its SSE events in raw) with its token times.
// The verdict reads every turn's timings and token times, which sit after the bodies.
func BenchmarkVerdictStreams(b *testing.B) {
	for _, tokens := range []int{64, 512} {
		b.Run(fmt.Sprintf("%dtok", tokens), func(b *testing.B) {
			db, exp := recordStreams(b, 600, 4, tokens)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				v, err := Build(ctx, db, exp)
				if err != nil {
					b.Fatal(err)
				}
				if err := v.Markdown(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(2*600*4), "µs/turn")
		})
	}
}

// recordStreams writes a two-arm streaming run of the quickstart example, sessions x
// rounds a arm with tokens streamed a reply, into a fresh database opened read-only.
func recordStreams(b *testing.B, sessions, rounds, tokens int) (*sqlx.DB, int64) {
	b.Helper()
	spec, err := arms.Load(filepath.Join("..", "examples", "quickstart.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "streams.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dj, _ := json.Marshal(orchestrator.DesignOf(spec))
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: spec.Name, SpecPath: "examples/quickstart.yaml", Spec: "version: 1",
		Seed: spec.Workload.Seed, Unit: spec.Analysis.Unit, Alpha: spec.Analysis.Alpha, Baseline: spec.Analysis.Baseline,
		Version: "bench", Host: "h", Created: t0, Design: string(dj)})
	if err != nil {
		b.Fatal(err)
	}
	event := `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}` + "\n\n"
	raw := strings.Repeat(event, tokens) + "data: [DONE]\n\n"
	content := strings.Repeat("tok ", tokens)
	w := s.NewWriter(store.WriterOptions{})
	for i, arm := range []string{"control", "treatment"} {
		armID, err := s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: arm, Position: i, Pins: "{}", Command: `["refserve"]`, Env: "{}"})
		if err != nil {
			b.Fatal(err)
		}
		start := t0.Add(time.Duration(i) * time.Minute)
		runID, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: armID, Runtime: "process", Status: "starting", Started: start})
		if err != nil {
			b.Fatal(err)
		}
		code := 0
		if err := s.UpdateRun(ctx, store.Run{ID: runID, Status: store.RunDone, Started: start, Ready: start.Add(time.Second),
			Ended: start.Add(time.Minute), ExitCode: &code}); err != nil {
			b.Fatal(err)
		}
		for sess := range sessions {
			for round := range rounds {
				// A steady pace that varies with the session and the token, never with the clock.
				ttft := time.Duration(20+sess%7) * time.Millisecond
				step := time.Duration(8+(sess+round)%5) * time.Millisecond / 2
				turn := store.Turn{ExperimentID: exp, RunID: runID, ArmID: armID, Session: sess, Index: round, Round: round,
					Started: start.Add(time.Duration(sess) * time.Millisecond), StatusCode: 200, FinishReason: "length",
					CompletionTokens: tokens, Deltas: tokens, Content: content, Request: `{"stream":true}`, Response: "{}", Raw: raw,
					TTFT: ttft, DecodeTime: time.Duration(tokens-1) * step, Latency: ttft + time.Duration(tokens-1)*step}
				for k := range tokens {
					turn.TokenTimes = append(turn.TokenTimes, ttft+time.Duration(k)*step+time.Duration(k%3)*time.Microsecond)
				}
				w.Turn(turn)
			}
			w.Session(store.Session{ExperimentID: exp, RunID: runID, ArmID: armID, Index: sess, Status: "ok", Turns: rounds})
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := store.OpenReadOnly(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db, exp
}
