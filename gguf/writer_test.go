package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func writeBuilder(t testing.TB, b *Builder) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := b.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

func TestBuilderRoundTrip(t *testing.T) {
	b := NewBuilder()
	b.AddUint32("a.uint32", 0xdeadbeef)
	b.AddInt32("a.int32", -7)
	b.AddFloat32("a.float32", 1.5)
	b.AddBool("a.true", true)
	b.AddBool("a.false", false)
	b.AddString("a.string", "héllo ▁wörld")
	b.AddString("a.empty", "")
	b.AddStrings("a.strings", []string{"x", "", "▁y"})
	b.AddStrings("a.no_strings", nil)
	b.AddFloat32s("a.float32s", []float32{0, -1.25, float32(math.Inf(1))})
	b.AddInt32s("a.int32s", []int32{math.MinInt32, 0, math.MaxInt32})
	// Sizes chosen so that neither tensor fills a multiple of 32 bytes.
	f32 := []float32{1, 2, 3, 4, 5, 6}
	f16 := []float32{0.5, -2, 65504, 1e-8, 3, 4, 5}
	b.AddF32("t.f32", []uint64{3, 2}, f32)
	b.AddF16("t.f16", []uint64{7}, f16)
	b.AddF32("t.one", []uint64{1, 1, 1, 1}, []float32{42})
	data := writeBuilder(t, b)

	f, err := parseGGUF(data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := []parsedKV{
		{"a.uint32", TypeUint32, uint32(0xdeadbeef)},
		{"a.int32", TypeInt32, int32(-7)},
		{"a.float32", TypeFloat32, float32(1.5)},
		{"a.true", TypeBool, true},
		{"a.false", TypeBool, false},
		{"a.string", TypeString, "héllo ▁wörld"},
		{"a.empty", TypeString, ""},
		{"a.strings", TypeArray, []string{"x", "", "▁y"}},
		{"a.no_strings", TypeArray, []string{}},
		{"a.float32s", TypeArray, []float32{0, -1.25, float32(math.Inf(1))}},
		{"a.int32s", TypeArray, []int32{math.MinInt32, 0, math.MaxInt32}},
	}
	if !reflect.DeepEqual(f.kvs, want) {
		t.Errorf("metadata:\n got %#v\nwant %#v", f.kvs, want)
	}
	if f.alignment != 32 {
		t.Errorf("alignment %d, want the default 32", f.alignment)
	}
	if len(f.tensors) != 3 {
		t.Fatalf("%d tensors, want 3", len(f.tensors))
	}
	wantTensors := []parsedTensor{
		{name: "t.f32", dims: []uint64{3, 2}, typ: TensorF32, offset: 0},
		{name: "t.f16", dims: []uint64{7}, typ: TensorF16, offset: 32},
		{name: "t.one", dims: []uint64{1, 1, 1, 1}, typ: TensorF32, offset: 64},
	}
	if !reflect.DeepEqual(f.tensors, wantTensors) {
		t.Errorf("tensors:\n got %+v\nwant %+v", f.tensors, wantTensors)
	}
	if len(f.data) != 96 {
		t.Errorf("data section %d bytes, want 96", len(f.data))
	}
	if f.dataStart%32 != 0 {
		t.Errorf("data section starts at %d, not 32-aligned", f.dataStart)
	}
	if got := f.tensorData(f.tensors[0]); !reflect.DeepEqual(got, f32) {
		t.Errorf("f32 data %v, want %v", got, f32)
	}
	wantF16 := []float32{0.5, -2, 65504, 0, 3, 4, 5} // 1e-8 is below the smallest float16 subnormal
	if got := f.tensorData(f.tensors[1]); !reflect.DeepEqual(got, wantF16) {
		t.Errorf("f16 data %v, want %v", got, wantF16)
	}
}

func TestBuilderEmpty(t *testing.T) {
	var b Builder // the zero value is usable
	data := writeBuilder(t, &b)
	want := []byte("GGUF\x03\x00\x00\x00" + strings.Repeat("\x00", 16) + strings.Repeat("\x00", 8))
	if !bytes.Equal(data, want) {
		t.Errorf("empty file %q, want %q", data, want)
	}
	if _, err := parseGGUF(data); err != nil {
		t.Errorf("parse: %v", err)
	}
}

func TestBuilderAlignment(t *testing.T) {
	b := NewBuilder()
	b.SetAlignment(64)
	b.AddString("general.name", "x")
	b.AddF32("a", []uint64{3}, []float32{1, 2, 3})
	b.AddF16("b", []uint64{5}, []float32{1, 2, 3, 4, 5})
	data := writeBuilder(t, b)
	f, err := parseGGUF(data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if e, ok := f.kv(KeyAlignment); !ok || e.typ != TypeUint32 || e.value != uint32(64) {
		t.Errorf("%s = %+v, want uint32 64", KeyAlignment, e)
	}
	if f.alignment != 64 || f.dataStart%64 != 0 {
		t.Errorf("alignment %d, data start %d", f.alignment, f.dataStart)
	}
	if f.tensors[1].offset != 64 || len(f.data) != 128 {
		t.Errorf("second tensor at %d, data %d bytes; want 64 and 128", f.tensors[1].offset, len(f.data))
	}
}

func TestBuilderErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *Builder)
		want  string
	}{
		{"duplicate key", func(b *Builder) { b.AddUint32("k", 1); b.AddString("k", "v") }, `duplicate metadata key "k"`},
		{"empty key", func(b *Builder) { b.AddBool("", true) }, "empty metadata key"},
		{"long key", func(b *Builder) { b.AddBool(strings.Repeat("k", 1<<16), true) }, "longer than 65535"},
		{"invalid key", func(b *Builder) { b.AddBool("k\xff", true) }, "not valid UTF-8"},
		{"invalid string", func(b *Builder) { b.AddString("k", "\xff") }, "not valid UTF-8"},
		{"invalid element", func(b *Builder) { b.AddStrings("k", []string{"ok", "\xc3"}) }, "element 1"},
		{"alignment by key", func(b *Builder) { b.AddUint32(KeyAlignment, 32) }, "SetAlignment"},
		{"alignment not power of two", func(b *Builder) { b.SetAlignment(48) }, "not a power of two"},
		{"alignment zero", func(b *Builder) { b.SetAlignment(0) }, "not a power of two"},
		{"alignment twice", func(b *Builder) { b.SetAlignment(32); b.SetAlignment(64) }, "duplicate metadata key"},
		{"duplicate tensor", func(b *Builder) {
			b.AddF32("t", []uint64{1}, []float32{1})
			b.AddF16("t", []uint64{1}, []float32{1})
		}, `duplicate tensor "t"`},
		{"empty tensor name", func(b *Builder) { b.AddF32("", []uint64{1}, []float32{1}) }, "empty tensor name"},
		{"long tensor name", func(b *Builder) { b.AddF32(strings.Repeat("n", 64), []uint64{1}, []float32{1}) }, "longer than 63"},
		{"no dims", func(b *Builder) { b.AddF32("t", nil, nil) }, "0 dimensions"},
		{"five dims", func(b *Builder) { b.AddF32("t", []uint64{1, 1, 1, 1, 1}, []float32{1}) }, "5 dimensions"},
		{"zero dim", func(b *Builder) { b.AddF32("t", []uint64{2, 0}, nil) }, "zero dimension"},
		{"shape mismatch", func(b *Builder) { b.AddF16("t", []uint64{2, 3}, make([]float32, 5)) }, "hold 6 elements, data has 5"},
		{"overflow", func(b *Builder) { b.AddF32("t", []uint64{1 << 40, 1 << 40}, nil) }, "overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder()
			tc.build(b)
			b.AddUint32("after", 1) // ignored once an error is recorded
			var buf bytes.Buffer
			n, err := b.WriteTo(&buf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WriteTo error %v, want one containing %q", err, tc.want)
			}
			if !errors.Is(b.Err(), err) {
				t.Errorf("Err() = %v, WriteTo returned %v", b.Err(), err)
			}
			if n != 0 || buf.Len() != 0 {
				t.Errorf("wrote %d bytes (reported %d) despite the error", buf.Len(), n)
			}
		})
	}
}

