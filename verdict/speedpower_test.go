package verdict

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/arbiterlab/arbiter/stats"
)

// The power `arbiter plan` gives a throughput claim (stats.LaunchTPower at the claim's
// level) is the rate at which the verdict itself shows it: simulated experiments of the
// throughput shape, launches differing by a log-normal CV around arms that truly do not
// differ, decided by the verdict's own family, show non-inferiority within the 5% margin
// as often as the plan says.
func TestThePlannedSpeedPowerIsTheVerdicts(t *testing.T) {
	var sh verdictShape
	for _, s := range shapes {
		if s.name == "throughput" {
			sh = s
		}
	}
	const reps = 1500
	for _, c := range []nullCell{{cv: 0.03, launches: 4}, {cv: 0.02, launches: 3}} {
		rng := rand.New(rand.NewPCG(7, uint64(c.launches)))
		shown, level := 0, 0.0
		for range reps {
			f := simulateVerdict(rng, sh, c, 0, false)
			for _, cl := range f.Claims {
				if cl.Outcome == OutcomeNonInferiority && cl.Group == "c=1" {
					level = cl.Level
					if cl.Claimed {
						shown++
					}
				}
			}
		}
		// The simulated medians carry a 0.5% sampling error beside the launches' spread.
		sd := math.Sqrt(c.cv*c.cv + 0.005*0.005)
		want := stats.LaunchTPower(c.launches, sd, -math.Log(0.95), level)
		got := float64(shown) / reps
		t.Logf("CV %g, %d launches per arm at %g: shown in %.3f, planned %.3f", c.cv, c.launches, level, got, want)
		if se := math.Sqrt(want * (1 - want) / reps); math.Abs(got-want) > 4*se+0.005 {
			t.Errorf("CV %g, %d launches per arm at %g: the verdict showed non-inferiority in %.3f of %d experiments; the plan's power %.3f",
				c.cv, c.launches, level, got, reps, want)
		}
	}
}
