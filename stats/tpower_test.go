package stats

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// tpowerReference is testdata/tpower/reference.json, computed by scipy (gen.py).
type tpowerReference struct {
	Survival []struct{ DF, Delta, X, P float64 } `json:"survival"`
	Power    []struct {
		K                       int
		SD, Shift, Level, Power float64
	} `json:"power"`
	ZPower []struct {
		K                              int
		SD, Bound, Shift, Level, Power float64
	} `json:"zpower"`
	Needed []struct {
		SD, Shift, Level, Power float64
		Needed                  int
	} `json:"needed"`
}

func loadTPowerReference(t *testing.T) tpowerReference {
	t.Helper()
	b, err := os.ReadFile("testdata/tpower/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r tpowerReference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Survival) == 0 || len(r.Power) == 0 || len(r.Needed) == 0 {
		t.Fatal("empty reference")
	}
	return r
}

func TestNoncentralTSurvivalMatchesScipy(t *testing.T) {
	for _, c := range loadTPowerReference(t).Survival {
		got := NoncentralTSurvival(c.DF, c.Delta, c.X)
		if math.Abs(got-c.P) > 1e-7 {
			t.Errorf("P(T > %g), df %g, delta %g = %.10g; scipy %.10g", c.X, c.DF, c.Delta, got, c.P)
		}
	}
	// A central t is Student's.
	if got, want := NoncentralTSurvival(5, 0, 2), tSurvival(5, 2); math.Abs(got-want) > 1e-10 {
		t.Errorf("central: %g; Student's %g", got, want)
	}
	for _, c := range []struct{ df, delta, x float64 }{{0, 1, 1}, {-1, 0, 0}, {3, math.NaN(), 0}, {3, 0, math.NaN()}, {3, math.Inf(1), 0}} {
		if got := NoncentralTSurvival(c.df, c.delta, c.x); !math.IsNaN(got) {
			t.Errorf("NoncentralTSurvival(%g, %g, %g) = %g; want NaN", c.df, c.delta, c.x, got)
		}
	}
}

func TestLaunchTPowerMatchesScipy(t *testing.T) {
	r := loadTPowerReference(t)
	for _, c := range r.Power {
		got := LaunchTPower(c.K, c.SD, c.Shift, c.Level)
		if math.Abs(got-c.Power) > 1e-7 {
			t.Errorf("power at %d launches, sd %g, shift %g, level %g = %.10g; scipy %.10g", c.K, c.SD, c.Shift, c.Level, got, c.Power)
		}
	}
	for _, c := range r.Needed {
		if got := LaunchesForTPower(c.SD, c.Shift, c.Level, c.Power, 64); got != c.Needed {
			t.Errorf("launches for power %g, sd %g, shift %g, level %g = %d; scipy %d", c.Power, c.SD, c.Shift, c.Level, got, c.Needed)
		}
	}
	for _, c := range r.ZPower {
		got := LaunchZPower(c.K, c.SD, c.Bound, c.Shift, c.Level)
		if math.Abs(got-c.Power) > 1e-9 {
			t.Errorf("floor's power at %d launches, sd %g, bound %g, shift %g, level %g = %.10g; scipy %.10g", c.K, c.SD, c.Bound, c.Shift, c.Level, got, c.Power)
		}
	}
	if len(r.ZPower) == 0 {
		t.Error("no floor reference")
	}
	if got := LaunchZPower(0, 0.03, 0.03, 0.05, 0.01); !math.IsNaN(got) {
		t.Errorf("no launch: floor's power %g; want NaN", got)
	}
	for _, k := range []int{0, 1} {
		if got := LaunchTPower(k, 0.03, 0.05, 0.01); !math.IsNaN(got) {
			t.Errorf("%d launches: power %g; want NaN", k, got)
		}
	}
	if got := LaunchTPower(4, 0, 0.05, 0.01); !math.IsNaN(got) {
		t.Errorf("no spread: power %g; want NaN", got)
	}
}

// The power of a test whose true difference sits on its threshold is its level, and it
// grows with the launches.
func TestLaunchTPowerAtTheThresholdIsTheLevel(t *testing.T) {
	for _, level := range []float64{0.01, 0.05} {
		if got := LaunchTPower(5, 0.04, 0, level); math.Abs(got-level) > 1e-9 {
			t.Errorf("power on the threshold at %g = %g", level, got)
		}
	}
	last := 0.0
	for k := 2; k <= 20; k++ {
		p := LaunchTPower(k, 0.05, 0.05, 0.01)
		if p <= last {
			t.Errorf("power at %d launches %g is not above %g at %d", k, p, last, k-1)
		}
		last = p
	}
}
