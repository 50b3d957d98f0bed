package verdict

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/internal/outfile"
	"github.com/arbiterlab/arbiter/orchestrator"
	"github.com/arbiterlab/arbiter/store"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// The example verdicts are rendered from databases written through the store API from
// fixed outcomes, so that their wording and structure can be pinned: a real run's timings
// and its scheduling-dependent corruption vary from run to run. Arms, pins, factors and
// the design come from the example spec itself, so a change to an example shows here.

// outcome is one session of a fixture.
type outcome struct {
	status   string // ok, error, timeout or aborted
	badRound int    // first round with a corrupted response; -1 for none
	rounds   int    // rounds reached; 0 for all of them
}

// finished is n sessions that completed every round; the first len(badRounds) of them were
// corrupted from those rounds on.
func finished(n int, badRounds ...int) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = outcome{status: "ok", badRound: -1}
		if i < len(badRounds) {
			out[i].badRound = badRounds[i]
		}
	}
	return out
}

// lostAt is n sessions lost with status after reaching round reached; the first
// corrupted of them had a corrupted response in that round before they were lost.
func lostAt(status string, n, corrupted, reached int) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = outcome{status: status, badRound: -1, rounds: reached + 1}
		if i < corrupted {
			out[i].badRound = reached
		}
	}
	return out
}

