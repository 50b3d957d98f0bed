package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"gonum.org/v1/gonum/stat/distuv"
)

// DefaultConf is the confidence level used when a caller passes 0 (or anything outside
// (0, 1)), so that zero-valued options work.
const DefaultConf = 0.95

// Bounds is an Interval that marshals to JSON as [lo, hi], the form of arbiter's --json
// output. An infinite or undefined bound is written as null (JSON has no infinity) and
// reads back as -Inf for lo and +Inf for hi.
type Bounds Interval

// MarshalJSON writes the bounds as a two-element array.
func (b Bounds) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	buf.WriteString(coreJSONNumber(b.Lo))
	buf.WriteByte(',')
	buf.WriteString(coreJSONNumber(b.Hi))
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads [lo, hi]; null bounds become -Inf and +Inf.
func (b *Bounds) UnmarshalJSON(data []byte) error {
	var v []*float64
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("stats: bounds: %w", err)
	}
	if len(v) != 2 {
		return fmt.Errorf("stats: bounds: want [lo, hi], got %d elements", len(v))
	}
	b.Lo, b.Hi = math.Inf(-1), math.Inf(1)
	if v[0] != nil {
		b.Lo = *v[0]
	}
	if v[1] != nil {
		b.Hi = *v[1]
	}
	return nil
}

