package gguf

import (
	"fmt"
	"math"
)

// This file holds a plain float64 implementation of the llama forward pass
// as llama.cpp computes it (RMS norm, rotary embeddings in the "normal"
// adjacent-pair layout, grouped-query attention, SwiGLU feed-forward), used
// by the tests to check what a written model generates without an engine.

type refLayer struct {
	attnNorm, ffnNorm      []float32
	q, k, v, o             []float32
	gate, up, down         []float32
	kCache, vCache         [][]float64 // per position, kvDim values after RoPE (k)
	headDim, kvDim, nHeads int
	nKVHeads, ffn          int
}

type refModel struct {
	d, vocab   int
	eps, base  float64
	embd, out  []float32
	outputNorm []float32
	layers     []*refLayer
}

// loadRefModel builds a refModel from a parsed file written by TinyLlama.
func loadRefModel(f *parsedFile) (*refModel, error) {
	u32 := func(key string) int {
		e, ok := f.kv(key)
		if !ok {
			panic("missing " + key)
		}
		return int(e.value.(uint32))
	}
	f32 := func(key string) float64 {
		e, _ := f.kv(key)
		return float64(e.value.(float32))
	}
	get := func(name string) []float32 {
		t, ok := f.tensor(name)
		if !ok {
			panic("missing tensor " + name)
		}
		return f.tensorData(t)
	}
	m := &refModel{
		d:     u32("llama.embedding_length"),
		vocab: u32("llama.vocab_size"),
		eps:   f32("llama.attention.layer_norm_rms_epsilon"),
		base:  f32("llama.rope.freq_base"),
	}
	m.embd = get("token_embd.weight")
	m.out = get("output.weight")
	m.outputNorm = get("output_norm.weight")
	heads := u32("llama.attention.head_count")
	kvHeads := u32("llama.attention.head_count_kv")
	headDim := u32("llama.attention.key_length")
	for l := range u32("llama.block_count") {
		p := fmt.Sprintf("blk.%d.", l)
		m.layers = append(m.layers, &refLayer{
			attnNorm: get(p + "attn_norm.weight"), ffnNorm: get(p + "ffn_norm.weight"),
			q: get(p + "attn_q.weight"), k: get(p + "attn_k.weight"),
			v: get(p + "attn_v.weight"), o: get(p + "attn_output.weight"),
			gate: get(p + "ffn_gate.weight"), up: get(p + "ffn_up.weight"),
			down:    get(p + "ffn_down.weight"),
			headDim: headDim, kvDim: headDim * kvHeads,
			nHeads: heads, nKVHeads: kvHeads, ffn: u32("llama.feed_forward_length"),
		})
	}
	return m, nil
}

// matVec computes W x for W stored as out rows of len(x) elements.
func matVec(w []float32, x []float64, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for j := range out {
		row := w[j*in : (j+1)*in]
		var s float64
		for i, v := range row {
			s += float64(v) * x[i]
		}
		y[j] = s
	}
	return y
}

func rmsNorm(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * scale * float64(w[i])
	}
	return y
}

// rope rotates adjacent pairs of each head in place, as llama.cpp's
// LLAMA_ROPE_TYPE_NORM does.
func rope(x []float64, headDim int, pos int, base float64) {
	for h := 0; h < len(x); h += headDim {
		for i := 0; i < headDim; i += 2 {
			theta := float64(pos) * math.Pow(base, -float64(i)/float64(headDim))
			c, s := math.Cos(theta), math.Sin(theta)
			a, b := x[h+i], x[h+i+1]
			x[h+i] = a*c - b*s
			x[h+i+1] = a*s + b*c
		}
	}
}

// step feeds one token at position pos (positions must be fed in order from
// 0) and returns the logits.
func (m *refModel) step(tok, pos int) []float64 {
	d := m.d
	x := make([]float64, d)
	for i := range d {
		x[i] = float64(m.embd[tok*d+i])
	}
	for _, l := range m.layers {
		h := rmsNorm(x, l.attnNorm, m.eps)
		q := matVec(l.q, h, l.headDim*l.nHeads)
		k := matVec(l.k, h, l.kvDim)
		v := matVec(l.v, h, l.kvDim)
		rope(q, l.headDim, pos, m.base)
		rope(k, l.headDim, pos, m.base)
		l.kCache = append(l.kCache, k)
		l.vCache = append(l.vCache, v)
		att := make([]float64, l.headDim*l.nHeads)
		group := l.nHeads / l.nKVHeads
		scores := make([]float64, pos+1)
		for hd := range l.nHeads {
			qh := q[hd*l.headDim : (hd+1)*l.headDim]
			ko := hd / group * l.headDim
			maxS := math.Inf(-1)
			for p := 0; p <= pos; p++ {
				var s float64
				for i, qv := range qh {
					s += qv * l.kCache[p][ko+i]
				}
				s /= math.Sqrt(float64(l.headDim))
				scores[p] = s
				maxS = max(maxS, s)
			}
			var sum float64
			for p := range scores {
				scores[p] = math.Exp(scores[p] - maxS)
				sum += scores[p]
			}
			for p := range scores {
				a := scores[p] / sum
				for i := range l.headDim {
					att[hd*l.headDim+i] += a * l.vCache[p][ko+i]
				}
			}
		}
		for i, v := range matVec(l.o, att, d) {
			x[i] += v
		}
		h = rmsNorm(x, l.ffnNorm, m.eps)
		g := matVec(l.gate, h, l.ffn)
		u := matVec(l.up, h, l.ffn)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		for i, v := range matVec(l.down, g, d) {
			x[i] += v
		}
	}
	return matVec(m.out, rmsNorm(x, m.outputNorm, m.eps), m.vocab)
}

func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// greedy feeds prompt and then generates n tokens greedily. It also returns
// the smallest margin seen between the best and second-best logit and the
// largest logit of a token the model should never generate (per emit),
// relative to the best logit.
func (m *refModel) greedy(prompt []int, n int, emit []bool) (out []int, minMargin, worstBanned float64) {
	var logits []float64
	pos := 0
	for _, t := range prompt {
		logits = m.step(t, pos)
		pos++
	}
	minMargin, worstBanned = math.Inf(1), math.Inf(-1)
	for range n {
		best := argmax(logits)
		second := math.Inf(-1)
		for i, v := range logits {
			if i != best && v > second {
				second = v
			}
			if !emit[i] {
				worstBanned = max(worstBanned, v-logits[best])
			}
		}
		minMargin = min(minMargin, logits[best]-second)
		out = append(out, best)
		logits = m.step(best, pos)
		pos++
	}
	return out, minMargin, worstBanned
}
