package verdict

// How the verdict writes a number, for every writer: the markdown, arbiter's own lines
// (show, stats, the headline) and the JSON summary's sentences.

import (
	"fmt"
	"math"
	"strconv"
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

// FormatPEq is a p-value after its name, as every sentence of the verdict, `show` and
// `stats` writes it: "= 0.003", or "< 1e-300" below what a float carries (never
// "p = < 1e-300"), "–" when there is none.
func FormatPEq(p float64) string {
	switch s := pval(p); {
	case strings.HasPrefix(s, "<"), s == "–":
		return s
	default:
		return "= " + s
	}
}

// pEq is FormatPEq, in the short name the verdict's sentences use.
func pEq(p float64) string { return FormatPEq(p) }

// tooWide is what an interval cell says when its bounds would be no finding: a bound
// that is not finite, or a change beyond ±10000% (or a difference of rates beyond ±100
// points, which no two rates can have).
const tooWide = "too wide to inform"

// widestChange is the largest change, as a share, printed as a number.
const widestChange = 100.0

// changeInterval is the interval of a ratio (1.05 is 5% more) as signed percentages,
// "-1.2% to +3.4%", or tooWide.
func changeInterval(lo, hi float64) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return "–"
	}
	if !informativeChange(lo) || !informativeChange(hi) {
		return tooWide
	}
	return signedPct(lo-1) + " to " + signedPct(hi-1)
}

// changeBound is a one-sided lower bound of a ratio, "≥ -1.2%", or tooWide.
func changeBound(lo float64) string {
	if math.IsNaN(lo) {
		return "–"
	}
	if !informativeChange(lo) {
		return tooWide
	}
	return "≥ " + signedPct(lo-1)
}

// informativeChange reports whether a ratio's bound says something as a change: finite,
// above no throughput at all, and within ±10000%.
func informativeChange(r float64) bool {
	return r > 0 && !math.IsInf(r, 0) && math.Abs(r-1) < widestChange+5e-4
}

// pointsInterval is the interval of a difference of rates in percentage points,
// "-1.2 to +18.3 pts", or tooWide.
func pointsInterval(lo, hi float64) string { return pointsWithin(lo, hi, 1) }

// pointsAfter is pointsInterval in prose that has just said "points": the unit is said
// once, "+18.3 points (97% CI +15.0 to +21.7)".
func pointsAfter(lo, hi float64) string { return strings.TrimSuffix(pointsInterval(lo, hi), " pts") }

// interactionInterval is the interval of a difference of two differences of rates (an
// interaction), which can reach ±200 points, or tooWide.
func interactionInterval(lo, hi float64) string { return pointsWithin(lo, hi, 2) }

func pointsWithin(lo, hi, widest float64) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return "–"
	}
	if !(math.Abs(lo) < widest+5e-4 && math.Abs(hi) < widest+5e-4) {
		return tooWide
	}
	return signedNum(100*lo) + " to " + signedNum(100*hi) + " pts"
}

// pointsBound is a one-sided upper bound of a difference of rates, "≤ +1.2 pts", or tooWide.
func pointsBound(hi float64) string {
	if math.IsNaN(hi) {
		return "–"
	}
	if !informativePoints(hi) {
		return tooWide
	}
	return "≤ " + signedNum(100*hi) + " pts"
}

// informativePoints reports whether a bound of a difference of rates is one two rates can
// have (to the tenth of a point printed).
func informativePoints(d float64) bool { return math.Abs(d) < 1.0005 }

// points is a difference of rates in percentage points, "+14.6 pts", or "–" where there
// is none.
func points(d float64) string {
	if math.IsNaN(d) {
		return "–"
	}
	return signedNum(100*d) + " pts"
}

// signedNum is a signed figure with one decimal, or ±∞; "–" where there is none.
func signedNum(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case math.IsInf(x, 1):
		return "+∞"
	case math.IsInf(x, -1):
		return "−∞"
	}
	if math.Abs(x) < 0.05 {
		x = 0 // no "-0.0"
	}
	return fmt.Sprintf("%+.1f", x)
}

