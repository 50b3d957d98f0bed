package verdict

// How the verdict writes a number, for every writer: the markdown, arbiter's own lines
// (show, stats, the headline) and the JSON summary's sentences.

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// When is a stored timestamp as a reader wants it: to the second, in UTC ("2026-12-02
// 04:59:12 UTC"); a value that does not parse is shown as stored.
func When(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// exitCode is an engine's exit status; empty where none was recorded.
func exitCode(c *int64) string {
	if c == nil {
		return ""
	}
	return fmt.Sprint(*c)
}

// span is a stretch of a launch or an experiment to the hundredth of a second ("1m2.35s");
// empty where it is unknown.
func span(d *time.Duration) string {
	if d == nil {
		return ""
	}
	return d.Round(10 * time.Millisecond).String()
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func ci(lo, hi float64) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return "–"
	}
	return fmt.Sprintf("%s – %s", pct(lo), pct(hi))
}

// FormatP writes a p-value as every verdict, `show` and `stats` print it: three
// decimals, four below 0.001, scientific below 1e-4, "< 1e-300" below what a float
// carries, "–" when there is none.
func FormatP(p float64) string { return pval(p) }

// pval is FormatP, in the short name the verdict's sentences use.
func pval(p float64) string {
	switch {
	case math.IsNaN(p):
		return "–"
	case p < 1e-300:
		// Below what a float carries (a normal tail at z past 37): say so, not "0".
		return "< 1e-300"
	case p < 1e-4:
		return fmt.Sprintf("%.1e", p)
	case p < 0.001:
		return fmt.Sprintf("%.4f", p)
	}
	return fmt.Sprintf("%.3f", p)
}

func ms(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	if x >= 1000 {
		return fmt.Sprintf("%.2f s", x/1000)
	}
	return fmt.Sprintf("%.0f ms", x)
}

// signedPct is a share as a signed percentage: "+1.2%".
func signedPct(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "unbounded"
	case math.IsInf(x, -1) || x <= -1:
		return "unbounded"
	case math.IsNaN(x):
		return "–"
	}
	return fmt.Sprintf("%+.1f%%", 100*x)
}

// pctShort is a margin as written: "5%".
func pctShort(x float64) string { return fmt.Sprintf("%g%%", math.Round(1000*x)/10) }

func tps(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// pEq is a p-value after its name: "= 0.003", or "< 1e-300" below what a float carries.
func pEq(p float64) string {
	if s := pval(p); strings.HasPrefix(s, "<") {
		return s
	}
	return "= " + pval(p)
}

// plainText is a sentence of the verdict without its markdown (bold marks, code spans),
// for readers that are not markdown: the JSON summary.
func plainText(s string) string {
	return strings.NewReplacer("**", "", "`", "").Replace(s)
}
