package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// docs/ARCHITECTURE.md: "the judge never formats a number of its own". The judge
// (verdict/judge.go) writes its caveats and gate reasons in words, but every figure that
// is not a count goes through the verdict's formatters (format.go: pct, pEq, levelText,
// signedNum, ...), so that a rate or a p reads alike in every writer. What can be checked:
// no string in the judge holds a verb that formats a fraction (%f, %g, %e and their
// widths, precisions and flags).

// fractionVerb is a formatting verb of a floating-point number; "%%" is a percent sign.
var fractionVerb = regexp.MustCompile(`(?:^|[^%])(?:%%)*%[-+# 0]*(?:\d+|\*)?(?:\.(?:\d+|\*)?)?[fFgGeE]`)

// literalsMatching lists the string literals of the Go file at path that re matches, each
// with its position.
func literalsMatching(t *testing.T, path string, re *regexp.Regexp) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && re.MatchString(s) {
				found = append(found, fset.Position(lit.Pos()).String()+": "+s)
			}
		}
		return true
	})
	return found
}

func TestTheJudgeFormatsNoFraction(t *testing.T) {
	for _, hit := range literalsMatching(t, filepath.Join(repoRoot(t), "verdict", "judge.go"), fractionVerb) {
		t.Errorf("the judge formats a number of its own (write it with a formatter of verdict/format.go): %s", hit)
	}
}

// The check sees every verb of a fraction, and neither a count, a string, nor a percent
// sign.
func TestFractionCheckSeesFractions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "judge.go")
	src := "package verdict\n\nvar a = \"%+.0f points\"\nvar b = \"%g\"\nvar c = \"%6.2e\"\nvar d = \"%.*f\"\n" +
		"var e = \"%d of %d (95%% exact upper bound), %s\"\nvar f = \"100%%f\"\nvar g = \"%%%.1f\"\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := literalsMatching(t, path, fractionVerb); len(got) != 5 {
		t.Errorf("found %q; want a, b, c, d and g", got)
	}
}
