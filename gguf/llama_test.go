package gguf

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func writeModel(t testing.TB, m TinyLlama) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		t.Fatalf("Write(%+v): %v", m, err)
	}
	return buf.Bytes()
}

func TestTinyLlamaLayout(t *testing.T) {
	data := writeModel(t, TinyLlama{})
	t.Logf("default model: %d bytes, sha256 %x", len(data), sha256.Sum256(data))
	f, err := parseGGUF(data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	v := buildVocab()
	nv := len(v.tokens)

	wantKV := map[string]any{
		"general.architecture":                   "llama",
		"general.type":                           "model",
		"general.name":                           tinyName,
		"general.alignment":                      uint32(32),
		"general.file_type":                      uint32(1),
		"llama.vocab_size":                       uint32(nv),
		"llama.context_length":                   uint32(32768),
		"llama.embedding_length":                 uint32(256),
		"llama.block_count":                      uint32(2),
		"llama.feed_forward_length":              uint32(512),
		"llama.attention.head_count":             uint32(4),
		"llama.attention.head_count_kv":          uint32(4),
		"llama.attention.key_length":             uint32(64),
		"llama.attention.value_length":           uint32(64),
		"llama.rope.dimension_count":             uint32(64),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.freq_base":                   float32(10000),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.tokens":                  v.tokens,
		"tokenizer.ggml.scores":                  v.scores,
		"tokenizer.ggml.token_type":              v.types,
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.padding_token_id":        uint32(0),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}
	if len(f.kvs) != len(wantKV) {
		t.Errorf("%d metadata entries, want %d", len(f.kvs), len(wantKV))
	}
	for _, e := range f.kvs {
		want, ok := wantKV[e.key]
		if !ok {
			t.Errorf("unexpected key %q", e.key)
			continue
		}
		if !reflect.DeepEqual(e.value, want) {
			t.Errorf("%s = %v (%T), want %v (%T)", e.key, e.value, e.value, want, want)
		}
	}

	type shape struct {
		dims []uint64
		typ  TensorType
	}
	want := map[string]shape{
		"token_embd.weight":  {[]uint64{256, uint64(nv)}, TensorF16},
		"output_norm.weight": {[]uint64{256}, TensorF32},
		"output.weight":      {[]uint64{256, uint64(nv)}, TensorF16},
	}
	for l := range 2 {
		p := fmt.Sprintf("blk.%d.", l)
		want[p+"attn_norm.weight"] = shape{[]uint64{256}, TensorF32}
		want[p+"ffn_norm.weight"] = shape{[]uint64{256}, TensorF32}
		for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			want[p+n+".weight"] = shape{[]uint64{256, 256}, TensorF16}
		}
		want[p+"ffn_gate.weight"] = shape{[]uint64{256, 512}, TensorF16}
		want[p+"ffn_up.weight"] = shape{[]uint64{256, 512}, TensorF16}
		want[p+"ffn_down.weight"] = shape{[]uint64{512, 256}, TensorF16}
	}
	if len(f.tensors) != len(want) {
		t.Errorf("%d tensors, want %d", len(f.tensors), len(want))
	}
	var params uint64
	for _, tn := range f.tensors {
		w, ok := want[tn.name]
		if !ok {
			t.Errorf("unexpected tensor %q", tn.name)
			continue
		}
		if !reflect.DeepEqual(tn.dims, w.dims) || tn.typ != w.typ {
			t.Errorf("%s: dims %v type %d, want %v type %d", tn.name, tn.dims, tn.typ, w.dims, w.typ)
		}
		n := uint64(1)
		for _, d := range tn.dims {
			n *= d
		}
		params += n
	}
	if p := (TinyLlama{}).withDefaults().params(); uint64(p) != params {
		t.Errorf("params() = %d, the file holds %d", p, params)
	}

	// The norms are ones and dimension 0 of the embeddings is the constant.
	for _, tn := range f.tensors {
		if strings.HasSuffix(tn.name, "norm.weight") {
			for i, x := range f.tensorData(tn) {
				if x != 1 {
					t.Fatalf("%s[%d] = %g, want 1", tn.name, i, x)
				}
			}
		}
	}
	embd := f.tensorData(mustTensor(t, f, "token_embd.weight"))
	for tok := range nv {
		if embd[tok*256] != 8 {
			t.Fatalf("token_embd[%d][0] = %g, want 8", tok, embd[tok*256])
		}
	}
}

func mustTensor(t testing.TB, f *parsedFile, name string) parsedTensor {
	t.Helper()
	tn, ok := f.tensor(name)
	if !ok {
		t.Fatalf("no tensor %q", name)
	}
	return tn
}

func TestTinyLlamaVocab(t *testing.T) {
	v := buildVocab()
	if n := len(v.tokens); n < 500 || n > 1000 {
		t.Errorf("vocabulary of %d tokens, want 500 to 1000", n)
	}
	if v.tokens[unkID] != "<unk>" || v.tokens[bosID] != "<s>" || v.tokens[eosID] != "</s>" {
		t.Errorf("special tokens %q", v.tokens[:3])
	}
	if v.types[unkID] != TokenUnknown || v.types[bosID] != TokenControl || v.types[eosID] != TokenControl {
		t.Errorf("special token types %v", v.types[:3])
	}
	for i := range 256 {
		id := 3 + i
		if want := fmt.Sprintf("<0x%02X>", i); v.tokens[id] != want || v.types[id] != TokenByte {
			t.Errorf("token %d = %q type %d, want %q type 6", id, v.tokens[id], v.types[id], want)
		}
	}
	seen := make(map[string]bool)
	emit := 0
	for i, tok := range v.tokens {
		if seen[tok] {
			t.Errorf("duplicate token %q", tok)
		}
		seen[tok] = true
		if i >= 259 && v.types[i] != TokenNormal {
			t.Errorf("token %q has type %d, want normal", tok, v.types[i])
		}
		if v.emit[i] {
			emit++
		}
	}
	for c := byte(0x21); c < 0x7f; c++ {
		if !seen[string(c)] {
			t.Errorf("printable character %q missing", c)
		}
	}
	if emit != len(vocabWords)+len(vocabPunct) {
		t.Errorf("%d generated tokens, want %d", emit, len(vocabWords)+len(vocabPunct))
	}

	// Every word and subword is reachable by llama.cpp's SentencePiece
	// merging, and so tokenizes to a single token.
	tok := newSPM(v)
	for _, w := range vocabWords {
		if got := tok.tokenize(spaceMark + w); len(got) != 1 {
			t.Errorf("%q tokenizes to %q", w, tok.pieces(got))
		}
	}
	for _, w := range vocabSubwords {
		if got := tok.tokenize(w); len(got) != 1 {
			t.Errorf("subword %q tokenizes to %q", w, tok.pieces(got))
		}
	}
	got := tok.pieces(tok.tokenize(spaceMark + strings.ReplaceAll("the government thinks, reworded: ok!", " ", spaceMark)))
	want := []string{"▁the", "▁government", "▁think", "s", ",", "▁", "re", "w", "o", "r", "d", "ed", ":", "▁o", "k", "!"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sentence tokenizes to %q, want %q", got, want)
	}
}

// spm is llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm) without
// byte fallback: start from single characters and repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token, the
// leftmost pair on ties.
type spm struct {
	v  vocab
	id map[string]int
}

func newSPM(v vocab) *spm {
	s := &spm{v: v, id: make(map[string]int)}
	for i, t := range v.tokens {
		s.id[t] = i
	}
	return s
}

func (s *spm) tokenize(text string) []int {
	var syms []string
	for _, r := range text {
		syms = append(syms, string(r))
	}
	for {
		best, bestScore := -1, float32(math.Inf(-1))
		for i := 0; i+1 < len(syms); i++ {
			if id, ok := s.id[syms[i]+syms[i+1]]; ok && s.v.scores[id] > bestScore {
				best, bestScore = i, s.v.scores[id]
			}
		}
		if best < 0 {
			break
		}
		syms[best] += syms[best+1]
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	ids := make([]int, len(syms))
	for i, p := range syms {
		id, ok := s.id[p]
		if !ok {
			id = unkID
		}
		ids[i] = id
	}
	return ids
}

func (s *spm) pieces(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.v.tokens[id]
	}
	return out
}

func TestTinyLlamaDeterministic(t *testing.T) {
	a := writeModel(t, TinyLlama{Seed: 7})
	b := writeModel(t, TinyLlama{Seed: 7, Layers: 2, Width: 256, Heads: 4, KVHeads: 4, FFN: 512, Context: 32768, Scale: 0.2})
	if !bytes.Equal(a, b) {
		t.Error("the same configuration, spelled out or defaulted, gave different bytes")
	}
	if c := writeModel(t, TinyLlama{Seed: 7}); !bytes.Equal(a, c) {
		t.Error("two writes of the same configuration differ")
	}
	d := writeModel(t, TinyLlama{Seed: 8})
	if len(d) != len(a) {
		t.Fatalf("seeds 7 and 8 give sizes %d and %d", len(a), len(d))
	}
	if bytes.Equal(a, d) {
		t.Fatal("seeds 7 and 8 gave identical bytes")
	}
	// Only tensor data differs between seeds, and all random tensors do.
	fa, err := parseGGUF(a)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := parseGGUF(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[:fa.dataStart], d[:fd.dataStart]) {
		t.Error("seeds changed the header")
	}
	for _, tn := range fa.tensors {
		da := fa.data[tn.offset : tn.offset+tn.size()]
		dd := fd.data[tn.offset : tn.offset+tn.size()]
		if same := bytes.Equal(da, dd); same != strings.HasSuffix(tn.name, "norm.weight") {
			t.Errorf("%s: same data for both seeds = %v", tn.name, same)
		}
	}
	if e := writeModel(t, TinyLlama{Seed: 7, Scale: 0.1}); bytes.Equal(a, e) {
		t.Error("a different Scale gave identical bytes")
	}
}

func TestTinyLlamaValidate(t *testing.T) {
	type testCase struct {
		m    TinyLlama
		want []string // substrings of the error; none means valid
	}
	var extra []testCase
	if math.MaxInt > math.MaxUint32 {
		extra = append(extra, testCase{TinyLlama{Context: math.MaxInt}, []string{"Context = 9223372036854775807, want 1 to 4294967295"}})
	}
	for _, tc := range append([]testCase{
		{TinyLlama{}, nil},
		{TinyLlama{Layers: 1, Width: 64, Heads: 2, KVHeads: 1, FFN: 100, Context: 128, Scale: 1}, nil},
		{TinyLlama{Width: 256, Heads: 3}, []string{"Width = 256 is not a multiple of Heads = 3"}},
		{TinyLlama{Width: 12, Heads: 4}, []string{"head size Width/Heads = 3 is odd"}},
		{TinyLlama{Heads: 4, KVHeads: 3}, []string{"Heads = 4 is not a multiple of KVHeads = 3"}},
		{TinyLlama{Heads: 2, KVHeads: 4}, []string{"KVHeads = 4 is more than Heads = 2"}},
		{TinyLlama{Layers: -1}, []string{"Layers = -1"}},
		{TinyLlama{Width: -256}, []string{"Width = -256"}},
		{TinyLlama{FFN: -1, Context: -5}, []string{"FFN = -1", "Context = -5"}},
		{TinyLlama{Width: 1 << 17, Heads: 1 << 17}, []string{"Width = 131072, want 1 to 65536", "Heads = 131072"}},
		{TinyLlama{Scale: -0.1}, []string{"Scale = -0.1"}},
		{TinyLlama{Scale: math.NaN()}, []string{"Scale = NaN"}},
		{TinyLlama{Scale: math.Inf(1)}, []string{"Scale = +Inf"}},
		{TinyLlama{Width: 65536, Layers: 64}, []string{"parameters is more than"}},
	}, extra...) {
		err := tc.m.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.m, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: valid, want an error", tc.m)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q does not mention %q", tc.m, err, w)
			}
		}
		if werr := tc.m.Write(&bytes.Buffer{}); werr == nil || werr.Error() != err.Error() {
			t.Errorf("%+v: Write returned %v, Validate %v", tc.m, werr, err)
		}
	}
}

