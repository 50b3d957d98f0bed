package repocheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docs/ARCHITECTURE.md says the CLI holds no rule of its own: it parses flags, calls the
// packages that own the rules and prints what they return. What can be checked of that:
// no command computes statistics. Only `arbiter stats`, whose work is to print a test on
// counts typed by hand, calls the statistics package; every other command reaches the
// statistics through the package that owns the rule (plan, bisect, verdict), and no
// command does arithmetic of its own with math, random draws or gonum.

// statsCommand is the one file of cmd/arbiter that may call the statistics.
const statsCommand = "cmd_stats.go"

// ruleImport reports whether path is what a command would compute statistics with.
func ruleImport(path string) bool {
	switch {
	case path == "math", path == "math/rand", path == "math/rand/v2",
		path == "github.com/arbiterlab/arbiter/stats", strings.HasPrefix(path, "gonum.org/"):
		return true
	}
	return false
}

// statisticsInCommands lists the non-test files of dir, but for statsCommand, that import
// what statistics are computed with, with the import.
func statisticsInCommands(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || filepath.Base(path) == statsCommand {
			continue
		}
		// Every file, whatever its build constraints: a rule behind a tag is still a rule.
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, err := strconv.Unquote(imp.Path.Value); err == nil && ruleImport(p) {
				found = append(found, filepath.Base(path)+" imports "+p)
			}
		}
	}
	return found
}

func TestCommandsComputeNoStatistics(t *testing.T) {
	for _, hit := range statisticsInCommands(t, filepath.Join(repoRoot(t), "cmd", "arbiter")) {
		t.Errorf("cmd/arbiter computes what a package owns (%s): move the rule into plan, bisect, verdict or stats, and call it", hit)
	}
}

// The check sees the statistics a command could compute with, behind a build tag too,
// and lets the stats command and the tests be.
func TestStatisticsCheckSeesStatistics(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"cmd_plan.go":    "package main\n\nimport (\n\t\"fmt\"\n\t\"math\"\n)\n",
		"cmd_bisect.go":  "//go:build linux\n\npackage main\n\nimport \"github.com/arbiterlab/arbiter/stats\"\n",
		"cmd_power.go":   "package main\n\nimport \"gonum.org/v1/gonum/stat\"\n",
		"cmd_stats.go":   "package main\n\nimport (\n\t\"math\"\n\t\"github.com/arbiterlab/arbiter/stats\"\n)\n",
		"cmd_x_test.go":  "package main\n\nimport \"math/rand/v2\"\n",
		"cmd_version.go": "package main\n\nimport \"fmt\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(statisticsInCommands(t, dir), "; ")
	if want := "cmd_bisect.go imports github.com/arbiterlab/arbiter/stats; cmd_plan.go imports math; cmd_power.go imports gonum.org/v1/gonum/stat"; got != want {
		t.Errorf("found %q; want %q", got, want)
	}
}
