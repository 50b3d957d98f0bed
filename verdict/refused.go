package verdict

import (
	"fmt"
	"strings"

	"github.com/arbiterlab/arbiter/store"
)

// refusedCaveat says that the experiment was refused: a launch's engine did not run as
// pinned, or its pins could not be checked, so nothing it would have answered was
// judged, and a resume does not run it again (arbiter run starts a new experiment).
func (v *Verdict) refusedCaveat(add func(CaveatKind, string, ...any)) {
	var refused []string
	for _, r := range v.Runs {
		if r.Status == store.RunRefused && !r.Superseded {
			refused = append(refused, fmt.Sprintf("%s (%s)", store.LaunchName(r.Arm, r.Block), dash(r.Error)))
		}
	}
	if len(refused) > 0 {
		add(CaveatProblem, "The experiment was refused: the engines of %s did not run as pinned, or their pins could not be checked, so no traffic was sent to them. A resume does not run it again; fix the engine or the pins and start a new experiment.",
			strings.Join(refused, "; "))
	}
}
