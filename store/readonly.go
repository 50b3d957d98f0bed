package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jmoiron/sqlx"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// applicationID marks a SQLite file as arbiter's results database ("ARBT" in the
// header's application id field), set by migration 005.
const applicationID = 0x41524254

// applicationIDSince is the schema version (007_lease.sql) from which every arbiter file
// carries applicationID.
const applicationIDSince = 7

var (
	// ErrNotArbiterDatabase reports a file that is not an arbiter results database:
	// another program's SQLite file, or an empty one where a database was expected.
	ErrNotArbiterDatabase = errors.New("not an arbiter database")
	// ErrOldSchema reports a database written by an older arbiter, which readers refuse
	// until `arbiter migrate` (or any run or resume on it) upgrades it.
	ErrOldSchema = errors.New("schema older than this arbiter's")
)

// readOnlyDriver opens connections whose every statement passes authorizeRead: on top of
// mode=ro and query_only, SQLite itself refuses at prepare time whatever would write a
// file, this one or any other (ATTACH, VACUUM INTO), or load code.
const readOnlyDriver = "sqlite3_arbiter_readonly"

func init() {
	sql.Register(readOnlyDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		// Pages are read through a memory map, as the writing store reads them (see
		// MmapSize); set before the authorizer, which refuses a PRAGMA that sets a value.
		if _, err := c.Exec(fmt.Sprintf("PRAGMA mmap_size = %d", MmapSize), nil); err != nil {
			return err
		}
		c.RegisterAuthorizer(func(action int, arg1, arg2, _ string) int {
			ok, _ := authorizeRead(action, arg1, arg2)
			return authResult(ok)
		})
		return nil
	}})
}

// The authorizer's action codes and answers, as SQLite's C API defines them
// (https://www.sqlite.org/c3ref/c_alter_table.html); written out because the driver
// exports them only in cgo builds.
const (
	authOK   = 0 // SQLITE_OK
	authDeny = 1 // SQLITE_DENY

	authDelete      = 9  // SQLITE_DELETE
	authInsert      = 18 // SQLITE_INSERT
	authPragma      = 19 // SQLITE_PRAGMA
	authRead        = 20 // SQLITE_READ
	authSelect      = 21 // SQLITE_SELECT
	authTransaction = 22 // SQLITE_TRANSACTION
	authUpdate      = 23 // SQLITE_UPDATE
	authAttach      = 24 // SQLITE_ATTACH
	authDetach      = 25 // SQLITE_DETACH
	authFunction    = 31 // SQLITE_FUNCTION
	authSavepoint   = 32 // SQLITE_SAVEPOINT
	authRecursive   = 33 // SQLITE_RECURSIVE
)

func authResult(ok bool) int {
	if ok {
		return authOK
	}
	return authDeny
}

// readPragmas are the pragmas a reader may run without an argument: each only reports.
// Pragmas that act when run bare (wal_checkpoint, optimize, shrink_memory,
// incremental_vacuum) are not among them.
var readPragmas = map[string]bool{
	"application_id": true, "user_version": true, "schema_version": true, "data_version": true,
	"page_count": true, "page_size": true, "freelist_count": true, "max_page_count": true,
	"encoding": true, "journal_mode": true, "foreign_keys": true, "query_only": true,
	"auto_vacuum": true, "busy_timeout": true, "cache_size": true, "synchronous": true,
	"database_list": true, "table_list": true, "function_list": true, "module_list": true,
	"pragma_list": true, "collation_list": true, "compile_options": true,
	"integrity_check": true, "quick_check": true, "foreign_key_check": true,
}

// readPragmasWithArgument take a table, index or count as their argument and still only
// report; for every other pragma an argument sets a value.
var readPragmasWithArgument = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true, "index_info": true,
	"index_xinfo": true, "foreign_key_list": true, "foreign_key_check": true, "integrity_check": true,
	"quick_check": true,
}

