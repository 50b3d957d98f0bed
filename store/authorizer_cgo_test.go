//go:build cgo

package store

import (
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// The authorizer's codes are written out (the driver exports them only with cgo); they
// must be SQLite's own.
func TestAuthorizerCodesAreSQLites(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, its int
	}{
		{"SQLITE_OK", authOK, sqlite3.SQLITE_OK}, {"SQLITE_DENY", authDeny, sqlite3.SQLITE_DENY},
		{"SQLITE_DELETE", authDelete, sqlite3.SQLITE_DELETE}, {"SQLITE_INSERT", authInsert, sqlite3.SQLITE_INSERT},
		{"SQLITE_PRAGMA", authPragma, sqlite3.SQLITE_PRAGMA}, {"SQLITE_READ", authRead, sqlite3.SQLITE_READ},
		{"SQLITE_SELECT", authSelect, sqlite3.SQLITE_SELECT}, {"SQLITE_TRANSACTION", authTransaction, sqlite3.SQLITE_TRANSACTION},
		{"SQLITE_UPDATE", authUpdate, sqlite3.SQLITE_UPDATE}, {"SQLITE_ATTACH", authAttach, sqlite3.SQLITE_ATTACH},
		{"SQLITE_DETACH", authDetach, sqlite3.SQLITE_DETACH}, {"SQLITE_FUNCTION", authFunction, sqlite3.SQLITE_FUNCTION},
		{"SQLITE_SAVEPOINT", authSavepoint, sqlite3.SQLITE_SAVEPOINT},
	} {
		if c.ours != c.its {
			t.Errorf("%s: ours %d, SQLite's %d", c.name, c.ours, c.its)
		}
	}
	// SQLITE_RECURSIVE is not exported by the driver; WITH RECURSIVE working in
	// TestQueryAllowsReadOnlyPragmasAndFunctions shows 33 is right.
}
