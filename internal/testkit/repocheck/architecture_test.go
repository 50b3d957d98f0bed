package repocheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/arbiterlab/arbiter/"

// mayImport reads the "Who may import whom" table of docs/ARCHITECTURE.md: package →
// the project's packages it may import.
func mayImport(t *testing.T, root string) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z0-9/_-]+)` \\| (.*) \\|$")
	name := regexp.MustCompile("`([a-z0-9/_-]+)`")
	out := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Who may import whom"
			continue
		}
		m := row.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		if _, twice := out[m[1]]; twice {
			t.Errorf("docs/ARCHITECTURE.md lists %s twice", m[1])
		}
		out[m[1]] = []string{}
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], n[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/ARCHITECTURE.md has no \"Who may import whom\" table")
	}
	return out
}

// TestArchitecture checks every package's imports of the project's own packages against
// docs/ARCHITECTURE.md: production code may not import what the table does not allow,
// tests no command, every package has a row, and nothing the table allows is left in it
// unused.
func TestArchitecture(t *testing.T) {
	root := repoRoot(t)
	allowed := mayImport(t, root)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .TestImports \",\"}}|{{join .XTestImports \",\"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	own := func(list string) []string {
		var pkgs []string
		for _, p := range strings.Split(list, ",") {
			if rest, ok := strings.CutPrefix(p, module); ok {
				pkgs = append(pkgs, rest)
			}
		}
		return pkgs
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Split(line, "|")
		pkg := strings.TrimPrefix(fields[0], module)
		listed[pkg] = true
		may, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's \"Who may import whom\"", pkg)
			continue
		}
		used := map[string]bool{}
		for _, imp := range own(fields[1]) {
			used[imp] = true
			if !slices.Contains(may, imp) {
				t.Errorf("%s imports %s, which docs/ARCHITECTURE.md does not allow it", pkg, imp)
			}
		}
		for _, imp := range append(own(fields[2]), own(fields[3])...) {
			if strings.HasPrefix(imp, "cmd/") && imp != pkg {
				t.Errorf("%s's tests import the command %s: no package imports a command", pkg, imp)
			}
		}
		for _, imp := range may {
			if !used[imp] {
				t.Errorf("docs/ARCHITECTURE.md lets %s import %s, which it does not: take it out of the row", pkg, imp)
			}
		}
	}
	for pkg := range allowed {
		if !listed[pkg] {
			t.Errorf("docs/ARCHITECTURE.md has a row for %s, which is no package", pkg)
		}
	}
}
