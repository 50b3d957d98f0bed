package toolmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/arbiterlab/arbiter/workload"
)

// A faithful conversation is one the workload's own tools accept: every call it makes
// is answered, not refused.
func TestFaithfulConversationsCallAsAsked(t *testing.T) {
	for i := range 60 {
		var lc *workload.LongContextConfig
		if i%3 == 2 {
			lc = &workload.LongContextConfig{StartTokens: 300, CeilingTokens: 1500, AskFirst: i%2 == 0}
		}
		c := workload.FaithfulSession(5, i, 3, lc)
		calls := 0
		for j, m := range c.Messages {
			if m.Role == "tool" && strings.Contains(m.Content, `"error"`) {
				t.Errorf("session %d: the tool refused call %+v: %s", i, c.Messages[j-1].ToolCalls, m.Content)
			}
			calls += len(m.ToolCalls)
		}
		if calls != 3 {
			t.Errorf("session %d: %d calls in 3 rounds", i, calls)
		}
	}
}

// The model learns what the assistant writes and nothing else: after each assistant
// marker, up to and including the end of its turn.
func TestTokenizeLearnsTheAssistantsTurns(t *testing.T) {
	v, err := NewVocab()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(v)
	if err != nil {
		t.Fatal(err)
	}
	c := workload.FaithfulSession(5, 1, 2, nil)
	text, err := RenderConversation(c)
	if err != nil {
		t.Fatal(err)
	}
	d := Tokenize(tok, text)
	var turn []int32
	var turns []string
	for i, id := range d.Tokens {
		if d.Learn[i] {
			turn = append(turn, id)
			if tok.Decode([]int32{id}) == EndOfTurn {
				turns = append(turns, tok.Decode(turn))
				turn = nil
			}
		}
	}
	want := []string{
		CallOpen + `{"name":"` + c.Messages[2].ToolCalls[0].Function.Name + `","arguments":` + c.Messages[2].ToolCalls[0].Function.Arguments + `}` + CallClose + EndOfTurn,
		c.Messages[4].Content + EndOfTurn,
	}
	if len(turns) != 4 || turns[0] != want[0] || turns[1] != want[1] {
		t.Errorf("learned turns:\n%q\nwant first two:\n%q", turns, want)
	}
	if tok.Decode(d.Tokens[1:]) != text {
		t.Error("the tokens do not spell the text")
	}
}

func TestWriteCorpus(t *testing.T) {
	v, err := NewVocab()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := WriteCorpus(dir, CorpusConfig{Seed: 3, Conversations: 30, MaxEstimate: 3000, MaxTokens: 1500}, v, 2)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Docs+sum.Dropped != 30 || sum.Docs == 0 || sum.LongestDoc > 1500 || sum.LearnedTokens == 0 {
		t.Errorf("summary %+v", sum)
	}
	sizes := map[string]int64{"tokens.u16": 2 * sum.Tokens, "learn.u8": sum.Tokens, "docs.u64": 8 * int64(sum.Docs)}
	for name, want := range sizes {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() != want {
			t.Errorf("%s: %v bytes (%v), want %d", name, fi, err, want)
		}
	}
	back, err := ReadVocab(dir)
	if err != nil || len(back.Tokens) != len(v.Tokens) || back.Tokens[len(v.Tokens)-1] != v.Tokens[len(v.Tokens)-1] {
		t.Errorf("vocab read back: %v", err)
	}
}

// Every example that serves the model speaks the template it was trained in.
func TestExamplesServeTheModelWithItsTemplate(t *testing.T) {
	paths, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			Engine struct {
				Model struct {
					File     string `yaml:"file"`
					Template string `yaml:"template"`
				} `yaml:"model"`
			} `yaml:"engine"`
		}
		if err := yaml.Unmarshal(b, &spec); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if filepath.Base(spec.Engine.Model.File) != "toolcall.gguf" {
			continue
		}
		n++
		if spec.Engine.Model.Template != Template {
			t.Errorf("%s: the model's template differs from toolmodel.Template:\n%s", p, spec.Engine.Model.Template)
		}
	}
	if n < 3 {
		t.Errorf("%d examples serve the tool-calling model, want at least 3", n)
	}
}
