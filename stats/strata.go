package stats

import (
	"encoding/json"
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Stratum is one stratum's 2x2 counts (a block, a node, a GPU slot): arm A with A events
// of N1, arm B with B events of N2.
type Stratum struct {
	A, N1 int
	B, N2 int
}

// StratifiedResult pools arm B against arm A over strata, so that a difference between
// blocks or nodes cannot masquerade as an arm effect. Odds ratios and risk differences
// are B relative to A.
type StratifiedResult struct {
	Conf float64 // confidence level of the intervals
	// Strata is the number of strata used; strata with an empty arm carry no
	// information and are left out (with a warning).
	Strata int

	// CMH is the Cochran-Mantel-Haenszel statistic (1 df) without continuity
	// correction, and CMHP its p-value.
	CMH, CMHP float64
	// CMHCorrected and CMHCorrectedP use the 0.5 continuity correction, applied only
	// when |sum(a - E[a])| >= 0.5 (as R's mantelhaen.test; statsmodels would square a
	// negative difference there).
	CMHCorrected, CMHCorrectedP float64

	// OddsRatio is the Mantel-Haenszel common odds ratio, with the
	// Robins-Breslow-Greenland interval OddsRatioCI. It is +Inf (or 0) when no stratum
	// has a discordant product in its denominator (numerator).
	OddsRatio   float64
	OddsRatioCI Bounds

	// RiskDifference is the Mantel-Haenszel common risk difference p_B - p_A, weights
	// n1*n2/n, with the interval from the Sato (1989) variance, which stays consistent
	// both for many sparse strata and for few large ones (the Greenland-Robins 1985
	// variance is consistent only for the latter).
	RiskDifference   float64
	RiskDifferenceCI Bounds

	// BreslowDay tests that the odds ratio is the same in every stratum, around the MH
	// estimate, with DF degrees of freedom (strata whose margins fix the table do not
	// count); Tarone adds Tarone's correction. As statsmodels'
	// test_equal_odds(adjust=False/True). NaN when fewer than two strata are free or
	// the common odds ratio is 0 or infinite.
	BreslowDay, BreslowDayP float64
	Tarone, TaroneP         float64
	DF                      int

	Warnings []Warning
}

// MarshalJSON writes the result with JSON-safe numbers (null for infinities).
func (r StratifiedResult) MarshalJSON() ([]byte, error) {
	lbl := coreConfLabel(r.Conf)
	f := []coreJSONField{
		{"strata", r.Strata},
		{"cmh", coreNested(
			coreJSONField{"statistic", r.CMH}, coreJSONField{"p", r.CMHP},
			coreJSONField{"statistic_corrected", r.CMHCorrected}, coreJSONField{"p_corrected", r.CMHCorrectedP})},
		{"odds_ratio", coreNested(coreJSONField{"estimate", r.OddsRatio}, coreJSONField{"rbg" + lbl, r.OddsRatioCI})},
		{"risk_difference", coreNested(coreJSONField{"estimate", r.RiskDifference}, coreJSONField{"sato" + lbl, r.RiskDifferenceCI})},
		{"breslow_day", coreNested(
			coreJSONField{"statistic", r.BreslowDay}, coreJSONField{"p", r.BreslowDayP},
			coreJSONField{"tarone_statistic", r.Tarone}, coreJSONField{"tarone_p", r.TaroneP},
			coreJSONField{"df", r.DF})},
	}
	if len(r.Warnings) > 0 {
		f = append(f, coreJSONField{"warnings", r.Warnings})
	}
	return coreJSONObject(f...)
}

// coreNested nests an ordered object inside another. Its fields are numbers, bounds
// and strings, which always marshal, so the error is unreachable.
func coreNested(fields ...coreJSONField) json.RawMessage {
	b, _ := coreJSONObject(fields...)
	return json.RawMessage(b)
}

// coreChi2SF is the upper tail of a chi-square with df degrees of freedom; for 1 df it
// uses erfc, which keeps small p-values precise.
func coreChi2SF(x float64, df int) float64 {
	if math.IsNaN(x) {
		return math.NaN()
	}
	if x <= 0 {
		return 1
	}
	if df == 1 {
		return math.Erfc(math.Sqrt(x / 2))
	}
	return distuv.ChiSquared{K: float64(df)}.Survival(x)
}

// Stratified runs the stratified analysis of arm B against arm A. It panics on counts
// out of range.
func Stratified(strata []Stratum, conf float64) StratifiedResult {
	conf = coreConf(conf)
	r := StratifiedResult{Conf: conf}
	z := coreZ(conf)
	type cell struct{ t00, t01, t10, t11, n float64 }
	var cells []cell
	sparse := 0
	for i, s := range strata {
		coreCheckCounts("Stratified", s.A, s.N1, s.B, s.N2)
		if s.N1 == 0 || s.N2 == 0 {
			r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("stratum %d has an empty arm (%d/%d vs %d/%d) and was left out", i+1, s.A, s.N1, s.B, s.N2)))
			continue
		}
		if s.A+s.B < 5 {
			sparse++
		}
		// Rows: arm B then arm A; columns: event, no event.
		cells = append(cells, cell{float64(s.B), float64(s.N2 - s.B), float64(s.A), float64(s.N1 - s.A), float64(s.N1 + s.N2)})
	}
	r.Strata = len(cells)
	if sparse > 0 {
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("%d of %d strata have fewer than 5 events: intervals and the Breslow-Day test are approximate there", sparse, len(cells))))
	}
	nan := math.NaN()
	r.CMH, r.CMHP, r.CMHCorrected, r.CMHCorrectedP = nan, nan, nan, nan
	r.OddsRatio, r.RiskDifference = nan, nan
	r.OddsRatioCI, r.RiskDifferenceCI = Bounds{nan, nan}, Bounds{nan, nan}
	r.BreslowDay, r.BreslowDayP, r.Tarone, r.TaroneP = nan, nan, nan, nan
	if len(cells) == 0 {
		r.Warnings = append(r.Warnings, "no stratum has observations in both arms")
		return r
	}

	// Cochran-Mantel-Haenszel.
	var dev, vsum float64
	for _, c := range cells {
		r1, c1, r2, c2 := c.t00+c.t01, c.t00+c.t10, c.t10+c.t11, c.t01+c.t11
		dev += c.t00 - r1*c1/c.n
		if c.n > 1 {
			vsum += r1 * c1 * r2 * c2 / (c.n * c.n * (c.n - 1))
		}
	}
	if vsum > 0 {
		r.CMH = dev * dev / vsum
		r.CMHP = coreChi2SF(r.CMH, 1)
		adj := math.Abs(dev)
		if adj >= 0.5 {
			adj -= 0.5
		}
		r.CMHCorrected = adj * adj / vsum
		r.CMHCorrectedP = coreChi2SF(r.CMHCorrected, 1)
	} else {
		r.Warnings = append(r.Warnings, "no stratum has both events and non-events: the CMH test is undefined")
	}

	// Mantel-Haenszel odds ratio and its Robins-Breslow-Greenland variance.
	var adn, bcn, sPR, sPSQR, sQS float64
	for _, c := range cells {
		p := (c.t00 + c.t11) / c.n
		q := 1 - p
		rr := c.t00 * c.t11 / c.n
		ss := c.t01 * c.t10 / c.n
		adn += rr
		bcn += ss
		sPR += p * rr
		sPSQR += p*ss + q*rr
		sQS += q * ss
	}
	r.OddsRatio = adn / bcn
	switch {
	case adn > 0 && bcn > 0:
		se := math.Sqrt((sPR/(adn*adn) + sPSQR/(adn*bcn) + sQS/(bcn*bcn)) / 2)
		l := math.Log(r.OddsRatio)
		r.OddsRatioCI = Bounds{math.Exp(l - z*se), math.Exp(l + z*se)}
	case adn > 0:
		r.OddsRatioCI = Bounds{nan, math.Inf(1)}
		r.Warnings = append(r.Warnings, "common odds ratio is infinite: no stratum has events in arm A together with non-events in arm B")
	case bcn > 0:
		r.OddsRatioCI = Bounds{0, nan}
		r.Warnings = append(r.Warnings, "common odds ratio is 0: no stratum has events in arm B together with non-events in arm A")
	default:
		r.Warnings = append(r.Warnings, "common odds ratio undefined: every stratum is all events or all non-events")
	}

	// Mantel-Haenszel risk difference with Sato's variance. Group 1 is arm B.
	var wsum, num, satoP, satoQ float64
	for _, c := range cells {
		x1, n1 := c.t00, c.t00+c.t01
		x0, n0 := c.t10, c.t10+c.t11
		wsum += n1 * n0 / c.n
		num += (x1*n0 - x0*n1) / c.n
		satoP += (n1*n1*x0 - n0*n0*x1 + n1*n0*(n0-n1)/2) / (c.n * c.n)
		satoQ += (x1*(n0-x0) + x0*(n1-x1)) / (2 * c.n)
	}
	r.RiskDifference = num / wsum
	if v := (r.RiskDifference*satoP + satoQ) / (wsum * wsum); v >= 0 {
		se := math.Sqrt(v)
		r.RiskDifferenceCI = Bounds{r.RiskDifference - z*se, r.RiskDifference + z*se}
	}

	// Breslow-Day around the MH odds ratio.
	if len(cells) < 2 || !(r.OddsRatio > 0) || math.IsInf(r.OddsRatio, 0) {
		return r
	}
	or := r.OddsRatio
	var bd, dsum, vs float64
	used := 0
	for _, c := range cells {
		r1, c1 := c.t00+c.t01, c.t00+c.t10
		lo, hi := math.Max(0, r1+c1-c.n), math.Min(r1, c1)
		if lo == hi { // a margin is zero: the stratum's table is fixed, nothing to test
			continue
		}
		e := coreBreslowDayExpected(or, r1, c1, c.n, lo, hi)
		v := 1 / (1/e + 1/(c1-e) + 1/(r1-e) + 1/(c.n-r1-c1+e))
		bd += (c.t00 - e) * (c.t00 - e) / v
		dsum += c.t00 - e
		vs += v
		used++
	}
	if used < 2 {
		return r
	}
	r.DF = used - 1
	r.BreslowDay = bd
	r.BreslowDayP = coreChi2SF(bd, r.DF)
	r.Tarone = bd - dsum*dsum/vs
	r.TaroneP = coreChi2SF(r.Tarone, r.DF)
	return r
}

// coreBreslowDayExpected is the expected top-left count of a stratum with row total r1,
// column total c1 and size n under a common odds ratio or: the root of
// (1-or)e² + (or(r1+c1) + n - r1 - c1)e - or·r1·c1 = 0 inside [lo, hi], taken from the
// numerically stable pair of root formulas (or may be exactly 1).
func coreBreslowDayExpected(or, r1, c1, n, lo, hi float64) float64 {
	qa := 1 - or
	qb := or*(r1+c1) + n - r1 - c1
	qc := -or * r1 * c1
	if qa == 0 {
		return -qc / qb
	}
	disc := math.Sqrt(qb*qb - 4*qa*qc)
	q := -(qb + math.Copysign(disc, qb)) / 2
	roots := [2]float64{q / qa, qc / q}
	best := roots[0]
	for _, e := range roots {
		if e >= lo-1e-9 && e <= hi+1e-9 {
			best = e
		}
	}
	return best
}
