package verdict

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
)

// damageTables are the tables a damaged record may be damaged in.
var damageTables = []string{"experiments", "arms", "runs", "sessions", "turns", "labels", "phases",
	"divergences", "server_metrics", "pin_checks", "detector_runs"}

// damageValues are what a damaged cell may hold: nothing, numbers out of any range,
// text where a number belongs and numbers where text does.
var damageValues = []any{nil, -1, 0, 1, 2, 1e300, -1e300, 3.5, "garbage", "", "NaN", "-Inf", "{", strings.Repeat("x", 1<<14), []byte{0xff, 0xfe, 0x00}, "\x1b[2J\n"}

// damage applies ops to the database behind db, four bytes an op: the table and whether
// to delete the row or change one cell of it, the column, the value, the row. An op the
// database refuses (a constraint) is skipped, as a damaged file would not hold it.
func damage(t *testing.T, db *sqlx.DB, ops []byte) []string {
	t.Helper()
	var path string
	rows, err := db.Queryx("PRAGMA database_list")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err == nil && name == "main" {
			path = file
		}
	}
	rows.Close()
	w, err := sqlx.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var done []string
	for len(ops) >= 4 {
		op := ops[:4]
		ops = ops[4:]
		table := damageTables[int(op[0]>>1)%len(damageTables)]
		var n int
		if err := w.Get(&n, "SELECT count(*) FROM "+table); err != nil || n == 0 {
			continue
		}
		row := fmt.Sprintf("rowid = (SELECT rowid FROM %s ORDER BY rowid LIMIT 1 OFFSET %d)", table, int(op[3])%n)
		if op[0]&1 == 1 && op[1]%4 == 0 {
			if _, err := w.Exec("DELETE FROM " + table + " WHERE " + row); err == nil {
				done = append(done, fmt.Sprintf("delete a row of %s", table))
			}
			continue
		}
		var cols []string
		if err := w.Select(&cols, "SELECT name FROM pragma_table_info(?)", table); err != nil || len(cols) == 0 {
			continue
		}
		col := cols[int(op[1])%len(cols)]
		v := damageValues[int(op[2])%len(damageValues)]
		if _, err := w.Exec(fmt.Sprintf("UPDATE %s SET %q = ? WHERE %s", table, col, row), v); err == nil {
			done = append(done, fmt.Sprintf("%s.%s = %.20s", table, col, fmt.Sprint(v)))
		}
	}
	return done
}

// judgeDamaged records a simulated experiment, damages it and judges it: the verdict is
// built or refused with an error that says why, and a verdict built renders its markdown,
// its JSON summary, its headline, show's decisions and every gate, without a panic.
func judgeDamaged(t *testing.T, seed uint64, ops []byte) {
	db, id, what := simulated(t, seed)
	done := damage(t, db, ops)
	t.Logf("damaged by %q", done)
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("seed %d (%s), damaged by %q: judging panics: %v", seed, what, done, r)
		}
	}()
	v, err := Build(context.Background(), db, id)
	if err != nil {
		// The refusal says what it was reading, in one bounded line: the damaged value
		// it quotes may be megabytes long.
		t.Logf("refused: %v", err)
		if msg := err.Error(); !strings.Contains(msg, "experiment") || len(msg) > 1024 || strings.ContainsAny(msg, "\n\x1b") {
			t.Errorf("seed %d (%s), damaged by %q: the refusal does not say, in one short line, what it read: %.2000q", seed, what, done, msg)
		}
		return
	}
	var b bytes.Buffer
	if err := v.Markdown(&b); err != nil {
		t.Errorf("seed %d (%s), damaged by %q: the markdown: %v", seed, what, done, err)
	}
	if _, err := json.Marshal(v.Summary()); err != nil {
		t.Errorf("seed %d (%s), damaged by %q: the JSON summary: %v", seed, what, done, err)
	}
	_ = v.Headline()
	for i := range v.Arms {
		_ = v.DecisionWords(i)
	}
	for _, g := range Gates() {
		v.CheckGate(g, GateOptions{})
	}
}

// TestVerdictOfDamagedRecords damages simulated records at random, a few cells and rows
// each, and judges them (FuzzVerdictOfDamagedRecords searches further).
func TestVerdictOfDamagedRecords(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 12
	}
	for seed := range uint64(n) {
		rng := rand.New(rand.NewPCG(seed, 0xda3a9e))
		ops := make([]byte, 4*(1+rng.IntN(8)))
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { judgeDamaged(t, seed, ops) })
	}
}

// FuzzVerdictOfDamagedRecords searches seeds and damage for a record whose verdict
// panics or cannot be written.
func FuzzVerdictOfDamagedRecords(f *testing.F) {
	for seed := range uint64(6) {
		f.Add(seed, []byte{8, 3, 0, 0, 9, 4, 6, 1, 12, 8, 8, 2})
	}
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) { judgeDamaged(t, seed, ops) })
}
