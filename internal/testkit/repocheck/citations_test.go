package repocheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's root, two folders up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s", root)
	}
	return root
}

// outside are documents that live beside the repository, not in it: a reader of the
// repository cannot open them, so nothing in it may send them there.
var outside = regexp.MustCompile(`\b(FACTS|DESIGN|STYLE|TEAM)(\.md)?\b`)

// cited is a path a text names under one of the repository's top-level folders
// (cmd/refserve/cohort.go, examples/quickstart.yaml, kernels/).
var cited = regexp.MustCompile(`(?:^|[\s(\[` + "`" + `"'])((?:arms|bisect|cmd|docs|examples|internal|kernels|openai|orchestrator|plan|plugins|stats|store|verdict|workload)/[\w./-]*[\w/])`)

// globRest is what follows a path that is a pattern: examples/gpu-*.yaml.
var globRest = regexp.MustCompile(`^[\w.-]*\*`)

// placeholder is a path with a word in capitals standing for a name (NAME, ID, DB).
var placeholder = regexp.MustCompile(`(^|[/.-])[A-Z]{2,}([/.-]|$)`)

// TestCitationsExist: comments, examples and documents cite only files that are in the
// repository.
func TestCitationsExist(t *testing.T) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", rel == "bin":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".sh", ".cu", ".h", ".py":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		if strings.HasSuffix(path, "citations_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: cites %s, which is not in the repository", rel, n, m)
			}
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				p := strings.TrimSuffix(strings.TrimRight(m[1], "."), "/")
				rest := line[strings.Index(line, m[1])+len(m[1]):]
				switch {
				case globRest.MatchString(rest), strings.ContainsAny(p, "*{<"), strings.Contains(p, "..."):
					continue // a pattern, not a file
				case placeholder.MatchString(p):
					continue // examples/NAME.yaml: a form, not a file
				case p == "kernels/build" || strings.HasPrefix(p, "kernels/build/"):
					continue // what make kernels builds
				}
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d: cites %s, which is not in the repository", rel, n, p)
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEngineLogsAreIgnored: engine logs go to arbiter-logs/ beside the database,
// wherever it is; git ignores them there.
func TestEngineLogsAreIgnored(t *testing.T) {
	root := repoRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not a git work tree")
	}
	for _, p := range []string{"arbiter-logs/0a1b2c3d/exp-1/exp1-control-b0.log", "results/arbiter-logs/0a1b2c3d/exp-2/exp2-a-b0.log"} {
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("git does not ignore %s", p)
		}
	}
}
