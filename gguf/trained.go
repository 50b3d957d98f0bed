package gguf

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Trained is a llama-architecture model trained outside Go: a checkpoint whose tensors
// carry their GGUF names (token_embd.weight, blk.N.attn_q.weight, ..., output.weight)
// in PyTorch's shapes ([out, in] for a matrix), whose metadata gives the shape
// (block_count, embedding_length, head_count, head_count_kv, feed_forward_length,
// context_length, rope_freq_base, rms_epsilon), and its vocabulary.
//
// HeadDim, when larger than the checkpoint's own heads (width / head_count), writes the
// same model with its attention heads padded to HeadDim dimensions: the query, key and
// value rows of each head gain zero rows and the output projection zero columns, the
// query is scaled so that the engine's 1/sqrt(HeadDim) is the checkpoint's 1/sqrt(its
// head), and the rotary base is raised to the ratio's power so that every rotated pair
// keeps its frequency. The padded model computes what the checkpoint computes (up to the
// F16 rounding of the scaled query); engines need it where a kernel exists only for some
// head sizes (llama.cpp's CUDA flash attention serves a quantized KV cache only for heads
// of 128).
type Trained struct {
	Name       string
	Checkpoint *Safetensors
	Vocab      Vocab
	HeadDim    int
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

// Heads checks that the model can be written as it is asked for (its shape, and heads
// that pad to HeadDim) without writing it, and returns the checkpoint's own head size
// and the size the written heads will have.
func (t Trained) Heads() (natural, written int, err error) {
	s, err := t.shape()
	if err != nil {
		return 0, 0, err
	}
	return t.heads(s)
}

func (t Trained) heads(s llamaShape) (natural, written int, err error) {
	natural = s.width / s.heads
	if t.HeadDim == 0 {
		return natural, natural, nil
	}
	if t.HeadDim < natural || t.HeadDim%2 != 0 || t.HeadDim > 1024 {
		return natural, 0, fmt.Errorf("gguf: heads of %d cannot be padded to %d: give an even size from %d to 1024", natural, t.HeadDim, natural)
	}
	return natural, t.HeadDim, nil
}

// Write writes the model as a GGUF v3 file: matrices as F16, norms as F32, the
// vocabulary as a SentencePiece one without a space prefix. The same checkpoint and
// vocabulary give the same bytes.
func (t Trained) Write(w io.Writer) error {
	s, err := t.shape()
	if err != nil {
		return err
	}
	natural, headDim, err := t.heads(s)
	if err != nil {
		return err
	}
	nv, d := len(t.Vocab.Tokens), s.width
	ratio := float64(headDim) / float64(natural)
	qDim := headDim * s.heads
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
	b.AddFloat32("llama.rope.freq_base", float32(math.Pow(s.ropeBase, ratio)))
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
	// add writes a tensor whose checkpoint shape is want; pad, if given, turns its
	// values into the padded model's, of the shape it returns.
	add := func(name string, want []int, f16 bool, pad func([]float32) ([]float32, []int)) {
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
		data, shape := x.Data, want
		if pad != nil && headDim != natural {
			data, shape = pad(x.Data)
		}
		dims := make([]uint64, len(shape)) // GGUF lists dimensions innermost first
		for i, v := range shape {
			dims[len(shape)-1-i] = uint64(v)
		}
		if f16 {
			b.AddF16(name, dims, data)
		} else {
			b.AddF32(name, dims, data)
		}
	}
	// rows pads each head's rows of a [heads*natural, d] projection to headDim rows,
	// scaled by scale; cols pads the output projection's columns the same way.
	rows := func(heads int, scale float32) func([]float32) ([]float32, []int) {
		return func(w []float32) ([]float32, []int) {
			out := make([]float32, heads*headDim*d)
			for h := range heads {
				for r := range natural {
					src := w[(h*natural+r)*d : (h*natural+r+1)*d]
					dst := out[(h*headDim+r)*d : (h*headDim+r+1)*d]
					for i, v := range src {
						dst[i] = v * scale
					}
				}
			}
			return out, []int{heads * headDim, d}
		}
	}
	cols := func(w []float32) ([]float32, []int) {
		out := make([]float32, d*qDim)
		for o := range d {
			for h := range s.heads {
				copy(out[o*qDim+h*headDim:o*qDim+h*headDim+natural], w[o*d+h*natural:o*d+(h+1)*natural])
			}
		}
		return out, []int{d, qDim}
	}
	add("token_embd.weight", []int{nv, d}, true, nil)
	for l := range s.layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", []int{d}, false, nil)
		add(p+"attn_q.weight", []int{d, d}, true, rows(s.heads, float32(math.Sqrt(ratio))))
		add(p+"attn_k.weight", []int{natural * s.kvHeads, d}, true, rows(s.kvHeads, 1))
		add(p+"attn_v.weight", []int{natural * s.kvHeads, d}, true, rows(s.kvHeads, 1))
		add(p+"attn_output.weight", []int{d, d}, true, cols)
		add(p+"ffn_norm.weight", []int{d}, false, nil)
		add(p+"ffn_gate.weight", []int{s.ffn, d}, true, nil)
		add(p+"ffn_up.weight", []int{s.ffn, d}, true, nil)
		add(p+"ffn_down.weight", []int{d, s.ffn}, true, nil)
	}
	add("output_norm.weight", []int{d}, false, nil)
	add("output.weight", []int{nv, d}, true, nil)
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

// ReadTrained reads a GGUF file Trained.Write wrote back into the checkpoint it was
// written from: its tensors in PyTorch's shapes, the metadata that gives the shape and
// its vocabulary. Matrices stored as F16 came from an F16 checkpoint, so the values are
// the checkpoint's own and writing them again gives the same file. A file whose heads
// were padded (HeadDim) is refused: its checkpoint is the unpadded one.
func ReadTrained(path string) (Trained, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Trained{}, fmt.Errorf("gguf: %w", err)
	}
	f, err := parseGGUF(raw)
	if err != nil {
		return Trained{}, fmt.Errorf("gguf: %s: %w", path, err)
	}
	tr, err := trainedOf(f)
	if err != nil {
		return Trained{}, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return tr, nil
}

func trainedOf(f *parsedFile) (Trained, error) {
	var missing []string
	get := func(key string) any {
		kv, ok := f.kv(key)
		if !ok {
			missing = append(missing, key)
			return nil
		}
		return kv.value
	}
	st := &Safetensors{Metadata: map[string]string{}, Tensors: map[string]Tensor{}}
	u32 := map[string]uint32{}
	for _, k := range []string{"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
		"feed_forward_length", "context_length", "attention.key_length"} {
		v, _ := get("llama." + k).(uint32)
		u32[k] = v
		st.Metadata[strings.TrimPrefix(k, "attention.")] = strconv.FormatUint(uint64(v), 10)
	}
	delete(st.Metadata, "key_length")
	for k, key := range map[string]string{"rope_freq_base": "llama.rope.freq_base", "rms_epsilon": "llama.attention.layer_norm_rms_epsilon"} {
		v, _ := get(key).(float32)
		st.Metadata[k] = strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	name, _ := get("general.name").(string)
	v := Vocab{}
	v.Tokens, _ = get("tokenizer.ggml.tokens").([]string)
	v.Scores, _ = get("tokenizer.ggml.scores").([]float32)
	v.Types, _ = get("tokenizer.ggml.token_type").([]int32)
	if len(missing) > 0 {
		return Trained{}, fmt.Errorf("not a trained llama: no %s", strings.Join(missing, ", "))
	}
	if h := u32["attention.head_count"]; h == 0 || u32["attention.key_length"]*h != u32["embedding_length"] {
		return Trained{}, fmt.Errorf("heads of %d in a width of %d with %d heads: padded, not a checkpoint's own",
			u32["attention.key_length"], u32["embedding_length"], h)
	}
	for _, pt := range f.tensors {
		shape := make([]int, len(pt.dims))
		for i, d := range pt.dims {
			shape[len(pt.dims)-1-i] = int(d)
		}
		st.Tensors[pt.name] = Tensor{Shape: shape, Data: f.tensorData(pt)}
	}
	return Trained{Name: name, Checkpoint: st, Vocab: v}, nil
}
