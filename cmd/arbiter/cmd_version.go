package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/internal/version"
)

func init() { subcommands = append(subcommands, newVersionCmd) }

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print arbiter's version (the one stored with every experiment it runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.json {
				return json.NewEncoder(g.stdout).Encode(map[string]string{"version": version.String(), "go": runtime.Version()})
			}
			_, err := fmt.Fprintf(g.stdout, "arbiter %s (%s)\n", version.String(), runtime.Version())
			return err
		},
	}
}
