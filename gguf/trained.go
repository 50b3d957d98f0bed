package gguf

import (
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Trained is a llama-architecture model trained outside Go: a checkpoint whose tensors
// carry their GGUF names (token_embd.weight, blk.N.attn_q.weight, ..., output.weight)
// in PyTorch's shapes ([out, in] for a matrix), whose metadata gives the shape
// (block_count, embedding_length, head_count, head_count_kv, feed_forward_length,
// context_length, rope_freq_base, rms_epsilon), and its vocabulary.
type Trained struct {
	Name       string
	Checkpoint *Safetensors
	Vocab      Vocab
}

// llamaShape is the architecture's numbers read from a checkpoint's metadata.
type llamaShape struct {
	layers, width, heads, kvHeads, ffn, context int
	ropeBase, eps                               float64
}

func (t Trained) shape() (llamaShape, error) {
	md := t.Checkpoint.Metadata
	var s llamaShape
	ints := []struct {
		key string
		dst *int
	}{{"block_count", &s.layers}, {"embedding_length", &s.width}, {"head_count", &s.heads},
		{"head_count_kv", &s.kvHeads}, {"feed_forward_length", &s.ffn}, {"context_length", &s.context}}
	for _, f := range ints {
		v, err := strconv.Atoi(md[f.key])
		if err != nil || v < 1 || v > 1<<20 {
			return s, fmt.Errorf("gguf: checkpoint metadata %s = %q, want a positive integer", f.key, md[f.key])
		}
		*f.dst = v
	}
	floats := []struct {
		key string
		dst *float64
	}{{"rope_freq_base", &s.ropeBase}, {"rms_epsilon", &s.eps}}
	for _, f := range floats {
		v, err := strconv.ParseFloat(md[f.key], 64)
		if err != nil || !(v > 0) {
			return s, fmt.Errorf("gguf: checkpoint metadata %s = %q, want a positive number", f.key, md[f.key])
		}
		*f.dst = v
	}
	if s.width%s.heads != 0 || s.heads%s.kvHeads != 0 || (s.width/s.heads)%2 != 0 {
		return s, fmt.Errorf("gguf: width %d, %d heads and %d key/value heads do not make whole, even heads", s.width, s.heads, s.kvHeads)
	}
	return s, nil
}

// Write writes the model as a GGUF v3 file: matrices as F16, norms as F32, the
// vocabulary as a SentencePiece one without a space prefix. The same checkpoint and
// vocabulary give the same bytes.
func (t Trained) Write(w io.Writer) error {
	s, err := t.shape()
	if err != nil {
		return err
	}
	nv, d := len(t.Vocab.Tokens), s.width
	headDim := d / s.heads
	kvDim := headDim * s.kvHeads
	b := NewBuilder()
	b.AddString("general.architecture", "llama")
	b.AddString("general.type", "model")
	b.AddString("general.name", t.Name)
	b.SetAlignment(DefaultAlignment)
	b.AddUint32("general.file_type", fileTypeMostlyF16)
	b.AddUint32("llama.vocab_size", uint32(nv))
	b.AddUint32("llama.context_length", uint32(s.context))
	b.AddUint32("llama.embedding_length", uint32(d))
	b.AddUint32("llama.block_count", uint32(s.layers))
	b.AddUint32("llama.feed_forward_length", uint32(s.ffn))
	b.AddUint32("llama.attention.head_count", uint32(s.heads))
	b.AddUint32("llama.attention.head_count_kv", uint32(s.kvHeads))
	b.AddUint32("llama.attention.key_length", uint32(headDim))
	b.AddUint32("llama.attention.value_length", uint32(headDim))
	b.AddUint32("llama.rope.dimension_count", uint32(headDim))
	b.AddFloat32("llama.attention.layer_norm_rms_epsilon", float32(s.eps))
	b.AddFloat32("llama.rope.freq_base", float32(s.ropeBase))
	b.AddString("tokenizer.ggml.model", "llama")
	b.AddStrings("tokenizer.ggml.tokens", t.Vocab.Tokens)
	b.AddFloat32s("tokenizer.ggml.scores", t.Vocab.Scores)
	b.AddInt32s("tokenizer.ggml.token_type", t.Vocab.Types)
	b.AddUint32("tokenizer.ggml.bos_token_id", bosID)
	b.AddUint32("tokenizer.ggml.eos_token_id", eosID)
	b.AddUint32("tokenizer.ggml.unknown_token_id", unkID)
	b.AddUint32("tokenizer.ggml.padding_token_id", unkID)
	b.AddBool("tokenizer.ggml.add_bos_token", true)
	b.AddBool("tokenizer.ggml.add_eos_token", false)
	b.AddBool("tokenizer.ggml.add_space_prefix", false)

	used := map[string]bool{}
	add := func(name string, want []int, f16 bool) {
		used[name] = true
		x, ok := t.Checkpoint.Tensors[name]
		if !ok {
			b.fail("checkpoint has no tensor %s", name)
			return
		}
		if !slices.Equal(x.Shape, want) {
			b.fail("tensor %s has shape %v, want %v", name, x.Shape, want)
			return
		}
		dims := make([]uint64, len(want)) // GGUF lists dimensions innermost first
		for i, v := range want {
			dims[len(want)-1-i] = uint64(v)
		}
		if f16 {
			b.AddF16(name, dims, x.Data)
		} else {
			b.AddF32(name, dims, x.Data)
		}
	}
	add("token_embd.weight", []int{nv, d}, true)
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", []int{d}, false)
		add(p+"attn_q.weight", []int{d, d}, true)
		add(p+"attn_k.weight", []int{kvDim, d}, true)
		add(p+"attn_v.weight", []int{kvDim, d}, true)
		add(p+"attn_output.weight", []int{d, d}, true)
		add(p+"ffn_norm.weight", []int{d}, false)
		add(p+"ffn_gate.weight", []int{s.ffn, d}, true)
		add(p+"ffn_up.weight", []int{s.ffn, d}, true)
		add(p+"ffn_down.weight", []int{d, s.ffn}, true)
	}
	add("output_norm.weight", []int{d}, false)
	add("output.weight", []int{nv, d}, true)
	for name := range t.Checkpoint.Tensors {
		if !used[name] {
			return fmt.Errorf("gguf: checkpoint tensor %s has no place in a llama of %d blocks", name, s.layers)
		}
	}
	if err := b.Err(); err != nil {
		return err
	}
	_, err = b.WriteTo(w)
	return err
}
