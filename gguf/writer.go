// Package gguf writes model files in the GGUF format (version 3) used by
// llama.cpp and the engines built on it, such as ollama.
//
// The package has two layers. [Builder] is a general GGUF v3 writer: it
// collects metadata key/value pairs and tensors in memory and serialises
// them with [Builder.WriteTo]. [TinyLlama] uses it to produce a small
// llama-architecture model with deterministic random weights, meant for
// exercising serving engines without downloading a real model.
//
// # File layout
//
// A GGUF v3 file is, in order and little-endian throughout:
//
//   - the magic bytes "GGUF" and the version, uint32 3;
//   - the tensor count and the metadata count, each uint64;
//   - the metadata: per entry a key string, a uint32 value type and the value;
//   - the tensor infos: per tensor a name string, a uint32 dimension count,
//     that many uint64 dimensions, a uint32 tensor type and a uint64 offset
//     relative to the start of the data section;
//   - zero padding up to the alignment;
//   - the data section: each tensor's data, each followed by zero padding up
//     to the alignment.
//
// Strings are a uint64 byte length followed by the bytes, without a
// terminator. Arrays are a uint32 element type, a uint64 element count and the
// elements. The alignment is 32 bytes unless the metadata key
// general.alignment (uint32) says otherwise.
//
// Dimensions are listed innermost first, the order ggml calls ne: a matrix
// that PyTorch holds with shape [out, in] has GGUF dimensions [in, out], and
// its data is the same row-major sequence of out rows of in elements.
package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// Version is the GGUF format version that [Builder] writes.
const Version uint32 = 3

// DefaultAlignment is the alignment of the data section and of every tensor's
// data when the metadata does not contain general.alignment.
const DefaultAlignment uint32 = 32

// KeyAlignment is the metadata key that overrides [DefaultAlignment].
const KeyAlignment = "general.alignment"

// MaxTensorName is the longest tensor name, in bytes, that ggml accepts.
const MaxTensorName = 63

// MaxDims is the largest number of dimensions ggml supports for a tensor.
const MaxDims = 4

// ValueType is the type tag of a metadata value, as stored in the file.
type ValueType uint32

// The GGUF metadata value types. [Builder] writes only some of them; the full
// list is given so that the numbering is documented in one place.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// TensorType is the ggml element type of a tensor, as stored in the file.
type TensorType uint32

// The tensor types [Builder] writes.
const (
	TensorF32 TensorType = 0 // IEEE 754 binary32, 4 bytes per element
	TensorF16 TensorType = 1 // IEEE 754 binary16, 2 bytes per element
)

// kv is one metadata entry: the key, the type tag and the encoded value
// (everything after the type tag).
type kv struct {
	key   string
	typ   ValueType
	value []byte
}

// tensor is one tensor: its info and its encoded data, unpadded.
type tensor struct {
	name string
	dims []uint64
	typ  TensorType
	data []byte
}

// Builder collects GGUF metadata and tensors and writes them as one GGUF v3
// file. Entries are written in the order they were added.
//
// The Add and Set methods do not return errors. The first invalid call
// (a duplicate key or tensor name, a string that is not UTF-8, a shape that
// does not match the data, ...) is remembered, later calls are ignored, and
// [Builder.WriteTo] and [Builder.Err] report it.
//
// The zero value is an empty Builder with [DefaultAlignment], like the one
// [NewBuilder] returns.
type Builder struct {
	alignment uint32
	kvs       []kv
	keys      map[string]bool
	tensors   []tensor
	names     map[string]bool
	err       error
}

// NewBuilder returns an empty Builder with [DefaultAlignment].
func NewBuilder() *Builder { return new(Builder) }

// align returns the alignment in effect.
func (b *Builder) align() uint64 {
	if b.alignment == 0 {
		return uint64(DefaultAlignment)
	}
	return uint64(b.alignment)
}

// Err returns the first error recorded by an Add or Set call, or nil.
func (b *Builder) Err() error { return b.err }

func (b *Builder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("gguf: "+format, args...)
	}
}

// SetAlignment sets the alignment of the data section and of each tensor's
// data, and records it in the metadata as general.alignment (uint32). n must
// be a power of two. SetAlignment may be called at most once; a Builder on
// which it is never called uses [DefaultAlignment] and writes no
// general.alignment entry, which readers interpret identically.
func (b *Builder) SetAlignment(n uint32) {
	if b.err != nil {
		return
	}
	if n == 0 || n&(n-1) != 0 {
		b.fail("alignment %d is not a power of two", n)
		return
	}
	if b.addKV(KeyAlignment, TypeUint32, binary.LittleEndian.AppendUint32(nil, n)) {
		b.alignment = n
	}
}

