//go:build linux

package guestinit

import (
	"os"
	"path/filepath"
	"testing"
)

// Catches: copyTree following a symlink (a link to a directory would bring
// that directory's files into the guest's /etc, and a dangling one would
// fail the launch), dropping one, or losing a file's bytes or mode; the
// symlink test is taken from the directory entry, without an lstat.
func TestCopyTreeKeepsSymlinksFilesAndModes(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "etc")
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(src, "alternatives"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "alternatives", "conf"), []byte("x=1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"alternatives/awk": "/usr/bin/mawk", // dangling here: kept as it is
		"alternatives/dir": outside,         // a directory: never followed
		"rel":              "alternatives/conf",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	for name, target := range links {
		got, err := os.Readlink(filepath.Join(dst, name))
		if err != nil || got != target {
			t.Fatalf("%s: link %q %v, want %q", name, got, err, target)
		}
	}
	b, err := os.ReadFile(filepath.Join(dst, "alternatives", "conf"))
	fi, serr := os.Stat(filepath.Join(dst, "alternatives", "conf"))
	if err != nil || serr != nil || string(b) != "x=1\n" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("file: %q %v %v %v", b, fi, err, serr)
	}
	if di, err := os.Lstat(filepath.Join(dst, "alternatives")); err != nil || !di.IsDir() || di.Mode().Perm() != 0o750 {
		t.Fatalf("directory: %v %v", di, err)
	}
	// Readlink above proves each is a link; nothing else came along.
	var names []string
	if err := filepath.WalkDir(dst, func(p string, _ os.DirEntry, err error) error {
		names = append(names, p)
		return err
	}); err != nil || len(names) != 6 { // etc, alternatives, its conf, awk and dir, rel
		t.Fatalf("copied %d entries %v (%v), want 6", len(names), names, err)
	}
}
