package machinelock

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestPrivateDirIsTheUsersOwn(t *testing.T) {
	base := t.TempDir()
	alt := func(dir string) string { return fmt.Sprintf("%s-%d", dir, os.Getuid()) }

	fresh := filepath.Join(base, "fresh")
	if got, err := PrivateDir(fresh); err != nil || got != fresh {
		t.Fatalf("a missing folder: %q, %v", got, err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("created %v, want 0700", fi.Mode().Perm())
	}

	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	if got, err := PrivateDir(file); err != nil || got != alt(file) {
		t.Errorf("a file in the way: %q, %v; want %s", got, err, alt(file))
	}

	target := filepath.Join(base, "target")
	os.Mkdir(target, 0o755)
	link := filepath.Join(base, "link")
	os.Symlink(target, link)
	got, err := PrivateDir(link)
	if err != nil || got != alt(link) {
		t.Errorf("a link in the way: %q, %v; want %s", got, err, alt(link))
	}
	if f, err := Open(filepath.Join(got, "30000")); err != nil {
		t.Error(err)
	} else {
		f.Close()
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("the link's target received %d files", len(entries))
	}

	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777)
	if got, err := PrivateDir(shared); err != nil || got != shared {
		t.Fatalf("an older shared folder of the user's: %q, %v", got, err)
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o700 {
		t.Errorf("left %v, want 0700", fi.Mode().Perm())
	}
}

func TestSharedDirRefusesALink(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	os.Mkdir(target, 0o755)
	link := filepath.Join(base, "gpus")
	os.Symlink(target, link)
	if got, err := SharedDir(link); err != nil || got != fmt.Sprintf("%s-%d", link, os.Getuid()) {
		t.Errorf("a link: %q, %v", got, err)
	}
	fresh := filepath.Join(base, "fresh")
	if got, err := SharedDir(fresh); err != nil || got != fresh {
		t.Fatalf("a missing folder: %q, %v", got, err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("created %v, want shared and sticky", fi.Mode())
	}
}
