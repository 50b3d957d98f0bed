package toolmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/arbiterlab/arbiter/gguf"
	"github.com/arbiterlab/arbiter/workload"
)

// Specials are the chat format's markers as tokens: each role's marker a control token,
// the call markers user-defined ones.
func Specials() []gguf.Special {
	var s []gguf.Special
	for _, r := range roles {
		s = append(s, gguf.Special{Text: "<|" + r + "|>", Type: gguf.TokenControl})
	}
	return append(s, gguf.Special{Text: CallOpen, Type: gguf.TokenUserDefined}, gguf.Special{Text: CallClose, Type: gguf.TokenUserDefined})
}

// vocabSeed and vocabConversations fix the sample the vocabulary's words are counted
// in: the same code gives the same vocabulary.
const (
	vocabSeed          = 99
	vocabConversations = 3000
)

var wordRE = regexp.MustCompile(` ?[A-Za-z_]+`)

// NewVocab is the model's vocabulary: the chat markers, the byte and ASCII tokens, and
// every word of two or more letters (with the space before it, if any) that a sample of
// the training conversations holds, most saving first.
func NewVocab() (gguf.Vocab, error) {
	count := map[string]int{}
	for i := range vocabConversations {
		text, err := RenderConversation(trainingConversation(vocabSeed, i, 6000))
		if err != nil {
			return gguf.Vocab{}, err
		}
		for _, w := range wordRE.FindAllString(text, -1) {
			count[strings.ReplaceAll(w, " ", "▁")]++
		}
	}
	type word struct {
		text  string
		saves int
	}
	var words []word
	for w, n := range count {
		if l := len([]rune(w)); l >= 2 {
			words = append(words, word{w, n * (l - 1)})
		}
	}
	sort.Slice(words, func(i, j int) bool {
		if words[i].saves != words[j].saves {
			return words[i].saves > words[j].saves
		}
		return words[i].text < words[j].text
	})
	pieces := make([]string, len(words))
	for i, w := range words {
		pieces[i] = w.text
	}
	return gguf.BuildVocab(Specials(), pieces)
}

// NewTokenizer is the tokenizer of v, the model's vocabulary.
func NewTokenizer(v gguf.Vocab) (*gguf.Tokenizer, error) { return gguf.NewTokenizer(v, 1) }

// trainingConversation is conversation i of a corpus: two of three a tool-call agent
// session of one to six rounds, the third a long-context session whose case file grows
// to about maxEstimate tokens (the workload's own estimate), half of them with each
// request before its part of the case file.
func trainingConversation(seed int64, i, maxEstimate int) workload.Conversation {
	r := uint64(seed)*0x9E3779B97F4A7C15 ^ uint64(i)*0xBF58476D1CE4E5B9
	next := func(n int) int {
		r ^= r >> 31
		r *= 0x94D049BB133111EB
		r ^= r >> 29
		return int(r % uint64(n))
	}
	if i%3 != 2 {
		return workload.FaithfulSession(seed, i, 1+next(6), nil)
	}
	start := 300 + next(max(maxEstimate/4, 1))
	ceiling := start + next(max(maxEstimate-start, 1))
	lc := &workload.LongContextConfig{StartTokens: start, CeilingTokens: ceiling, AskFirst: next(2) == 0}
	if next(3) == 0 {
		lc.SharedPrefixTokens = -1
	}
	return workload.FaithfulSession(seed, i, 2+next(5), lc)
}

// Doc is one conversation's tokens, and which of them the model learns to write: every
// token after an assistant's marker up to and including its end of turn.
type Doc struct {
	Tokens []int32
	Learn  []bool
}

// Tokenize tokenizes training text as the engine tokenizes a prompt (begin-of-sequence
// first, markers parsed), and marks the assistant's tokens.
func Tokenize(tok *gguf.Tokenizer, text string) Doc {
	ids := tok.Encode(text, true, true)
	asst, _ := tok.ID(AssistantMarker)
	eot, _ := tok.ID(EndOfTurn)
	d := Doc{Tokens: ids, Learn: make([]bool, len(ids))}
	in := false
	for i, id := range ids {
		d.Learn[i] = in
		switch id {
		case asst:
			in = true
		case eot:
			in = false
		}
	}
	return d
}

// CorpusConfig says which conversations a corpus holds.
type CorpusConfig struct {
	Seed          int64 `json:"seed"`
	Conversations int   `json:"conversations"`
	// MaxEstimate is the long-context sessions' largest context, in the workload's
	// estimate (four characters a token); MaxTokens drops a conversation longer than it.
	MaxEstimate int `json:"max_estimate"`
	MaxTokens   int `json:"max_tokens"`
}

