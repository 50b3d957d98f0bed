package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// rankCase is one case of testdata/rank/reference.json, written by gen.py.
type rankCase struct {
	A, B    []float64
	Conf    float64
	U, P    float64
	Exact   bool
	MedianA float64 `json:"median_a"`
	MedianB float64 `json:"median_b"`
	Shift   float64
	ShiftCI [2]*float64 `json:"shift_ci"`
	Ratio   *float64
	RatioCI [2]*float64 `json:"ratio_ci"`
}

func loadRankCases(t *testing.T) []rankCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rank", "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Cases []rankCase }
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) < 15 {
		t.Fatalf("only %d reference cases", len(ref.Cases))
	}
	return ref.Cases
}

// bound compares an interval bound with its reference, null meaning unbounded.
func bound(t *testing.T, what string, got float64, want *float64, inf float64) {
	t.Helper()
	if want == nil {
		if got != inf {
			t.Errorf("%s = %v, want unbounded", what, got)
		}
		return
	}
	if !relClose(got, *want, 1e-9) {
		t.Errorf("%s = %v, want %v", what, got, *want)
	}
}

func relClose(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestRankCompareMatchesScipy(t *testing.T) {
	for i, c := range loadRankCases(t) {
		r, err := RankCompare(c.A, c.B, c.Conf)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if r.U != c.U || r.Exact != c.Exact {
			t.Errorf("case %d (%dx%d): U = %v exact = %v, want %v %v", i, len(c.A), len(c.B), r.U, r.Exact, c.U, c.Exact)
		}
		if !relClose(r.P, c.P, 1e-9) {
			t.Errorf("case %d (%dx%d, exact %v): p = %v, want %v", i, len(c.A), len(c.B), c.Exact, r.P, c.P)
		}
		if r.MedianA != c.MedianA || r.MedianB != c.MedianB || !relClose(r.Shift, c.Shift, 1e-12) {
			t.Errorf("case %d: medians %v %v shift %v, want %v %v %v", i, r.MedianA, r.MedianB, r.Shift, c.MedianA, c.MedianB, c.Shift)
		}
		bound(t, "shift lower bound", r.ShiftCI.Lo, c.ShiftCI[0], math.Inf(-1))
		bound(t, "shift upper bound", r.ShiftCI.Hi, c.ShiftCI[1], math.Inf(1))
		if c.Ratio == nil {
			if !math.IsNaN(r.Ratio) {
				t.Errorf("case %d: ratio %v for a sample that is not positive", i, r.Ratio)
			}
			continue
		}
		if !relClose(r.Ratio, *c.Ratio, 1e-9) {
			t.Errorf("case %d: ratio %v, want %v", i, r.Ratio, *c.Ratio)
		}
		bound(t, "ratio lower bound", r.RatioCI.Lo, c.RatioCI[0], 0)
		bound(t, "ratio upper bound", r.RatioCI.Hi, c.RatioCI[1], math.Inf(1))
	}
}

func TestRankCompareSmallSamplesWarn(t *testing.T) {
	r, err := RankCompare([]float64{1, 2, 3}, []float64{4, 5, 6}, 0.95)
	if err != nil {
		t.Fatal(err)
	}
	// 3 against 3 cannot reach p <= 0.05 (the smallest exact two-sided p is 0.1), so
	// the 95% interval cannot be bounded, and the result says so.
	if len(r.Warnings) == 0 || !math.IsInf(r.ShiftCI.Lo, -1) {
		t.Errorf("no warning or a bounded interval for 3 against 3: %+v", r)
	}
	if _, err := RankCompare(nil, []float64{1}, 0.95); err == nil {
		t.Error("an empty sample was accepted")
	}
	if _, err := RankCompare([]float64{math.NaN()}, []float64{1}, 0.95); err == nil {
		t.Error("NaN was accepted")
	}
}

// TestExactUDistIsADistribution checks the recurrence against the symmetry and the total
// every null distribution of U must have.
func TestExactUDistIsADistribution(t *testing.T) {
	for _, mn := range [][2]int{{1, 1}, {3, 5}, {10, 7}, {50, 50}} {
		d := exactUDist(mn[0], mn[1])
		sum := 0.0
		for u, p := range d {
			sum += p
			if !relClose(p, d[len(d)-1-u], 1e-12) {
				t.Fatalf("%v: P(U=%d) = %v but P(U=%d) = %v", mn, u, p, len(d)-1-u, d[len(d)-1-u])
			}
		}
		if !relClose(sum, 1, 1e-12) {
			t.Errorf("%v: total %v", mn, sum)
		}
	}
}

func TestNonInferiorRatio(t *testing.T) {
	base := []float64{100, 101, 99, 102, 98, 100.5, 99.5, 101.5, 98.5, 100.2, 99.8, 100.7}
	same := make([]float64, len(base))
	slower := make([]float64, len(base))
	for i, x := range base {
		same[i] = x * 0.995
		slower[i] = x * 0.85
	}
	ni, err := NonInferiorRatio(base, same, 0.05, 0.05, true)
	if err != nil {
		t.Fatal(err)
	}
	if !ni.NonInferior || ni.Bound <= 0.95 || ni.Bound >= 1 {
		t.Errorf("0.5%% slower is non-inferior within 5%%: %+v", ni)
	}
	ni, _ = NonInferiorRatio(base, slower, 0.05, 0.05, true)
	if ni.NonInferior || ni.Ratio > 0.9 {
		t.Errorf("15%% slower must not be non-inferior within 5%%: %+v", ni)
	}
	// Lower is better: a latency 15% lower is non-inferior; 15% higher is not.
	if ni, _ := NonInferiorRatio(base, slower, 0.05, 0.05, false); !ni.NonInferior {
		t.Errorf("lower latency not non-inferior: %+v", ni)
	}
	if _, err := NonInferiorRatio(base, []float64{0, 1}, 0.05, 0.05, true); err == nil {
		t.Error("a zero throughput was accepted for a ratio")
	}
}

// sortHodgesLehmann is hodgesLehmann as the definition reads: every difference written
// out and sorted. The order statistics hodgesLehmann selects must be exactly these.
func sortHodgesLehmann(a, b []float64, lo, hi int, f func(float64) float64) (float64, Interval) {
	d := make([]float64, 0, len(a)*len(b))
	for _, y := range b {
		for _, x := range a {
			d = append(d, f(y)-f(x))
		}
	}
	sort.Float64s(d)
	ci := Interval{math.Inf(-1), math.Inf(1)}
	if lo >= 1 && lo <= len(d) {
		ci.Lo = d[lo-1]
	}
	if hi >= 1 && hi <= len(d) && lo >= 1 {
		ci.Hi = d[hi-1]
	}
	return sortedMedian(d), ci
}

// checkHodgesLehmann compares hodgesLehmann with the sort at every rank pair worth trying.
func checkHodgesLehmann(t *testing.T, a, b []float64) {
	t.Helper()
	mn := len(a) * len(b)
	fs := map[string]func(float64) float64{"shift": func(x float64) float64 { return x }}
	if positive(a) && positive(b) {
		fs["log"] = math.Log
	}
	for name, f := range fs {
		for _, r := range [][2]int{{0, mn + 1}, {1, mn}, {1, 1}, {mn, mn}, {(mn + 1) / 2, mn/2 + 1}, {mn / 3, mn - mn/3}, {2, mn - 1}} {
			gm, gci := hodgesLehmann(a, b, r[0], r[1], f)
			wm, wci := sortHodgesLehmann(a, b, r[0], r[1], f)
			if math.Float64bits(gm) != math.Float64bits(wm) || gci != wci {
				t.Fatalf("%s of %v and %v, ranks %v: median %v %v, want %v %v", name, a, b, r, gm, gci, wm, wci)
			}
		}
	}
}

func TestHodgesLehmannSelectsWhatTheSortGives(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		a, b := make([]float64, 1+rng.IntN(40)), make([]float64, 1+rng.IntN(40))
		for _, s := range [][]float64{a, b} {
			for i := range s {
				switch rng.IntN(4) {
				case 0: // ties: a few round values
					s[i] = float64(rng.IntN(5))
				case 1: // latencies: positive, skewed
					s[i] = math.Exp(rng.NormFloat64()) * 120
				case 2:
					s[i] = rng.NormFloat64() * 1e-3
				default:
					s[i] = rng.Float64()*2e6 - 1e6
				}
			}
		}
		checkHodgesLehmann(t, a, b)
	}
}

func FuzzHodgesLehmannMatchesSort(f *testing.F) {
	f.Add([]byte{1, 2, 3, 9, 8}, []byte{4, 4, 200, 0})
	f.Add([]byte{0}, []byte{0})
	f.Fuzz(func(t *testing.T, x, y []byte) {
		if len(x) == 0 || len(y) == 0 || len(x) > 64 || len(y) > 64 {
			return
		}
		a, b := make([]float64, len(x)), make([]float64, len(y))
		for i, v := range x {
			a[i] = float64(int8(v)) / 4
		}
		for i, v := range y {
			b[i] = float64(v)*1.5 + 0.25
		}
		checkHodgesLehmann(t, a, b)
	})
}

// BenchmarkRankCompare3000 compares two arms of 3,000 session summaries, as the verdict
// of a run of 3,000 sessions an arm does for each latency metric.
func BenchmarkRankCompare3000(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	x, y := make([]float64, 3000), make([]float64, 3000)
	for i := range x {
		x[i], y[i] = math.Exp(rng.NormFloat64())*100, math.Exp(rng.NormFloat64())*105
	}
	for b.Loop() {
		if _, err := RankCompare(x, y, 0.95); err != nil {
			b.Fatal(err)
		}
	}
}
