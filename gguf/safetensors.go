package gguf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Safetensors is a checkpoint in the safetensors format (an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte range, then
// the data), with every tensor widened to float32.
type Safetensors struct {
	// Metadata is the header's __metadata__: string keys and values.
	Metadata map[string]string
	// Tensors holds each tensor's shape (outermost first, as PyTorch writes it) and
	// values in row-major order.
	Tensors map[string]Tensor
}

// Tensor is one tensor of a checkpoint.
type Tensor struct {
	Shape []int
	Data  []float32
}

// maxSafetensorsHeader bounds the JSON header a checkpoint may have.
const maxSafetensorsHeader = 16 << 20

// ReadSafetensors reads the checkpoint at path. F32, F16 and BF16 tensors are read.
func ReadSafetensors(path string) (*Safetensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := readSafetensors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func readSafetensors(r io.Reader) (*Safetensors, error) {
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, fmt.Errorf("safetensors header length: %w", err)
	}
	if n > maxSafetensorsHeader {
		return nil, fmt.Errorf("safetensors header of %d bytes is over the %d accepted", n, maxSafetensorsHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	st := &Safetensors{Metadata: map[string]string{}, Tensors: map[string]Tensor{}}
	type entry struct {
		name    string
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	var entries []entry
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &st.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors __metadata__: %w", err)
			}
			continue
		}
		e := entry{name: name}
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("safetensors tensor %q: %w", name, err)
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Offsets[0] < entries[j].Offsets[0] })
	var pos int64
	for _, e := range entries {
		width := map[string]int64{"F32": 4, "F16": 2, "BF16": 2}[e.DType]
		if width == 0 {
			return nil, fmt.Errorf("safetensors tensor %q: dtype %q is not read (F32, F16 or BF16)", e.name, e.DType)
		}
		count := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > 1<<31 {
				return nil, fmt.Errorf("safetensors tensor %q: dimension %d", e.name, d)
			}
			count *= int64(d)
		}
		if e.Offsets[0] != pos || e.Offsets[1]-e.Offsets[0] != count*width || count > maxParams {
			return nil, fmt.Errorf("safetensors tensor %q: bytes %d to %d do not hold %d %s values after byte %d", e.name, e.Offsets[0], e.Offsets[1], count, e.DType, pos)
		}
		buf := make([]byte, count*width)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("safetensors tensor %q: %w", e.name, err)
		}
		pos = e.Offsets[1]
		data := make([]float32, count)
		for i := range data {
			switch e.DType {
			case "F32":
				data[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			case "F16":
				data[i] = Float32From16(binary.LittleEndian.Uint16(buf[2*i:]))
			case "BF16":
				data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[2*i:])) << 16)
			}
		}
		st.Tensors[e.name] = Tensor{Shape: e.Shape, Data: data}
	}
	return st, nil
}
