package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/internal/testkit/testbin"
	"github.com/arbiterlab/arbiter/openai"
	"github.com/arbiterlab/arbiter/store"
	"github.com/arbiterlab/arbiter/toolmodel"
)

// These tests drive ollama, an engine arbiter did not write, built for the CPU (go install
// github.com/ollama/ollama@v0.6.5; CI builds it and sets ARBITER_REQUIRE_OLLAMA=1).

// withOllama writes the example at path into dir, with the changes of r if any, its
// engine run from the test's ollama binary by path (the tests run in parallel, so none
// changes $PATH), and returns the copy's path.
func withOllama(t *testing.T, path, dir string, r *strings.Replacer) string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	if r != nil {
		text = r.Replace(text)
	}
	// The copy reads the examples' models where they are.
	models, err := filepath.Abs(filepath.Join(filepath.Dir(path), "models"))
	if err != nil {
		t.Fatal(err)
	}
	text = strings.ReplaceAll(text, "file: models/", "file: "+models+"/")
	pinned := strings.Replace(text, "  preset: ollama\n", fmt.Sprintf("  preset: ollama\n  command: [%q, serve]\n", testbin.Ollama(t)), 1)
	if pinned == text {
		t.Fatalf("%s has no ollama engine to run from a path", path)
	}
	spec := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(spec, []byte(pinned), 0o644); err != nil {
		t.Fatal(err)
	}
	return spec
}

// On a CPU, ollama leaves flash attention off and its KV cache in f16 whatever its env
// asks, and says so only in its log: the KV-cache example is refused before any traffic,
// with exit code 5, and its verdict names the pins and what the engine reported.
func TestOllamaKVCacheExampleRefusedOnCPU(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := withOllama(t, "../../examples/ollama-kv-cache.yaml", dir, nil)
	db, out := filepath.Join(dir, "r.db"), filepath.Join(dir, "kv.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", out)
	if code != exitPinRefused {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, exitPinRefused, stdout, stderr)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**Not judged: pins did not take effect.**", "Arm **q4_0** pinned `OLLAMA_KV_CACHE_TYPE=q4_0`, and its engine reported `f16`",
		"type_k = 'f16'", "`OLLAMA_FLASH_ATTENTION=1`", "<summary>Pins as the engines reported them</summary>", "| q8_0 | b0 | `OLLAMA_KV_CACHE_TYPE=q8_0` | f16 | not in effect |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the verdict does not say %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "<summary>Results by arm</summary>") {
		t.Errorf("a refused experiment's verdict shows results:\n%s", md)
	}
	st, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var sent int
	if err := st.Get(&sent, `SELECT count(*) FROM turns`); err != nil || sent != 0 {
		t.Errorf("%d turns recorded (%v): a refused experiment sends no traffic", sent, err)
	}
	var refused []string
	if err := st.Select(&refused, `SELECT a.name || ':' || p.got FROM pin_checks p JOIN runs r ON r.id = p.run_id JOIN arms a ON a.id = r.arm_id
		WHERE p.pin = 'OLLAMA_KV_CACHE_TYPE' AND p.status = ? ORDER BY a.name`, store.PinNotInEffect); err != nil {
		t.Fatal(err)
	}
	if strings.Join(refused, " ") != "q4_0:f16 q8_0:f16" {
		t.Errorf("KV-cache pins not in effect: %q, want q4_0's and q8_0's, reported f16", refused)
	}
}

// Divergence between arms is judged against the divergence between identical arms: the
// parallel example's p16-again repeats p16, and p1 is tested against that floor. The
// example's workload, made smaller to keep the suite short.
func TestOllamaParallelExampleJudgedAgainstTheFloor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := withOllama(t, "../../examples/ollama-parallel.yaml", dir,
		strings.NewReplacer("sessions: 32", "sessions: 6", "concurrency: 16", "concurrency: 6", "max_tokens: 32", "max_tokens: 12"))
	out := filepath.Join(dir, "p.md")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", filepath.Join(dir, "r.db"), "-o", out)
	if code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**p1** ", " from p16 ", "the A/A floor: ", "; the floor, p16-again, which repeats p16's pins, departed in ", "| p16-again | 6 |", "| the floor |",
		"| p1 | b0 | `OLLAMA_NUM_PARALLEL=1` | 1 | verified |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the verdict does not say %q:\n%s", want, md)
		}
	}
}

