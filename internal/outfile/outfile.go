// Package outfile writes the files arbiter's commands leave for people (verdicts, bisection
// reports, charts): atomically, so that a file is whole or absent, and never over a file
// that must survive (the results database and its journal files, the spec) nor through a
// symbolic link, a directory or a device.
package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// RefusedError says why a path was not written: a usage error, the path named wrongly.
type RefusedError struct {
	Path string
	Why  string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("refusing to write %s: %s", e.Path, e.Why) }

// Guard names the files an output may never replace. Its zero value protects no named
// file, but still refuses what is neither a regular file nor a new path.
type Guard struct {
	// Database is the results database; its -wal, -shm and -journal files are kept too.
	Database string
	// Specs are the spec files the output was judged from.
	Specs []string
}

// protected is one file a Guard keeps, and what it is.
type protected struct{ path, what string }

// sqliteSiblings are the files SQLite keeps beside a database, and what each is.
var sqliteSiblings = []struct{ suffix, what string }{
	{"", "the results database"},
	{"-wal", "the results database's write-ahead log"},
	{"-shm", "the results database's shared-memory index"},
	{"-journal", "the results database's rollback journal"},
}

func (g Guard) kept() []protected {
	var out []protected
	if g.Database != "" {
		dbs := []string{g.Database}
		// SQLite keeps the journal files beside the file a symbolic link points to.
		if real, err := filepath.EvalSymlinks(g.Database); err == nil && real != g.Database {
			dbs = append(dbs, real)
		}
		for _, db := range dbs {
			for _, s := range sqliteSiblings {
				out = append(out, protected{db + s.suffix, s.what})
			}
		}
	}
	for _, s := range g.Specs {
		if s != "" {
			out = append(out, protected{s, "the spec file"})
		}
	}
	return out
}

// Check returns a *RefusedError when path may not be written: it is (or is a link to)
// one of the files g keeps, or it exists and is not a regular file.
func (g Guard) Check(path string) error {
	if path == "" {
		return &RefusedError{Path: `""`, Why: "no file named"}
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fi = nil
	case err != nil:
		return fmt.Errorf("write %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return &RefusedError{Path: path, Why: "it is a symbolic link (name the file itself, or a new path)"}
	case fi.IsDir():
		return &RefusedError{Path: path, Why: "it is a directory (name a file in it)"}
	case !fi.Mode().IsRegular():
		return &RefusedError{Path: path, Why: "it is not a regular file (a device, pipe or socket)"}
	}
	canon := canonical(path)
	for _, k := range g.kept() {
		if canon == canonical(k.path) {
			return &RefusedError{Path: path, Why: "it is " + k.what}
		}
		// Hard links, bind mounts and case-folding file systems name one file twice.
		if fi != nil {
			if ki, err := os.Stat(k.path); err == nil && os.SameFile(fi, ki) {
				return &RefusedError{Path: path, Why: "it is " + k.what + " (" + k.path + ")"}
			}
		}
	}
	return nil
}

// canonical is path made absolute with the symbolic links of its directory resolved, so
// that two spellings of one path compare equal whether or not the file exists yet.
func canonical(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	dir, base := filepath.Split(abs)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return filepath.Join(dir, base)
}

// Write checks path with g, then writes data to it atomically: to a temporary file in
// the same directory, synced, then renamed over path, so that a reader (or an arbiter
// killed meanwhile, or a full disk) never leaves a partial file at path.
func (g Guard) Write(path string, data []byte) error {
	if err := g.Check(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// CreateTemp makes the file private; a verdict is as readable as any file written.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	// The rename is durable once the directory is: a crash now keeps the new file.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
