package stats

import (
	"fmt"
	"math"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// When the launch (one engine run) is the unit, the sessions of a launch share its memory
// layout, its warm-up and its node, so they are correlated, and an experiment has only as
// many independent units as it has launches: a few per arm. A chi-square test corrected
// by an estimated design effect (DonnerAdjusted) needs many clusters; with two to eight
// launches per arm it rejects a true null up to twice as often as it should. The
// launch-level test here compares the launches' own corruption rates with Student's t on
// launches − 2 degrees of freedom, the cluster-level analysis that the literature on
// trials with few clusters recommends (Donner and Klar 2000; Hayes and Moulton 2017),
// whose size stays near alpha down to two launches per arm
// (TestLaunchTTestSizeWithFewLaunches).

// MinLaunchesPerArm is the fewest launches (with at least one analysed session) each arm
// needs before the launch-level test can conclude anything: the t reference estimates
// the launch-to-launch variance within each arm, which one launch cannot show. Below it
// no launch-level conclusion is possible, whatever the session counts say.
const MinLaunchesPerArm = 2

// LaunchTest is the comparison of arm B's launches with the baseline arm A's.
type LaunchTest struct {
	LaunchesA, LaunchesB int // launches with at least one analysed session
	// Possible is false when an arm has fewer than MinLaunchesPerArm launches: then no
	// launch-level conclusion is possible and every figure below is NaN.
	Possible bool
	// RateA and RateB are the unweighted means of the launches' corruption rates.
	RateA, RateB float64
	Difference   float64  // RateB − RateA
	SE           float64  // pooled-variance standard error of Difference
	T            float64  // Difference / SE
	DF           int      // LaunchesA + LaunchesB − 2
	P            float64  // two-sided, Student's t with DF degrees of freedom
	CI           Interval // t interval of Difference at the requested confidence
	Conf         float64
	Warnings     []Warning
}

// MarshalJSON writes the test with the figures that are undefined when no conclusion
// is possible as null.
func (l LaunchTest) MarshalJSON() ([]byte, error) {
	return coreJSONObject(
		coreJSONField{"launches_a", l.LaunchesA},
		coreJSONField{"launches_b", l.LaunchesB},
		coreJSONField{"possible", l.Possible},
		coreJSONField{"rate_a", l.RateA},
		coreJSONField{"rate_b", l.RateB},
		coreJSONField{"difference", l.Difference},
		coreJSONField{"se", l.SE},
		coreJSONField{"t", l.T},
		coreJSONField{"df", l.DF},
		coreJSONField{"p", l.P},
		coreJSONField{"ci" + coreConfLabel(l.Conf), Bounds(l.CI)},
		coreJSONField{"warnings", l.Warnings},
	)
}

// LaunchTTest compares the corruption rates of two arms' launches: each launch counts
// once, with its share of corrupted sessions (ClusterCounts.Events of Responses), and
// the two arms' means are compared by the pooled two-sample t test on DF = launches − 2
// degrees of freedom, with its interval at confidence conf (0 means DefaultConf).
// Launches without analysed sessions are left out. It checks the tallies like
// DonnerAdjusted.
func LaunchTTest(a, b []ClusterCounts, conf float64) (LaunchTest, error) {
	if err := checkClusters("arm A", a); err != nil {
		return LaunchTest{}, err
	}
	if err := checkClusters("arm B", b); err != nil {
		return LaunchTest{}, err
	}
	conf = coreConf(conf)
	nan := math.NaN()
	out := LaunchTest{Conf: conf, RateA: nan, RateB: nan, Difference: nan, SE: nan, T: nan, P: nan, CI: Interval{nan, nan}}
	rates := func(cs []ClusterCounts) []float64 {
		var r []float64
		for _, c := range cs {
			if c.Responses > 0 {
				r = append(r, float64(c.Events)/float64(c.Responses))
			}
		}
		return r
	}
	ra, rb := rates(a), rates(b)
	out.LaunchesA, out.LaunchesB = len(ra), len(rb)
	if skipped := len(a) + len(b) - len(ra) - len(rb); skipped > 0 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%d launches had no analysed session and were left out", skipped)))
	}
	if len(ra) < MinLaunchesPerArm || len(rb) < MinLaunchesPerArm {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("%d and %d launches: each arm needs at least %d to estimate how much launches differ, so no launch-level conclusion is possible",
			len(ra), len(rb), MinLaunchesPerArm)))
		return out, nil
	}
	out.Possible = true
	mean := func(r []float64) float64 {
		s := 0.0
		for _, x := range r {
			s += x
		}
		return s / float64(len(r))
	}
	out.RateA, out.RateB = mean(ra), mean(rb)
	out.Difference = out.RateB - out.RateA
	ss := 0.0
	for _, x := range ra {
		ss += (x - out.RateA) * (x - out.RateA)
	}
	for _, x := range rb {
		ss += (x - out.RateB) * (x - out.RateB)
	}
	out.DF = len(ra) + len(rb) - 2
	df := float64(out.DF)
	out.SE = math.Sqrt(ss / df * (1/float64(len(ra)) + 1/float64(len(rb))))
	tq := studentQuantile(out.DF, 1-(1-conf)/2)
	switch {
	case out.SE > 0:
		out.T = out.Difference / out.SE
		out.P = min(1, 2*distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Survival(math.Abs(out.T)))
	case out.Difference == 0:
		out.T, out.P = 0, 1
	default:
		// Every launch of each arm had the same rate: the t statistic is unbounded.
		out.T, out.P = math.Copysign(math.Inf(1), out.Difference), 0
		out.Warnings = append(out.Warnings, "every launch of each arm had exactly the same corruption rate: the launch-to-launch variance is estimated as 0 and the t test cannot weigh the difference; read the session counts")
	}
	out.CI = Interval{out.Difference - tq*out.SE, out.Difference + tq*out.SE}
	if min(len(ra), len(rb)) < 4 {
		out.Warnings = append(out.Warnings, Warning(fmt.Sprintf("only %d and %d launches: the t reference has %d degrees of freedom, so only a large, consistent difference between launches can be shown; more blocks buy more power than more sessions per launch",
			len(ra), len(rb), out.DF)))
	}
	return out, nil
}

// studentQuantiles memoizes Student's t quantiles by (df, probability): the inverse
// incomplete beta costs microseconds, and a verdict or a simulation asks for the same
// few again and again.
var studentQuantiles sync.Map

func studentQuantile(df int, p float64) float64 {
	type key struct {
		df int
		p  float64
	}
	k := key{df, p}
	if q, ok := studentQuantiles.Load(k); ok {
		return q.(float64)
	}
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(p)
	studentQuantiles.Store(k, q)
	return q
}
