package gguf

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

func testVocab(t testing.TB) *Tokenizer {
	v, err := BuildVocab([]Special{{"<|user|>", TokenControl}, {"<x>", TokenUserDefined}}, []string{"▁the", "▁then", "engine", "▁queue", "▁héllo"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewTokenizer(v, bosID)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenizerMergesAndFallsBack(t *testing.T) {
	tok := testVocab(t)
	pieces := func(ids []int32) []string {
		var out []string
		for _, id := range ids {
			out = append(out, tok.tokens[id])
		}
		return out
	}
	for _, c := range []struct {
		text    string
		special bool
		want    string
	}{
		{"the then engine", true, "t h e|▁then|▁|engine"},
		{" the queue", true, "▁the|▁queue"},
		{"<|user|>then", true, "<|user|>|t h en"},
		{"<|user|>", false, "< | u s e r | >"},
		{"a<x>b", false, "a|<x>|b"},
		{"\n", true, "<0x0A>"},
		{"é", true, "<0xC3>|<0xA9>"},
		{" héllo", true, "▁héllo"},
	} {
		got := strings.Join(pieces(tok.Encode(c.text, false, c.special)), "|")
		// Adjacent single characters print with spaces in want.
		want := c.want
		if got != strings.NewReplacer(" ", "|").Replace(want) {
			t.Errorf("Encode(%q, special %v) = %s, want %s", c.text, c.special, got, want)
		}
	}
	if ids := tok.Encode("", true, true); len(ids) != 1 || ids[0] != bosID {
		t.Errorf("Encode of nothing with bos = %v", ids)
	}
}

func TestBuildVocabRefusesDuplicates(t *testing.T) {
	if _, err := BuildVocab([]Special{{"<s>", TokenControl}}, nil); err == nil {
		t.Error("a special repeating <s> was accepted")
	}
	if _, err := BuildVocab([]Special{{"<z>", TokenNormal}}, nil); err == nil {
		t.Error("a special of normal type was accepted")
	}
}

func FuzzTokenizerRoundTrip(f *testing.F) {
	tok := testVocab(f)
	f.Add("the then <|user|> engine\nqueue héllo")
	f.Add("\xff\xfe<x>")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, true, true)
		if ids[0] != bosID {
			t.Fatal("no bos")
		}
		if !utf8.ValidString(s) {
			return // a broken sequence takes the next byte along, as llama.cpp reads it
		}
		if got := tok.Decode(ids[1:]); got != strings.ReplaceAll(s, "▁", " ") {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
	})
}

func safetensorsBytes(header string, data []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestReadSafetensors(t *testing.T) {
	data := binary.LittleEndian.AppendUint16(nil, Float16(1.5))
	data = binary.LittleEndian.AppendUint16(data, Float16(-2))
	data = binary.LittleEndian.AppendUint16(data, 0x3fc0) // bf16 1.5
	st, err := readSafetensors(bytes.NewReader(safetensorsBytes(
		`{"__metadata__":{"k":"v"},"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[4,6]}}`, data)))
	if err != nil {
		t.Fatal(err)
	}
	if a := st.Tensors["a"].Data; len(a) != 2 || a[0] != 1.5 || a[1] != -2 || st.Tensors["b"].Data[0] != 1.5 || st.Metadata["k"] != "v" {
		t.Errorf("read %+v", st)
	}
	for _, bad := range []string{
		`{"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}`,
		`{"a":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"F16","shape":[2],"data_offsets":[2,6]}}`,
		`not json`,
	} {
		if _, err := readSafetensors(bytes.NewReader(safetensorsBytes(bad, data))); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzReadSafetensors(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), []byte{0, 0, 128, 63})
	f.Fuzz(func(t *testing.T, header, data []byte) {
		st, err := readSafetensors(bytes.NewReader(safetensorsBytes(string(header), data)))
		if err != nil {
			return
		}
		for name, x := range st.Tensors {
			n := 1
			for _, d := range x.Shape {
				n *= d
			}
			if n != len(x.Data) {
				t.Fatalf("%s: shape %v holds %d values, read %d", name, x.Shape, n, len(x.Data))
			}
		}
	})
}
