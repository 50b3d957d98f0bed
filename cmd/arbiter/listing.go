package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// listFormat is the --format of a command that prints a list or a table: --json makes it
// json, and anything but table, csv or json is bad usage.
func listFormat(g *globals, format string) (string, error) {
	if g.json {
		format = "json"
	}
	switch format {
	case "table", "csv", "json":
		return format, nil
	}
	return "", withCode(exitUsage, fmt.Errorf("--format %q: want table, csv or json", format))
}

// listing is what a list command (ls, bisect --list) prints, a row per item: with -q the
// ids alone; as JSON the items themselves (an empty list, not null, when there are none);
// as CSV the columns' names and cells; as a table the same columns, aligned, with the
// table's own cells (dashes for nothing, numbers people read).
type listing[T any] struct {
	items     []T
	id        func(T) int64
	columns   []string // CSV's header
	tableHead []string
	csvRow    func(T) []string
	tableRow  func(T) []string // nil: csvRow
}

func (l listing[T]) write(g *globals, format string, quiet bool) error {
	switch {
	case quiet:
		for _, it := range l.items {
			fmt.Fprintln(g.stdout, l.id(it))
		}
		return nil
	case format == "json":
		items := l.items
		if items == nil {
			items = []T{}
		}
		return json.NewEncoder(g.stdout).Encode(items)
	case format == "csv":
		cw := csv.NewWriter(g.stdout)
		cw.Write(l.columns)
		for _, it := range l.items {
			cw.Write(l.csvRow(it))
		}
		cw.Flush()
		return cw.Error()
	}
	row := l.tableRow
	if row == nil {
		row = l.csvRow
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(l.tableHead, "\t"))
	for _, it := range l.items {
		fmt.Fprintln(tw, strings.Join(row(it), "\t"))
	}
	return tw.Flush()
}

// toTheSecond is a stored timestamp (RFC 3339 to the nanosecond) as lists print it for
// scripts: RFC 3339 in UTC to the second; a timestamp it cannot read is printed as stored.
func toTheSecond(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.UTC().Format(time.RFC3339)
}
