package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiterlab/arbiter/arms"
)

// manual is the README and every page of docs/ (not the results and calibration reports,
// which quote what was measured when they were written).
func manual(t *testing.T, root string) map[string]string {
	t.Helper()
	pages := map[string]string{}
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(paths, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		pages[rel] = string(b)
	}
	return pages
}

// code is what a page shows as code: its `spans` and fenced blocks, where a command or a
// file is named as one types it.
func code(page string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			out = append(out, line)
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestManualNamesOnlyWhatExists: every make target, arbiter command and example file
// the README and docs/ name is one the repository has, and the README's examples table
// lists every example.
func TestManualNamesOnlyWhatExists(t *testing.T) {
	root := repoRoot(t)
	pages := manual(t, root)

	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}

	// The commands are the headings of the reference that cmd/arbiter's
	// TestCommandReferenceIsCurrent holds to the command tree.
	commands := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### arbiter ([a-z ]+)$`).FindAllStringSubmatch(pages[filepath.Join("docs", "commands.md")], -1) {
		commands[m[1]] = true
	}
	if !commands["run"] || !commands["stats compare"] {
		t.Fatalf("docs/commands.md lists no commands (found %v): its generated reference is missing", commands)
	}

	// A command is named where a line of code starts with it, as one types it.
	makeRef := regexp.MustCompile(`^(?:\$ )?make ([a-z][a-z-]*)`)
	arbiterRef := regexp.MustCompile(`^(?:\$ )?(?:bin/)?arbiter ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?`)
	for name, page := range pages {
		// The generated reference quotes the commands' own help, prose included.
		page, _, _ = strings.Cut(page, "<!-- Generated from arbiter's command tree")
		for _, c := range code(page) {
			c = strings.TrimSpace(c)
			for _, m := range makeRef.FindAllStringSubmatch(c, -1) {
				if !targets[m[1]] {
					t.Errorf("%s names `make %s`, which the Makefile does not have", name, m[1])
				}
			}
			for _, m := range arbiterRef.FindAllStringSubmatch(c, -1) {
				if !commands[m[1]] {
					t.Errorf("%s names `arbiter %s`, which is no command (%q)", name, m[1], c)
					continue
				}
				if m[2] != "" && (m[1] == "stats" || m[1] == "image") && !commands[m[1]+" "+m[2]] {
					t.Errorf("%s names `arbiter %s %s`, which is no command (%q)", name, m[1], m[2], c)
				}
			}
		}
	}

	examples, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(root, "examples", "*", "*.yaml"))
	for _, p := range append(examples, more...) {
		rel, _ := filepath.Rel(root, p)
		if !strings.Contains(pages["README.md"], "| [`"+rel+"`]("+rel+") |") {
			t.Errorf("README.md's examples table has no row for %s", rel)
		}
	}
	for _, m := range regexp.MustCompile("\\| \\[`([^`]+)`\\]").FindAllStringSubmatch(pages["README.md"], -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("README.md's examples table lists %s: %v", m[1], err)
		}
	}
}

