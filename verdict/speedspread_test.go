package verdict

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
)

// SpeedSpreads pools, phase by phase, the spread of the logs of the launches' medians
// within each arm: the arms' own difference is not in it.
func TestSpeedSpreadsPoolWithinTheArms(t *testing.T) {
	db, id := outcomeExamples["throughput"](t)
	spreads, err := SpeedSpreads(context.Background(), db, id)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Build(context.Background(), db, id)
	if err != nil {
		t.Fatal(err)
	}
	samples := v.launchSamples()
	// The pooled within-arm standard deviation of the logs of each launch's median, by
	// hand: two arms of two launches, two degrees of freedom.
	within := func(group string) float64 {
		ss := 0.0
		for _, arm := range samples {
			if len(arm) != 2 {
				t.Fatalf("an arm of %d launches; the fixture has two", len(arm))
			}
			d := math.Log(arm[0].metrics[group][MetricThroughput]) - math.Log(arm[1].metrics[group][MetricThroughput])
			ss += d * d / 2
		}
		return math.Sqrt(ss / 2)
	}
	if len(spreads) != 3 {
		t.Fatalf("spreads %+v; want the three phases", spreads)
	}
	for i, name := range []string{"c=1", "c=32", "poisson 16/s"} {
		s, want := spreads[i], within(name)
		if !(want > 0) || s.Group != name || s.Launches != 4 || s.Spread.DF != 2 || math.Abs(s.Spread.SD-want) > 1e-9*want || !(s.Spread.Upper > s.Spread.SD) {
			t.Errorf("phase %d: %+v; want %s, 4 launches, SD %.6g on 2 degrees of freedom, its bound above", i, s, name, want)
		}
	}
}

// A floor of several loads says each load's bound, which its claims rest on.
func TestAFloorSentenceGivesEveryLoadsBound(t *testing.T) {
	f := &Floor{Experiment: 4, Name: "tp-aa", Launches: 8, ICC: math.NaN(), ICCUpper: math.NaN(), Speed: map[string]map[string]Spread{
		"c=1":          {MetricThroughput: {SD: 0.0008, Upper: 0.001, DF: 6}},
		"c=32":         {MetricThroughput: {SD: 0.009, Upper: 0.015, DF: 6}},
		"poisson 16/s": {MetricThroughput: {SD: 0.068, Upper: 0.11, DF: 6}},
	}}
	want := "a launch-to-launch spread of tok/s of at most 0.1% at c=1, 1.5% at c=32 and 11.6% at poisson 16/s;"
	if got := f.Sentence(); !strings.Contains(got, want) {
		t.Errorf("floor sentence:\n%s\nwant %q", got, want)
	}
}

// CorruptionSpread averages the arms' own intra-launch correlations: an arm with no
// corrupted session shows none, and the arms' difference is not in it.
func TestCorruptionSpreadIsWithinTheArms(t *testing.T) {
	db, id := recordFixture(t, examples["quickstart4"])
	icc, launches, err := CorruptionSpread(context.Background(), db, id)
	if err != nil {
		t.Fatal(err)
	}
	v := buildExample(t, "quickstart4")
	var treatment []stats.ClusterCounts
	for i, arm := range v.launchSamples() {
		for _, s := range arm {
			if v.Arms[i].Name == "treatment" {
				treatment = append(treatment, stats.ClusterCounts{Events: s.corrupt, Responses: s.sessions})
			}
		}
	}
	want := stats.LaunchICC(treatment)
	if launches != 8 || math.IsNaN(want) || math.Abs(icc-want) > 1e-12 {
		t.Errorf("ICC %g over %d launches; want treatment's own %g over 8 (control corrupted nothing)", icc, launches, want)
	}
}