func join(parts ...[]outcome) []outcome {
	var out []outcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// launch is one run of a fixture.
type launch struct {
	arm      string
	block    int
	status   string // "done" when empty
	err      string
	sessions []outcome
	// running, when set, records the engine's /metrics as scraped: this many requests
	// running at every scrape, an empty queue, and throughput growing with them.
	running float64
	// cacheHit, when set, is the cache hit rate its engine reports (0.4 otherwise).
	cacheHit float64
	// node and slot place the launch (default: node "local", the launch's position in
	// its block); wave is its wave within the block.
	node       string
	slot, wave int
	// gpu, when set, records the launch's GPU telemetry (see recordGPUs).
	gpu *gpuRun
	// oneEvent records this launch's replies as one event each (see fixture.oneEvent).
	oneEvent bool
}

// fixture is an example's recorded experiment.
type fixture struct {
	example string // examples/NAME.yaml
	runs    []launch
	// divergence, when set, records the divergence pass as a temperature-0 run leaves
	// it: every session of a non-baseline arm compared with the baseline's of its block,
	// diverging at its first corrupted turn.
	divergence   bool
	stoppedEarly string
	status       string // "done" when empty
	err          string // the experiment's error, as a failure records it
	// oneEvent, when set, records every reply as one event, as a workload that does not
	// stream leaves it: no inter-token latency.
	oneEvent bool
}

// recordFixture writes f into a fresh database and returns it opened read-only.
func recordFixture(t *testing.T, f fixture) (*sqlx.DB, int64) {
	t.Helper()
	specPath := filepath.Join("..", "examples", f.example+".yaml")
	spec, err := arms.Load(specPath)
	if err != nil {
		t.Fatal(err)
	}
	armList, err := spec.Expand()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A fixture that finished records as many blocks as it planned: one that records
	// fewer launches than its example declares is that example with fewer blocks.
	if f.stoppedEarly == "" && (f.status == "" || f.status == "done") {
		blocks := 0
		for _, r := range f.runs {
			blocks = max(blocks, r.block+1)
		}
		spec.Blocks = min(max(spec.Blocks, 1), blocks)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	dj, _ := json.Marshal(orchestrator.DesignOf(spec))
	baseline := spec.Analysis.Baseline
	if baseline == "" {
		baseline = armList[0].Name
	}
	exp, err := s.CreateExperiment(ctx, store.Experiment{Name: spec.Name, SpecPath: "examples/" + f.example + ".yaml", Spec: "version: 1",
		Seed: spec.Workload.Seed, Unit: spec.Analysis.Unit, Alpha: spec.Analysis.Alpha, Baseline: baseline, Version: "test",
		Host: "h", Created: t0, Design: string(dj)})
	if err != nil {
		t.Fatal(err)
	}
	armIDs := map[string]int64{}
	envs := map[string]map[string]string{}
	for i, a := range armList {
		pins, _ := json.Marshal(map[string]any{"env": a.Pins.Env, "args": append([]string{}, a.Pins.Args...)})
		var levels []byte
		if a.Levels != nil {
			levels, _ = json.Marshal(a.Levels)
		}
		id, err := s.AddArm(ctx, store.Arm{ExperimentID: exp, Name: a.Name, Position: i, Pins: string(pins), Levels: string(levels), Command: `["refserve"]`, Env: "{}"})
		if err != nil {
			t.Fatal(err)
		}
		armIDs[a.Name], envs[a.Name] = id, a.Pins.Env
	}
	rounds := spec.Workload.Rounds
	w := s.NewWriter(store.WriterOptions{})
	runOf := map[string]int64{}   // arm and block to run, for the divergence rows
	inBlock := map[[2]int]int{}   // launches so far per block and wave
	lostRun := map[string]int64{} // arm and block to a run lost with its node, which the next launch replaces
	var div []store.SessionDivergence
	for k, r := range f.runs {
		armID, ok := armIDs[r.arm]
		if !ok {
			t.Fatalf("fixture names arm %q, which %s does not have", r.arm, specPath)
		}
		start := t0.Add(time.Duration(k) * time.Minute)
		// The arms of a block (of a wave) start together, as the scheduler runs them.
		node, slot := r.node, r.slot
		if node == "" {
			node = "local"
			slot = inBlock[[2]int{r.block, r.wave}]
		}
		inBlock[[2]int{r.block, r.wave}]++
		launched := t0.Add(time.Duration(r.block)*10*time.Minute + time.Duration(r.wave)*5*time.Minute)
		runID, err := s.StartRun(ctx, store.Run{ExperimentID: exp, ArmID: armID, Block: r.block, Runtime: "process", Status: "starting",
			Started: launched, Node: node, Slot: slot, Wave: r.wave})
		if err != nil {
			t.Fatal(err)
		}
		status, code := r.status, 0
		if status == "" {
			status = "done"
		}
		if status == "crashed" {
			code = 139
		}
		if lost, ok := lostRun[fmt.Sprint(r.arm, r.block)]; ok {
			if err := s.Supersede(ctx, lost, runID); err != nil {
				t.Fatal(err)
			}
		}
		if r.status == "lost" {
			lostRun[fmt.Sprint(r.arm, r.block)] = runID
		}
		runOf[fmt.Sprint(r.arm, r.block)] = runID
		info, _ := json.Marshal(map[string]any{"version": "refserve 0.1", "env": envs[r.arm]})
		wstart := launched.Add(time.Second)
		wend := wstart.Add(18*time.Second + time.Duration(slot)*500*time.Millisecond)
		ready, instance, exit := launched.Add(300*time.Millisecond), fmt.Sprintf("pid %d", 4200+k), &code
		if status == "lost" {
			// Its node did not answer: nothing started.
			wstart, wend, ready, instance, exit, info = time.Time{}, time.Time{}, time.Time{}, "", nil, nil
		}
		if err := s.UpdateRun(ctx, store.Run{ID: runID, Status: store.RunStatus(status), Error: r.err, Started: launched,
			Ready: ready, WorkloadStarted: wstart, WorkloadEnded: wend,
			Ended: launched.Add(20 * time.Second), ExitCode: exit, ServerInfo: string(info), Instance: instance}); err != nil {
			t.Fatal(err)
		}
		if r.running > 0 {
			recordLoad(t, s, exp, runID, armID, r.running, cmp.Or(r.cacheHit, 0.4))
		}
		if r.gpu != nil {
			recordGPUs(t, s, exp, runID, armID, *r.gpu)
		}
		for si, o := range r.sessions {
			index := r.block*spec.Workload.Sessions + si
			reached := rounds
			if o.rounds > 0 {
				reached = o.rounds
			}
			turns := 0
			first := -1
			for round := 0; round < reached; round++ {
				for step := 0; step < 2; step++ {
					bad := o.badRound >= 0 && round >= o.badRound && step == 1
					if bad && first < 0 {
						first = turns
					}
					reason := ""
					if bad {
						reason = "DeepSeek V4 DSML markup in content (8 markers), first at rune 0: \"<｜DSML｜tool_calls>\""
					}
					deltas, decode := 12, time.Duration(80+(si*5+turns*3)%17)*time.Millisecond
					if f.oneEvent || r.oneEvent {
						deltas, decode = 1, 0
					}
					// Timings vary with the session and the turn, never with the clock.
					w.Turn(store.Turn{ExperimentID: exp, RunID: runID, ArmID: armID, Session: index, Index: turns, Round: round,
						Started: start.Add(time.Duration(turns) * time.Second), StatusCode: 200, FinishReason: "stop",
						TTFT: time.Duration(20+(si*7+turns)%13) * time.Millisecond, Latency: time.Duration(110+(si*11+turns*3)%37) * time.Millisecond,
						DecodeTime: decode, Deltas: deltas,
						CompletionTokens: 40, Content: "ok", Corrupted: bad, Request: "{}", Response: "{}",
						Labels: []store.Label{{Detector: "dsml-leak", Corrupted: bad, Reason: reason}, {Detector: "toolcall-schema"}}})
					turns++
				}
			}
			if f.divergence && r.arm != baseline {
				d := store.SessionDivergence{RunID: runID, Session: index, Compared: turns}
				if first >= 0 {
					d.Turn = sql.NullInt64{Int64: int64(first), Valid: true}
					d.Field = sql.NullString{String: "content", Valid: true}
					d.Rune = sql.NullInt64{Valid: true}
					d.ArmExcerpt = sql.NullString{String: "<｜DSML｜tool_calls>", Valid: true}
					d.BaselineExcerpt = sql.NullString{Valid: true}
				}
				div = append(div, d)
			}
			row := store.Session{ExperimentID: exp, RunID: runID, ArmID: armID, Index: index, Block: r.block, Status: store.SessionStatus(o.status), Turns: turns, Corrupted: first >= 0}
			if first >= 0 {
				row.FirstCorruptedTurn = &first
			}
			w.Session(row)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if f.divergence {
		for i := range div {
			div[i].BaselineRunID = runOf[fmt.Sprint(baseline, 0)]
		}
		if err := s.WriteDivergence(ctx, exp, div, nil); err != nil {
			t.Fatal(err)
		}
	}
	if f.stoppedEarly != "" {
		s.StopEarly(ctx, exp, f.stoppedEarly)
	}
	status := f.status
	if status == "" {
		status = "done"
	}
	s.FinishExperiment(ctx, exp, store.ExperimentStatus(status), f.err, t0.Add(time.Hour))
	s.Close()
	db, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, exp
}

// The examples' recorded outcomes: what a run of each against refserve typically gives.
var examples = map[string]fixture{
	// The decisive A/B: bf16 index-K corrupts about 15% of sessions, fp8 none.
	"quickstart": {example: "quickstart", divergence: true, runs: []launch{
		{arm: "treatment", sessions: join(finished(60, 0, 1, 1, 2, 2, 2, 3, 3, 3)), running: 57},
		{arm: "control", sessions: finished(60), running: 58},
	}},
	// The decisive A/B with 4 launches per arm: every treatment launch corrupts, no
	// control launch does.
	"quickstart4": {example: "quickstart-launches", runs: []launch{
		{arm: "treatment", sessions: finished(60, 0, 1, 1, 2, 2, 2, 3, 3, 3), running: 57},
		{arm: "control", sessions: finished(60), running: 58},
		{arm: "control", block: 1, sessions: finished(60), running: 58},
		{arm: "treatment", block: 1, sessions: finished(60, 1, 1, 2, 2, 3, 3, 3), running: 57},
		{arm: "treatment", block: 2, sessions: finished(60, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3), running: 57},
		{arm: "control", block: 2, sessions: finished(60), running: 58},
		{arm: "control", block: 3, sessions: finished(60), running: 58},
		{arm: "treatment", block: 3, sessions: finished(60, 0, 1, 2, 2, 3, 3, 3, 3), running: 57},
	}},
	// Identical arms: nothing to find.
	"aa": {example: "aa", runs: []launch{
		{arm: "a2", sessions: finished(60)},
		{arm: "a1", sessions: finished(60)},
		{arm: "a1", block: 1, sessions: finished(60)},
		{arm: "a2", block: 1, sessions: finished(60)},
		{arm: "a2", block: 2, sessions: finished(60)},
		{arm: "a1", block: 2, sessions: finished(60)},
		{arm: "a1", block: 3, sessions: finished(60)},
		{arm: "a2", block: 3, sessions: finished(60)},
	}},
	// Corruption needs bf16 index-K and HiCache together: the interaction.
	"factorial": {example: "factorial", runs: []launch{
		{arm: "bf16_index_k=1,hicache=on", sessions: finished(60, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3)},
		{arm: "bf16_index_k=0,hicache=on", sessions: finished(60)},
		{arm: "bf16_index_k=1,hicache=off", sessions: finished(60, 3)},
		{arm: "bf16_index_k=0,hicache=off", sessions: finished(60)},
	}},
	// Stopped for efficacy at the second of four looks.
	"sequential": {example: "sequential", stoppedEarly: "treatment against control: launch p = 0.00216 ≤ 0.00375 over 6 and 6 launches", runs: []launch{
		{arm: "control", block: 0, sessions: finished(60)},
		{arm: "treatment", block: 0, sessions: finished(60, 0, 1, 1, 2, 2, 3, 3, 3)},
		{arm: "treatment", block: 1, sessions: finished(60, 0, 1, 1, 2, 2, 2, 3, 3, 3)},
		{arm: "control", block: 1, sessions: finished(60)},
		{arm: "control", block: 2, sessions: finished(60)},
		{arm: "treatment", block: 2, sessions: finished(60, 1, 1, 2, 3, 3, 3)},
		{arm: "treatment", block: 3, sessions: finished(60, 0, 1, 2, 2, 2, 3, 3)},
		{arm: "control", block: 3, sessions: finished(60)},
		{arm: "treatment", block: 4, sessions: finished(60, 0, 1, 1, 2, 3, 3, 3, 3)},
		{arm: "control", block: 4, sessions: finished(60)},
		{arm: "control", block: 5, sessions: finished(60)},
		{arm: "treatment", block: 5, sessions: finished(60, 1, 2, 2, 2, 3, 3, 3)},
	}},
	// The decisive A/B on two nodes, two blocks: the arms swap nodes between blocks, and
	// node-b stopped answering during block 1, after which its arm ran on node-a in a
	// second wave.
	"nodes": {example: "quickstart", runs: []launch{
		{arm: "treatment", node: "node-a", sessions: finished(60, 0, 1, 1, 2, 2, 2, 3, 3, 3)},
		{arm: "control", node: "node-b", sessions: finished(60)},
		{arm: "control", block: 1, node: "node-a", sessions: finished(60)},
		{arm: "treatment", block: 1, node: "node-b", status: "lost", err: "node node-b: docker runtime: no daemon answers at tcp://node-b:2376 (node unreachable)"},
		{arm: "treatment", block: 1, node: "node-a", wave: 1, sessions: finished(60, 0, 1, 2, 2, 3, 3, 3, 3)},
	}},
	// The decisive A/B whose treatment engine was killed mid-run: 9 sessions had
	// finished (2 corrupted), 48 were cut off (3 of them already corrupted) and 3 never
	// started. Counting the corrupted-then-lost sessions would read as 5 of 12 corrupted.
	"crash": {example: "quickstart", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", status: "crashed", err: "engine exited on its own during the workload (exit code 137, signal: killed)",
			sessions: join(finished(9, 1, 2), lostAt("aborted", 48, 3, 1))},
	}},
}

// recordLoad records nine scrapes of a run's engine, 250 ms apart: running requests at
// every scrape but the last (taken as the workload ended, with nothing running), an empty
// queue, token usage that follows the load, the cache hit rate hit, and 45 generated
// tokens per second per running request.
func recordLoad(t *testing.T, s *store.Store, exp, run, arm int64, running, hit float64) {
	t.Helper()
	for k := range 9 {
		at := float64(250 * k)
		now := running
		if k == 8 {
			now = 0
		}
		samples := []store.MetricSample{
			{Name: "sglang:num_running_reqs", Labels: `{model_name="refserve"}`, Value: now},
			{Name: "sglang:num_queue_reqs", Labels: `{model_name="refserve"}`, Value: 0},
			{Name: "sglang:token_usage", Labels: `{model_name="refserve"}`, Value: now / 200},
			{Name: "sglang:cache_hit_rate", Labels: `{model_name="refserve"}`, Value: hit},
			{Name: "sglang:generation_tokens_total", Labels: `{model_name="refserve"}`, Value: 45 * running * at / 1000},
		}
		if err := s.AddServerMetrics(context.Background(), exp, run, arm, at, samples); err != nil {
			t.Fatal(err)
		}
	}
}

func buildExample(t *testing.T, name string) *Verdict {
	t.Helper()
	db, ref := recordFixture(t, examples[name])
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func markdown(t *testing.T, v *Verdict) string {
	t.Helper()
	var b bytes.Buffer
	if err := v.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestExampleVerdicts pins every example's verdict (markdown and charts) to its golden
// file, and checks the structure every verdict must have: a headline of at most three
// sentences, and no paragraph said twice.
func TestExampleVerdicts(t *testing.T) {
	for _, name := range []string{"quickstart", "quickstart4", "aa", "factorial", "sequential", "crash", "nodes"} {
		t.Run(name, func(t *testing.T) {
			v := buildExample(t, name)
			dir := t.TempDir()
			path := filepath.Join(dir, name+".md")
			if err := v.WriteFiles(path, outfile.Guard{}); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{name + ".md", name + "-rates.svg", name + "-rounds.svg"} {
				got, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				checkGolden(t, got, filepath.Join("testdata", strings.Replace(f, name, name+".golden", 1)))
			}
			md, _ := os.ReadFile(path)
			checkStructure(t, string(md))
		})
	}
}

// headlineOf is the paragraph under the title.
func headlineOf(md string) string {
	paras := strings.Split(md, "\n\n")
	if len(paras) < 2 {
		return ""
	}
	return strings.TrimSpace(paras[1])
}

// sentences splits prose at a full stop, question or exclamation mark followed by a space
// or the end; decimals ("15.0%") and names ("bf16_index_k=0") never match.
var sentenceEnd = regexp.MustCompile(`[.!?](\s+|$)`)

func sentences(text string) []string {
	var out []string
	for _, s := range sentenceEnd.Split(strings.TrimSpace(text), -1) {
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkStructure checks what makes a verdict a 30-second read: a headline of at most three
// sentences that ends with the decision, no paragraph, list item or headline sentence said
// twice.
func checkStructure(t *testing.T, md string) {
	t.Helper()
	head := headlineOf(md)
	if strings.HasPrefix(head, "#") || head == "" {
		t.Fatalf("no headline paragraph under the title:\n%s", md)
	}
	if n := len(sentences(head)); n > 3 {
		t.Errorf("headline has %d sentences, want at most 3:\n%s", n, head)
	}
	// Every paragraph and every line of one (a list item) counts once per place it
	// appears; table rows repeat by design ("| 1 | 0/60 |") and are left out.
	seen := map[string]bool{}
	for _, block := range strings.Split(md, "\n\n") {
		units := map[string]bool{strings.TrimSpace(block): true}
		for _, line := range strings.Split(block, "\n") {
			units[strings.TrimSpace(line)] = true
		}
		for unit := range units {
			if len(unit) < 40 || strings.HasPrefix(unit, "|") {
				continue
			}
			if seen[unit] {
				t.Errorf("paragraph appears twice:\n%s", unit)
			}
			seen[unit] = true
		}
	}
	rest := strings.Replace(md, head, "", 1)
	for _, s := range sentences(head) {
		if len(s) > 40 && strings.Contains(rest, s) {
			t.Errorf("headline sentence repeated in the body:\n%s", s)
		}
	}
	checkFolds(t, md)
	for _, banned := range []string{"explains", "explained by chance"} {
		if strings.Contains(md, banned) {
			t.Errorf("verdict says chance %q a difference", banned)
		}
	}
}

// firstScreen is the most lines a verdict may show before its first folded section.
const firstScreen = 40

// checkFolds checks that a verdict's decision fits one screen and the rest is folded:
// at most firstScreen lines before the first <details>, every section after it inside a
// <details> block with a blank line after its summary and before its end (without them
// GitHub and GitLab show the markdown inside as text), none left open.
func checkFolds(t *testing.T, md string) {
	t.Helper()
	lines := strings.Split(md, "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "<details>") })
	if first < 0 {
		t.Fatalf("nothing is folded:\n%s", md)
	}
	if first > firstScreen {
		t.Errorf("%d lines before the first folded section, want at most %d:\n%s", first, firstScreen, strings.Join(lines[:first], "\n"))
	}
	open := false
	for i, l := range lines[first:] {
		i += first
		switch {
		case strings.HasPrefix(l, "<details>"):
			if open || !strings.HasPrefix(l, "<details><summary>") || !strings.HasSuffix(l, "</summary>") || lines[i+1] != "" {
				t.Errorf("line %d: a folded section opens badly: %q", i+1, l)
			}
			open = true
		case l == "</details>":
			if !open || lines[i-1] != "" {
				t.Errorf("line %d: a folded section closes badly", i+1)
			}
			open = false
		case strings.HasPrefix(l, "## ") || !open && l != "" && l != "---" && !strings.HasPrefix(l, "Query the raw data"):
			t.Errorf("line %d is outside every folded section: %q", i+1, l)
		}
	}
	if open {
		t.Errorf("a folded section is never closed")
	}
}

// TestFirstScreen holds the verdicts a new user reads first, as committed, to one screen
// before their first folded section.
func TestFirstScreen(t *testing.T) {
	for _, name := range []string{"quickstart4", "throughput", "deadlock"} {
		t.Run(name, func(t *testing.T) {
			md, err := os.ReadFile(filepath.Join("testdata", name+".golden.md"))
			if err != nil {
				t.Fatal(err)
			}
			checkFolds(t, string(md))
		})
	}
}

func checkGolden(t *testing.T, got []byte, path string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./verdict -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from its golden file (go test ./verdict -update rewrites it):\n%s", path, got)
	}
}

// One launch per arm: the verdict reports what it saw and says it cannot attribute it to
// the flag; the regression gate passes (nothing was claimed) and the undecided gate
// does not.
func TestQuickstartReportsButCannotAttribute(t *testing.T) {
	v := buildExample(t, "quickstart")
	base, tr := v.Arms[0], v.Arms[1]
	if base.Corrupted != 0 || tr.Corrupted != 9 || tr.Sessions != 60 || tr.Lost != 0 {
		t.Fatalf("counts: control %d/%d, treatment %d/%d (%d lost)", base.Corrupted, base.Sessions, tr.Corrupted, tr.Sessions, tr.Lost)
	}
	c := tr.Compare
	// 0/60 vs 9/60: scipy.stats.fisher_exact gives p = 0.0029 (two-sided).
	if c == nil || c.FisherP < 0.0028 || c.FisherP > 0.0030 || c.Decision() != "none" || c.Launch == nil || c.Launch.Testable || c.Launch.Needed != 2 {
		t.Fatalf("comparison = %+v, claim %+v", c, c.Launch)
	}
	if g, why := v.CheckGate("regression", GateOptions{}); g != GatePass {
		t.Errorf("regression gate on an untestable increase: %v %q; nothing was claimed", g, why)
	}
	if g, why := v.CheckGate("undecided", GateOptions{}); g != GateUndecided || !strings.Contains(why, "cannot be told apart") {
		t.Errorf("undecided gate on an untestable increase: %v %q", g, why)
	}
	head := v.Headline()[0]
	if !strings.Contains(head, "9 of 60 sessions") || !strings.HasSuffix(head, "2 launches per arm (`launches: 2`) can test it, or one per arm weighed against an A/A noise floor (`--noise-floor`).") {
		t.Errorf("headline does not say what the design can claim: %q", head)
	}
	if v.Responses == nil || !v.Responses.Available || v.Responses.FisherP >= c.FisherP {
		t.Errorf("response view = %+v: counting responses should look (wrongly) more certain", v.Responses)
	}
}

// Four launches per arm: the randomization test on launches decides, and the headline,
// the comparison, the gate and the JSON agree.
func TestQuickstartWithLaunchesIsSignificantAndGated(t *testing.T) {
	v := buildExample(t, "quickstart4")
	c := v.Arms[1].Compare
	if c == nil || c.Decision() != "higher" || c.Launch == nil || !c.Launch.Testable || math.Abs(c.Launch.P-2.0/70) > 1e-12 {
		t.Fatalf("comparison = %+v, claim %+v", c, c.Launch)
	}
	if g, _ := v.CheckGate("regression", GateOptions{}); g != GateFail {
		t.Errorf("regression gate on a significant regression: %v, want failed", g)
	}
	if g, why := v.CheckGate("undecided", GateOptions{}); g != GatePass {
		t.Errorf("undecided gate on a decided run: %v (%s)", g, why)
	}
	head := v.Headline()[0]
	// The decision, then what to do with it.
	if !strings.Contains(head, "treatment's corruption rate is significantly higher.") || !strings.Contains(head, "over 4 and 4 launches") ||
		!strings.HasSuffix(head, "Next: keep control's pins (`BF16_INDEX_K=0`), and `--fail-on regression` fails CI on a result like this.") {
		t.Errorf("headline: %q", head)
	}
	sum := v.Summary()
	b, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"decision":"higher"`) {
		t.Errorf("--json does not carry the decision: %s", b)
	}
}

// The bug this guards against: after a crash only the sessions corrupted before the
// crash used to count, so the crashed arm read as "corrupted 5 of 14 … significantly
// higher" and the gate passed or failed on a corruption that the crash made up.
func TestCrashedArmIsInconclusiveNotCorrupted(t *testing.T) {
	v := buildExample(t, "crash")
	tr := v.Arms[1]
	if tr.Sessions != 9 || tr.Corrupted != 2 || tr.CorruptedThenLost != 3 || tr.Lost != 51 || tr.Planned != 60 {
		t.Fatalf("treatment: %d analysed, %d corrupted, %d corrupted then lost, %d lost of %d planned; want 9, 2, 3, 51, 60",
			tr.Sessions, tr.Corrupted, tr.CorruptedThenLost, tr.Lost, tr.Planned)
	}
	c := tr.Compare
	if c == nil || !c.Inconclusive || c.Decision() != "inconclusive" || !strings.Contains(c.Why, "crashed") {
		t.Fatalf("comparison = %+v, want inconclusive because treatment crashed", c)
	}
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "The engine of treatment crashed (block 0)") || !strings.Contains(head, "The corruption of treatment is inconclusive") {
		t.Errorf("headline does not say first that treatment crashed and is inconclusive:\n%s", head)
	}
	md := markdown(t, v)
	if strings.Contains(md, "significantly higher") {
		t.Errorf("a crashed arm reads as significantly higher:\n%s", md)
	}
	for _, gate := range []string{"regression", "difference", "undecided"} {
		if g, why := v.CheckGate(gate, GateOptions{}); g != GateUndecided || !strings.Contains(why, "inconclusive") {
			t.Errorf("gate %s on a crash: %v (%s), want undecided as inconclusive", gate, g, why)
		}
		if gate == "undecided" {
			continue
		}
		if failed, why := v.GateWith(gate, GateOptions{AllowInconclusive: true}); failed {
			t.Errorf("gate %s --allow-inconclusive failed: %s", gate, why)
		}
	}
	if failed, _ := v.Gate("corruption"); !failed {
		t.Error("corruption gate passed although sessions were corrupted")
	}
	if c.Faults.Faulted != 1 || c.Faults.Launches != 1 || c.Faults.BaseFaulted != 0 || c.Faults.FisherP != 1 {
		t.Errorf("launch comparison = %+v, want 1 of 1 crashed against 0 of 1, p = 1", c.Launch)
	}
	if !strings.Contains(md, "| treatment | 1 | 0 | 1 | 0 | 0 |") {
		t.Errorf("no launch table showing the crash:\n%s", md)
	}
}

// A loss above analysis.max_loss makes an arm inconclusive even without a crash; at or
// below it, the arm is judged and the tipping point says how fragile that is.
func TestLossAboveMaxLossIsInconclusive(t *testing.T) {
	f := fixture{example: "quickstart", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", sessions: join(finished(53, 0, 1, 2, 3, 3, 3, 3, 3), lostAt("timeout", 7, 0, 2))},
	}}
	db, ref := recordFixture(t, f)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	c := v.Arms[1].Compare
	if !c.Inconclusive || !strings.Contains(c.Why, "lost 7 of 60 sessions (11.7%), more than analysis.max_loss allows (10.0%)") {
		t.Fatalf("7 of 60 lost (11.7%%) at max_loss 10%%: %+v", c)
	}
	f.runs[1].sessions = join(finished(54, 0, 1, 2, 3, 3, 3, 3, 3), lostAt("timeout", 6, 0, 2))
	db, ref = recordFixture(t, f)
	if v, err = Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	}
	c = v.Arms[1].Compare
	if c.Inconclusive || c.Decision() != "none" || c.Launch == nil || c.Launch.Testable || c.Tipping == nil {
		t.Fatalf("6 of 60 lost (10%%, at the limit) should be judged (one launch: not attributable): %+v", c)
	}
}

// Arms whose sessions show the same share corrupted, on launches too few to test, are
// said to show no difference, not "this cannot be told apart from a difference"; arms
// that differ keep that sentence. With several arms the evidence names each arm's counts
// instead of a largest difference of +0.0 points.
func TestUntestableArmsThatShowNoDifferenceAreSaidToShowNone(t *testing.T) {
	const none, untold = "These sessions show no difference, and with 1 launch per arm a difference could not have been told apart", "this cannot be told apart"
	for _, c := range []struct {
		name      string
		f         fixture
		want, not []string
	}{
		{"two arms, none corrupted", fixture{example: "quickstart", runs: []launch{
			{arm: "control", sessions: finished(60)}, {arm: "treatment", sessions: finished(60)}}},
			[]string{"a difference of +0.0 points", none}, []string{untold}},
		{"two arms, as many corrupted", fixture{example: "quickstart", runs: []launch{
			{arm: "control", sessions: finished(60, 0, 1)}, {arm: "treatment", sessions: finished(60, 2, 3)}}},
			[]string{"2 of 60 sessions (3.3%) against 2 of 60", none}, []string{untold}},
		{"two arms that differ", fixture{example: "quickstart", runs: []launch{
			{arm: "control", sessions: finished(60, 0)}, {arm: "treatment", sessions: finished(60, 2, 3)}}},
			[]string{untold}, []string{"show no difference"}},
		{"three arms, none corrupted", fixture{example: "ollama-parallel", runs: []launch{
			{arm: "p16", sessions: finished(32)}, {arm: "p16-again", sessions: finished(32)}, {arm: "p1", sessions: finished(32)}}},
			[]string{"Every arm's share of corrupted sessions equals the baseline **p16**'s (0 of 32, 0.0%): **p16-again** 0 of 32 sessions (0.0%) and **p1** 0 of 32 sessions (0.0%).", none},
			[]string{untold, "The largest difference"}},
		{"three arms, one differs", fixture{example: "ollama-parallel", runs: []launch{
			{arm: "p16", sessions: finished(32)}, {arm: "p16-again", sessions: finished(32)}, {arm: "p1", sessions: finished(32, 0)}}},
			[]string{"The largest difference", untold}, []string{"Every arm's share", "show no difference"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, ref := recordFixture(t, c.f)
			v, err := Build(context.Background(), db, ref)
			if err != nil {
				t.Fatal(err)
			}
			head := headlineOf(markdown(t, v))
			for _, w := range c.want {
				if !strings.Contains(head, w) {
					t.Errorf("the headline lacks %q:\n%s", w, head)
				}
			}
			for _, w := range c.not {
				if strings.Contains(head, w) {
					t.Errorf("the headline says %q:\n%s", w, head)
				}
			}
		})
	}
}

// The tipping point re-runs Fisher's exact test with the lost sessions counted. The
// expected numbers were found by brute force with scipy (testdata/tipping.py).
func TestTippingPointMatchesABruteForceSearch(t *testing.T) {
	cases := []struct {
		name               string
		control, treatment []outcome
		from, side, to     string
		sessions           int
	}{
		// 0/60 vs 8/50, 10 treatment sessions lost: p = 0.0013. Counted clean, 0/60 vs
		// 8/60 stays significant, and control lost nothing: no labelling changes it.
		{"significant, robust", finished(60), join(finished(50, 0, 0, 0, 0, 0, 0, 0, 0), lostAt("error", 10, 0, 0)), "higher", "", "", -1},
		// 0/50 (10 lost) vs 5/60: p = 0.062. Even all 10 lost control sessions corrupted
		// would not make treatment significantly lower.
		{"not significant, control lost", join(finished(50), lostAt("error", 10, 0, 0)), finished(60, 0, 0, 0, 0, 0), "none", "", "", -1},
		// 1/60 vs 5/52, 8 treatment sessions lost: p = 0.095; 3 of the 8 corrupted would
		// make treatment significantly higher.
		{"not significant, treatment lost", finished(60, 0), join(finished(52, 0, 0, 0, 0, 0), lostAt("timeout", 8, 0, 0)), "none", "treatment", "higher", 3},
		// 2/45 (15 control lost) vs 12/60: p = 0.022; 2 of the 15 lost control sessions
		// corrupted would remove the difference.
		{"significant, control lost", join(finished(45, 0, 0), lostAt("error", 15, 0, 0)), finished(60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), "higher", "control", "none", 2},
		// 58/60 vs 48/50, 10 treatment sessions lost, more than control's 2 clean ones:
		// p = 1. No labelling makes treatment higher; counted clean (48/60) it is lower
		// (p = 0.008). The search on treatment's side must not count control's sessions
		// past its own 60.
		{"not significant, treatment lost more than control has clean", finished(60, make([]int, 58)...), join(finished(50, make([]int, 48)...), lostAt("error", 10, 0, 0)), "none", "control", "lower", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db, ref := recordFixture(t, fixture{example: "quickstart", runs: []launch{
				{arm: "control", sessions: tc.control}, {arm: "treatment", sessions: tc.treatment}}})
			v, err := Build(context.Background(), db, ref)
			if err != nil {
				t.Fatal(err)
			}
			tp := v.Arms[1].Compare.Tipping
			if tp == nil {
				t.Fatal("no tipping point although sessions were lost")
			}
			if tp.From != tc.from || tp.Sessions != tc.sessions || tp.Side != tc.side || tp.To != tc.to {
				t.Errorf("tipping point = %+v, want from %s: %d of %s's lost sessions → %s", *tp, tc.from, tc.sessions, tc.side, tc.to)
			}
		})
	}
}

func TestAAVerdictSaysWhetherTheCheckPassed(t *testing.T) {
	v := buildExample(t, "aa")
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "A/A check passed: ") {
		t.Errorf("A/A headline = %q", head)
	}
	for _, g := range []string{"regression", "difference", "corruption", "loss"} {
		if failed, why := v.Gate(g); failed {
			t.Errorf("gate %s failed on a clean A/A: %s", g, why)
		}
	}

	// The same identical arms, but the pipeline sees a difference in every launch.
	var runs []launch
	for b := range 4 {
		runs = append(runs, launch{arm: "a1", block: b, sessions: finished(60)}, launch{arm: "a2", block: b, sessions: finished(60, 0, 0, 1, 1, 2, 2, 3, 3)})
	}
	db, ref := recordFixture(t, fixture{example: "aa", runs: runs})
	if v, err := Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	} else if head := v.Headline()[0]; !strings.HasPrefix(head, "A/A check FAILED: the pipeline claims a difference between identical arms (a2's corruption higher).") {
		t.Errorf("A/A with a significant difference: headline %q", head)
	} else {
		checkStructure(t, markdown(t, v))
	}

	// One launch per arm: identical arms whose launches differ would go unnoticed.
	db, ref = recordFixture(t, fixture{example: "aa", runs: []launch{
		{arm: "a1", sessions: finished(60)},
		{arm: "a2", sessions: finished(60, 0, 0, 1, 1, 2, 2, 3, 3)},
	}})
	if v, err := Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	} else if head := v.Headline()[0]; !strings.HasPrefix(head, "A/A check not decided: ") {
		t.Errorf("A/A with one launch per arm: headline %q", head)
	}

	// Identical arms, but one crashed: the check cannot pass.
	db, ref = recordFixture(t, fixture{example: "aa", runs: []launch{
		{arm: "a1", sessions: finished(60)},
		{arm: "a2", status: "crashed", err: "engine exited on its own during the workload (exit code 139)", sessions: join(finished(58), lostAt("aborted", 2, 0, 1))},
	}})
	if v, err := Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	} else if head := v.Headline()[0]; !strings.HasPrefix(head, "A/A check FAILED: the engine of a2 crashed (block 0)") {
		t.Errorf("A/A with a crash: headline %q", head)
	}
}

// A workload that does not stream measures no inter-token latency in any launch: that is
// no claim to test, and no number of launches is advised for it.
func TestUnmeasuredMetricIsNoClaim(t *testing.T) {
	var runs []launch
	for b := range 3 {
		for _, arm := range []string{"f16", "f16-again", "q8_0", "q4_0"} {
			runs = append(runs, launch{arm: arm, block: b, sessions: finished(48)})
		}
	}
	db, ref := recordFixture(t, fixture{example: "ollama-kv-cache", runs: runs, oneEvent: true})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown(t, v)
	for _, c := range v.Claims.Claims {
		if c.Outcome == MetricITL {
			t.Errorf("an inter-token latency claim no launch measured: %+v", c)
		}
	}
	if strings.Contains(md, "inter-token latency. To decide") || strings.Contains(md, "run 2 launches per arm") {
		t.Errorf("the verdict advises launches for a metric the workload never measures:\n%s", md)
	}
	speed := 0
	for _, c := range v.Claims.Claims {
		if c.Outcome == MetricThroughput && c.LaunchesArm == 3 && c.LaunchesBase == 3 {
			speed++
		}
	}
	if speed != 3 {
		t.Errorf("%d tok/s claims on 3 launches against 3, want one per arm against f16", speed)
	}

	// One arm whose replies came in one event: its inter-token latency is no claim, the
	// others' are, and nothing advises launches.
	for i := range runs {
		runs[i].oneEvent = runs[i].arm == "q4_0"
	}
	db, ref = recordFixture(t, fixture{example: "ollama-kv-cache", runs: runs})
	if v, err = Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	}
	md = markdown(t, v)
	var itl []string
	for _, c := range v.Claims.Claims {
		if c.Outcome == MetricITL {
			itl = append(itl, c.Arm)
		}
	}
	if !slices.Equal(itl, []string{"f16-again", "q8_0"}) {
		t.Errorf("inter-token latency claims for %v, want f16-again and q8_0 (q4_0 measured none)", itl)
	}
	if strings.Contains(md, "To decide them, run") || strings.Contains(md, "To decide it, run") {
		t.Errorf("the verdict advises launches for a metric an arm never measured:\n%s", md)
	}
	if !strings.Contains(md, "Not compared, because no launch of the arm measured it while other arms' launches did: inter-token latency of q4_0 at all sessions.") {
		t.Errorf("the verdict does not say q4_0's inter-token latency went unmeasured:\n%s", md)
	}
}

func TestFactorialHeadlineSaysWhatTheLaunchesAllow(t *testing.T) {
	v := buildExample(t, "factorial")
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "The largest difference from the baseline bf16_index_k=0,hicache=off") || !strings.HasSuffix(head, "2 launches per arm (`launches: 2`) can test it, or one per arm weighed against an A/A noise floor (`--noise-floor`).") {
		t.Errorf("headline: %q", head)
	}
	md := markdown(t, v)
	if strings.Count(md, "<summary>Factorial model</summary>") != 1 || strings.Count(md, "| term |") != 1 {
		t.Errorf("the factorial model is not one table:\n%s", md)
	}
	// One launch per cell: no claim can be tested, and none is charged a share of alpha.
	if strings.Contains(md, "This verdict tests") || !strings.Contains(md, "Not attributable with these launches") {
		t.Errorf("the caveats misstate what was tested:\n%s", md)
	}
}

func TestCaveatsAreMergedAndRanked(t *testing.T) {
	v := buildExample(t, "crash")
	if len(v.Caveats) == 0 || v.Caveats[0].Kind != CaveatProblem || !strings.HasPrefix(v.Caveats[0].Text, "Launches that did not finish: treatment/b0 crashed") {
		t.Fatalf("the crash is not the first caveat: %+v", v.Caveats)
	}
	f := buildExample(t, "factorial")
	bounds := 0
	for i, c := range f.Caveats {
		if c.Kind == CaveatBound {
			bounds++
		}
		if i > 0 && c.Kind < f.Caveats[i-1].Kind {
			t.Errorf("caveat %d (%s) ranked after one of kind %s: %+v", i, c.Kind, f.Caveats[i-1].Kind, f.Caveats)
		}
	}
	if bounds != 1 {
		t.Errorf("%d zero-event caveats, want them merged into 1: %+v", bounds, f.Caveats)
	}
	if last := f.Caveats[len(f.Caveats)-1]; last.Kind != CaveatBound && last.Kind != CaveatMultiplicity {
		t.Errorf("caveats not ranked (bounds and multiplicity last): %+v", f.Caveats)
	}
	// What the launches could not test is said under the claims instead, once.
	md := markdown(t, f)
	for _, c := range f.Caveats {
		if listed := strings.Contains(md, "- "+c.Text+"\n"); listed != (c.Kind != CaveatUntested) {
			t.Errorf("the markdown lists the %s caveat %v: %q", c.Kind, listed, c.Text)
		}
	}
}

func TestBuildUnknownExperiment(t *testing.T) {
	db, _ := recordFixture(t, examples["quickstart"])
	if _, err := Build(context.Background(), db, 1<<40); err == nil || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

func TestWriteFilesWritesChartsBesideTheMarkdown(t *testing.T) {
	v := buildExample(t, "quickstart")
	dir := t.TempDir()
	path := filepath.Join(dir, "out", "verdict.md")
	if err := v.WriteFiles(path, outfile.Guard{}); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(path)
	for _, chart := range []string{"verdict-rates.svg", "verdict-rounds.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, "out", chart))
		if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("treatment")) {
			t.Errorf("%s: %v (%d bytes)", chart, err, len(b))
		}
		if !bytes.Contains(md, []byte("("+chart+")")) {
			t.Errorf("markdown does not link %s", chart)
		}
	}
}

func TestSentencesCountsWhatAReaderCounts(t *testing.T) {
	for text, want := range map[string]int{
		"treatment corrupted 9 of 60 sessions (15.0%) against 0 of 60 (0.0%). Fisher's exact test gives p = 0.003 ≤ alpha 0.05: higher.": 2,
		"bf16_index_k=1,hicache=on: a difference of +8.3 points (95% CI +0.7 to +18.1).":                                                 1,
		"One. Two! Three? Four.": 4,
	} {
		if got := len(sentences(text)); got != want {
			t.Errorf("%d sentences in %q, want %d", got, text, want)
		}
	}
	_ = fmt.Sprint()
}

// bad is n finished sessions, all corrupted from round 1.
func bad(n, of int) []outcome {
	r := make([]int, n)
	for i := range r {
		r[i] = 1
	}
	return finished(of, r...)
}

// TestEveryDesignReadsInThirtySeconds checks the structure of verdicts beyond the
// examples' goldens: the GPU examples, several arms with one crashed, a crashed baseline,
// a sequential design that never crossed, a non-inferiority margin and an A/A with a
// significant difference. Each must keep a headline of at most three sentences, say
// nothing twice, and never call a crashed arm significantly anything.
func TestEveryDesignReadsInThirtySeconds(t *testing.T) {
	level := func(b, h, g int) string {
		return fmt.Sprintf("bf16_index_k=%d,hicache=%s,gate=%d", b, map[int]string{0: "off", 1: "on"}[h], g)
	}
	var h200 []launch // docs/results/2026-11-30-h200/run3: 11/60 and 54/60 where hicache=on,gate=0
	for _, b := range []int{0, 1} {
		for _, h := range []int{0, 1} {
			for _, g := range []int{0, 1} {
				n := 0
				if h == 1 && g == 0 {
					n = map[int]int{0: 11, 1: 54}[b]
				}
				h200 = append(h200, launch{arm: level(b, h, g), sessions: bad(n, 60)})
			}
		}
	}
	factorialCrash := fixture{example: "factorial", runs: []launch{
		{arm: "bf16_index_k=0,hicache=off", sessions: finished(60)},
		{arm: "bf16_index_k=0,hicache=on", sessions: finished(60)},
		{arm: "bf16_index_k=1,hicache=off", sessions: finished(60, 1)},
		{arm: "bf16_index_k=1,hicache=on", status: "wedged", err: "engine wedged: it still answers but completes no turn (60 turns in a row failed, none completed)",
			sessions: join(bad(4, 20), lostAt("timeout", 40, 2, 1))},
	}}
	cases := map[string]fixture{
		"gpu factorial (2^3, three interactions)": {example: "gpu-factorial", runs: h200},
		"gpu decisive": {example: "gpu-decisive", runs: []launch{
			{arm: "control", sessions: finished(60)}, {arm: "treatment", sessions: bad(22, 60)}}},
		"gpu low load": {example: "gpu-low-load", runs: []launch{
			{arm: "control", sessions: finished(60)}, {arm: "treatment", sessions: finished(60)}}},
		"factorial with a wedged arm": factorialCrash,
		"crashed baseline": {example: "quickstart", runs: []launch{
			{arm: "control", status: "crashed", err: "engine exited on its own during the workload (exit code 139)", sessions: join(finished(20), lostAt("aborted", 40, 0, 1))},
			{arm: "treatment", sessions: bad(9, 60)}}},
		"sequential, never crossed": {example: "sequential", runs: []launch{
			{arm: "control", block: 0, sessions: finished(60)}, {arm: "treatment", block: 0, sessions: finished(60, 1)},
			{arm: "control", block: 1, sessions: finished(60)}, {arm: "treatment", block: 1, sessions: finished(60)},
			{arm: "control", block: 2, sessions: finished(60, 2)}, {arm: "treatment", block: 2, sessions: finished(60, 1)},
			{arm: "control", block: 3, sessions: finished(60)}, {arm: "treatment", block: 3, sessions: finished(60, 3)}}},
		"aa failed": {example: "aa", runs: []launch{
			{arm: "a1", sessions: finished(60)}, {arm: "a2", sessions: bad(8, 60)}}},
		"interrupted": {example: "quickstart", status: "interrupted", runs: []launch{
			{arm: "control", sessions: finished(60)},
			{arm: "treatment", status: "interrupted", sessions: join(finished(30, 1, 2), lostAt("aborted", 30, 0, 1))}}},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			db, ref := recordFixture(t, f)
			v, err := Build(context.Background(), db, ref)
			if err != nil {
				t.Fatal(err)
			}
			md := markdown(t, v)
			checkStructure(t, md)
			for _, a := range v.Arms {
				if len(a.Problems) > 0 && strings.Contains(headlineOf(md), "**"+a.Name+"** (+") {
					t.Errorf("the headline judges %s, which has no decision:\n%s", a.Name, headlineOf(md))
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("headline: %s", headlineOf(md))
			}
		})
	}

	// A non-inferiority margin adds its own decision to a two-arm headline.
	db := record(t, "ni", "session", store.Design{Blocks: 1, Margin: 0.1}, []fixtureRun{
		{arm: "baseline", sessions: 200, corrupted: 2},
		{arm: "fixed", sessions: 200, corrupted: 1, lost: 12},
	})
	_, md := build(t, db, "ni")
	checkStructure(t, md)
}

// TestConditionsFlagAnArmThatCarriedAnotherLoad: the verdict's Conditions section shows
// each arm's running requests and throughput from the scraped metrics, and flags an arm
// whose engine ran at another load than the baseline's (here half of it), in the table
// and among the caveats; arms at the same load are not flagged.
func TestConditionsFlagAnArmThatCarriedAnotherLoad(t *testing.T) {
	same := buildExample(t, "quickstart")
	if len(same.Conditions) != 2 {
		t.Fatalf("conditions of %d arms; want 2", len(same.Conditions))
	}
	for i, c := range same.Conditions {
		if c.Scrapes != 9 || len(c.Differs) != 0 {
			t.Errorf("%s: %d scrapes, differs %v; want 9 and none", same.Arms[i].Name, c.Scrapes, c.Differs)
		}
	}
	if got := same.Conditions[same.Baseline].Values[CondRunning]; got != 58 {
		t.Errorf("control ran %v requests on average; want 58 (the last scrape, as the workload ended, weighs nothing)", got)
	}
	if got := same.Conditions[same.Baseline].Values[CondThroughput]; math.Abs(got-45*58) > 1e-6 {
		t.Errorf("control's throughput %v; want %v", got, 45*58)
	}
	md := markdown(t, same)
	if !strings.Contains(md, "<summary>Conditions</summary>") || !strings.Contains(md, "| treatment | 9 | 57.0 | 57.0 | 0.0 | 28.5% | 40.0% | 2565 tok/s | same as control |") {
		t.Errorf("the Conditions section does not show the arms' load:\n%s", md)
	}

	f := examples["quickstart"]
	f.runs = []launch{
		{arm: "treatment", sessions: finished(60, 0, 1, 1), running: 29},
		{arm: "control", sessions: finished(60), running: 58},
	}
	db, ref := recordFixture(t, f)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	treatment := v.Conditions[v.armIndex("treatment")]
	if want := []string{CondRunning, CondTokenUsage, CondThroughput}; !slices.Equal(treatment.Differs, want) {
		t.Errorf("treatment differs in %v; want %v", treatment.Differs, want)
	}
	md = markdown(t, v)
	if !strings.Contains(md, "**differ**: running requests, token usage, throughput") {
		t.Errorf("the Conditions table does not flag treatment:\n%s", md)
	}
	if !strings.Contains(strings.Join(caveatTexts(v.Caveats), "\n"), "The engines did not carry the same load: treatment (running requests 29.0 against 58.0") {
		t.Errorf("the caveats do not say the load differed: %+v", v.Caveats)
	}
}

// A cache tier raises the cache hit rate at the same load: that is what the pin does to
// the engine, not a load the arms were compared under, and the verdict says it so. Only
// running and queued requests are the load.
func TestConditionsTellTheEnginesStateFromItsLoad(t *testing.T) {
	f := examples["quickstart"]
	f.runs = []launch{
		{arm: "treatment", sessions: finished(60, 0, 1, 1), running: 58, cacheHit: 0.9},
		{arm: "control", sessions: finished(60), running: 58},
	}
	db, ref := recordFixture(t, f)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	if d := v.Conditions[v.armIndex("treatment")].Differs; !slices.Equal(d, []string{CondCacheHit}) {
		t.Fatalf("treatment differs in %v; want the cache hit rate alone", d)
	}
	caveats := strings.Join(caveatTexts(v.Caveats), "\n")
	if strings.Contains(caveats, "did not carry the same load") ||
		!strings.Contains(caveats, "Under the same load, the engines' state differed: treatment (cache hit rate 90.0% against 40.0%) against control") {
		t.Errorf("a cache hit rate the pin raised is called another load:\n%s", caveats)
	}
}

// An arm whose engine wedged carried less load because it stopped serving: that is the
// effect measured, not a condition it was compared under, so its stopped launches are
// left out of its conditions and never flagged as a confound.
func TestConditionsLeaveOutLaunchesThatStopped(t *testing.T) {
	f := examples["quickstart"]
	f.runs = []launch{
		{arm: "control", sessions: finished(60), running: 58},
		{arm: "treatment", status: "wedged", err: "engine wedged: no token for 30s", sessions: join(finished(20), lostAt("timeout", 40, 0, 1)), running: 5},
	}
	db, ref := recordFixture(t, f)
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	treatment := v.Conditions[v.armIndex("treatment")]
	if treatment.Stopped != 1 || treatment.Scrapes != 0 || len(treatment.Differs) != 0 {
		t.Errorf("treatment's conditions: %+v", treatment)
	}
	if strings.Contains(strings.Join(caveatTexts(v.Caveats), "\n"), "did not carry the same load") {
		t.Errorf("a wedged engine's load flagged as a confound: %q", v.Caveats)
	}
	if md := markdown(t, v); !strings.Contains(md, "Launches whose engine wedged or crashed are left out (treatment's 1)") {
		t.Errorf("the Conditions section does not say what it left out:\n%s", md)
	}
}

// TestConditionsUnknownWithoutMetrics: with no metrics recorded the section says the
// load is unknown and how to get it, rather than staying silent.
func TestConditionsUnknownWithoutMetrics(t *testing.T) {
	v := buildExample(t, "aa")
	if len(v.Conditions) != 0 {
		t.Fatalf("conditions without metrics: %+v", v.Conditions)
	}
	if md := markdown(t, v); !strings.Contains(md, "No server metrics were recorded") || !strings.Contains(md, "--enable-metrics") {
		t.Errorf("the Conditions section does not say the load is unknown:\n%s", md)
	}
}

// TestRoundsNumberedAsInTheDatabase: the verdict's rounds are turns.round as stored, so
// that a reader can go from a row of the table to the turns behind it.
func TestRoundsNumberedAsInTheDatabase(t *testing.T) {
	db, ref := recordFixture(t, examples["quickstart"])
	var stored []int
	if err := db.Select(&stored, `SELECT DISTINCT round FROM turns ORDER BY round`); err != nil {
		t.Fatal(err)
	}
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown(t, v)
	section := md[strings.Index(md, "<summary>Corruption by round</summary>"):]
	section = section[:strings.Index(section, "</details>")]
	rows := regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(section, -1)
	var shown []int
	for _, r := range rows {
		var n int
		fmt.Sscan(r[1], &n)
		shown = append(shown, n)
	}
	if !slices.Equal(shown, stored) {
		t.Errorf("the verdict shows rounds %v; the database stores %v", shown, stored)
	}
}

func TestServerFactsShowWhichNestedSettingDiffered(t *testing.T) {
	faults := func(wedge bool) map[string]any {
		return map[string]any{"kv_transfer_loop_dead": false, "mass_abort_wedge": false,
			"nixl_abort_wedge": false, "scheduler_overlap_deadlock": wedge}
	}
	v := &Verdict{Runs: []RunFact{
		{Arm: "control", ServerInfo: map[string]any{"port": 1.0, "tp_size": 8.0, "refserve_faults": faults(false)}},
		{Arm: "treatment", ServerInfo: map[string]any{"port": 2.0, "tp_size": 8.0, "refserve_faults": faults(true)}},
	}}
	got := v.serverFacts()
	if !strings.Contains(got, "4 identical across runs") {
		t.Errorf("want tp_size and three unchanged faults counted identical:\n%s", got)
	}
	if !strings.Contains(got, "| run | refserve_faults.scheduler_overlap_deadlock |") ||
		!strings.Contains(got, "| control/b0 | false |") || !strings.Contains(got, "| treatment/b0 | true |") {
		t.Errorf("the differing nested setting is not its own column:\n%s", got)
	}
}

// An experiment the user interrupted says so first and names the command that finishes
// it; the sessions its interrupted launch never finished are not the engine's losses.
func TestInterruptedVerdictNamesResume(t *testing.T) {
	db, ref := recordFixture(t, fixture{example: "quickstart", status: "interrupted", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", status: "interrupted", sessions: join(finished(30, 1, 2), lostAt("aborted", 30, 0, 1))}}})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "Interrupted before its plan was done") || !strings.Contains(head, fmt.Sprintf("`arbiter resume %d` finishes it", ref)) {
		t.Errorf("headline does not say the run was interrupted and how to finish it: %q", head)
	}
	tr := v.Arms[1]
	if tr.Lost != 0 || len(tr.Problems) != 0 || strings.Contains(head, "inconclusive") {
		t.Errorf("the interrupted launch's unfinished sessions count against the engine: lost %d, problems %v\n%s", tr.Lost, tr.Problems, head)
	}
}

// A launch the user's interrupt cut short is left out of the analysis whole: the
// sessions it finished first are its shortest, and where a fault ends a session's round
// early they are its faulty ones. Here treatment's cut-short launch finished 20 sessions,
// 10 of them corrupted, where its full launch corrupted 2 of 60: counted, they would
// make a difference of identical arms. The verdict analyses the full launches only, says
// what was left out, and the corruption gate still fails on the corrupted responses seen.
func TestALaunchCutShortIsLeftOutOfTheAnalysis(t *testing.T) {
	db, ref := recordFixture(t, fixture{example: "quickstart-launches", status: "interrupted", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", sessions: finished(60)},
		{arm: "control", block: 1, sessions: finished(60)},
		{arm: "treatment", block: 1, status: "interrupted", sessions: join(finished(20, slices.Repeat([]int{1}, 10)...), lostAt("aborted", 40, 3, 1))}}})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	tr := v.Arms[1]
	if tr.Name != "treatment" || tr.Sessions != 60 || tr.Corrupted != 0 || tr.Lost != 0 || tr.CorruptedThenLost != 0 || tr.CorruptedThenCut() != 13 {
		t.Errorf("%s: %d of %d analysed sessions corrupted, lost %d, corrupted then lost %d, corrupted in launches cut short %d; want 0 of 60, 0, 0 and 13",
			tr.Name, tr.Corrupted, tr.Sessions, tr.Lost, tr.CorruptedThenLost, tr.CorruptedThenCut())
	}
	if tr.Launches.Total != 2 || tr.Launches.Interrupted != 1 || tr.Launches.Judged() != 1 {
		t.Errorf("treatment's launches: %+v, judged %d; want 2, one interrupted, one judged", tr.Launches, tr.Launches.Judged())
	}
	if c := tr.Compare; c == nil || c.Significant || c.FisherP != 1 {
		t.Errorf("treatment against control on the full launches (0/60 against 0/120): %+v", c)
	}
	for _, p := range v.Pairs {
		if p.Pairs != 60 {
			t.Errorf("paired sessions: %d pairs, want the 60 of block 0 (block 1's treatment launch was cut short)", p.Pairs)
		}
	}
	md := markdown(t, v)
	for _, want := range []string{
		"| treatment | 60 | 0 | 0.0% |",
		"The launch cut short, treatment/b1, is left out of the analysis, with the 20 sessions it finished (10 corrupted) and the 40 it left unfinished (3 with a corrupted response): the sessions a launch finishes first need not be a fair sample of its sessions",
		"this judges the launches that finished",
		"the rest of its plan (4 launches per arm) can test for one",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the verdict does not say %q:\n%s", want, md)
		}
	}
	if got := v.DecisionWords(1); got != "not attributable (1 launch per arm; the rest of its plan (4) can test it)" {
		t.Errorf("show's decision cell: %q", got)
	}
	if failed, why := v.Gate("corruption"); !failed || !strings.HasSuffix(why, "treatment: 0 of 60 analysed sessions corrupted, 13 more corrupted in launches cut short") {
		t.Errorf("the corruption gate: failed %v, %q", failed, why)
	}
	if got := v.Summary()["arms"].([]map[string]any)[1]["corrupted_then_cut_short"]; got != 13 {
		t.Errorf("--json corrupted_then_cut_short = %v, want 13", got)
	}
}

// An experiment whose arbiter was killed mid-launch is judged as an interrupted one: its
// launch still recorded as running is cut short, left out of the analysis, and the
// headline says how to finish the experiment, in the database the user named.
func TestAnAbandonedExperimentLeavesItsUnfinishedLaunchOut(t *testing.T) {
	db, ref := recordFixture(t, fixture{example: "quickstart", status: "running", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", status: "ready", sessions: finished(20, slices.Repeat([]int{1}, 10)...)}}})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	v.DB = "results/ab.db"
	if st := v.Experiment.State(); st != store.ExperimentAbandoned {
		t.Fatalf("state %s, want abandoned (no arbiter holds its lease)", st)
	}
	tr := v.Arms[1]
	if tr.Sessions != 0 || tr.Launches.Unfinished != 1 || tr.Launches.Judged() != 0 || tr.CorruptedThenCut() != 10 {
		t.Errorf("treatment: %d analysed, launches %+v (judged %d), %d corrupted in launches cut short; want 0, 1 unfinished, 0 judged, 10",
			tr.Sessions, tr.Launches, tr.Launches.Judged(), tr.CorruptedThenCut())
	}
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "Abandoned (its arbiter was killed, or its machine went away) before its plan was done") ||
		!strings.Contains(head, fmt.Sprintf("`arbiter resume %d --db results/ab.db` finishes it", ref)) {
		t.Errorf("the headline does not say the experiment was abandoned and how to finish it: %q", head)
	}
	if md := markdown(t, v); !strings.Contains(md, "The launch cut short, treatment/b0, is left out of the analysis, with the 20 sessions it finished (10 corrupted)") {
		t.Errorf("the caveat does not name the launch left out:\n%s", md)
	}
}

// An experiment that failed in block 1 of 4 (an engine that stopped running as pinned)
// is judged on block 0, and says so first: that it failed before its plan was done, why,
// and that its resume runs the rest once the cause is fixed. Before, its headline gave
// the advice of the rest of its plan as if nothing had stopped it.
func TestAFailedExperimentSaysItStoppedBeforeItsPlanWasDone(t *testing.T) {
	why := "arm treatment's engine does not run as pinned (BF16_INDEX_K: the engine reports 0)"
	db, ref := recordFixture(t, fixture{example: "quickstart-launches", status: "failed", err: why, runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", sessions: finished(60, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)}}})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	v.DB = "results/ab.db"
	head := v.Headline()[0]
	if !strings.HasPrefix(head, "Failed before its plan was done (6 of its launches were cut short or never ran; the caveats say why)") ||
		!strings.Contains(head, fmt.Sprintf("`arbiter resume %d --db results/ab.db` runs the rest once the cause is fixed", ref)) {
		t.Errorf("the headline does not say the experiment failed mid-plan: %q", head)
	}
	if md := markdown(t, v); !strings.Contains(md, "The experiment **failed** ("+why+"): the counts cover only") {
		t.Errorf("the caveat does not say why it failed:\n%s", md)
	}
	// A failure after the whole plan ran (an arm without one session) has nothing left
	// to run: no such headline.
	var all []launch
	for b := range 4 {
		all = append(all, launch{arm: "control", block: b, sessions: finished(60)}, launch{arm: "treatment", block: b, sessions: finished(60, 0, 1)})
	}
	db, ref = recordFixture(t, fixture{example: "quickstart-launches", status: "failed", err: why, runs: all})
	if v, err = Build(context.Background(), db, ref); err != nil {
		t.Fatal(err)
	}
	if head := v.Headline()[0]; strings.HasPrefix(head, "Failed") {
		t.Errorf("a failure after the whole plan says its plan was not done: %q", head)
	}
}

// Two launches an arm are judged by Welch's t test, whose interval on one degree of
// freedom can pass ±100 points. The caveat that names the differences a claim cannot
// rule out says what the Claims table says of it (too wide to inform), never a difference
// of rates no two rates can have.
func TestThePowerCaveatPrintsNoDifferenceBeyondAHundredPoints(t *testing.T) {
	db, ref := recordFixture(t, fixture{example: "quickstart-launches", runs: []launch{
		{arm: "control", sessions: finished(60)},
		{arm: "treatment", sessions: finished(60)},
		{arm: "control", block: 1, sessions: finished(60)},
		{arm: "treatment", block: 1, sessions: finished(60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)},
	}})
	v, err := Build(context.Background(), db, ref)
	if err != nil {
		t.Fatal(err)
	}
	var c *Comparison
	for _, a := range v.Arms {
		if a.Name == "treatment" {
			c = a.Compare
		}
	}
	if c == nil || c.Launch == nil || c.Significant || !(c.Launch.CI.Hi > 1) {
		t.Fatalf("the fixture does not give a claim without a difference whose interval passes +100 points: %+v", c)
	}
	md := markdown(t, v)
	var caveat string
	for line := range strings.Lines(md) {
		if strings.Contains(line, "No difference shown is not the same as no difference") {
			caveat = line
		}
	}
	if !strings.Contains(caveat, "treatment's by any amount (its interval is too wide to inform)") {
		t.Errorf("the caveat does not say treatment's interval is too wide to inform: %q", caveat)
	}
	for _, m := range regexp.MustCompile(`([-+]?[0-9.]+) (to|points)`).FindAllStringSubmatch(caveat, -1) {
		var x float64
		if _, err := fmt.Sscan(m[1], &x); err == nil && math.Abs(x) > 100 {
			t.Errorf("the caveat names a difference of %v points: %q", x, caveat)
		}
	}
	if !strings.Contains(md, "| corruption | treatment | control | 2 vs 2 | +25.0 pts | "+tooWide+" |") {
		t.Errorf("the Claims table does not call the interval too wide:\n%s", md)
	}
}

// TestTheJudgeDecidesWhetherResponsesAreClustered: whether responses may count as
// independent is the judge's decision, a field the writers read.
func TestTheJudgeDecidesWhetherResponsesAreClustered(t *testing.T) {
	v := buildExample(t, "quickstart4")
	rv := v.Responses
	if rv == nil || !rv.Available || !rv.Clustered || !(rv.DesignEffect > clusteredDesignEffect) {
		t.Fatalf("responses: %+v", rv)
	}
	if md := markdown(t, v); !strings.Contains(md, "But the responses of a session are correlated") {
		t.Errorf("the markdown does not say the responses are correlated:\n%s", md)
	}
	rv.Clustered = false
	if md := markdown(t, v); !strings.Contains(md, "so the two views agree") {
		t.Errorf("the markdown decides clustering itself, not from the judge's field:\n%s", md)
	}
}
