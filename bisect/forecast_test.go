package bisect

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
	"github.com/arbiterlab/arbiter/verdict"
)

// The plan of the example bisection: its changes, the step design it is simulated with,
// and a simulation whose shares add up; a rate outside (0, 1] is refused.
func TestForecastOfTheExample(t *testing.T) {
	spec, err := arms.LoadBisect("../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewForecast(spec, d, ForecastOptions{Simulations: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Changes) != len(spec.Changes) || f.Rate != spec.Search.Effect || f.LaunchICC != d.Step.LaunchICC || f.LaunchICCBasis != LaunchICCBasis(spec) {
		t.Errorf("forecast %+v of design %+v", f, d)
	}
	if s := f.Simulation; s.Bisections != 50 || math.Abs(s.Right+s.Wrong+s.Uncertain-1) > 1e-9 {
		t.Errorf("simulated bisections %+v do not add up", s)
	}
	var b bytes.Buffer
	f.WriteText(&b)
	if !strings.Contains(b.String(), "50 simulated bisections") || !strings.Contains(b.String(), "launch ICC ") {
		t.Errorf("the plan reads:\n%s", b.String())
	}
	if _, err := NewForecast(spec, d, ForecastOptions{Rate: 1.5}); err == nil {
		t.Error("a culprit's rate of 1.5 was planned for")
	}
}

// A noise floor lends a bisection its bound of how launches differ in corruption; one
// that measured none, or one too wide to bound any step, is refused.
func TestApplyFloor(t *testing.T) {
	spec, err := arms.LoadBisect("../examples/bisect/tuesday-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FloorSpec(spec); err != nil {
		t.Fatal(err)
	}
	basis, err := ApplyFloor(spec, &verdict.Floor{Experiment: 3, Launches: 8, ICC: 0.01, ICCUpper: 0.04, Conf: 0.9}, "aa")
	if err != nil || spec.Search.LaunchICC != 0.04 || !strings.Contains(basis, "A/A experiment 3 over 8 launches") {
		t.Errorf("ICC %g, basis %q, %v", spec.Search.LaunchICC, basis, err)
	}
	for _, f := range []*verdict.Floor{{ICCUpper: math.NaN()}, {ICCUpper: 1}} {
		if _, err := ApplyFloor(spec, f, "aa"); !errors.Is(err, verdict.ErrFloorRefused) {
			t.Errorf("floor with ICC bound %g: %v", f.ICCUpper, err)
		}
	}
}