// The tool-calling model arbiter trains (examples/models/toolcall.gguf) calls tools on
// ollama: in the example's baseline, the turns that open a round (where the request asks
// for a tool) carry a call ollama parsed, with arguments the tool's schema accepts; and
// every prompt ollama counted has exactly the tokens toolmodel renders and tokenizes for
// the same request, so the model was trained on what the engine feeds it.
func TestOllamaToolcallsExampleCallsTools(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := withOllama(t, "../../examples/ollama-toolcalls.yaml", dir,
		strings.NewReplacer("sessions: 16", "sessions: 6", "concurrency: 4", "concurrency: 2"))
	db := filepath.Join(dir, "r.db")
	code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", filepath.Join(dir, "v.md"))
	if code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	st, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var turns []struct {
		Arm      string  `db:"arm"`
		Opens    bool    `db:"opens"`
		Calls    bool    `db:"calls"`
		Invalid  bool    `db:"invalid"`
		Prompt   int     `db:"prompt_tokens"`
		Request  string  `db:"request"`
		ErrorMsg *string `db:"error"`
	}
	if err := st.Select(&turns, `SELECT a.name AS arm,
		t.turn_index = (SELECT min(u.turn_index) FROM turns u WHERE u.run_id = t.run_id AND u.session_index = t.session_index AND u.round = t.round) AS opens,
		t.tool_calls IS NOT NULL AS calls,
		EXISTS (SELECT 1 FROM labels l WHERE l.run_id = t.run_id AND l.session_index = t.session_index AND l.turn_index = t.turn_index AND l.corrupted) AS invalid,
		t.prompt_tokens, t.request, t.error
		FROM turns t JOIN arms a ON a.id = t.arm_id ORDER BY a.name, t.session_index, t.turn_index`); err != nil {
		t.Fatal(err)
	}
	v, err := toolmodel.NewVocab()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := toolmodel.NewTokenizer(v)
	if err != nil {
		t.Fatal(err)
	}
	type count struct{ turns, calls, opens, validOpens, counted, matched int }
	by := map[string]*count{}
	for _, tr := range turns {
		c := by[tr.Arm]
		if c == nil {
			c = &count{}
			by[tr.Arm] = c
		}
		c.turns++
		if tr.Calls {
			c.calls++
		}
		if tr.Opens {
			c.opens++
			if tr.Calls && !tr.Invalid {
				c.validOpens++
			}
		}
		if tr.ErrorMsg != nil || tr.Prompt == 0 {
			continue
		}
		var req openai.ChatRequest
		if err := json.Unmarshal([]byte(tr.Request), &req); err != nil {
			t.Fatal(err)
		}
		text, err := toolmodel.Render(req.Tools, req.Messages)
		if err != nil {
			t.Fatal(err)
		}
		c.counted++
		if n := len(tok.Encode(text, true, true)); n == tr.Prompt {
			c.matched++
		} else if c.counted-c.matched <= 3 {
			t.Errorf("%s: ollama counted %d prompt tokens, toolmodel %d, for:\n%s", tr.Arm, tr.Prompt, n, text)
		}
	}
	base := by["p1"]
	if base == nil || base.opens == 0 {
		t.Fatalf("no turns of the baseline p1 recorded: %v", by)
	}
	if 10*base.calls < 3*base.turns {
		t.Errorf("p1: %d of %d turns carry a parsed tool call, want at least 30%%", base.calls, base.turns)
	}
	if 10*base.validOpens < 9*base.opens {
		t.Errorf("p1: %d of %d turns that open a round carry a schema-valid call, want at least 90%%", base.validOpens, base.opens)
	}
	for arm, c := range by {
		if c.counted == 0 || c.matched != c.counted {
			t.Errorf("%s: %d of %d prompts have the tokens ollama counted", arm, c.matched, c.counted)
		}
		t.Logf("%s: %d turns, %d with a call; %d open a round, %d with a valid call; %d of %d prompt counts match", arm, c.turns, c.calls, c.opens, c.validOpens, c.matched, c.counted)
	}
}

// engine.model.head_dim serves the same model with its heads padded (as CUDA flash
// attention needs for a quantized KV cache): on ollama's CPU backend the padded model
// writes, turn for turn, what the file as it is writes.
func TestOllamaPaddedHeadsServeTheSameReplies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	few := []string{"sessions: 16", "sessions: 3", "concurrency: 4", "concurrency: 3"}
	replies := func(name string, r *strings.Replacer) map[string]string {
		t.Helper()
		sub := filepath.Join(dir, name)
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		spec := withOllama(t, "../../examples/ollama-toolcalls.yaml", sub, r)
		db := filepath.Join(sub, "r.db")
		if code, stdout, stderr := runCLI(t, "run", spec, "--db", db, "-o", filepath.Join(sub, "v.md")); code != exitOK {
			t.Fatalf("%s: exit %d; stdout:\n%s\nstderr:\n%s", name, code, stdout, stderr)
		}
		st, err := store.OpenReadOnly(db)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var turns []struct {
			Key     string  `db:"key"`
			Content string  `db:"content"`
			Calls   *string `db:"tool_calls"`
			Error   *string `db:"error"`
		}
		if err := st.Select(&turns, `SELECT a.name || '/' || t.session_index || '/' || t.turn_index AS key,
			t.content, t.tool_calls, t.error FROM turns t JOIN arms a ON a.id = t.arm_id`); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, tr := range turns {
			if tr.Error != nil {
				t.Fatalf("%s: turn %s failed: %s", name, tr.Key, *tr.Error)
			}
			reply := tr.Content
			if tr.Calls != nil { // the calls without their ids, which ollama draws at random
				var calls []openai.ToolCall
				if err := json.Unmarshal([]byte(*tr.Calls), &calls); err != nil {
					t.Fatal(err)
				}
				for _, c := range calls {
					reply += " " + c.Function.Name + c.Function.Arguments
				}
			}
			out[tr.Key] = reply
		}
		return out
	}
	plain := replies("plain", strings.NewReplacer(few...))
	padded := replies("padded", strings.NewReplacer(append(few, "    context: 4096\n", "    context: 4096\n    head_dim: 128\n")...))
	if len(plain) < 18 || len(plain) != len(padded) {
		t.Fatalf("%d turns as the file is, %d padded", len(plain), len(padded))
	}
	calls := 0
	for key, want := range plain {
		if got := padded[key]; got != want {
			t.Errorf("turn %s: padded model wrote %q, the file as it is %q", key, got, want)
		}
		if strings.Contains(want, "{") {
			calls++
		}
	}
	if calls == 0 {
		t.Error("no turn carried a tool call: the comparison saw no calls")
	}
	t.Logf("%d turns, %d with tool calls, the same in both", len(plain), calls)
}