// exampleRows are the rows of the README's examples table: file → what it says.
func exampleRows(t *testing.T, readme string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| \\[`(examples/[^`]+\\.yaml)`\\]\\([^)]*\\) \\| (.*) \\|[^|]*\\|$").FindAllStringSubmatch(readme, -1) {
		rows[m[1]] = m[2]
	}
	if len(rows) == 0 {
		t.Fatal("README.md has no examples table")
	}
	return rows
}

var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "six": 6, "eight": 8}

// TestExampleFactsMatchTheirSpecs: what the README's examples table says about a spec is
// what the spec says: the pins it names (`NAME=VALUE`; "both arms pin" means every arm),
// its launches per arm, a sequential design's looks, and its model's padded heads.
func TestExampleFactsMatchTheirSpecs(t *testing.T) {
	root := repoRoot(t)
	rows := exampleRows(t, manual(t, root)["README.md"])
	pin := regexp.MustCompile("`([A-Z][A-Z0-9_]*)=([^`\\s]*)`")
	launches := regexp.MustCompile(`\b([0-9]+|one|two|three|four|six|eight) launch(?:es)? per arm\b`)
	looks := regexp.MustCompile("`looks: ([0-9]+)`")
	heads := regexp.MustCompile(`heads padded to ([0-9]+)`)
	checked := 0
	for file, says := range rows {
		if strings.HasPrefix(file, "examples/bisect/") {
			continue
		}
		spec, err := arms.Load(filepath.Join(root, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		all, err := spec.Expand()
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for _, m := range pin.FindAllStringSubmatch(says, -1) {
			checked++
			var with []string
			for _, a := range all {
				if a.Env[m[1]] == m[2] {
					with = append(with, a.Name)
				}
			}
			switch {
			case strings.Contains(says, "both arms pin") || strings.Contains(says, "every arm pins"):
				if len(with) != len(all) {
					t.Errorf("README.md says every arm of %s pins %s=%s; only %v of %d do", file, m[1], m[2], with, len(all))
				}
			case len(with) == 0:
				t.Errorf("README.md says %s pins %s=%s; no arm does", file, m[1], m[2])
			}
		}
		for _, m := range launches.FindAllStringSubmatch(says, -1) {
			checked++
			n, ok := numberWords[m[1]]
			if !ok {
				n, _ = strconv.Atoi(m[1])
			}
			if spec.Blocks != n {
				t.Errorf("README.md says %s runs %d launches per arm; the spec runs %d", file, n, spec.Blocks)
			}
		}
		for _, m := range heads.FindAllStringSubmatch(says, -1) {
			checked++
			if n, _ := strconv.Atoi(m[1]); spec.Engine.Model == nil || spec.Engine.Model.HeadDim != n {
				t.Errorf("README.md says %s serves its model with heads padded to %d; the spec's engine.model is %+v", file, n, spec.Engine.Model)
			}
		}
		for _, m := range looks.FindAllStringSubmatch(says, -1) {
			checked++
			n, _ := strconv.Atoi(m[1])
			if spec.Analysis.Sequential.Looks != n {
				t.Errorf("README.md says %s has looks: %d; the spec has %d", file, n, spec.Analysis.Sequential.Looks)
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d facts of the examples table checked: the patterns no longer match the table", checked)
	}
}

// TestManualNamesEveryTable: the database page and query's reference name exactly the
// tables the store's migrations create.
func TestManualNamesEveryTable(t *testing.T) {
	root := repoRoot(t)
	migrations, err := filepath.Glob(filepath.Join(root, "store", "migrations", "*.sql"))
	if err != nil || len(migrations) == 0 {
		t.Fatalf("no migrations under store/migrations (%v)", err)
	}
	created := map[string]bool{}
	for _, p := range migrations {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?(\w+)`).FindAllStringSubmatch(string(b), -1) {
			created[m[1]] = true
		}
		for _, m := range regexp.MustCompile(`(?i)DROP TABLE (?:IF EXISTS )?(\w+)`).FindAllStringSubmatch(string(b), -1) {
			delete(created, m[1])
		}
		for _, m := range regexp.MustCompile(`(?i)ALTER TABLE (\w+) RENAME TO (\w+)`).FindAllStringSubmatch(string(b), -1) {
			delete(created, m[1])
			created[m[2]] = true
		}
	}
	var want []string
	for name := range created {
		want = append(want, name)
	}
	sort.Strings(want)

	pages := manual(t, root)
	named := func(text string) []string {
		var got []string
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(text, -1) {
			if created[m[1]] && !slices.Contains(got, m[1]) {
				got = append(got, m[1])
			}
		}
		sort.Strings(got)
		return got
	}
	db := pages[filepath.Join("docs", "results-database.md")]
	tablesPara, _, _ := strings.Cut(db[strings.Index(db, "Tables:"):], "\n\n")
	if got := named(tablesPara); !slices.Equal(got, want) {
		t.Errorf("docs/results-database.md's tables are %v; the migrations create %v", got, want)
	}
	cmds := pages[filepath.Join("docs", "commands.md")]
	row := regexp.MustCompile("(?m)^\\| `arbiter query .*$").FindString(cmds)
	list, _, _ := strings.Cut(row[strings.Index(row, "read-only SQL over"):], ";")
	if got := named(list); !slices.Equal(got, want) {
		t.Errorf("docs/commands.md's query row names the tables %v; the migrations create %v", got, want)
	}
}
