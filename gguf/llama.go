package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
)

// Defaults of [TinyLlama]. A zero field takes its default.
const (
	DefaultLayers  = 2
	DefaultWidth   = 256
	DefaultHeads   = 4
	DefaultContext = 32768
	DefaultScale   = 0.2
)

// Fixed hyperparameters of [TinyLlama], written to the metadata.
const (
	tinyRMSEpsilon = 1e-5
	tinyRopeBase   = 10000
	tinyName       = "arbiter-tiny-llama"
	// fileTypeMostlyF16 is general.file_type for a model whose matrices
	// are F16 and whose 1-D tensors are F32 (llama.cpp LLAMA_FTYPE_MOSTLY_F16).
	fileTypeMostlyF16 = 1
	// maxParams bounds the model size; the file is built in memory.
	maxParams = 1 << 30
	// bannedWeight is the dimension-0 weight of the output rows of tokens
	// the model must not generate.
	bannedWeight = -64
)

// TinyLlama describes a llama-architecture model of random weights.
//
// Zero fields take their defaults. The tensors and metadata follow what
// llama.cpp expects of the "llama" architecture, with a SentencePiece
// ("llama") vocabulary of 916 tokens: <unk>, <s>, </s>, the 256 byte tokens
// <0x00>..<0xFF>, the printable ASCII characters, 200 common English words
// with the word-boundary marker "▁" in front, 38 subwords such as "ing", and
// the word prefixes the tokenizer needs to build those words by merging.
// Matrices are stored as F16 and norm weights as F32; the default
// configuration gives a file of 3,586,656 bytes.
//
// The weights are generated as follows, with d = Width. Every random value
// is drawn uniformly from an interval centred on zero, sized to give the
// stated standard deviation. The generator is SplitMix64 seeded from Seed
// and the tensor name, so the bytes do not depend on the Go release, and a
// tensor's values depend only on Seed, its name, its size and Scale.
//
//   - token_embd: standard deviation 1, except dimension 0, which holds the
//     constant sqrt(d)/2 in every row.
//   - attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down:
//     standard deviation Scale*sqrt(256/n), n being the matrix's input
//     length (d, or FFN for ffn_down), so that Scale has the same effect at
//     any width. The rows of attn_output and ffn_down that write dimension 0
//     of the residual stream are zero, which keeps that dimension constant.
//   - attn_norm, ffn_norm and output_norm: all ones.
//   - output: the rows of the tokens the model may generate, the 200 words
//     and the punctuation . , ; : ! ?, have standard deviation 3/sqrt(d)
//     outside dimension 0 and 0 on it, giving logits with a standard
//     deviation of about 3. The rows of all other tokens (control, byte and
//     single-character tokens, subwords, word prefixes) are zero except for
//     -64 on dimension 0, which the constant (positive after any RMS norm)
//     turns into a large negative logit.
//
// As a result, under greedy decoding the model does not produce </s>, so a
// request always runs to its token limit, nor byte tokens, so its output is
// valid UTF-8: a space-separated sequence of English words with occasional
// punctuation. When sampling at temperature 1 the chance of an excluded
// token is below 1e-5 per token for the default configuration.
//
// Scale sets the standard deviation of the projection weights, and with it
// how sharply attention selects earlier positions and how much the layers
// change the residual stream relative to the token embedding. The default,
// 0.2, was chosen by running greedy decoding (in a float64 reference
// implementation) over the default configuration for 16 seeds: the 32 tokens
// generated after a short chat prompt held on average 27 distinct words, the
// longest run of one repeated word averaged 1.5, no output ended in a
// repeating cycle, and no excluded token came within 19 of the best logit.
// At Scale 0.05 the next token depends almost only on the current one and 9
// of the 16 outputs ended in a short cycle, often a single word repeated; at
// 0.3 the outputs were as varied, but the larger residual stream narrowed
// the gap to the excluded tokens to about 10.
type TinyLlama struct {
	Layers  int     // transformer blocks, llama.block_count; default 2
	Width   int     // embedding length, llama.embedding_length; default 256
	Heads   int     // attention heads, llama.attention.head_count; default 4
	KVHeads int     // key/value heads, llama.attention.head_count_kv; default Heads
	FFN     int     // feed-forward length, llama.feed_forward_length; default 2*Width
	Context int     // training context, llama.context_length; default 32768
	Seed    int64   // the weights are a deterministic function of the configuration and Seed
	Scale   float64 // scale of the projection weights; default 0.2 (see above)
}

