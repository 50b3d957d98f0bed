package repocheck

import (
	"bufio"
	"errors"
	"fmt"
	"go/build"
	"go/build/constraint"
	"maps"
	"os"
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

// osNames are the values of GOOS a build constraint may name.
var osNames = map[string]bool{"aix": true, "android": true, "darwin": true, "dragonfly": true, "freebsd": true,
	"hurd": true, "illumos": true, "ios": true, "js": true, "linux": true, "netbsd": true, "openbsd": true,
	"plan9": true, "solaris": true, "wasip1": true, "windows": true, "zos": true}

// builds are the build contexts a module's files can be compiled under: every GOOS its
// constraints name, and, where they say unix, a unix other than Linux and a system that is
// no unix; with cgo and without; under every combination of its own tags.
func builds(t *testing.T, root string) []build.Context {
	t.Helper()
	goos := map[string]bool{"linux": true, "darwin": true, "windows": true}
	own := map[string]bool{}
	err := walkPackages(root, func(dir string, files []string) error {
		for _, name := range files {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n") {
				if !constraint.IsGoBuild(line) {
					continue
				}
				expr, err := constraint.Parse(line)
				if err != nil {
					return fmt.Errorf("%s: %v", filepath.Join(dir, name), err)
				}
				expr.Eval(func(tag string) bool {
					switch {
					case osNames[tag]:
						goos[tag] = true
					case tag == "unix":
						goos["freebsd"] = true
					case tag == "cgo", tag == "gc", tag == "gccgo", strings.HasPrefix(tag, "go1."), tag == build.Default.GOARCH:
					default:
						own[tag] = true
					}
					return false
				})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for tag := range own {
		tags = append(tags, tag)
	}
	slices.Sort(tags)
	var out []build.Context
	for name := range goos {
		for _, cgo := range []bool{false, true} {
			for subset := 0; subset < 1<<len(tags); subset++ {
				c := build.Default
				c.GOOS, c.GOARCH, c.CgoEnabled, c.BuildTags = name, "amd64", cgo, nil
				for i, tag := range tags {
					if subset&(1<<i) != 0 {
						c.BuildTags = append(c.BuildTags, tag)
					}
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// walkPackages calls fn with every folder of the module under root that holds Go files,
// and their names; it skips testdata, hidden folders and modules of their own.
func walkPackages(root string, fn func(dir string, files []string) error) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root {
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		var files []string
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
				files = append(files, e.Name())
			}
		}
		if len(files) == 0 {
			return nil
		}
		return fn(path, files)
	})
}

// importsOf is what each package of the module under root imports of the module's own
// packages, under any of the builds: package → its code's imports, and its tests'.
type importsOf map[string]struct{ code, tests map[string]bool }

func loadImports(t *testing.T, root, module string, contexts []build.Context) importsOf {
	t.Helper()
	out := importsOf{}
	err := walkPackages(root, func(dir string, _ []string) error {
		rel, _ := filepath.Rel(root, dir)
		pkg := filepath.ToSlash(rel)
		for _, c := range contexts {
			p, err := c.ImportDir(dir, 0)
			var none *build.NoGoError
			if errors.As(err, &none) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s under GOOS=%s cgo=%v tags=%v: %w", pkg, c.GOOS, c.CgoEnabled, c.BuildTags, err)
			}
			e, ok := out[pkg]
			if !ok {
				e.code, e.tests = map[string]bool{}, map[string]bool{}
			}
			for _, imp := range p.Imports {
				if rest, ok := strings.CutPrefix(imp, module); ok {
					e.code[rest] = true
				}
			}
			for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
				if rest, ok := strings.CutPrefix(imp, module); ok {
					e.tests[rest] = true
				}
			}
			out[pkg] = e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// importProblems holds imports to the table: production code may not import what the
// table does not allow, tests no command, every package has a row, and nothing the table
// allows is left in it unused.
func importProblems(allowed map[string][]string, got importsOf) []string {
	var problems []string
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		imps := got[pkg]
		may, ok := allowed[pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("package %s has no row in docs/ARCHITECTURE.md's \"Who may import whom\"", pkg))
			continue
		}
		for _, imp := range slices.Sorted(maps.Keys(imps.code)) {
			if !slices.Contains(may, imp) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which docs/ARCHITECTURE.md does not allow it", pkg, imp))
			}
		}
		for _, imp := range slices.Sorted(maps.Keys(imps.tests)) {
			if strings.HasPrefix(imp, "cmd/") && imp != pkg {
				problems = append(problems, fmt.Sprintf("%s's tests import the command %s: no package imports a command", pkg, imp))
			}
		}
		for _, imp := range may {
			if !imps.code[imp] {
				problems = append(problems, fmt.Sprintf("docs/ARCHITECTURE.md lets %s import %s, which it does not: take it out of the row", pkg, imp))
			}
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(allowed)) {
		if _, ok := got[pkg]; !ok {
			problems = append(problems, fmt.Sprintf("docs/ARCHITECTURE.md has a row for %s, which is no package", pkg))
		}
	}
	return problems
}

// TestArchitecture checks every package's imports of the project's own packages against
// docs/ARCHITECTURE.md under every build the module's constraints allow (each GOOS they
// name, cgo on and off, every combination of arbiter's own tags), so that a file only
// Windows or a static build compiles is held to the table too.
func TestArchitecture(t *testing.T) {
	root := repoRoot(t)
	for _, p := range importProblems(mayImport(t, root), loadImports(t, root, module, builds(t, root))) {
		t.Error(p)
	}
}

// TestArchitectureSeesEveryBuild: a forbidden import in a file that only Windows builds
// fails the check, though the host's build never compiles it; so does one behind a tag
// of the module's own.
func TestArchitectureSeesEveryBuild(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"go.mod":              "module example.com/m\n\ngo 1.22\n",
		"low/low.go":          "package low\n",
		"high/high.go":        "package high\n\nimport _ \"example.com/m/low\"\n",
		"low/open_windows.go": "//go:build windows\n\npackage low\n\nimport _ \"example.com/m/high\"\n",
		"low/static.go":       "//go:build m_static && !windows\n\npackage low\n\nimport _ \"example.com/m/mid\"\n",
		"mid/mid.go":          "package mid\n",
	}
	for name, src := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	allowed := map[string][]string{"low": {}, "mid": {}, "high": {"low"}}

	host := build.Default
	host.GOOS, host.BuildTags = "linux", nil
	if p := importProblems(allowed, loadImports(t, root, "example.com/m/", []build.Context{host})); len(p) != 0 {
		t.Fatalf("the host's build alone should see nothing wrong: %q", p)
	}
	problems := importProblems(allowed, loadImports(t, root, "example.com/m/", builds(t, root)))
	want := []string{"low imports high, which docs/ARCHITECTURE.md does not allow it",
		"low imports mid, which docs/ARCHITECTURE.md does not allow it"}
	if !slices.Equal(problems, want) {
		t.Errorf("every build: %q; want %q", problems, want)
	}
}
