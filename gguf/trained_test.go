package gguf

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// committedModel is the tool-calling model the examples serve, trained on a GPU and
// written by Trained.Write.
const committedModel = "../examples/models/toolcall.gguf"

// checkpointOf rebuilds the checkpoint a GGUF file of Trained was written from: its
// tensors in PyTorch's shapes and the metadata that gives the shape. Matrices stored as
// F16 came from an F16 checkpoint, so the values are the checkpoint's own.
func checkpointOf(t *testing.T, f *parsedFile) (Trained, []byte) {
	t.Helper()
	st := &Safetensors{Metadata: map[string]string{}, Tensors: map[string]Tensor{}}
	for _, k := range []string{"block_count", "embedding_length", "head_count", "head_count_kv", "feed_forward_length", "context_length"} {
		kv, ok := f.kv("llama." + strings.Replace(k, "head_count", "attention.head_count", 1))
		if !ok {
			t.Fatalf("no llama metadata for %s", k)
		}
		st.Metadata[k] = strconv.FormatUint(uint64(kv.value.(uint32)), 10)
	}
	for k, key := range map[string]string{"rope_freq_base": "llama.rope.freq_base", "rms_epsilon": "llama.attention.layer_norm_rms_epsilon"} {
		kv, ok := f.kv(key)
		if !ok {
			t.Fatalf("no %s", key)
		}
		st.Metadata[k] = strconv.FormatFloat(float64(kv.value.(float32)), 'g', -1, 32)
	}
	for _, pt := range f.tensors {
		shape := make([]int, len(pt.dims))
		for i, d := range pt.dims {
			shape[len(pt.dims)-1-i] = int(d)
		}
		st.Tensors[pt.name] = Tensor{Shape: shape, Data: f.tensorData(pt)}
	}
	get := func(key string) any {
		kv, ok := f.kv(key)
		if !ok {
			t.Fatalf("no %s", key)
		}
		return kv.value
	}
	tr := Trained{Name: get("general.name").(string), Checkpoint: st, Vocab: Vocab{
		Tokens: get("tokenizer.ggml.tokens").([]string),
		Scores: get("tokenizer.ggml.scores").([]float32),
		Types:  get("tokenizer.ggml.token_type").([]int32),
	}}
	var b bytes.Buffer
	if err := tr.Write(&b); err != nil {
		t.Fatal(err)
	}
	return tr, b.Bytes()
}

// The committed model is byte for byte what Trained.Write makes of its checkpoint: its
// tensors, read back, written again, give the same file; and it is a model ollama's
// llama.cpp reads as the chat format's (no space prefix, the markers as special tokens).
func TestCommittedToolModelIsReproducible(t *testing.T) {
	raw, err := os.ReadFile(committedModel)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 16<<20 {
		t.Errorf("%s is %d bytes, over 16 MiB", committedModel, len(raw))
	}
	f, err := parseGGUF(raw)
	if err != nil {
		t.Fatal(err)
	}
	tr, again := checkpointOf(t, f)
	if !bytes.Equal(raw, again) {
		t.Fatalf("writing the committed model's own checkpoint gives %d bytes that differ from its %d", len(again), len(raw))
	}
	if kv, ok := f.kv("tokenizer.ggml.add_space_prefix"); !ok || kv.value != false {
		t.Errorf("add_space_prefix = %v, want false", kv.value)
	}
	tok, err := NewTokenizer(tr.Vocab, bosID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"<|assistant|>", "<tool_call>", "</s>"} {
		if ids := tok.Encode(s, false, true); len(ids) != 1 {
			t.Errorf("%q tokenizes to %v, want one token", s, ids)
		}
	}
	// Writing is deterministic: a changed value changes the file.
	tr.Checkpoint.Tensors["output_norm.weight"].Data[0] += 1
	var b bytes.Buffer
	if err := tr.Write(&b); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(raw, b.Bytes()) {
		t.Error("a changed weight left the file the same")
	}
}
