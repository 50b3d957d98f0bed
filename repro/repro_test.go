package repro

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestDeparts(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"the same", "the same", -1}, {"anything", "", -1}, {"abcX", "abcY", 3}, {"ab", "abc", 2}, {"ǅx", "ǅy", 1},
	} {
		if got := departs(tc.a, tc.b); got != tc.want {
			t.Errorf("departs(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if got := callNames(json.RawMessage(`[{"id":"1","function":{"name":"get_weather","arguments":"{}"}},{"function":{"name":"run_sql"}}]`)); !slices.Equal(got, []string{"get_weather", "run_sql"}) {
		t.Errorf("callNames = %q", got)
	}
	if got := callNames(json.RawMessage(`not json`)); got != nil {
		t.Errorf("callNames of garbage = %q", got)
	}
}

// The issue text names the failing arm by its pins, every launch with its version, the
// rates, each case and how the baseline answered it, and the replay command.
func TestMarkdown(t *testing.T) {
	b := &Bundle{Name: "x", Baseline: "control", Headline: "treatment corrupted 9 of 60.", Concurrency: 60, Detectors: []string{"dsml-leak"},
		Arms: []Arm{{Name: "control", Pins: "BF16_INDEX_K=0", Command: []string{"refserve"}, Env: map[string]string{"B": "2", "A": "1"}, Version: "0.1.0", Sessions: 60},
			{Name: "treatment", Pins: "BF16_INDEX_K=1", Command: []string{"refserve"}, Sessions: 60, Corrupted: 9, Rate: 0.15, Interval: [2]float64{0.08, 0.26}}},
		Cases: []Case{{ID: "case-1", Arm: "treatment", Session: 7, Turn: 4, Round: 2, Reasons: "dsml-leak: markup", Departs: -1,
			BaselineCalls: json.RawMessage(`[{"function":{"name":"get_weather"}}]`)}},
		Load: make([]json.RawMessage, 59)}
	md := b.Markdown()
	for _, want := range []string{"# x: responses corrupted with treatment (BF16_INDEX_K=1), not with control", "treatment corrupted 9 of 60.",
		"**control** (engine version 0.1.0): `refserve` with `A=1 B=2`", "**treatment** (engine version not reported)",
		"| treatment | 9 | 60 | 15.0% | 8.0% – 26.0% |", "control answered the same turn with the structured call get_weather",
		"with the 59 requests that opened the same round", "arbiter repro --replay BUNDLE --base-url"} {
		if !strings.Contains(md, want) {
			t.Errorf("README lacks %q:\n%s", want, md)
		}
	}
}

// The title says what the rates say: a baseline that corrupted more is named as the worse.
func TestTitleComesFromTheRates(t *testing.T) {
	arms := func(control, treatment int) []Arm {
		return []Arm{{Name: "control", Pins: "BF16_INDEX_K=0", Sessions: 60, Corrupted: control, Rate: float64(control) / 60},
			{Name: "treatment", Pins: "BF16_INDEX_K=1", Sessions: 60, Corrupted: treatment, Rate: float64(treatment) / 60}}
	}
	for _, c := range []struct {
		control, treatment int
		want               string
	}{
		{0, 9, "# x: responses corrupted with treatment (BF16_INDEX_K=1), not with control\n"},
		{3, 9, "# x: more responses corrupted with treatment (BF16_INDEX_K=1) than with control\n"},
		{9, 0, "# x: responses corrupted with control (BF16_INDEX_K=0), not with treatment (BF16_INDEX_K=1)\n"},
		{9, 3, "# x: more responses corrupted with control (BF16_INDEX_K=0) than with treatment (BF16_INDEX_K=1)\n"},
		{4, 4, "# x: responses corrupted alike with treatment (BF16_INDEX_K=1) and control\n"},
	} {
		b := &Bundle{Name: "x", Baseline: "control", Arms: arms(c.control, c.treatment), Cases: []Case{{ID: "case-1"}}}
		if md := b.Markdown(); !strings.HasPrefix(md, c.want) {
			t.Errorf("control %d, treatment %d: title %q, want %q", c.control, c.treatment, strings.SplitN(md, "\n", 2)[0], c.want)
		}
	}
}

// What an engine reports and a detector says reaches the text inert: no escape
// sequence, and no markdown of its own.
func TestMarkdownOfForeignText(t *testing.T) {
	b := &Bundle{Name: "x", Baseline: "control",
		Arms:  []Arm{{Name: "control", Version: "0.5\x1b]0;owned\x07 **pwn** " + strings.Repeat("v", 3<<20)}, {Name: "treatment", Corrupted: 1, Rate: 0.1}},
		Cases: []Case{{ID: "case-1", Arm: "treatment", Reasons: "plugin: \x1b[2J<img src=x> [a](b)"}}}
	md := b.Markdown()
	if strings.ContainsAny(md, "\x1b\x07") || strings.Contains(md, " <img") || strings.Contains(md, "**pwn**") || len(md) > 64<<10 {
		t.Errorf("README of %d bytes:\n%.2000s", len(md), md)
	}
}
