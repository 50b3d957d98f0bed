package verdict

import (
	"strings"
	"testing"
)

// Arms that corrupted as often as the baseline are said so, the ones that cannot be
// judged left to the sentence on problems: not "the largest difference is a's: +0.0".
func TestArmsAlikeButOneInconclusiveAreSaidAlike(t *testing.T) {
	v := buildExample(t, "factorial")
	others := v.others()
	if len(others) < 3 {
		t.Fatalf("the factorial example compares %d arms with its baseline", len(others))
	}
	for k, i := range others {
		c := *v.Arms[i].Compare
		c.Difference, c.Inconclusive = 0, k == 0
		v.Arms[i].Compare = &c
	}
	got := v.sameEvidence("")
	if !strings.HasPrefix(got, "Every other arm that can be judged corrupted the same share of its sessions as the baseline ") ||
		strings.Contains(got, v.Arms[others[0]].Name+" ") || !strings.Contains(got, v.Arms[others[1]].Name+" ") {
		t.Errorf("arms alike but %s inconclusive: %q", v.Arms[others[0]].Name, got)
	}
	// One that differs makes the largest difference the evidence again.
	c := *v.Arms[others[1]].Compare
	c.Difference = 0.05
	v.Arms[others[1]].Compare = &c
	if got := v.sameEvidence(""); got != "" {
		t.Errorf("an arm that differs, still: %q", got)
	}
}
