package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newMigrateCmd) }

func newMigrateCmd(g *globals) *cobra.Command {
	return addDBFlag(&cobra.Command{
		Use:   "migrate",
		Short: "Upgrade the results database to this arbiter's schema",
		Long: `Upgrade a results database written by an older arbiter to this one's schema, keeping every
row. Commands that only read (ls, show, verdict, query, gc) refuse an older schema rather than
change the file behind your back; run and resume upgrade it themselves. An older arbiter can no
longer read the file afterwards. A SQLite file that is not an arbiter database is refused and
left as it was.`,
		Example: `  arbiter migrate --db results.db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, to, err := store.Migrate(g.dbPath())
			if errors.Is(err, store.ErrNotArbiterDatabase) {
				return withCode(exitUsage, err)
			}
			if err != nil {
				return err
			}
			if g.json {
				return json.NewEncoder(g.stdout).Encode(map[string]any{"database": g.dbPath(), "from": from, "to": to})
			}
			if from == to {
				fmt.Fprintf(g.stdout, "%s: schema version %d, already this arbiter's\n", g.dbPath(), to)
				return nil
			}
			fmt.Fprintf(g.stdout, "%s: upgraded from schema version %d to %d\n", g.dbPath(), from, to)
			return nil
		},
	}, g)
}