// CorpusSummary is what WriteCorpus wrote, also saved as corpus.json.
type CorpusSummary struct {
	Config        CorpusConfig `json:"config"`
	VocabSize     int          `json:"vocab_size"`
	Docs          int          `json:"docs"`
	Dropped       int          `json:"dropped"`
	Tokens        int64        `json:"tokens"`
	LearnedTokens int64        `json:"learned_tokens"`
	LongestDoc    int          `json:"longest_doc"`
}

// WriteCorpus tokenizes the corpus cfg describes into dir: tokens.u16 (every
// conversation's tokens, one after another, little-endian uint16), learn.u8 (1 where the
// model learns the token), docs.u64 (each conversation's first token's index) and
// corpus.json. workers conversations are rendered at once.
func WriteCorpus(dir string, cfg CorpusConfig, v gguf.Vocab, workers int) (CorpusSummary, error) {
	sum := CorpusSummary{Config: cfg, VocabSize: len(v.Tokens)}
	if len(v.Tokens) > 1<<16 {
		return sum, fmt.Errorf("toolmodel: %d tokens do not fit uint16", len(v.Tokens))
	}
	tok, err := NewTokenizer(v)
	if err != nil {
		return sum, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sum, err
	}
	files := map[string]*os.File{}
	for _, name := range []string{"tokens.u16", "learn.u8", "docs.u64"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return sum, err
		}
		defer f.Close()
		files[name] = f
	}
	const batch = 256
	workers = max(workers, 1)
	for first := 0; first < cfg.Conversations; first += batch {
		n := min(batch, cfg.Conversations-first)
		docs := make([]Doc, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, workers)
		for k := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				text, err := RenderConversation(trainingConversation(cfg.Seed, first+k, cfg.MaxEstimate))
				docs[k], errs[k] = Tokenize(tok, text), err
			}()
		}
		wg.Wait()
		for k, d := range docs {
			if errs[k] != nil {
				return sum, errs[k]
			}
			if cfg.MaxTokens > 0 && len(d.Tokens) > cfg.MaxTokens {
				sum.Dropped++
				continue
			}
			if err := binary.Write(files["docs.u64"], binary.LittleEndian, uint64(sum.Tokens)); err != nil {
				return sum, err
			}
			ids := make([]uint16, len(d.Tokens))
			learn := make([]byte, len(d.Tokens))
			for i, id := range d.Tokens {
				ids[i] = uint16(id)
				if d.Learn[i] {
					learn[i] = 1
					sum.LearnedTokens++
				}
			}
			if err := binary.Write(files["tokens.u16"], binary.LittleEndian, ids); err != nil {
				return sum, err
			}
			if _, err := files["learn.u8"].Write(learn); err != nil {
				return sum, err
			}
			sum.Docs++
			sum.Tokens += int64(len(ids))
			sum.LongestDoc = max(sum.LongestDoc, len(ids))
		}
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			return sum, err
		}
	}
	vb, err := json.Marshal(v)
	if err != nil {
		return sum, err
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.json"), vb, 0o644); err != nil {
		return sum, err
	}
	b, _ := json.MarshalIndent(sum, "", "  ") // plain fields always encode
	return sum, os.WriteFile(filepath.Join(dir, "corpus.json"), append(b, '\n'), 0o644)
}

// ReadVocab reads the vocabulary a corpus was tokenized with (its vocab.json).
func ReadVocab(corpusDir string) (gguf.Vocab, error) {
	var v gguf.Vocab
	b, err := os.ReadFile(filepath.Join(corpusDir, "vocab.json"))
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%s: %w", filepath.Join(corpusDir, "vocab.json"), err)
	}
	if len(v.Tokens) == 0 || len(v.Tokens) != len(v.Scores) || len(v.Tokens) != len(v.Types) {
		return v, fmt.Errorf("%s: %d tokens, %d scores and %d types", filepath.Join(corpusDir, "vocab.json"), len(v.Tokens), len(v.Scores), len(v.Types))
	}
	return v, nil
}

// WriteGGUF writes the trained checkpoint at checkpoint, with the vocabulary of the
// corpus it was trained on, as a GGUF file at out (through a temporary file).
func WriteGGUF(out, checkpoint, corpusDir, name string) error {
	v, err := ReadVocab(corpusDir)
	if err != nil {
		return err
	}
	st, err := gguf.ReadSafetensors(checkpoint)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".model-*.gguf")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := (gguf.Trained{Name: name, Checkpoint: st, Vocab: v}).Write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}