// AddUint32 adds a metadata entry of type uint32.
func (b *Builder) AddUint32(key string, v uint32) {
	b.addUserKV(key, TypeUint32, binary.LittleEndian.AppendUint32(nil, v))
}

// AddFloat32 adds a metadata entry of type float32.
func (b *Builder) AddFloat32(key string, v float32) {
	b.addUserKV(key, TypeFloat32, binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
}

// AddBool adds a metadata entry of type bool, stored as one byte, 0 or 1.
func (b *Builder) AddBool(key string, v bool) {
	var x byte
	if v {
		x = 1
	}
	b.addUserKV(key, TypeBool, []byte{x})
}

// AddString adds a metadata entry of type string. v must be valid UTF-8.
func (b *Builder) AddString(key string, v string) {
	if b.err != nil {
		return
	}
	if !utf8.ValidString(v) {
		b.fail("value of %q is not valid UTF-8", key)
		return
	}
	b.addUserKV(key, TypeString, appendString(nil, v))
}

// AddStrings adds a metadata entry of type array of string. Every element
// must be valid UTF-8.
func (b *Builder) AddStrings(key string, v []string) {
	if b.err != nil {
		return
	}
	buf := appendArrayHeader(nil, TypeString, len(v))
	for i, s := range v {
		if !utf8.ValidString(s) {
			b.fail("element %d of %q is not valid UTF-8", i, key)
			return
		}
		buf = appendString(buf, s)
	}
	b.addUserKV(key, TypeArray, buf)
}

// AddFloat32s adds a metadata entry of type array of float32.
func (b *Builder) AddFloat32s(key string, v []float32) {
	buf := appendArrayHeader(make([]byte, 0, 12+4*len(v)), TypeFloat32, len(v))
	for _, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	b.addUserKV(key, TypeArray, buf)
}

// AddInt32s adds a metadata entry of type array of int32.
func (b *Builder) AddInt32s(key string, v []int32) {
	buf := appendArrayHeader(make([]byte, 0, 12+4*len(v)), TypeInt32, len(v))
	for _, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(x))
	}
	b.addUserKV(key, TypeArray, buf)
}

// addUserKV adds an entry through the public Add methods, which must not be
// used for general.alignment: that key also changes the layout, so it is set
// only through SetAlignment.
func (b *Builder) addUserKV(key string, typ ValueType, value []byte) {
	if b.err != nil {
		return
	}
	if key == KeyAlignment {
		b.fail("set %s with SetAlignment", KeyAlignment)
		return
	}
	b.addKV(key, typ, value)
}

func (b *Builder) addKV(key string, typ ValueType, value []byte) bool {
	if b.err != nil {
		return false
	}
	switch {
	case key == "":
		b.fail("empty metadata key")
	case len(key) > math.MaxUint16:
		b.fail("metadata key of %d bytes is longer than %d", len(key), math.MaxUint16)
	case !utf8.ValidString(key):
		b.fail("metadata key %q is not valid UTF-8", key)
	case b.keys[key]:
		b.fail("duplicate metadata key %q", key)
	}
	if b.err != nil {
		return false
	}
	if b.keys == nil {
		b.keys = make(map[string]bool)
	}
	b.keys[key] = true
	b.kvs = append(b.kvs, kv{key: key, typ: typ, value: value})
	return true
}

