package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeDemoOutput is the output the README shows for make demo: the first fenced block
// without a language after the set-up commands.
func readmeDemoOutput(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "`make demo` then runs")
	if !ok {
		t.Fatal("README.md no longer says what make demo runs")
	}
	_, rest, ok = strings.Cut(rest, "\n```\n")
	block, _, ok2 := strings.Cut(rest, "\n```\n")
	if !ok || !ok2 {
		t.Fatal("README.md shows no output of make demo")
	}
	return strings.Split(block, "\n")
}

// TestDemoPrintsWhatTheREADMEShows runs the demo's spec as make demo does and compares
// what it prints with the README: the same decision, word for word and count for count;
// only the wall time and the database's id in the verdict's name may differ.
func TestDemoPrintsWhatTheREADMEShows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo: eight launches of refserve")
	}
	buildRefserve(t)
	want := readmeDemoOutput(t)
	db := filepath.Join(t.TempDir(), "arbiter.db")
	code, stdout, stderr := runCLI(t, "run", filepath.Join("..", "..", "examples", "quickstart-launches.yaml"), "--db", db)
	if code != exitOK {
		t.Fatalf("the demo exited %d\n%s\n%s", code, stdout, stderr)
	}
	got := strings.Split(strings.TrimSpace(stdout), "\n")
	first := regexp.MustCompile(`^experiment 1 \(bf16-index-k-launches\): done in [0-9.ms]+$`)
	if !first.MatchString(want[0]) || !first.MatchString(got[0]) {
		t.Errorf("first line: README %q, demo %q", want[0], got[0])
	}
	last := regexp.MustCompile(`^verdict: (.*/)?verdicts/bf16-index-k-launches-[0-9a-f]{8}-1\.md$`)
	if !last.MatchString(want[len(want)-1]) || !last.MatchString(got[len(got)-1]) {
		t.Errorf("last line: README %q, demo %q", want[len(want)-1], got[len(got)-1])
	}
	words := func(lines []string) string { return strings.Join(strings.Fields(strings.Join(lines, " ")), " ") }
	if w, g := words(want[1:len(want)-1]), words(got[1:len(got)-1]); w != g {
		t.Errorf("the demo's decision differs from the README's:\nREADME: %s\ndemo:   %s", w, g)
	}
}