// withDefaults returns m with zero fields replaced by their defaults.
func (m TinyLlama) withDefaults() TinyLlama {
	if m.Layers == 0 {
		m.Layers = DefaultLayers
	}
	if m.Width == 0 {
		m.Width = DefaultWidth
	}
	if m.Heads == 0 {
		m.Heads = DefaultHeads
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.FFN == 0 {
		m.FFN = 2 * m.Width
	}
	if m.Context == 0 {
		m.Context = DefaultContext
	}
	if m.Scale == 0 {
		m.Scale = DefaultScale
	}
	return m
}

// Validate reports whether the configuration, after defaults are applied,
// describes a model that llama.cpp can load and this package can build. It
// returns nil or an error that lists the problems found.
func (m TinyLlama) Validate() error {
	c := m.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	invalid := func() error {
		if len(errs) == 0 {
			return nil
		}
		return fmt.Errorf("gguf: invalid TinyLlama: %w", errors.Join(errs...))
	}

	// Ranges first. The upper bounds keep the size arithmetic below far
	// from overflow; the size itself is limited by maxParams.
	inRange := func(name string, v, limit int) {
		if v < 1 || v > limit {
			bad("%s = %d, want 1 to %d", name, v, limit)
		}
	}
	inRange("Layers", c.Layers, 1<<12)
	inRange("Width", c.Width, 1<<16)
	inRange("Heads", c.Heads, 1<<16)
	inRange("KVHeads", c.KVHeads, 1<<16)
	inRange("FFN", c.FFN, 1<<20)
	if int64(c.Context) < 1 || int64(c.Context) > math.MaxUint32 {
		bad("Context = %d, want 1 to %d (llama.context_length is a uint32)", c.Context, uint32(math.MaxUint32))
	}
	if !(c.Scale > 0 && c.Scale <= 100) { // also rejects NaN
		bad("Scale = %v, want a number in (0, 100]", c.Scale)
	}
	if err := invalid(); err != nil {
		return err
	}

	// Then the shape constraints of the llama architecture.
	if c.Width%c.Heads != 0 {
		bad("Width = %d is not a multiple of Heads = %d", c.Width, c.Heads)
	} else if hd := c.Width / c.Heads; hd%2 != 0 {
		bad("head size Width/Heads = %d is odd; rotary embeddings need an even head size", hd)
	}
	if c.KVHeads > c.Heads {
		bad("KVHeads = %d is more than Heads = %d", c.KVHeads, c.Heads)
	} else if c.Heads%c.KVHeads != 0 {
		bad("Heads = %d is not a multiple of KVHeads = %d", c.Heads, c.KVHeads)
	}
	if p := c.params(); p > maxParams {
		bad("%d parameters is more than the supported %d", p, maxParams)
	}
	return invalid()
}

// params returns the parameter count of a validated configuration.
func (m TinyLlama) params() int64 {
	d, f := int64(m.Width), int64(m.FFN)
	kv := d / int64(m.Heads) * int64(m.KVHeads)
	v := int64(len(buildVocab().tokens))
	perLayer := 2*d + d*d + 2*d*kv + d*d + 3*d*f
	return 2*v*d + d + int64(m.Layers)*perLayer
}

// Write writes the model as a GGUF v3 file to w. Equal configurations
// (after defaults) produce identical bytes.
func (m TinyLlama) Write(w io.Writer) error {
	if err := m.Validate(); err != nil {
		return err
	}
	b, err := m.build()
	if err != nil {
		return err
	}
	_, err = b.WriteTo(w)
	return err
}

// build assembles the metadata and tensors of a validated configuration.
func (m TinyLlama) build() (*Builder, error) {
	c := m.withDefaults()
	voc := buildVocab()
	d, f, nv := c.Width, c.FFN, len(voc.tokens)
	headDim := d / c.Heads
	kvDim := headDim * c.KVHeads

	b := NewBuilder()
	b.AddString("general.architecture", "llama")
	b.AddString("general.type", "model")
	b.AddString("general.name", tinyName)
	b.SetAlignment(DefaultAlignment)
	b.AddUint32("general.file_type", fileTypeMostlyF16)
	b.AddUint32("llama.vocab_size", uint32(nv))
	b.AddUint32("llama.context_length", uint32(c.Context))
	b.AddUint32("llama.embedding_length", uint32(d))
	b.AddUint32("llama.block_count", uint32(c.Layers))
	b.AddUint32("llama.feed_forward_length", uint32(f))
	b.AddUint32("llama.attention.head_count", uint32(c.Heads))
	b.AddUint32("llama.attention.head_count_kv", uint32(c.KVHeads))
	b.AddUint32("llama.attention.key_length", uint32(headDim))
	b.AddUint32("llama.attention.value_length", uint32(headDim))
	b.AddUint32("llama.rope.dimension_count", uint32(headDim))
	b.AddFloat32("llama.attention.layer_norm_rms_epsilon", tinyRMSEpsilon)
	b.AddFloat32("llama.rope.freq_base", tinyRopeBase)
	b.AddString("tokenizer.ggml.model", "llama")
	b.AddStrings("tokenizer.ggml.tokens", voc.tokens)
	b.AddFloat32s("tokenizer.ggml.scores", voc.scores)
	b.AddInt32s("tokenizer.ggml.token_type", voc.types)
	b.AddUint32("tokenizer.ggml.bos_token_id", bosID)
	b.AddUint32("tokenizer.ggml.eos_token_id", eosID)
	b.AddUint32("tokenizer.ggml.unknown_token_id", unkID)
	b.AddUint32("tokenizer.ggml.padding_token_id", unkID)
	b.AddBool("tokenizer.ggml.add_bos_token", true)
	b.AddBool("tokenizer.ggml.add_eos_token", false)

	ones := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return x
	}
	// matrix adds an F16 weight of PyTorch shape [out, in], GGUF dims [in, out].
	// Projection weights have standard deviation Scale*sqrt(256/in).
	std := func(in int) float64 { return c.Scale * math.Sqrt(256/float64(in)) }
	matrix := func(name string, out, in int) []float32 {
		x := c.random(name, out*in, std(in))
		b.AddF16(name, []uint64{uint64(in), uint64(out)}, x)
		return x
	}

	// Token embeddings: GGUF dims [d, vocab]; dimension 0 is a constant.
	bias := float32(math.Sqrt(float64(d)) / 2)
	embd := c.random("token_embd.weight", nv*d, 1)
	for t := range nv {
		embd[t*d] = bias
	}
	b.AddF16("token_embd.weight", []uint64{uint64(d), uint64(nv)}, embd)

	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		b.AddF32(p+"attn_norm.weight", []uint64{uint64(d)}, ones(d))
		matrix(p+"attn_q.weight", d, d)
		matrix(p+"attn_k.weight", kvDim, d)
		matrix(p+"attn_v.weight", kvDim, d)
		o := c.random(p+"attn_output.weight", d*d, std(d))
		clear(o[:d]) // output row 0: keep dimension 0 of the residual constant
		b.AddF16(p+"attn_output.weight", []uint64{uint64(d), uint64(d)}, o)
		b.AddF32(p+"ffn_norm.weight", []uint64{uint64(d)}, ones(d))
		matrix(p+"ffn_gate.weight", f, d)
		matrix(p+"ffn_up.weight", f, d)
		down := c.random(p+"ffn_down.weight", d*f, std(f))
		clear(down[:f]) // output row 0, as for attn_output
		b.AddF16(p+"ffn_down.weight", []uint64{uint64(f), uint64(d)}, down)
	}

	b.AddF32("output_norm.weight", []uint64{uint64(d)}, ones(d))
	out := c.random("output.weight", nv*d, 3/math.Sqrt(float64(d)))
	for t := range nv {
		row := out[t*d : (t+1)*d]
		if voc.emit[t] {
			row[0] = 0
		} else {
			clear(row)
			row[0] = bannedWeight
		}
	}
	b.AddF16("output.weight", []uint64{uint64(d), uint64(nv)}, out)
	return b, b.Err()
}

// random returns n values drawn uniformly with mean 0 and standard deviation
// std, from a stream determined by the seed and the tensor name.
func (m TinyLlama) random(name string, n int, std float64) []float32 {
	h := fnv.New64a()
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(m.Seed)))
	h.Write([]byte(name))
	r := splitmix64{state: h.Sum64()}
	halfWidth := std * math.Sqrt(3)
	x := make([]float32, n)
	for i := range x {
		u := float64(r.next()>>11) / (1 << 53) // uniform in [0, 1)
		x[i] = float32((2*u - 1) * halfWidth)
	}
	return x
}

// splitmix64 is the SplitMix64 generator (Steele, Lea and Flood, 2014). It
// is used instead of math/rand so that the weights stay the same across Go
// releases.
type splitmix64 struct{ state uint64 }

func (s *splitmix64) next() uint64 {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