func TestTinyLlamaSmallConfigs(t *testing.T) {
	for _, m := range []TinyLlama{
		{Layers: 1, Width: 8, Heads: 2, FFN: 3}, // tensors that need padding
		{Layers: 3, Width: 64, Heads: 8, KVHeads: 2, Context: 512},
	} {
		f, err := parseGGUF(writeModel(t, m))
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if got := len(f.tensors); got != 3+9*m.Layers {
			t.Errorf("%+v: %d tensors", m, got)
		}
	}
}

// TestTinyLlamaGreedy runs the default configuration with a reference
// forward pass and checks that greedy decoding gives varied words.
func TestTinyLlamaGreedy(t *testing.T) {
	v := buildVocab()
	tok := newSPM(v)
	// The chat template the end-to-end test registers with ollama.
	prompt := append([]int{bosID}, tok.tokenize(strings.ReplaceAll(
		" <|user|>Tell me a story about the world.\n<|assistant|>", " ", spaceMark))...)
	for seed := range int64(3) {
		f, err := parseGGUF(writeModel(t, TinyLlama{Seed: seed}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := loadRefModel(f)
		if err != nil {
			t.Fatal(err)
		}
		out, _, banned := m.greedy(prompt, 32, v.emit)
		text := strings.ReplaceAll(strings.Join(tok.pieces(out), ""), spaceMark, " ")
		t.Logf("seed %d: %s", seed, text)
		distinct := make(map[int]bool)
		run, maxRun := 0, 0
		for i, id := range out {
			if !v.emit[id] {
				t.Errorf("seed %d: generated %q, outside the generated set", seed, v.tokens[id])
			}
			distinct[id] = true
			if i > 0 && id == out[i-1] {
				run++
			} else {
				run = 1
			}
			maxRun = max(maxRun, run)
		}
		if len(distinct) < 16 || maxRun > 4 {
			t.Errorf("seed %d: %d distinct tokens of 32, longest run %d", seed, len(distinct), maxRun)
		}
		if banned > -10 {
			t.Errorf("seed %d: a token outside the generated set came within %.1f of the best logit", seed, -banned)
		}
	}
}
