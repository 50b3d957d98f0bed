package detectors

import (
	"context"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

const prose = `HiCache keeps KV pages of finished turns in host memory and restores them when a
session comes back. The restore runs on a side stream so that it overlaps with compute; the
consumer must wait on the restore's event before it reads, or it may see the stale bytes of
the page's previous owner. Under light load the copy usually wins the race, which is why the
bug hides at one session and shows at sixty. The same test, at the same concurrency, with only
one flag toggled, settles the question in an hour.

To reproduce it, run 60 sessions of 4 rounds each against both arms, and compare the share of
sessions with at least one corrupted response. A session, not a response, is the unit: the
turns of one session share a cache and fail together.`

const goCode = "```go\nfunc (s *Store) Flush(ctx context.Context) error {\n\ts.mu.Lock()\n\tdefer s.mu.Unlock()\n\tfor _, b := range s.pending {\n\t\tif err := s.write(ctx, b); err != nil {\n\t\t\treturn fmt.Errorf(\"flush: %w\", err)\n\t\t}\n\t}\n\ts.pending = s.pending[:0]\n\treturn nil\n}\n```"

const pyCode = "```python\nimport numpy as np\n\ndef softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()\n\nprint(softmax(np.array([1.0, 2.0, 3.0])))\nprint(softmax(np.array([1.0, 2.0, 3.0])))\nprint(softmax(np.array([0.0, 0.0, 0.0])))\n```"

func TestRepetition(t *testing.T) {
	table := "| a | b | c | d | e | f | g | h | i | j | k | l | m | n | o | p | q | r |\n" +
		"|" + strings.Repeat("---|", 18) + "\n" + "|" + strings.Repeat(" x |", 18) + "\n"
	tests := []struct {
		name    string
		content string
		want    string // substring of the reason; "" means clean
	}{
		{"prose", prose, ""},
		{"go code", goCode, ""},
		{"python code with repeated lines", pyCode, ""},
		{"wide markdown table", table, ""},
		{"horizontal rules", "Intro\n\n" + strings.Repeat("-", 80) + "\n\n" + strings.Repeat("=", 80), ""},
		{"ellipsis and dots", "Wait" + strings.Repeat(".", 200) + " done", ""},
		{"counting", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30", ""},
		{"a few zeros", "weights = [0, 0, 0, 0, 0, 0, 0, 0]", ""},
		{"emphatic but short", "no no no no no no no no no no!", ""},
		{"chinese prose", "高速缓存把已完成轮次的键值页保存在主机内存中，并在会话返回时恢复它们。恢复在旁路流上进行，以便与计算重叠。", ""},
		{"one token 29 times", strings.Repeat("the ", 29), ""},
		{"long span 3 times", strings.Repeat("I will now call the weather tool for Paris. ", 3), ""},

		{"one token 30 times", "Answer: " + strings.Repeat("the ", 30), "a 1-token span repeated 30 times"},
		{"sentence loop", "Sure. " + strings.Repeat("I will now call the weather tool for Paris. ", 6), "a 10-token span repeated 6 times"},
		{"long span 4 times", strings.Repeat("I will now call the weather tool for Paris. ", 4), "repeated 4 times"},
		{"paragraph loop", strings.Repeat(prose[:300]+" ", 4), "repeated 4 times"},
		{"pair loop", strings.Repeat("tool call ", 15), "a 2-token span repeated 15 times"},
		{"chinese loop", "好的，" + strings.Repeat("好的", 30), "a 2-token span repeated 30 times"},
		{"separated word loop", strings.Repeat("ok, ", 30), "a 2-token span repeated 30 times"},
		{"separated word 29 times", strings.Repeat("ok, ", 29), ""},
		{"token run of 40", "ids: " + strings.Repeat("the ", 40), "a 1-token span repeated 40 times"},
		{"sentence 10 times", strings.Repeat("The cache restores the page before the read. ", 10), "repeated 10 times"},
		{"table row loop", "| a | b |\n|---|---|\n" + strings.Repeat("| Yes | Yes | Yes | Yes | Yes | Yes |\n", 40), "repeated"},
		{"loop around closed fences", strings.Repeat("Here is the code again:\n```\nx := 1\n```\n", 12), "repeated"},
		{"loop in an unclosed fence", "```python\n" + strings.Repeat("print(\"the weather in Paris is sunny today\")\n", 20), "repeated"},

		// Legitimate repetition in content.
		{"identity matrix in a fence", "The 8x8 identity:\n\n```python\nI = [\n" + identity(8) + "]\n```\n", ""},
		{"identity matrix", "I = [\n" + identity(8) + "]", ""},
		{"bare identity matrix in a fence", "```\n" + bareIdentity(8) + "```", ""},
		{"bare identity matrix", bareIdentity(8), ""},
		{"forty zeros", "zeros = [" + strings.TrimSuffix(strings.Repeat("0, ", 40), ", ") + "]", ""},
		{"forty zeros spaced", "ids: " + strings.Repeat("0 ", 40), ""},
		{"json array of identical objects", "[" + strings.TrimSuffix(strings.Repeat(`{"name": "slot", "status": "free", "owner": null}, `, 5), ", ") + "]", ""},
		{"markdown table of Yes", "| | A | B | C | D | E | F |\n|---|---|---|---|---|---|---|\n" + strings.Repeat("| Yes | Yes | Yes | Yes | Yes | Yes |\n", 6), ""},
		{"square table of Yes", strings.Repeat("| Yes | Yes | Yes | Yes | Yes | Yes |\n", 6), ""},
		{"loop inside a closed fence", "```\n" + strings.Repeat("the ", 60) + "\n```", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := repetition{}.Detect(context.Background(), reply(tt.content))
			if err != nil {
				t.Fatal(err)
			}
			if l.Detector != RepetitionName {
				t.Errorf("detector = %q", l.Detector)
			}
			if tt.want == "" {
				if l.Corrupted || l.Reason != "" {
					t.Fatalf("want clean, got %+v", l)
				}
				return
			}
			if !l.Corrupted || !strings.Contains(l.Reason, tt.want) {
				t.Fatalf("got %+v, want a reason containing %q", l, tt.want)
			}
			checkExcerpt(t, l.Reason)
		})
	}
}

// identity returns the rows of an n×n identity matrix as Python list literals.
func identity(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("    [")
		for j := range n {
			if j > 0 {
				b.WriteString(", ")
			}
			if i == j {
				b.WriteString("1")
			} else {
				b.WriteString("0")
			}
		}
		b.WriteString("],\n")
	}
	return b.String()
}

