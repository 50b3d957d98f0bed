package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fuzzTarget is a fuzz test's declaration.
var fuzzTarget = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)

// fuzzLine is one line of make fuzz: the target and the package it runs in.
var fuzzLine = regexp.MustCompile(`-fuzz '\^(Fuzz\w+)\$\$' -fuzztime \$\(FUZZTIME\) \./([\w/-]+)`)

// TestMakeFuzzRunsEveryTarget: make fuzz runs every fuzz target of the module, once, in
// its own package; a target added without its line, or a line left behind by a target
// renamed or moved, fails here.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	root := repoRoot(t)
	declared := map[string]string{} // target → package folder
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// bench/ is a module of its own, with no fuzz target.
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bin" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzTarget.FindAllStringSubmatch(string(src), -1) {
			if other, ok := declared[m[1]]; ok {
				t.Errorf("%s is declared in %s and in %s: make fuzz names targets by name", m[1], other, filepath.Dir(rel))
			}
			declared[m[1]] = filepath.Dir(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	run := map[string]string{}
	for _, m := range fuzzLine.FindAllStringSubmatch(string(mk), -1) {
		if _, twice := run[m[1]]; twice {
			t.Errorf("make fuzz runs %s twice", m[1])
		}
		run[m[1]] = m[2]
		if dir, ok := declared[m[1]]; !ok {
			t.Errorf("make fuzz runs %s in ./%s, and no test declares it", m[1], m[2])
		} else if dir != m[2] {
			t.Errorf("make fuzz runs %s in ./%s; it is declared in %s", m[1], m[2], dir)
		}
	}
	for name, dir := range declared {
		if _, ok := run[name]; !ok {
			t.Errorf("%s (in %s) is not in make fuzz", name, dir)
		}
	}
	if len(declared) == 0 {
		t.Fatal("no fuzz target found: the walk or the pattern is wrong")
	}
}
