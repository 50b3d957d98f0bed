package verdict

import (
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
)

// TestPAfterItsNameNeverReadsEqualsBelow: a p below what a float carries reads
// "p < 1e-300", never "p = < 1e-300".
func TestPAfterItsNameNeverReadsEqualsBelow(t *testing.T) {
	for _, c := range []struct {
		p    float64
		want string
	}{{0.029, "= 0.029"}, {3e-7, "= 3.0e-07"}, {1e-320, "< 1e-300"}, {0, "< 1e-300"}, {math.NaN(), "–"}} {
		if got := FormatPEq(c.p); got != c.want {
			t.Errorf("FormatPEq(%g) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestIntervalsTooWideToInformSayWhy: a change whose interval reaches beyond ±10000%, or
// never closes, is no finding: the cell says so in words instead of printing the bounds
// (the throughput example's TTFT once read "-100.0% to +40062839.2%").
func TestIntervalsTooWideToInformSayWhy(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64 // ratios
		want   string
	}{
		{0.95, 1.05, "-5.0% to +5.0%"},
		{0.5, 101, "-50.0% to +10000.0%"},
		{1e-9, 400629.392, "too wide to inform"},
		{0.5, 101.5, "too wide to inform"},
		{0, 2, "too wide to inform"},
		{0.9, math.Inf(1), "too wide to inform"},
		{math.NaN(), math.NaN(), "–"},
	} {
		if got := changeInterval(c.lo, c.hi); got != c.want {
			t.Errorf("changeInterval(%g, %g) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	for _, c := range []struct {
		lo, hi float64 // differences of rates
		want   string
	}{
		{-0.012, 0.183, "-1.2 to +18.3 pts"},
		{-1.4, 0.9, "too wide to inform"},
		{math.Inf(-1), 0.1, "too wide to inform"},
		{-1.00000000400075, -0.99999999599925, "-100.0 to -100.0 pts"},
	} {
		if got := pointsInterval(c.lo, c.hi); got != c.want {
			t.Errorf("pointsInterval(%g, %g) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{{1.51, 186.82, "1.51 – 186.82"}, {0.05, 2400, "0.05 – 2.4e+03"}, {0.001, math.Inf(1), "too wide to inform"}, {1e-6, 3, "too wide to inform"}} {
		if got := ratioInterval(c.lo, c.hi); got != c.want {
			t.Errorf("ratioInterval(%g, %g) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	ttft := &LaunchClaim{Outcome: MetricTTFT, Testable: true, Estimate: 3.1, CI: stats.Interval{Lo: 1e-9, Hi: 400629.392}}
	if got := claimInterval(ttft); got != "too wide to inform" {
		t.Errorf("a TTFT claim's interval of -100%% to +40062839%% reads %q", got)
	}
	ni := &LaunchClaim{Outcome: OutcomeNonInferiority, Testable: true, CI: stats.Interval{Lo: 0, Hi: math.Inf(1)}}
	if got := claimInterval(ni); got != "too wide to inform" {
		t.Errorf("a non-inferiority bound of -100%% reads %q", got)
	}
}

// TestLevelsAreWrittenAsAReaderExpects: a round confidence is a percentage; a claim's
// own level that is not round is named as the claim's level, exactly, never as "99.62%".
func TestLevelsAreWrittenAsAReaderExpects(t *testing.T) {
	for _, c := range []struct {
		level float64
		want  string
	}{
		{0.03, "97% CI"},
		{0.005, "99.5% CI"},
		{0.05, "95% CI"},
		{0.0038, "interval at the claim's level 0.0038"},
		{0.00167, "interval at the claim's level 0.00167"},
	} {
		got := intervalLabel(c.level)
		if got != c.want {
			t.Errorf("intervalLabel(%g) = %q, want %q", c.level, got, c.want)
		}
		if strings.Contains(got, ".62%") || strings.Contains(got, ".83%") {
			t.Errorf("intervalLabel(%g) = %q: an odd percentage", c.level, got)
		}
	}
}

// The numbers `arbiter stats` prints: rates with the digits a rare event needs, statistics
// to three digits, a p-value as how often chance alone would give it, and what it means
// at the level, never that the arms are equal.
func TestStatsNumbers(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{FormatRate(0.003125), "0.312%"}, {FormatRate(0), "0%"}, {FormatRate(1), "100%"}, {FormatRate(math.NaN()), "n/a"}, {FormatRate(math.Inf(1)), "+inf"},
		{FormatNumber(2.71828), "2.72"}, {FormatNumber(math.Inf(-1)), "-inf"}, {FormatNumber(math.NaN()), "n/a"},
		{OnceIn(0.002), "once in 500 experiments"}, {OnceIn(2e-7), "once in 5.0e+06 experiments"}, {OnceIn(0), "less than once in 1e+300 experiments"},
		{PValueWords(math.NaN(), 0.05), "undefined for these counts"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
	if s := PValueWords(0.002, 0.05); !strings.HasPrefix(s, "p = 0.002: significant at alpha 0.05; ") || !strings.Contains(s, "once in 500 experiments") {
		t.Errorf("significant: %q", s)
	}
	if s := PValueWords(0.2, 0.05); !strings.Contains(s, "not significant at alpha 0.05") || !strings.Contains(s, "not evidence that the arms are equal") {
		t.Errorf("not significant: %q", s)
	}
}
