package arms

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiterlab/arbiter/internal/testkit/memtest"
)

const limitsHead = "version: 1\nname: x\nengine: {preset: refserve}\nworkload: {sessions: 2, rounds: 1}\n"

// hostileSpecs are texts the YAML parser would spend gigabytes or minutes on, each with
// where the refusal must point and what it must say.
func hostileSpecs() []struct {
	name, text, at, path, msg string
} {
	var block strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&block, "  a%d:\n", i)
	}
	var levels, levelMap, comments strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&levels, "%q, ", fmt.Sprint(i))
	}
	for i := range 50_000 {
		fmt.Fprintf(&levelMap, "    l%d: {}\n", i)
	}
	for range 10_000 {
		comments.WriteString("# note\n")
	}
	var indented strings.Builder
	for i := range 40 {
		fmt.Fprintf(&indented, "%sk%d:\n", strings.Repeat(" ", i+1), i)
	}
	deepAt := func(prefix string) string { return fmt.Sprintf("5:%d", len(prefix)+MaxSpecDepth) }
	return []struct{ name, text, at, path, msg string }{
		{"flow lists 40k deep", limitsHead + "arms: " + strings.Repeat("[", 40_000) + strings.Repeat("]", 40_000), deepAt("arms: "), "arms.0.0.0.0.0...", "nested more than 32 deep"},
		{"flow lists 100k deep", limitsHead + "arms: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), deepAt("arms: "), "arms.0.0.0.0.0...", "nested more than 32 deep"},
		{"flow maps 40k deep", limitsHead + "arms: " + strings.Repeat("{a: ", 40_000) + "1" + strings.Repeat("}", 40_000), "5:128", "arms.a.a.a.a.a...", "nested more than 32 deep"},
		{"block lists 40k deep", limitsHead + "arms:\n" + strings.Repeat("- ", 40_000) + "a\n", "6:63", "arms.0.0.0.0.0...", "nested more than 32 deep"},
		{"indented keys 40 deep", limitsHead + "arms:\n" + indented.String(), "36:32", "arms.k0.k1.k2.k3.k4...", "nested more than 32 deep"},
		{"100k arms", limitsHead + "arms:\n" + clip(block.String(), MaxSpecBytes-len(limitsHead)-10), "5:1", "arms", "arms listed, more than 256; split the experiment"},
		{"100k arms in flow", limitsHead + "arms: {" + clip(strings.Repeat("a: {}, ", 100_000), MaxSpecBytes-200) + "}\n", "5:1", "arms", "arms listed, more than 256"},
		{"100k levels", limitsHead + "factors:\n  f: {env: K, levels: [" + clip(levels.String(), MaxSpecBytes-200) + "]}\n", "6:15", "factors.f.levels", "levels, so any design expands it to at least"},
		{"50k levels as a mapping", limitsHead + "factors:\n  f:\n" + levelMap.String(), "6:3", "factors.f", "factor f has 50000 levels"},
		{"10k comment lines", limitsHead + "arms: {a: {}, b: {}}\n" + comments.String(), "4092:1", "", "more than the 4096 a spec may hold"},
		{"300k tags", limitsHead + "arms: " + strings.Repeat("!t ", 300_000) + "x\n", "5:1", "", "more than the 4096 a spec may hold"},
		{"a 1 MiB comment and a byte", limitsHead + "#" + strings.Repeat("x", MaxSpecBytes), "1:1", "", "more than the 1048576 bytes (1 MiB)"},
	}
}

// clip cuts s to at most n bytes.
func clip(s string, n int) string { return s[:min(n, len(s))] }

func TestHostileSpecsAreRefusedFromTheText(t *testing.T) {
	for _, h := range hostileSpecs() {
		t.Run(h.name, func(t *testing.T) {
			data := []byte(h.text)
			// Measured in a process of its own: the tests beside this one allocate too.
			var err error
			use := memtest.Measure(t, func() { _, err = Parse("hostile.yaml", data) })
			errs := Errors(err)
			if len(errs) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			e := errs[0]
			if got := fmt.Sprintf("%d:%d", e.Line, e.Col); got != h.at || e.Path != h.path || !strings.Contains(e.Msg, h.msg) {
				t.Errorf("got %s %q: %s\nwant %s %q: ...%s...", got, e.Path, e.Msg, h.at, h.path, h.msg)
			}
			// What the refusal costs is allocation, counted exactly: the text itself
			// (Parse keeps no copy of a refused one) and little else.
			if alloc := use.Allocated; alloc > 4<<20 {
				t.Errorf("refusing it allocated %d bytes", alloc)
			}
		})
	}
}

