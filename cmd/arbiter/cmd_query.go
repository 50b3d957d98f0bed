package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arbiterlab/arbiter/internal/bytesize"
	"github.com/arbiterlab/arbiter/internal/ui"
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
	timeout  time.Duration
	maxRows  int64
	maxBytes sizeFlag
}

func newQueryCmd(g *globals) *cobra.Command {
	o := queryOptions{maxBytes: store.DefaultQueryMaxBytes}
	cmd := &cobra.Command{
		Use:   "query SQL",
		Short: "Run read-only SQL against the results database",
		Long: `Run read-only SQL against the results database and print the rows. SQL may hold several
statements separated by semicolons; each one's rows are printed in turn (table and csv: a blank
line between them; json: one JSON array per statement, one per line).
The database is opened read-only, and SQLite itself refuses, before anything runs, every
statement that would write: INSERT, UPDATE, DELETE, schema changes, ATTACH, VACUUM (INTO),
transactions, pragmas that set a value, load_extension. A query with one refused statement runs
none of them, and nothing is changed.
` + ui.Wrap("Tables: "+strings.Join(store.Tables, ", ")+".", "", 96) + `
A query is bounded: it is interrupted after --timeout, stops past --max-rows rows (all its
statements together), and --max-bytes bounds every single value (SQLite refuses to make a longer
one: zeroblob(1e9) fails at once) and the text and blobs of all its rows together. Rows are
printed as they are read: csv and json at once, a table once its statement has ended (its
columns are aligned to its widest cells), so a query that reaches a limit has printed the rows
before it (a json array is then left open) and exits 1 saying which limit it reached.`,
		Example: queryExamples(),
		Args:    cobra.ExactArgs(1),
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
	cmd.Flags().DurationVar(&o.timeout, "timeout", store.DefaultQueryTimeout, "interrupt the query after this long (0: no limit)")
	cmd.Flags().Int64Var(&o.maxRows, "max-rows", store.DefaultQueryMaxRows, "stop past this many rows, all statements together (0: no limit)")
	cmd.Flags().Var(&o.maxBytes, "max-bytes", "refuse a value longer than this, and stop past this much text and blobs in all rows together, e.g. 64MiB or 1GiB (0: no limit)")
	return addDBFlag(cmd, g)
}

// queryLimitFlags names the flag that raises each limit of a query.
var queryLimitFlags = map[store.QueryLimit]string{
	store.LimitTime: "--timeout", store.LimitRows: "--max-rows", store.LimitBytes: "--max-bytes",
}

func runQuery(ctx context.Context, g *globals, sql string, o queryOptions) error {
	if o.timeout < 0 || o.maxRows < 0 {
		return withCode(exitUsage, errors.New("query: --timeout and --max-rows take 0 (no limit) or more"))
	}
	// On the command line 0 is no limit; to the store it is the default.
	noLimitIfZero := func(n int64) int64 {
		if n == 0 {
			return -1
		}
		return n
	}
	lim := store.QueryLimits{
		Timeout:  time.Duration(noLimitIfZero(int64(o.timeout))),
		MaxRows:  noLimitIfZero(o.maxRows),
		MaxBytes: noLimitIfZero(int64(o.maxBytes)),
	}
	var w queryWriter
	switch o.format {
	case "json":
		w = &jsonRowWriter{out: bufio.NewWriter(g.stdout)}
	case "csv":
		w = &csvRowWriter{out: bufio.NewWriter(g.stdout)}
	default:
		w = &tableRowWriter{out: g.stdout, maxWidth: o.maxWidth}
	}
	err := store.QueryTo(ctx, g.dbPath(), sql, lim, w)
	if ferr := w.finish(err == nil); err == nil {
		err = ferr
	}
	var le *store.QueryLimitError
	switch {
	case errors.Is(err, store.ErrNoStatement):
		return withCode(exitUsage, fmt.Errorf("query: %w (try %q)", err, store.FirstQuery))
	case errors.Is(err, store.ErrQueryRefused):
		return withCode(exitUsage, err)
	case errors.As(err, &le):
		return fmt.Errorf("%w; narrow the query (WHERE, LIMIT), or raise the limit with %s (0: no limit)", err, queryLimitFlags[le.Limit])
	}
	return err
}

// queryWriter prints a query's rows as the store hands them on; finish ends the output,
// completely when the query ran to its end.
type queryWriter interface {
	store.RowWriter
	finish(complete bool) error
}

// jsonRowWriter prints each statement as one JSON array of objects, a line each, row by
// row; an array is closed only when its statement ended, so that a query stopped at a
// limit never reads as a whole result.
type jsonRowWriter struct {
	out  *bufio.Writer
	cols []string
	open bool
	rows int
}

func (j *jsonRowWriter) Statement(_ string, cols []string) error {
	if j.open {
		j.out.WriteString("]\n")
	}
	j.cols, j.open, j.rows = cols, true, 0
	return j.out.WriteByte('[')
}

func (j *jsonRowWriter) Row(row []any) error {
	m := make(map[string]any, len(j.cols))
	for i, c := range j.cols {
		m[c] = row[i]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if j.rows > 0 {
		j.out.WriteByte(',')
	}
	j.rows++
	_, err = j.out.Write(b)
	return err
}

func (j *jsonRowWriter) finish(complete bool) error {
	if j.open && complete {
		j.out.WriteString("]\n")
	}
	return j.out.Flush()
}

// csvRowWriter prints each statement's columns and rows, a blank line between statements.
type csvRowWriter struct {
	out        *bufio.Writer
	cw         *csv.Writer
	statements int
}

func (c *csvRowWriter) Statement(_ string, cols []string) error {
	if c.cw == nil {
		c.cw = csv.NewWriter(c.out)
	}
	if c.statements++; c.statements > 1 {
		c.cw.Flush()
		c.out.WriteByte('\n')
	}
	return c.cw.Write(cols)
}

func (c *csvRowWriter) Row(row []any) error {
	rec := make([]string, len(row))
	for i, v := range row {
		rec[i] = cell(v)
	}
	return c.cw.Write(rec)
}

func (c *csvRowWriter) finish(bool) error {
	if c.cw != nil {
		c.cw.Flush()
		if err := c.cw.Error(); err != nil {
			return err
		}
	}
	return c.out.Flush()
}

// tableRowWriter prints each statement as an aligned table once the statement has
// ended (or stopped): aligning needs its widest cells, so its rows wait, as cut cells,
// within the query's row and size limits. A statement stopped before its first row
// prints nothing, not "(no rows)".
type tableRowWriter struct {
	out      io.Writer
	maxWidth int
	cols     []string          // the current statement's
	pending  bool              // a statement began and has printed nothing yet
	tw       *tabwriter.Writer // from the current statement's first row
	printed  int               // statements printed
}

func (t *tableRowWriter) Statement(_ string, cols []string) error {
	if err := t.endStatement(true); err != nil {
		return err
	}
	t.cols, t.pending = cols, true
	return nil
}

func (t *tableRowWriter) Row(row []any) error {
	if t.tw == nil {
		t.tw = t.start()
	}
	rec := make([]string, len(row))
	for i, v := range row {
		rec[i] = cut(oneLine(cell(v)), t.maxWidth)
	}
	_, err := fmt.Fprintln(t.tw, strings.Join(rec, "\t"))
	return err
}

// start begins a statement's table: a blank line after the one before, and the header.
func (t *tableRowWriter) start() *tabwriter.Writer {
	if t.printed++; t.printed > 1 {
		fmt.Fprintln(t.out)
	}
	tw := tabwriter.NewWriter(t.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.cols, "\t"))
	t.pending = false
	return tw
}

// endStatement prints the current statement's table; one without rows says so when it
// ran to its end.
func (t *tableRowWriter) endStatement(complete bool) error {
	tw := t.tw
	t.tw = nil
	switch {
	case tw != nil:
		return tw.Flush()
	case t.pending && complete:
		if err := t.start().Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintln(t.out, "(no rows)")
		return err
	}
	return nil
}

func (t *tableRowWriter) finish(complete bool) error { return t.endStatement(complete) }

// sizeFlag is a flag's size in bytes: a whole number, or one with a unit such as 512KiB,
// 64MiB, 1GiB (or KB, MB, GB in powers of 1000).
type sizeFlag int64

func (b *sizeFlag) String() string { return bytesize.Compact(int64(*b)) }

func (b *sizeFlag) Set(s string) error {
	n, ok := bytesize.Parse(s)
	if !ok {
		return fmt.Errorf("want bytes as a number, or with a unit such as 64MiB or 1GiB")
	}
	*b = sizeFlag(n)
	return nil
}

func (b *sizeFlag) Type() string { return "size" }

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

// queryExamples is query's help's examples: the store's example statements as one types them.
func queryExamples() string {
	var lines []string
	for _, q := range store.ExampleQueries {
		line := fmt.Sprintf("  arbiter query %q", q.SQL)
		if q.Flags != "" {
			line += " " + q.Flags
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
