package verdict

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// The level a plan says the primary claim will be tested at is the level the verdict of
// such an experiment gives it: agents with one and four launches per arm, a factorial, an
// abort cascade (wedges primary, corruption and speed beside) and a throughput run.
func TestPlannedLevelIsTheVerdictsOwn(t *testing.T) {
	for _, c := range []struct {
		name, example string
		launches      int
		v             func(t *testing.T) *Verdict
	}{
		{"quickstart", "quickstart", 1, func(t *testing.T) *Verdict { return buildExample(t, "quickstart") }},
		{"quickstart4", "quickstart-launches", 4, func(t *testing.T) *Verdict { return buildExample(t, "quickstart4") }},
		{"factorial", "factorial", 1, func(t *testing.T) *Verdict { return buildExample(t, "factorial") }},
		{"abort-wedge", "abort-wedge", 4, func(t *testing.T) *Verdict { return buildOutcomes(t, "abort-wedge") }},
		{"throughput", "throughput", 2, func(t *testing.T) *Verdict { return buildOutcomes(t, "throughput") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, err := arms.Load(filepath.Join("..", "examples", c.example+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			v := c.v(t)
			judged := math.Inf(1)
			for _, cl := range v.Claims.Claims {
				if cl.Primary {
					judged = min(judged, cl.Level)
				}
			}
			if planned := PlannedLevel(spec, len(v.Arms), c.launches, false); planned != judged {
				t.Errorf("planned level %g, the verdict's %g", planned, judged)
			}
		})
	}
}