// BenchmarkRefuseHostileSpec measures how long a refusal takes: a hostile text is
// scanned once and refused before the YAML parser runs (the target is well under 100 ms
// for the 1 MiB texts).
func BenchmarkRefuseHostileSpec(b *testing.B) {
	for _, h := range hostileSpecs() {
		data := []byte(h.text)
		b.Run(strings.ReplaceAll(h.name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse("hostile.yaml", data); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

func TestShapeScanAcceptsRealSpecs(t *testing.T) {
	files, _ := filepath.Glob("../testdata/specs/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, p := range append(files, examples...) {
		if strings.HasSuffix(p, "invalid-deep-nesting.yaml") {
			continue // the one refused for its shape
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if e := checkShape(p, data); e != nil {
			t.Errorf("%s refused: %v", p, e)
		}
	}
	// 256 arms, each pinning a variable and three flags, with comments: the most a
	// spec may expand to, written out.
	var b strings.Builder
	b.WriteString("version: 1\nname: wide\nengine: {preset: refserve}\nworkload: {sessions: 2, rounds: 1}\narms:\n")
	for i := range MaxArms {
		fmt.Fprintf(&b, "  # arm %d\n  a%d:\n    env: {K: %q}\n    args: [--x, %q, --y, %q, --z, %q]\n", i, i, fmt.Sprint(i), "1", "2", "3")
	}
	s, err := Parse("wide.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("256 explicit arms refused: %v", err)
	}
	if len(s.Arms) != MaxArms {
		t.Errorf("%d arms", len(s.Arms))
	}
}

func TestShapeScanReadsYAMLItDoesNotParse(t *testing.T) {
	// Quotes, block scalars and comments hold brackets, dashes and colons that open
	// nothing; lists may stand at their key's column.
	src := limitsHead + `arms:
  a:
    env: {K: "[[[[{{{{", L: 'it''s [ ]'}
    args:
    - "--x: [["
    - |
      [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
      - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -
    - >-
      {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{
  b: {env: {K: "multi
      line [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ string"}, args: [it's, "x"]}  # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
`
	if e := checkShape("s.yaml", []byte(src)); e != nil {
		t.Fatalf("refused: %v", e)
	}
	// The arms are counted where they are, whatever the style.
	var b strings.Builder
	b.WriteString(limitsHead + "arms:\n")
	for i := range MaxArms + 1 {
		fmt.Fprintf(&b, "  \"a%d\": |\n    text\n", i)
	}
	e := checkShape("s.yaml", []byte(b.String()))
	if e == nil || e.Path != "arms" || !strings.Contains(e.Msg, "257 arms listed") {
		t.Fatalf("257 arms with block scalars: %v", e)
	}
}

func TestLoadReadsRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "spec.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(limitsHead+"#"+strings.Repeat("x", MaxSpecBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "a named pipe, not a regular file"},
		{"/dev/zero", "a device, not a regular file"},
		{dir, "a directory, not a regular file"},
		{big, "bytes, more than the 1048576 bytes (1 MiB)"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := Load(tc.path)
			done <- err
		}()
		select {
		case err := <-done:
			errs := Errors(err)
			if len(errs) != 1 || errs[0].File != tc.path || errs[0].Line != 1 || !strings.Contains(errs[0].Msg, tc.want) {
				t.Errorf("Load(%s) = %v, want a %q at 1:1", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			// A guard, not a wait: Load must answer at once, and a blocked open of
			// the FIFO would otherwise hang the test binary.
			t.Fatalf("Load(%s) blocked", tc.path)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
}

func TestWorkloadBounds(t *testing.T) {
	spec := func(workload string) string {
		return "version: 1\nname: x\nengine: {preset: refserve}\narms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\nworkload: " + workload + "\n"
	}
	for _, tc := range []struct{ workload, want string }{
		{"{sessions: 2000000000, rounds: 2000000000}", "5:22 workload.sessions: value 2000000000 is more than 100000; 5:42 workload.rounds: value 2000000000 is more than 1000"},
		{"{sessions: 100000, rounds: 1000, concurrency: 60}", "5:1 workload: 100000 sessions x 1000 rounds is 100000000 conversation rounds per arm and block, more than 1000000"},
		{"{sessions: 5000, rounds: 1}", "5:22 workload.concurrency: concurrency defaults to sessions (5000), more than 4096"},
		{"{sessions: 5, rounds: 1, concurrency: 5000}", "5:49 workload.concurrency: value 5000 is more than 4096"},
		{"{sessions: 5, rounds: 1, max_tokens: 2000000}", "5:48 workload.max_tokens: value 2000000 is more than 1048576"},
		{"{sessions: 5, rounds: 1, max_response_bytes: 100}", "5:56 workload.max_response_bytes: size 100 bytes is outside 65536 (64 KiB) to 1073741824 (1 GiB)"},
		{"{sessions: 5, rounds: 1, max_response_bytes: 2GiB}", "5:56 workload.max_response_bytes: size 2147483648 bytes is outside"},
		{"{sessions: 5, rounds: 1, max_response_bytes: lots}", `5:56 workload.max_response_bytes: bad size "lots"`},
		{"{sessions: 5, rounds: 1, stream: maybe}", "5:44 workload.stream: value must be true or false"},
	} {
		_, err := Parse("w.yaml", []byte(spec(tc.workload)))
		var got []string
		for _, e := range Errors(err) {
			got = append(got, fmt.Sprintf("%d:%d %s: %s", e.Line, e.Col, e.Path, e.Msg))
		}
		joined := strings.Join(got, "; ")
		for _, w := range strings.Split(tc.want, "; ") {
			if !strings.Contains(joined, w) {
				t.Errorf("%s:\n  got  %s\n  want %s", tc.workload, joined, w)
			}
		}
	}
	for _, tc := range []struct {
		workload string
		bytes    int64
		noStream bool
	}{
		{"{sessions: 5, rounds: 1}", DefaultMaxResponseBytes, false},
		{"{sessions: 5, rounds: 1, max_response_bytes: 16MiB, stream: false}", 16 << 20, true},
		{"{sessions: 5, rounds: 1, max_response_bytes: 100000, stream: true}", 100000, false},
		{"{sessions: 5, rounds: 1, max_response_bytes: 512 KiB}", 512 << 10, false},
		{"{sessions: 5, rounds: 1, max_response_bytes: 2MB}", 2_000_000, false},
	} {
		s, err := Parse("w.yaml", []byte(spec(tc.workload)))
		if err != nil {
			t.Errorf("%s: %v", tc.workload, err)
			continue
		}
		if s.Workload.MaxResponseBytes != tc.bytes || s.Workload.NoStream != tc.noStream {
			t.Errorf("%s: max_response_bytes %d, no stream %v", tc.workload, s.Workload.MaxResponseBytes, s.Workload.NoStream)
		}
	}
}

func TestDesignBounds(t *testing.T) {
	base := "version: 1\nname: x\nengine: {preset: refserve, gpus: %s}\narms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\nworkload: {sessions: 2, rounds: 1}\nblocks: %s\n"
	for _, tc := range []struct{ gpus, blocks, want string }{
		{"2000000000", "1", "engine.gpus: value 2000000000 is more than 256"},
		{"1", "2000000000", "blocks: value 2000000000 is more than 100"},
	} {
		_, err := Parse("d.yaml", []byte(fmt.Sprintf(base, tc.gpus, tc.blocks)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpus %s blocks %s: %v", tc.gpus, tc.blocks, err)
		}
	}
	_, err := Parse("d.yaml", []byte("version: 1\nname: x\nengine: {preset: refserve}\narms: {a: {env: {K: \"0\"}}, b: {env: {K: \"1\"}}}\nworkload: {sessions: 2, rounds: 1}\nanalysis: {sequential: {looks: 1000}}\n"))
	if err == nil || !strings.Contains(err.Error(), "analysis.sequential.looks: value 1000 is more than 20") {
		t.Errorf("1000 looks: %v", err)
	}
}

func TestShapeScanCountsWhatTheParserWouldNest(t *testing.T) {
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	for name, src := range map[string]string{
		"after an anchor":                  "arms: &a" + deep + "\n",
		"after a tag":                      "arms: !!seq" + deep + "\n",
		"after a colon with no space":      "arms: {a:\"x" + deep + "\"}\n",
		"after a block scalar's last line": "a: |\n      text\n  b: " + deep + "\n",
		"in a flow mapping's value":        "arms: {a: " + deep + "}\n",
		"after a quoted key":               "arms: {\"a\": " + deep + "}\n",
	} {
		e := checkShape("s.yaml", []byte(src))
		if e == nil || !strings.Contains(e.Msg, "nested more than 32 deep") {
			t.Errorf("%s: %v", name, e)
		}
	}
}