// AddF32 adds a tensor stored as float32. dims are innermost first (see the
// package documentation) and their product must equal len(data).
func (b *Builder) AddF32(name string, dims []uint64, data []float32) {
	if !b.checkTensor(name, dims, len(data)) {
		return
	}
	buf := make([]byte, 0, 4*len(data))
	for _, x := range data {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	b.addTensor(name, dims, TensorF32, buf)
}

// AddF16 adds a tensor stored as float16, converting each element with
// [Float16] (round to nearest even; values beyond the float16 range become
// infinities). dims are innermost first and their product must equal
// len(data).
func (b *Builder) AddF16(name string, dims []uint64, data []float32) {
	if !b.checkTensor(name, dims, len(data)) {
		return
	}
	buf := make([]byte, 0, 2*len(data))
	for _, x := range data {
		buf = binary.LittleEndian.AppendUint16(buf, Float16(x))
	}
	b.addTensor(name, dims, TensorF16, buf)
}

func (b *Builder) checkTensor(name string, dims []uint64, n int) bool {
	if b.err != nil {
		return false
	}
	switch {
	case name == "":
		b.fail("empty tensor name")
	case len(name) > MaxTensorName:
		b.fail("tensor name %q is longer than %d bytes", name, MaxTensorName)
	case !utf8.ValidString(name):
		b.fail("tensor name %q is not valid UTF-8", name)
	case b.names[name]:
		b.fail("duplicate tensor %q", name)
	case len(dims) == 0 || len(dims) > MaxDims:
		b.fail("tensor %q has %d dimensions, want 1 to %d", name, len(dims), MaxDims)
	}
	if b.err != nil {
		return false
	}
	count := uint64(1)
	for _, d := range dims {
		if d == 0 {
			b.fail("tensor %q has a zero dimension in %v", name, dims)
			return false
		}
		if count > math.MaxInt64/d {
			b.fail("tensor %q: dimensions %v overflow", name, dims)
			return false
		}
		count *= d
	}
	if count != uint64(n) {
		b.fail("tensor %q: dimensions %v hold %d elements, data has %d", name, dims, count, n)
		return false
	}
	return true
}

func (b *Builder) addTensor(name string, dims []uint64, typ TensorType, data []byte) {
	if b.names == nil {
		b.names = make(map[string]bool)
	}
	b.names[name] = true
	b.tensors = append(b.tensors, tensor{name: name, dims: append([]uint64(nil), dims...), typ: typ, data: data})
}

// padding returns the number of zero bytes that bring offset up to a
// multiple of align.
func padding(offset, align uint64) uint64 {
	return (align - offset%align) % align
}

// WriteTo writes the GGUF file to w and returns the number of bytes written.
// It returns the error recorded by an earlier Add or Set call, if any,
// without writing anything. The output depends only on the calls made, so
// equal call sequences produce identical bytes.
func (b *Builder) WriteTo(w io.Writer) (int64, error) {
	if b.err != nil {
		return 0, b.err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	cw := &countingWriter{w: bw}
	align := b.align()

	var hdr []byte
	hdr = append(hdr, Magic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, Version)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(b.tensors)))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(b.kvs)))
	cw.write(hdr)

	for _, e := range b.kvs {
		buf := appendString(nil, e.key)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(e.typ))
		cw.write(buf)
		cw.write(e.value)
	}

	var offset uint64
	for _, t := range b.tensors {
		buf := appendString(nil, t.name)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(t.dims)))
		for _, d := range t.dims {
			buf = binary.LittleEndian.AppendUint64(buf, d)
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t.typ))
		buf = binary.LittleEndian.AppendUint64(buf, offset)
		cw.write(buf)
		n := uint64(len(t.data))
		offset += n + padding(n, align)
	}

	zeros := make([]byte, align)
	cw.write(zeros[:padding(uint64(cw.n), align)])
	for _, t := range b.tensors {
		cw.write(t.data)
		cw.write(zeros[:padding(uint64(len(t.data)), align)])
	}
	if cw.err == nil {
		cw.err = bw.Flush()
	}
	if cw.err != nil {
		cw.n -= int64(bw.Buffered()) // accepted by bw but never written to w
	}
	return cw.n, cw.err
}

// countingWriter counts the bytes handed to w and keeps the first error.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) write(p []byte) {
	if c.err != nil || len(p) == 0 {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}

func appendString(buf []byte, s string) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(s)))
	return append(buf, s...)
}

func appendArrayHeader(buf []byte, elem ValueType, n int) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(elem))
	return binary.LittleEndian.AppendUint64(buf, uint64(n))
}

// Float16 converts f to the bits of the nearest IEEE 754 binary16 value,
// rounding ties to even. Values whose magnitude rounds above 65504 become
// infinities, values too small for a subnormal become signed zeros, and NaNs
// stay NaNs (quiet).
func Float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal in binary16 (or zero): the value is m * 2^-24 with m
		// the full 24-bit significand shifted right by 14-e.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry out of the mantissa correctly bumps the exponent, up to infinity
	}
	return sign | uint16(h)
}

// Float32From16 decodes IEEE 754 binary16 bits exactly: the inverse of [Float16] on
// every value float16 holds.
func Float32From16(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float32(h & 0x3ff)
	switch exp {
	case 0:
		return sign * mant * float32(math.Ldexp(1, -24))
	case 0x1f:
		if mant != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * (1 + mant/1024) * float32(math.Ldexp(1, exp-15))
}
