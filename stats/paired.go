package stats

import (
	"fmt"
	"math"
)

// PairedResult is the exact McNemar test on matched pairs (the same session replayed on
// both arms, the same prompt on both containers): only discordant pairs carry
// information about the difference between arms.
type PairedResult struct {
	// AOnly counts pairs where only arm A had the event; BOnly where only arm B had it.
	AOnly, BOnly int
	// P is the exact two-sided p: twice the binomial(AOnly+BOnly, 1/2) tail at the
	// smaller count, capped at 1 (statsmodels' mcnemar(exact=True)).
	P float64
	// OddsRatio is the conditional (matched-pairs) odds ratio BOnly/AOnly; OddsRatioCI
	// is exact, from the Clopper-Pearson interval of BOnly/(AOnly+BOnly).
	OddsRatio   float64
	OddsRatioCI Bounds
	Conf        float64
	Warnings    []Warning
}

// MarshalJSON writes the result with JSON-safe numbers (null for infinities).
func (r PairedResult) MarshalJSON() ([]byte, error) {
	f := []coreJSONField{
		{"a_only", r.AOnly},
		{"b_only", r.BOnly},
		{"p_two_sided", r.P},
		{"odds_ratio", coreNested(coreJSONField{"estimate", r.OddsRatio}, coreJSONField{"exact" + coreConfLabel(r.Conf), r.OddsRatioCI})},
	}
	if len(r.Warnings) > 0 {
		f = append(f, coreJSONField{"warnings", r.Warnings})
	}
	return coreJSONObject(f...)
}

// McNemar tests paired binary outcomes from the discordant counts: aOnly pairs where
// only arm A had the event, bOnly where only arm B had it. It panics on negative counts.
func McNemar(aOnly, bOnly int, conf float64) PairedResult {
	if aOnly < 0 || bOnly < 0 {
		panic(fmt.Sprintf("stats: McNemar: negative discordant counts %d, %d", aOnly, bOnly))
	}
	conf = coreConf(conf)
	r := PairedResult{AOnly: aOnly, BOnly: bOnly, Conf: conf}
	n := aOnly + bOnly
	r.P = min(1, 2*coreBinomCDFHalf(min(aOnly, bOnly), n))
	r.OddsRatio = float64(bOnly) / float64(aOnly)
	if n == 0 {
		r.OddsRatio = math.NaN()
		r.OddsRatioCI = Bounds{0, math.Inf(1)}
		r.Warnings = append(r.Warnings, "no discordant pairs: the arms never disagreed, the test has nothing to weigh")
		return r
	}
	cp := ClopperPearson(bOnly, n, conf)
	r.OddsRatioCI = Bounds{cp.Lo / (1 - cp.Lo), cp.Hi / (1 - cp.Hi)} // Hi = 1 gives +Inf
	if n < 10 {
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("only %d discordant pairs: the test has little power", n)))
	}
	return r
}

// coreBinomCDFHalf is P(X <= k) for X ~ Binomial(n, 1/2), summed in log space from k
// downwards (k is at most n/2 here, so the terms shrink).
func coreBinomCDFHalf(k, n int) float64 {
	if k >= n {
		return 1
	}
	if 2*k > n { // walk the shorter tail
		return 1 - coreBinomCDFHalf(n-k-1, n)
	}
	lt := coreLogChoose(n, k) - float64(n)*math.Ln2
	s, t := 1.0, 1.0
	for x := k; x > 0; x-- {
		t *= float64(x) / float64(n-x+1) // P(x-1)/P(x)
		s += t
		if t < s*1e-17 {
			break
		}
	}
	return math.Exp(lt + math.Log(s))
}