// confText is a confidence level in percent, short: "97", "99.4".
func confText(conf float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", 100*conf), "0"), ".")
}

// roundConf reports whether a confidence reads as a percentage a reader knows: whole,
// or to a tenth ("97", "99.5"); a claim's share of alpha seldom is ("99.62").
func roundConf(conf float64) bool {
	x := 1000 * conf
	return math.Abs(x-math.Round(x)) < 1e-6
}

// intervalLabel names an interval at 1 − level: "97% CI" where that confidence is round,
// else by the claim's level itself, exactly: "interval at the claim's level 0.0038".
func intervalLabel(level float64) string {
	if roundConf(1 - level) {
		return confText(1-level) + "% CI"
	}
	return "interval at the claim's level " + levelText(level)
}

// labelled is an interval after its label: "97% CI +1.2 to +3.4 pts", "interval at the
// claim's level 0.0038: +1.2 to +3.4 pts".
func labelled(label, interval string) string {
	if strings.HasSuffix(label, "CI") {
		return label + " " + interval
	}
	return label + ": " + interval
}

// boundLabel names a one-sided bound at 1 − level: "one-sided 99% bound", or "one-sided
// bound at the claim's level 0.00167".
func boundLabel(level float64) string {
	if roundConf(1 - level) {
		return "one-sided " + confText(1-level) + "% bound"
	}
	return "one-sided bound at the claim's level " + levelText(level)
}

// plainText is a sentence of the verdict without its markdown (bold marks, code spans),
// for readers that are not markdown: the JSON summary.
func plainText(s string) string {
	return strings.NewReplacer("**", "", "`", "").Replace(s)
}

// widestRatio is the largest ratio (odds ratios), or its inverse, printed as a number.
const widestRatio = 1e4

// ratioInterval is the interval of a ratio printed as ratios (odds ratios), "0.52 – 3.10",
// or tooWide where a bound is not finite or beyond widestRatio or its inverse.
func ratioInterval(lo, hi float64) string {
	if math.IsNaN(lo) || math.IsNaN(hi) {
		return "–"
	}
	for _, r := range []float64{lo, hi} {
		if !(r >= 1/widestRatio && r <= widestRatio) {
			return tooWide
		}
	}
	return num(lo) + " – " + num(hi)
}

// lowerBy says how much lower a one-sided lower bound of a ratio lets a speed be: "up to
// 6.9% lower", or, where the launches gave no bound, that they cannot bound it.
func lowerBy(bound float64) string {
	if math.IsNaN(bound) || !informativeChange(math.Max(bound, 1e-300)) {
		return "lower by more than these launches can bound"
	}
	return "up to " + pctShort(math.Max(0, 1-bound)) + " lower"
}

// number formats x, or "–" where it was not measured.
func number(x float64, format string) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf(format, x)
}

// FormatRate writes a rate as a percentage with enough digits for rare events ("0.312%");
// "+inf" and "n/a" where it is infinite or undefined.
func FormatRate(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+inf"
	case math.IsNaN(v):
		return "n/a"
	case v == 0 || v == 1:
		return fmt.Sprintf("%.0f%%", 100*v)
	}
	return fmt.Sprintf("%.3g%%", 100*v)
}

// FormatNumber writes a statistic to three significant digits; "+inf", "-inf" and
// "n/a" where it is infinite or undefined.
func FormatNumber(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "n/a"
	}
	return fmt.Sprintf("%.3g", v)
}

// OnceIn writes a probability as "once in N experiments".
func OnceIn(p float64) string {
	if p < 1e-300 {
		// Below what a float carries: a bound, as FormatPEq says it.
		return "less than once in 1e+300 experiments"
	}
	n := 1 / p
	if n >= 1e6 {
		return fmt.Sprintf("once in %.1e experiments", n)
	}
	return fmt.Sprintf("once in %s experiments", strconv.FormatFloat(math.Round(n), 'f', 0, 64))
}
