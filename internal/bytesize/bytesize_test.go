package bytesize

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"8MiB", 8 << 20, true},
		{"512 KiB", 512 << 10, true},
		{"1gib", 1 << 30, true},
		{"16MB", 16_000_000, true},
		{"2k", 2048, true},
		{" 7 b ", 7, true},
		{"-1", 0, false},
		{"8 TiB", 0, false},
		{"MiB", 0, false},
		{"9223372036854775807GiB", 0, false},
		{"1.5MiB", 0, false},
	} {
		got, ok := Parse(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestWriters(t *testing.T) {
	for _, c := range []struct {
		n              int64
		human, compact string
	}{
		{1 << 30, "1 GiB", "1GiB"},
		{256 << 20, "256 MiB", "256MiB"},
		{512 << 10, "512 KiB", "512KiB"},
		{1536 << 20, "1536 MiB", "1536MiB"},
		{100000, "100000 bytes", "100000"},
		{0, "0 bytes", "0"},
	} {
		if got := String(c.n); got != c.human {
			t.Errorf("String(%d) = %q; want %q", c.n, got, c.human)
		}
		if got := Compact(c.n); got != c.compact {
			t.Errorf("Compact(%d) = %q; want %q", c.n, got, c.compact)
		}
		if back, ok := Parse(Compact(c.n)); !ok || back != c.n {
			t.Errorf("Parse(Compact(%d)) = %d, %v", c.n, back, ok)
		}
	}
	if got := Approx(1468006, true); got != "more than 1.4 MiB (1468006 bytes)" {
		t.Errorf("Approx = %q", got)
	}
}

func FuzzByteSize(f *testing.F) {
	f.Add("8MiB")
	f.Add("512 kb")
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := Parse(s)
		if !ok {
			return
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		if back, ok := Parse(Compact(n)); !ok || back != n {
			t.Fatalf("Parse(Compact(%d)) = %d, %v", n, back, ok)
		}
	})
}