// coreJSONNumber formats v for JSON, writing null for infinities and NaN.
func coreJSONNumber(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "null"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// coreJSONField is one key of a JSON object written in a fixed order.
type coreJSONField struct {
	key   string
	value any
}

// coreJSONObject writes fields in order; float64 values go through coreJSONNumber.
func coreJSONObject(fields ...coreJSONField) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		buf.Write(k)
		buf.WriteByte(':')
		if v, ok := f.value.(float64); ok {
			buf.WriteString(coreJSONNumber(v))
			continue
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, fmt.Errorf("stats: json field %q: %w", f.key, err)
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// coreConf maps a confidence level outside (0, 1) to DefaultConf.
func coreConf(conf float64) float64 {
	if !(conf > 0 && conf < 1) {
		return DefaultConf
	}
	return conf
}

// coreConfLabel names a confidence level in JSON keys: 0.95 -> "95", 0.975 -> "97.5".
func coreConfLabel(conf float64) string {
	return strconv.FormatFloat(math.Round(coreConf(conf)*1e6)/1e4, 'f', -1, 64)
}

// coreZ is the two-sided normal critical value for conf.
func coreZ(conf float64) float64 {
	return distuv.UnitNormal.Quantile(1 - (1-coreConf(conf))/2)
}

// Wilson is the Wilson score interval for x events of n. With n = 0 it is [0, 1].
func Wilson(x, n int, conf float64) Interval {
	coreCheckCounts("Wilson", x, n, 0, 0)
	if n == 0 {
		return Interval{0, 1}
	}
	z := coreZ(conf)
	z2, nf := z*z, float64(n)
	p := float64(x) / nf
	denom := 1 + z2/nf
	center := (p + z2/(2*nf)) / denom
	half := z * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / denom
	lo, hi := max(0, center-half), min(1, center+half)
	if x == 0 {
		lo = 0
	}
	if x == n {
		hi = 1
	}
	return Interval{lo, hi}
}

// ClopperPearson is the exact (beta quantile) interval for x events of n: it never
// covers less than conf, which is why "0 of 240" is reported as [0, 0.0153] and not as
// zero. With n = 0 it is [0, 1].
func ClopperPearson(x, n int, conf float64) Interval {
	coreCheckCounts("ClopperPearson", x, n, 0, 0)
	tail := (1 - coreConf(conf)) / 2
	iv := Interval{0, 1}
	if x > 0 {
		iv.Lo = distuv.Beta{Alpha: float64(x), Beta: float64(n - x + 1)}.Quantile(tail)
	}
	if x < n {
		iv.Hi = distuv.Beta{Alpha: float64(x + 1), Beta: float64(n - x)}.Quantile(1 - tail)
	}
	return iv
}

// Newcombe is Newcombe's hybrid score interval (his method 10) for the difference of
// rates p_B - p_A, built from the two Wilson intervals; it behaves well at zero counts,
// where the Wald interval collapses.
func Newcombe(a, n1, b, n2 int, conf float64) Interval {
	coreCheckCounts("Newcombe", a, n1, b, n2)
	pa, pb := coreRate(a, n1), coreRate(b, n2)
	wa, wb := Wilson(a, n1, conf), Wilson(b, n2, conf)
	d := pb - pa
	return Interval{
		Lo: d - math.Sqrt((pb-wb.Lo)*(pb-wb.Lo)+(wa.Hi-pa)*(wa.Hi-pa)),
		Hi: d + math.Sqrt((wb.Hi-pb)*(wb.Hi-pb)+(pa-wa.Lo)*(pa-wa.Lo)),
	}
}

// coreRate is x/n, or NaN for an empty arm.
func coreRate(x, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return float64(x) / float64(n)
}

// ErrNoRatio reports that a ratio interval cannot be formed from the counts given.
var ErrNoRatio = errors.New("ratio interval undefined")

// KoopmanRatio is Koopman's asymptotic score interval for the rate ratio p_B/p_A (as
// statsmodels' confint_proportions_2indep(compare='ratio', method='score',
// correction=False)), found by inverting the score test numerically. It stays defined
// at zero counts: with a = 0 < b the upper bound is +Inf, with b = 0 < a the lower bound
// is 0, and with a = b = 0 it is [0, +Inf]. It fails (ErrNoRatio) for an empty arm, or
// if the score test cannot bracket a bound.
func KoopmanRatio(a, n1, b, n2 int, conf float64) (Interval, error) {
	coreCheckCounts("KoopmanRatio", a, n1, b, n2)
	if n1 == 0 || n2 == 0 {
		return Interval{}, fmt.Errorf("stats: Koopman ratio of %d/%d vs %d/%d: empty arm: %w", a, n1, b, n2, ErrNoRatio)
	}
	if a == 0 && b == 0 {
		return Interval{0, math.Inf(1)}, nil
	}
	z := coreZ(conf)
	// score(θ) is the signed score statistic for H0: p_B = θ p_A; it falls as θ grows.
	x0, x1, m0, m1 := float64(a), float64(b), float64(n1), float64(n2)
	nn, x := m0+m1, x0+x1
	p0hat, p1hat := x0/m0, x1/m1
	score := func(theta float64) float64 {
		bb := theta*(m1+x0) + m0 + x1
		disc := math.Max(bb*bb-4*nn*theta*x, 0)
		q0 := 2 * x / (bb + math.Sqrt(disc)) // restricted MLE of p_A
		q1 := theta * q0
		v := q1*(1-q1)/m1 + theta*theta*q0*(1-q0)/m0
		num := p1hat - theta*p0hat
		if v <= 0 {
			if num == 0 {
				return 0
			}
			return math.Copysign(math.Inf(1), num)
		}
		return num / math.Sqrt(v)
	}
	// solve finds θ with score(θ) = target between a θ where score is above it and one
	// where it is below, by bisection in log θ.
	solve := func(above, below, target float64) float64 {
		for i := 0; i < 200; i++ {
			mid := math.Sqrt(above * below)
			if mid == above || mid == below {
				break
			}
			if score(mid) > target {
				above = mid
			} else {
				below = mid
			}
		}
		return math.Sqrt(above * below)
	}
	// step moves θ by factor until score(θ) crosses target in direction sign, within
	// ratios of 1e±300; past that the score test cannot bound the ratio.
	step := func(theta, factor, target, sign float64) (float64, bool) {
		for i := 0; i < 2000; i++ {
			s := score(theta)
			if math.IsNaN(s) || theta > 1e300 || theta < 1e-300 {
				return theta, false
			}
			if sign*(s-target) >= 0 {
				return theta, true
			}
			theta *= factor
		}
		return theta, false
	}
	fail := fmt.Errorf("stats: Koopman ratio of %d/%d vs %d/%d: score test does not bracket a bound: %w", a, n1, b, n2, ErrNoRatio)
	iv := Interval{0, math.Inf(1)}
	start := p1hat / p0hat
	if a == 0 || b == 0 {
		start = 1
	}
	if b > 0 { // a finite lower bound exists
		above, ok1 := step(start, 0.5, z, +1) // score >= z
		below, ok2 := step(above, 2, z, -1)   // score <= z
		if !ok1 || !ok2 {
			return Interval{}, fail
		}
		iv.Lo = solve(above, below, z)
	}
	if a > 0 { // a finite upper bound exists
		below, ok1 := step(start, 2, -z, -1)   // score <= -z
		above, ok2 := step(below, 0.5, -z, +1) // score >= -z
		if !ok1 || !ok2 {
			return Interval{}, fail
		}
		iv.Hi = solve(above, below, -z)
	}
	if math.IsNaN(iv.Lo) || math.IsNaN(iv.Hi) || iv.Lo > iv.Hi {
		return Interval{}, fail
	}
	return iv, nil
}

// KatzRatio is the Katz log interval for p_B/p_A, exp(log ratio ± z·se); it needs at
// least one event in each arm (ErrNoRatio otherwise).
func KatzRatio(a, n1, b, n2 int, conf float64) (Interval, error) {
	coreCheckCounts("KatzRatio", a, n1, b, n2)
	if a == 0 || b == 0 {
		return Interval{}, fmt.Errorf("stats: Katz ratio of %d/%d vs %d/%d: zero events in an arm: %w", a, n1, b, n2, ErrNoRatio)
	}
	r := (float64(b) / float64(n2)) / (float64(a) / float64(n1))
	se := math.Sqrt(1/float64(b) - 1/float64(n2) + 1/float64(a) - 1/float64(n1))
	d := coreZ(conf) * se
	return Interval{r * math.Exp(-d), r * math.Exp(d)}, nil
}

// RatioEstimate is the rate ratio p_B/p_A with its interval.
type RatioEstimate struct {
	Estimate float64 // +Inf when arm A has no events and arm B has some; NaN when neither has
	CI       Bounds
	Method   string  // "koopman", or "katz" when the score interval could not be formed
	Conf     float64 // confidence level of CI
	Warnings []Warning
}

// MarshalJSON writes {"estimate", "method", "ciNN": [lo, hi], "warnings"} with NN the
// confidence level in percent.
func (r RatioEstimate) MarshalJSON() ([]byte, error) {
	f := []coreJSONField{
		{"estimate", r.Estimate},
		{"method", r.Method},
		{"ci" + coreConfLabel(r.Conf), r.CI},
	}
	if len(r.Warnings) > 0 {
		f = append(f, coreJSONField{"warnings", r.Warnings})
	}
	return coreJSONObject(f...)
}

// RiskRatio estimates p_B/p_A with Koopman's score interval, falling back to Katz's log
// interval, and says in Warnings when a zero count makes a bound 0 or infinite.
func RiskRatio(a, n1, b, n2 int, conf float64) RatioEstimate {
	conf = coreConf(conf)
	r := RatioEstimate{Estimate: coreRate(b, n2) / coreRate(a, n1), Conf: conf, Method: "koopman"}
	iv, err := KoopmanRatio(a, n1, b, n2, conf)
	if err != nil {
		r.Method = "katz"
		if iv, err = KatzRatio(a, n1, b, n2, conf); err != nil {
			r.CI = Bounds{math.NaN(), math.NaN()}
			r.Warnings = append(r.Warnings, Warning("rate ratio undefined: "+err.Error()))
			return r
		}
	}
	r.CI = Bounds(iv)
	switch {
	case a == 0 && b == 0:
		r.Warnings = append(r.Warnings, "rate ratio undefined: no events in either arm; its interval is [0, +Inf)")
	case a == 0:
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("no events in arm A (0/%d): the rate ratio is infinite and its interval has no upper bound", n1)))
	case b == 0:
		r.Warnings = append(r.Warnings, Warning(fmt.Sprintf("no events in arm B (0/%d): the rate ratio is 0 and its interval starts at 0", n2)))
	}
	return r
}
