package gguf

import (
	"bytes"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// committedModel is the tool-calling model the examples serve, trained on a GPU and
// written by Trained.Write.
const committedModel = "../examples/models/toolcall.gguf"

// checkpointOf rebuilds the checkpoint a GGUF file of Trained was written from and
// writes it again.
func checkpointOf(t *testing.T, f *parsedFile) (Trained, []byte) {
	t.Helper()
	tr, err := trainedOf(f)
	if err != nil {
		t.Fatal(err)
	}
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

// A model written with its heads padded computes what the checkpoint computes: the
// reference forward pass generates the same tokens from both, with logits that differ
// only by the F16 rounding of the scaled query; heads of their own size give the same
// file; and the padded file is not taken for a checkpoint.
func TestPaddedHeadsComputeTheSame(t *testing.T) {
	raw, err := os.ReadFile(committedModel)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseGGUF(raw)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := checkpointOf(t, f)
	write := func(headDim int) []byte {
		t.Helper()
		tr.HeadDim = headDim
		var b bytes.Buffer
		if err := tr.Write(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if !bytes.Equal(write(64), raw) {
		t.Error("padding heads of 64 to 64 changed the file")
	}
	padded := write(128)
	pf, err := parseGGUF(padded)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{"llama.attention.key_length": uint32(128), "llama.attention.value_length": uint32(128),
		"llama.rope.dimension_count": uint32(128), "llama.rope.freq_base": float32(1e10), "llama.embedding_length": uint32(256)} {
		if kv, _ := pf.kv(key); kv.value != want {
			t.Errorf("%s = %v, want %v", key, kv.value, want)
		}
	}
	if q := mustTensor(t, pf, "blk.0.attn_q.weight"); !slices.Equal(q.dims, []uint64{256, 512}) {
		t.Errorf("attn_q dims %v, want [256 512]", q.dims)
	}
	if o := mustTensor(t, pf, "blk.0.attn_output.weight"); !slices.Equal(o.dims, []uint64{512, 256}) {
		t.Errorf("attn_output dims %v, want [512 256]", o.dims)
	}
	if _, err := trainedOf(pf); err == nil || !strings.Contains(err.Error(), "padded") {
		t.Errorf("reading the padded file as a checkpoint: %v", err)
	}
	tr.HeadDim = 48
	if err := tr.Write(io.Discard); err == nil {
		t.Error("heads of 64 padded to 48 were written")
	}

	tok, err := NewTokenizer(tr.Vocab, bosID)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("<|tools|>lookup_order(order_id) \n<|user|>Look up order ORD-03480 for me.\n<|assistant|>", true, true)
	var ids []int
	for _, id := range prompt {
		ids = append(ids, int(id))
	}
	ref, err := loadRefModel(f)
	if err != nil {
		t.Fatal(err)
	}
	pad, err := loadRefModel(pf)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var worst float64
	pos := 0
	a, b := []float64(nil), []float64(nil)
	var gen []int
	for i := 0; i < len(ids)+n; i++ {
		id := 0
		if i < len(ids) {
			id = ids[i]
		} else {
			id = argmax(a)
			if argmax(b) != id {
				t.Fatalf("token %d: the padded model chose %d, the checkpoint %d", i-len(ids), argmax(b), id)
			}
			gen = append(gen, id)
		}
		a, b = ref.step(id, pos), pad.step(id, pos)
		pos++
		for j := range a {
			worst = max(worst, math.Abs(a[j]-b[j]))
		}
	}
	var gen32 []int32
	for _, id := range gen {
		gen32 = append(gen32, int32(id))
	}
	t.Logf("both generated %q; largest logit difference %.2g", tok.Decode(gen32), worst)
	if worst > 0.05 {
		t.Errorf("logits differ by up to %.3g between the padded model and the checkpoint", worst)
	}
}
