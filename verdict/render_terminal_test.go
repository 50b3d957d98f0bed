package verdict

import (
	"bytes"
	"strings"
	"testing"
)

// The terminal summary: a line per arm with its launches by how they ended, its corrupted
// share and its decision as the verdict words it, then the headline wrapped to 100
// columns.
func TestTerminalSummary(t *testing.T) {
	v := buildExample(t, "quickstart4")
	var b bytes.Buffer
	if err := v.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"ARM", "LAUNCHES", "DECISION", "4 done", "baseline", v.DecisionWords(v.armIndex("treatment"))} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary lacks %q:\n%s", want, out)
		}
	}
	paras := strings.Split(out, "\n\n")
	if len(paras) < 2 {
		t.Fatalf("no headline under the table:\n%s", out)
	}
	for _, line := range strings.Split(paras[1], "\n") {
		if len(line) > 100 {
			t.Errorf("a headline line runs past 100 columns: %q", line)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(strings.Join(v.Headline(), " ")), " ")) {
		t.Errorf("the summary does not carry the headline:\n%s", out)
	}
}
