package verdict

import (
	"fmt"
	"strings"
)

// externalNote says, for arms that already ran at their base URLs (runtime kind
// external), that arbiter launched none of them, how their pins were checked, and
// which pins no engine could confirm.
func (v *Verdict) externalNote() string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "- The arms already ran at their base URLs (runtime external): arbiter launched none of them and cannot vouch for the rest of their configuration. Each engine's `get_server_info` was compared with its arm's pins before the experiment and at every run; an engine that reported other settings was refused.\n")
	if len(v.Design.PinsUnverified) == 0 {
		fmt.Fprintf(b, "- Every pin was confirmed by its engine's `get_server_info`.\n")
		return b.String()
	}
	fmt.Fprintf(b, "- **Pins that could not be verified** (the engine did not report them): %s.\n", strings.Join(v.Design.PinsUnverified, "; "))
	return b.String()
}
