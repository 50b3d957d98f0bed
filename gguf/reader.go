package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file holds a GGUF v3 reader for the files this package writes (the value and
// tensor types the Builder uses). It is written independently of the Builder's encoding
// helpers and checks the layout rules as it goes, so that a file it accepts is well
// formed: the tests read back what the Builder wrote with it, and ReadTrained turns a
// trained model's file back into its checkpoint.

// parsedKV is one metadata entry. value holds uint32, int32, float32, bool,
// string, []string, []float32 or []int32.
type parsedKV struct {
	key   string
	typ   ValueType
	value any
}

type parsedTensor struct {
	name   string
	dims   []uint64
	typ    TensorType
	offset uint64 // relative to the data section
}

// size returns the byte size of the tensor's data, unpadded.
func (t parsedTensor) size() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	switch t.typ {
	case TensorF32:
		return 4 * n
	case TensorF16:
		return 2 * n
	}
	return 0
}

type parsedFile struct {
	version   uint32
	kvs       []parsedKV
	tensors   []parsedTensor
	alignment uint64
	dataStart uint64 // absolute offset of the data section
	data      []byte // the data section, to the end of the file
}

func (f *parsedFile) kv(key string) (parsedKV, bool) {
	for _, e := range f.kvs {
		if e.key == key {
			return e, true
		}
	}
	return parsedKV{}, false
}

func (f *parsedFile) tensor(name string) (parsedTensor, bool) {
	for _, t := range f.tensors {
		if t.name == name {
			return t, true
		}
	}
	return parsedTensor{}, false
}

// tensorData returns the tensor's elements as float32.
func (f *parsedFile) tensorData(t parsedTensor) []float32 {
	raw := f.data[t.offset : t.offset+t.size()]
	var out []float32
	switch t.typ {
	case TensorF32:
		out = make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case TensorF16:
		out = make([]float32, len(raw)/2)
		for i := range out {
			out[i] = Float32From16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	}
	return out
}

type byteReader struct {
	b   []byte
	off uint64
}

var errShort = errors.New("unexpected end of file")

func (r *byteReader) take(n uint64) ([]byte, error) {
	if n > uint64(len(r.b))-r.off {
		return nil, errShort
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *byteReader) u32() (uint32, error) {
	p, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (r *byteReader) u64() (uint64, error) {
	p, err := r.take(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

func (r *byteReader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	p, err := r.take(n)
	return string(p), err
}

func (r *byteReader) scalar(t ValueType) (any, error) {
	switch t {
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		v, err := r.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := r.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		p, err := r.take(1)
		if err != nil {
			return nil, err
		}
		if p[0] > 1 {
			return nil, fmt.Errorf("bool byte %d", p[0])
		}
		return p[0] == 1, nil
	case TypeString:
		return r.str()
	}
	return nil, fmt.Errorf("unsupported value type %d", t)
}

func (r *byteReader) array() (any, error) {
	et, err := r.u32()
	if err != nil {
		return nil, err
	}
	n, err := r.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) { // every element takes at least one byte
		return nil, errShort
	}
	elem := ValueType(et)
	switch elem {
	case TypeString:
		out := make([]string, n)
		for i := range out {
			if out[i], err = r.str(); err != nil {
				return nil, err
			}
		}
		return out, nil
	case TypeFloat32:
		out := make([]float32, n)
		for i := range out {
			v, err := r.u32()
			if err != nil {
				return nil, err
			}
			out[i] = math.Float32frombits(v)
		}
		return out, nil
	case TypeInt32:
		out := make([]int32, n)
		for i := range out {
			v, err := r.u32()
			if err != nil {
				return nil, err
			}
			out[i] = int32(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported array element type %d", et)
}

// parseGGUF parses a complete GGUF v3 file and checks its layout: the magic
// and version, unique keys and tensor names, tensor offsets aligned and laid
// out in order with the padding the format prescribes, and a data section
// exactly as long as the padded tensors.
func parseGGUF(b []byte) (*parsedFile, error) {
	r := &byteReader{b: b}
	magic, err := r.take(4)
	if err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("magic %q", magic)
	}
	f := &parsedFile{alignment: uint64(DefaultAlignment)}
	if f.version, err = r.u32(); err != nil {
		return nil, err
	}
	if f.version != 3 {
		return nil, fmt.Errorf("version %d", f.version)
	}
	nTensors, err := r.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64()
	if err != nil {
		return nil, err
	}
	if nTensors > uint64(len(b)) || nKV > uint64(len(b)) {
		return nil, errShort
	}
	seen := make(map[string]bool)
	for range nKV {
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		t, err := r.u32()
		if err != nil {
			return nil, err
		}
		var v any
		if ValueType(t) == TypeArray {
			v, err = r.array()
		} else {
			v, err = r.scalar(ValueType(t))
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		f.kvs = append(f.kvs, parsedKV{key: key, typ: ValueType(t), value: v})
		if key == KeyAlignment {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("bad %s %v", KeyAlignment, v)
			}
			f.alignment = uint64(a)
		}
	}
	seen = make(map[string]bool)
	for range nTensors {
		var t parsedTensor
		if t.name, err = r.str(); err != nil {
			return nil, err
		}
		if seen[t.name] {
			return nil, fmt.Errorf("duplicate tensor %q", t.name)
		}
		seen[t.name] = true
		nd, err := r.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > MaxDims {
			return nil, fmt.Errorf("tensor %q: %d dims", t.name, nd)
		}
		for range nd {
			d, err := r.u64()
			if err != nil {
				return nil, err
			}
			if d == 0 || d > uint64(len(b)) {
				return nil, fmt.Errorf("tensor %q: dim %d", t.name, d)
			}
			t.dims = append(t.dims, d)
		}
		typ, err := r.u32()
		if err != nil {
			return nil, err
		}
		t.typ = TensorType(typ)
		if t.typ != TensorF32 && t.typ != TensorF16 {
			return nil, fmt.Errorf("tensor %q: type %d", t.name, typ)
		}
		if t.offset, err = r.u64(); err != nil {
			return nil, err
		}
		f.tensors = append(f.tensors, t)
	}
	f.dataStart = r.off + (f.alignment-r.off%f.alignment)%f.alignment
	if f.dataStart > uint64(len(b)) {
		return nil, errShort
	}
	for _, p := range b[r.off:f.dataStart] {
		if p != 0 {
			return nil, errors.New("non-zero padding before the data section")
		}
	}
	f.data = b[f.dataStart:]

	var next uint64
	for _, t := range f.tensors {
		if t.offset%f.alignment != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d not aligned to %d", t.name, t.offset, f.alignment)
		}
		if t.offset != next {
			return nil, fmt.Errorf("tensor %q: offset %d, want %d", t.name, t.offset, next)
		}
		size := t.size()
		next = t.offset + size + (f.alignment-size%f.alignment)%f.alignment
		if next > uint64(len(f.data)) {
			return nil, fmt.Errorf("tensor %q: data ends past the end of the file", t.name)
		}
	}
	if next != uint64(len(f.data)) {
		return nil, fmt.Errorf("data section is %d bytes, tensors need %d", len(f.data), next)
	}
	return f, nil
}