// bareIdentity returns an n×n identity matrix as rows of space-separated digits, where
// every 1 is n zeros after the last.
func bareIdentity(n int) string {
	var b strings.Builder
	for i := range n {
		row := strings.Split(strings.Repeat("0", n), "")
		row[i] = "1"
		b.WriteString(strings.Join(row, " ") + "\n")
	}
	return b.String()
}

func TestTokenize(t *testing.T) {
	toks := tokenize("a_b, c--d 好的 ---")
	var got []string
	s := "a_b, c--d 好的 ---"
	for i, tk := range toks {
		end := len(s)
		if i+1 < len(toks) {
			end = toks[i+1].off
		}
		got = append(got, strings.TrimSpace(s[tk.off:end]))
	}
	want := []string{"a_b", ",", "c", "--", "d", "好", "的", "---"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tokens = %q, want %q", got, want)
	}
}

func FuzzRepetition(f *testing.F) {
	for _, s := range []string{"", prose, goCode, pyCode, "I will now call the weather tool.", "a b a b a b a b", "好的好的", "| --- | --- |",
		"| Yes | Yes | Yes | Yes | Yes | Yes |\n", `{"name": "slot", "status": "free"},`, "1 0 0 0 0 0 0 0 0 0\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, unit string) {
		l, err := repetition{}.Detect(context.Background(), reply(unit))
		if err != nil {
			t.Fatal(err)
		}
		if l.Corrupted == (l.Reason == "") {
			t.Fatalf("corrupted=%v with reason %q", l.Corrupted, l.Reason)
		}
		// A primitive unit of 8 to maxUnit tokens said five times over is a loop, or
		// structRepeats+1 times when it is structure rather than language.
		toks := tokenize(unit)
		if len(toks) < longUnit || len(toks) > maxUnit || !primitive(toks) {
			return
		}
		times := 5
		if !language(toks) {
			times = structRepeats + 1
		}
		looped := strings.Repeat(unit+" ", times)
		if len(tokenize(looped)) != times*len(toks) {
			return // the unit's ends merge into one token across the seam
		}
		if len(fencedSpans(looped)) > 0 {
			return // closed fenced blocks are skipped
		}
		if l, _ := (repetition{}).Detect(context.Background(), reply(looped)); !l.Corrupted {
			t.Fatalf("%d times %q judged clean", times, unit)
		}
	})
}

// scanLoop is findLoop as the definition reads: every unit length against every position.
// findLoop probes instead; the two must agree on every content.
func scanLoop(content string) (loop, bool) {
	toks := unfenced(content, tokenize(content))
	n := len(toks)
	best, bestCover := loop{}, 0
	for p := 1; p <= maxUnit && p*2 <= n; p++ {
		run := 0
		for i := 0; i+p <= n; i++ {
			if i+p < n && toks[i].id == toks[i+p].id {
				run++
				continue
			}
			if run > 0 {
				start, cover := i-run, run+p
				if cover > bestCover && isLoop(toks[start:start+p], cover) {
					bestCover = cover
					best = loop{unit: p, repeats: cover / p, rune: utf8.RuneCountInString(content[:toks[start].off])}
					best.excerpt = excerpt(content[toks[start].off:], excerptRunes)
				}
			}
			run = 0
		}
	}
	return best, bestCover > 0
}

// FuzzFindLoopMatchesScan: the probing search finds the loop the full scan finds, in
// content as it comes and in content made of a few pieces said over and over, where
// loops of every length and overlapping runs are common.
func FuzzFindLoopMatchesScan(f *testing.F) {
	for _, s := range []string{"", prose, "a b a b a b a b", "x " + strings.Repeat("the cache was restored and ", 9) + "then",
		strings.Repeat("| Yes | Yes |\n", 20), identity(12), strings.Repeat("好的", 40)} {
		f.Add(s, uint8(0), uint8(0))
		f.Add(s, uint8(7), uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, times, split uint8) {
		if times > 0 && len(s) > 0 {
			// Pieces of s repeated: a prefix times times, then the whole once, then the
			// prefix again, so that runs of two periods touch and overlap.
			cut := int(split) % (len(s) + 1)
			s = strings.Repeat(s[:cut]+" ", int(times)) + s + " " + strings.Repeat(s[:cut]+" ", int(times)/2)
		}
		got, gotOK := findLoop(s)
		want, wantOK := scanLoop(s)
		if got != want || gotOK != wantOK {
			t.Fatalf("findLoop = %+v %v, full scan = %+v %v", got, gotOK, want, wantOK)
		}
	})
}

// TestIsCJKEveryRune: the shortcut below cjkFirst changes no answer.
func TestIsCJKEveryRune(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if got, want := isCJK(r), unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul); got != want {
			t.Fatalf("isCJK(%U) = %v, want %v", r, got, want)
		}
	}
}
