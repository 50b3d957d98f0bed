package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated part of docs/commands.md from the command tree")

// generatedMark opens the part of docs/commands.md that TestCommandReferenceIsCurrent
// writes; everything from it to the end of the file comes from the command tree.
const generatedMark = "<!-- Generated from arbiter's command tree: `make docs` rewrites everything below. -->"

// commandReference is the reference of every command arbiter has, as its --help says
// it: usage, description and the command's own flags, then its subcommands in turn.
func commandReference(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString(generatedMark + "\n\n## Every command\n\n")
	b.WriteString("Flags every command takes:\n\n```\n")
	b.WriteString(root.PersistentFlags().FlagUsagesWrapped(100))
	b.WriteString("```\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || !sub.IsAvailableCommand() && !sub.HasSubCommands() {
				continue
			}
			sub.InheritedFlags() // merges --json and --log-level in, as running the command does
			fmt.Fprintf(&b, "\n### %s\n\n%s.\n\n```\n", sub.CommandPath(), strings.TrimSuffix(sub.Short, "."))
			if sub.HasAvailableSubCommands() {
				fmt.Fprintf(&b, "Usage: %s COMMAND\n", sub.CommandPath())
			} else {
				fmt.Fprintf(&b, "Usage: %s\n", sub.UseLine())
			}
			if sub.Long != "" {
				fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(sub.Long))
			}
			if sub.Example != "" {
				fmt.Fprintf(&b, "\nExamples:\n%s\n", sub.Example)
			}
			if fl := sub.LocalNonPersistentFlags(); fl.HasAvailableFlags() {
				fmt.Fprintf(&b, "\nFlags:\n%s", fl.FlagUsagesWrapped(100))
			}
			b.WriteString("```\n")
			walk(sub)
		}
	}
	walk(root)
	return b.String()
}

// TestCommandReferenceIsCurrent: docs/commands.md ends with the reference the command
// tree gives, so a flag or command added, renamed or explained anew changes the page
// with it (-update-docs, or make docs, rewrites it).
func TestCommandReferenceIsCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "commands.md")
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hand, _, found := bytes.Cut(page, []byte(generatedMark))
	if !found {
		t.Fatalf("%s lacks the line %q that starts its generated part", path, generatedMark)
	}
	want := string(hand) + commandReference(newRoot(&globals{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}))
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(page) != want {
		t.Errorf("%s is not what the command tree says: run make docs (go test ./cmd/arbiter -run TestCommandReferenceIsCurrent -update-docs)", path)
	}
}

// The reference names every command that runs, with its usage line and its own flags.
func TestCommandReferenceNamesEveryCommand(t *testing.T) {
	root := newRoot(&globals{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	ref := commandReference(root)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden {
				continue
			}
			if !strings.Contains(ref, "\n### "+sub.CommandPath()+"\n") {
				t.Errorf("the reference lacks %s", sub.CommandPath())
			}
			if !sub.HasAvailableSubCommands() && !strings.Contains(ref, "Usage: "+sub.UseLine()+"\n") {
				t.Errorf("the reference lacks %s's usage %q", sub.CommandPath(), sub.UseLine())
			}
			sub.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(ref, "--"+f.Name) {
					t.Errorf("the reference lacks %s --%s", sub.CommandPath(), f.Name)
				}
			})
			walk(sub)
		}
	}
	walk(root)
}
