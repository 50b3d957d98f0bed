package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/arbiterlab/arbiter/store"
)

func init() { subcommands = append(subcommands, newQueryCmd) }

type queryOptions struct {
	format   string
	maxWidth int
}

func newQueryCmd(g *globals) *cobra.Command {
	var o queryOptions
	cmd := &cobra.Command{
		Use:   "query SQL",
		Short: "Run read-only SQL against the results database",
		Long: `Run read-only SQL against the results database and print the rows. SQL may hold several
statements separated by semicolons; each one's rows are printed in turn (table and csv: a blank
line between them; json: one JSON array per statement, one per line).
The database is opened read-only, and SQLite itself refuses, before anything runs, every
statement that would write: INSERT, UPDATE, DELETE, schema changes, ATTACH, VACUUM (INTO),
transactions, pragmas that set a value, load_extension. A query with one refused statement runs
none of them, and nothing is changed. Tables: experiments, arms, runs, sessions, turns, labels,
divergences, phases, leases, engine_processes, bisections, bisection_steps, server_metrics.`,
		Example: `  arbiter query "SELECT a.name, sum(s.corrupted) AS corrupted, count(*) AS sessions
                 FROM sessions s JOIN arms a ON a.id = s.arm_id GROUP BY a.name"
  arbiter query "SELECT count(*) FROM turns; SELECT count(*) FROM sessions" --format csv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := listFormat(g, o.format)
			if err != nil {
				return err
			}
			o.format = format
			return runQuery(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.format, "format", "table", "output format: table, csv or json")
	cmd.Flags().IntVar(&o.maxWidth, "max-width", 60, "in table format, cut cells longer than this (0: never)")
	return addDBFlag(cmd, g)
}

func runQuery(ctx context.Context, g *globals, sql string, o queryOptions) error {
	results, err := store.Query(ctx, g.dbPath(), sql)
	switch {
	case errors.Is(err, store.ErrNoStatement):
		return withCode(exitUsage, fmt.Errorf("query: %w (try \"SELECT * FROM experiments\")", err))
	case errors.Is(err, store.ErrQueryRefused):
		return withCode(exitUsage, err)
	case err != nil:
		return err
	}
	for i, rs := range results {
		if i > 0 && o.format != "json" {
			fmt.Fprintln(g.stdout)
		}
		var err error
		switch o.format {
		case "json":
			err = writeJSONRows(g.stdout, rs.Columns, rs.Rows)
		case "csv":
			err = writeCSVRows(g.stdout, rs.Columns, rs.Rows)
		default:
			err = writeTableRows(g.stdout, rs.Columns, rs.Rows, o.maxWidth)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func writeJSONRows(w io.Writer, cols []string, table [][]any) error {
	enc := json.NewEncoder(w)
	out := make([]map[string]any, 0, len(table))
	for _, row := range table {
		m := make(map[string]any, len(cols))
		for i, c := range cols {
			m[c] = row[i]
		}
		out = append(out, m)
	}
	return enc.Encode(out)
}

func writeCSVRows(w io.Writer, cols []string, table [][]any) error {
	cw := csv.NewWriter(w)
	cw.Write(cols)
	for _, row := range table {
		rec := make([]string, len(row))
		for i, v := range row {
			rec[i] = cell(v)
		}
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

func writeTableRows(w io.Writer, cols []string, table [][]any, maxWidth int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, row := range table {
		rec := make([]string, len(row))
		for i, v := range row {
			rec[i] = cut(oneLine(cell(v)), maxWidth)
		}
		fmt.Fprintln(tw, strings.Join(rec, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(table) == 0 {
		_, err := fmt.Fprintln(w, "(no rows)")
		return err
	}
	return nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return x
	case float64:
		return fmt.Sprintf("%.6g", x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
}

func cut(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