type failingWriter struct{ left int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

func TestBuilderWriteError(t *testing.T) {
	b := NewBuilder()
	b.AddF32("t", []uint64{1 << 16}, make([]float32, 1<<16))
	w := &failingWriter{left: 100000}
	n, err := b.WriteTo(w)
	if err == nil || n != 100000 {
		t.Errorf("WriteTo = %d, %v; want 100000 and an error", n, err)
	}
}

func TestFloat16(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.1, 0x2e66},
		{65504, 0x7bff},
		{65519, 0x7bff},                       // below the halfway point to 65536
		{65520, 0x7c00},                       // halfway, rounds to even: infinity
		{1e6, 0x7c00},                         // overflow
		{float32(math.Ldexp(1, -14)), 0x0400}, // smallest normal
		{float32(math.Ldexp(1, -24)), 0x0001}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0x0000}, // halfway to the smallest subnormal: even is 0
		{float32(math.Ldexp(1.5, -25)), 0x0001},
		{float32(math.Ldexp(3, -25)), 0x0002},     // 1.5 subnormal units, ties to even 2
		{1 + float32(math.Ldexp(1, -11)), 0x3c00}, // halfway between 1 and next: even is 1
		{1 + float32(math.Ldexp(3, -11)), 0x3c02}, // halfway, rounds up to even
		{float32(math.Inf(-1)), 0xfc00},
	} {
		if got := Float16(tc.in); got != tc.want {
			t.Errorf("Float16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if got := Float16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("Float16(NaN) = %#04x, not a NaN", got)
	}
	// Every finite float16 value converts back to itself.
	for h := range 1 << 16 {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN
		}
		f := Float32From16(uint16(h))
		if got := Float16(f); got != uint16(h) {
			t.Fatalf("Float16(%g) = %#04x, want %#04x", f, got, h)
		}
	}
}