// deniedFunctions load code or touch files outside the database; most builds lack all
// but load_extension, and none of them may run in a reader that has them.
var deniedFunctions = map[string]bool{
	"load_extension": true, "readfile": true, "writefile": true, "edit": true, "fts3_tokenizer": true,
	"zipfile": true, "sqlar_compress": true, "sqlar_uncompress": true, "lsmode": true,
}

// authorizeRead is the read-only policy: reading tables, selecting, recursive common
// table expressions, functions other than deniedFunctions and pragmas that only
// report. Everything else (writes, schema changes, ATTACH and DETACH, which VACUUM INTO
// also needs, transactions, pragmas that set a value) is denied; why says what was.
func authorizeRead(action int, arg1, arg2 string) (ok bool, why string) {
	switch action {
	case authSelect, authRead, authRecursive:
		return true, ""
	case authFunction:
		if deniedFunctions[strings.ToLower(arg2)] {
			return false, "the function " + arg2 + " reaches outside the database"
		}
		return true, ""
	case authPragma:
		name := strings.ToLower(arg1)
		if arg2 == "" && readPragmas[name] || arg2 != "" && readPragmasWithArgument[name] {
			return true, ""
		}
		if arg2 != "" {
			return false, "PRAGMA " + arg1 + " = " + arg2 + " sets a value"
		}
		return false, "PRAGMA " + arg1 + " may change the file"
	case authAttach:
		return false, "ATTACH opens (or creates) another file"
	case authDetach:
		return false, "DETACH changes the connection"
	case authInsert, authUpdate, authDelete:
		if strings.HasPrefix(strings.ToLower(arg1), "sqlite_") {
			return false, "it changes the schema"
		}
		return false, "it writes rows"
	case authTransaction, authSavepoint:
		return false, "transactions have no place in a read"
	}
	return false, "it would change the database"
}

// OpenExisting opens the results database at path for writing, as Open does, but never
// creates one: a command that continues recorded work (a resume) needs the file to be
// there.
func OpenExisting(path string, o Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no results database at %s (give --db): %w", path, err)
	}
	return Open(path, o)
}

// OpenReadOnly opens an existing results database for reading only: the file is opened
// read-only (mode=ro, query_only), and every statement passes authorizeRead, so that no
// statement through the connection can change this file or write another. A file of
// another program, an empty one and one of another schema version are refused
// (ErrNotArbiterDatabase, ErrOldSchema), so that readers never fail later with "no
// such column".
func OpenReadOnly(path string) (*sqlx.DB, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open %s: no results database there (run an experiment first, or give --db): %w", path, err)
	}
	db, err := openRead(path)
	if err != nil {
		return nil, err
	}
	v, err := identify(context.Background(), db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	switch {
	case v == 0:
		db.Close()
		return nil, fmt.Errorf("open %s: %w (an empty file; run an experiment first)", path, ErrNotArbiterDatabase)
	case v > SchemaVersion:
		db.Close()
		return nil, fmt.Errorf("open %s: schema version %d is newer than this arbiter's %d", path, v, SchemaVersion)
	case v < SchemaVersion:
		db.Close()
		return nil, fmt.Errorf("open %s: %w: the file has schema version %d, this arbiter reads version %d; upgrade it with `arbiter migrate --db %s` (an older arbiter can no longer read it then)",
			path, ErrOldSchema, v, SchemaVersion, path)
	}
	return db, nil
}

// Identify checks, reading only, that the file at path is an arbiter results database
// (of any schema version: Open migrates it), an empty file, or no file at all, so that a
// run can refuse another program's database before it checks anything else. Open
// checks the same again.
func Identify(path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := openRead(path)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := identify(context.Background(), db); err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	return nil
}

