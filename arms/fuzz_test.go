package arms

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, that every problem it reports
// carries a position a user can open (line and column from 1), and that whatever it
// accepts expands and redacts cleanly.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/specs/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, p := range append(files, examples...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{
		"", "-", "{", "version: 1\nname: x\n", "a: &a [*a]\n", "x: *nope\n", "? [a]\n: b\n",
		"version: 1\nname: x\nengine: {preset: refserve}\narms: {a: &p {env: {K: \"0\"}}, b: *p}\nworkload: {sessions: 1, rounds: 1}\n",
		"version: 1\n---\nversion: 1\n", "version: !!str 1\n", "arms:\n  <<: {a: {}}\n",
		"workload: {sessions: 99999999999999999999, rounds: -1}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("error without a SpecError: %v", err)
			}
			for _, e := range errs {
				if e.Line < 1 || e.Col < 1 || e.File != "fuzz.yaml" {
					t.Fatalf("error without a position: %#v", e)
				}
			}
			return
		}
		arms, err := s.Expand()
		if err != nil {
			t.Fatalf("Parse accepted a spec that Expand refuses: %v", err)
		}
		if len(arms) < 2 || s.Analysis.Baseline == "" {
			t.Fatalf("accepted spec with %d arms, baseline %q", len(arms), s.Analysis.Baseline)
		}
		_ = s.RedactedSource()
		_ = s.Redactor(nil).Redact(string(data))
	})
}
