package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
		Short: "Run a read-only SQL query against the results database",
		Long: `Run one read-only SQL statement against the results database and print the rows.
The database is opened read-only: statements that would change it are refused and change nothing.
Tables: experiments, arms, runs, sessions, turns, labels, phases.`,
		Example: `  arbiter query "SELECT a.name, sum(s.corrupted) AS corrupted, count(*) AS sessions
                 FROM sessions s JOIN arms a ON a.id = s.arm_id GROUP BY a.name"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.json {
				o.format = "json"
			}
			return runQuery(cmd.Context(), g, args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.format, "format", "table", "output format: table, csv or json")
	cmd.Flags().IntVar(&o.maxWidth, "max-width", 60, "in table format, cut cells longer than this (0: never)")
	return cmd
}

// readOnlyVerbs are the statements arbiter query runs; everything else is refused before
// it reaches the (read-only) connection, which would refuse it too.
var readOnlyVerbs = map[string]bool{"SELECT": true, "WITH": true, "EXPLAIN": true, "VALUES": true, "PRAGMA": true}

func runQuery(ctx context.Context, g *globals, sql string, o queryOptions) error {
	switch o.format {
	case "table", "csv", "json":
	default:
		return withCode(exitUsage, fmt.Errorf("--format %q: want table, csv or json", o.format))
	}
	verb := strings.ToUpper(firstWord(sql))
	switch {
	case verb == "":
		return withCode(exitUsage, fmt.Errorf("query: no SQL statement (try \"SELECT * FROM experiments\")"))
	case !readOnlyVerbs[verb]:
		return withCode(exitUsage, fmt.Errorf("query refused: arbiter query is read-only and %s would change the database; nothing was changed", verb))
	case verb == "PRAGMA" && strings.Contains(sql, "="):
		// PRAGMA x = y sets a value; on a read-only connection some fail oddly.
		return withCode(exitUsage, fmt.Errorf("query refused: arbiter query is read-only and this PRAGMA sets a value; nothing was changed"))
	}
	db, err := store.OpenReadOnly(g.dbPath())
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryxContext(ctx, sql)
	if err != nil {
		if isReadOnlyError(err) {
			return withCode(exitUsage, fmt.Errorf("query refused: arbiter query is read-only; nothing was changed (%v)", err))
		}
		return fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	var table [][]any
	for rows.Next() {
		vals, err := rows.SliceScan()
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
		table = append(table, vals)
	}
	if err := rows.Err(); err != nil {
		if isReadOnlyError(err) {
			return withCode(exitUsage, fmt.Errorf("query refused: arbiter query is read-only; nothing was changed (%v)", err))
		}
		return fmt.Errorf("query: %w", err)
	}
	switch o.format {
	case "json":
		return writeJSONRows(g.stdout, cols, table)
	case "csv":
		return writeCSVRows(g.stdout, cols, table)
	}
	return writeTableRows(g.stdout, cols, table, o.maxWidth)
}

func firstWord(sql string) string {
	s := strings.TrimSpace(sql)
	// Skip leading comments so that "-- note\nSELECT" is a SELECT.
	for {
		switch {
		case strings.HasPrefix(s, "--"):
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = strings.TrimSpace(s[i+1:])
				continue
			}
			return ""
		case strings.HasPrefix(s, "/*"):
			if i := strings.Index(s, "*/"); i >= 0 {
				s = strings.TrimSpace(s[i+2:])
				continue
			}
			return ""
		}
		break
	}
	s = strings.TrimLeft(s, "(")
	end := strings.IndexFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') })
	if end < 0 {
		return s
	}
	return s[:end]
}

func isReadOnlyError(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "readonly") || strings.Contains(msg, "read-only") || strings.Contains(msg, "query_only")
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