// openRead opens the file at path through readOnlyDriver (mode=ro, query_only). SQLite
// reads a WAL-mode database through its -shm file, which it creates beside the database
// when it is missing: in a directory it cannot write (a read-only file system, a
// snapshot, an archive), that fails. With no -wal file there (or an empty one), nothing
// is waiting to be checkpointed and no writer has the database open, so the file alone
// is the whole database and is opened immutable=1, which needs no -shm. With a -wal that
// holds pages and no -shm, reading the file alone would silently lose those pages: the
// error says so.
func openRead(path string) (*sqlx.DB, error) {
	// The database file itself: a reason to fail here is the real one ("permission
	// denied"), not what SQLite says after trying its side files.
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f.Close()
	db, err := pingRead("file:" + escapePath(path) + "?mode=ro&_busy_timeout=10000&_query_only=1")
	if err == nil {
		return db, nil
	}
	var se sqlite3.Error
	dir := filepath.Dir(path)
	if errors.As(err, &se) && se.Code == sqlite3.ErrNotADB {
		return nil, fmt.Errorf("open %s: %w: SQLite says %v", path, ErrNotArbiterDatabase, err)
	}
	if !errors.As(err, &se) || se.Code != sqlite3.ErrCantOpen || dirWritable(dir) {
		return nil, fmt.Errorf("open %s read-only: %w", path, err)
	}
	wal, walErr := os.Stat(path + "-wal")
	_, shmErr := os.Stat(path + "-shm")
	switch {
	case errors.Is(walErr, fs.ErrNotExist) || walErr == nil && wal.Size() == 0:
		db, ierr := pingRead("file:" + escapePath(path) + "?mode=ro&immutable=1&_query_only=1")
		if ierr != nil {
			return nil, fmt.Errorf("open %s read-only (its directory %s cannot be written, so it was opened immutable): %w", path, dir, ierr)
		}
		return db, nil
	case walErr == nil && errors.Is(shmErr, fs.ErrNotExist):
		return nil, fmt.Errorf("open %s read-only: its directory %s cannot be written (a read-only file system?), and SQLite needs to create %s-shm there to read the %d bytes of its write-ahead log %s-wal; copy the database and its -wal to a writable directory and read it there",
			path, dir, path, wal.Size(), path)
	}
	return nil, fmt.Errorf("open %s read-only: its directory %s cannot be written (a read-only file system?): %w", path, dir, err)
}

// pingRead opens dsn through readOnlyDriver and makes sure a connection opens.
func pingRead(dsn string) (*sqlx.DB, error) {
	db, err := sqlx.Open(readOnlyDriver, dsn)
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// identify checks that db is an arbiter results database, or an empty file that may
// become one, and returns its schema version (0 for an empty file). It reads only.
func identify(ctx context.Context, db *sqlx.DB) (int, error) {
	var app, v int
	if err := db.GetContext(ctx, &app, "PRAGMA application_id"); err != nil {
		return 0, err
	}
	if err := db.GetContext(ctx, &v, "PRAGMA user_version"); err != nil {
		return 0, err
	}
	if app != 0 && app != applicationID {
		return 0, fmt.Errorf("%w: its application id is %#x, another program's", ErrNotArbiterDatabase, app)
	}
	var tables []string
	if err := db.SelectContext(ctx, &tables, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`); err != nil {
		return 0, err
	}
	has := func(name string) bool {
		for _, t := range tables {
			if t == name {
				return true
			}
		}
		return false
	}
	switch {
	case v == 0 && len(tables) > 0:
		return 0, fmt.Errorf("%w: it holds tables of another program (%s)", ErrNotArbiterDatabase, listSome(tables))
	case v > 0 && !has("experiments"):
		return 0, fmt.Errorf("%w: it has schema version %d but no experiments table (tables: %s)", ErrNotArbiterDatabase, v, listSome(tables))
	case v >= applicationIDSince && app == 0:
		// Every arbiter file from the lease migration on carries the application id.
		return 0, fmt.Errorf("%w: schema version %d without arbiter's application id", ErrNotArbiterDatabase, v)
	}
	return v, nil
}

func listSome(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}