// FuzzMetadataString checks that any metadata key and string value, alone
// and as part of a string array, either round-trips exactly through the
// Builder and the test reader or is rejected for not being UTF-8 (or, for
// keys, being empty).
func FuzzMetadataString(f *testing.F) {
	f.Add("general.name", "tiny", "▁the")
	f.Add("k", "", "")
	f.Add("tokenizer.ggml.tokens", "<0x0A>", "\x00")
	f.Add("\xff", "\xc3\x28", "ok")
	f.Add("a.b", strings.Repeat("ü", 100), "\u2581")
	f.Fuzz(func(t *testing.T, key, value, elem string) {
		b := NewBuilder()
		b.AddString(key, value)
		b.AddStrings(key+".list", []string{value, elem, ""})
		var buf bytes.Buffer
		_, err := b.WriteTo(&buf)
		valid := key != "" && len(key)+len(".list") <= math.MaxUint16 &&
			utf8.ValidString(key) && utf8.ValidString(value) && utf8.ValidString(elem)
		if !valid {
			if err == nil {
				t.Fatalf("key %q value %q elem %q accepted", key, value, elem)
			}
			return
		}
		if err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		p, err := parseGGUF(buf.Bytes())
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		want := []parsedKV{
			{key, TypeString, value},
			{key + ".list", TypeArray, []string{value, elem, ""}},
		}
		if !reflect.DeepEqual(p.kvs, want) {
			t.Fatalf("got %#v, want %#v", p.kvs, want)
		}
	})
}

// AddInt32 adds a metadata entry of type int32.
func (b *Builder) AddInt32(key string, v int32) {
	b.addUserKV(key, TypeInt32, binary.LittleEndian.AppendUint32(nil, uint32(v)))
}
