package agentd

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A write through a chain of symlinks lands in the file at its end, and one
// through a dangling link creates the file the link names; every link stays
// a link. Catches, in resolveWriteTarget, EvalSymlinks' `err == nil` made
// `err != nil` (a chain followed one hop only, so the middle link is
// replaced by a regular file and the real file is untouched; a dangling
// link's write sent to the empty path).
func TestWriteFollowsSymlinkChainsAndDanglingLinks(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.WriteFile(real, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"mid": "real", "link": "mid", "dangling": "made"}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if r := daemonPut(t, d, "/v1/fs/file", filepath.Join(dir, "link"), strings.NewReader("new"), 3); r.status != http.StatusNoContent {
		t.Errorf("PUT through link -> mid -> real: %d %q", r.status, r.body)
	}
	if r := daemonPut(t, d, "/v1/fs/file", filepath.Join(dir, "dangling"), strings.NewReader("made"), 4); r.status != http.StatusNoContent {
		t.Errorf("PUT through a dangling link: %d %q", r.status, r.body)
	}
	for name, to := range links {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != to {
			t.Errorf("%s is no longer a link to %s: %q %v", name, to, got, err)
		}
	}
	for name, want := range map[string]string{"real": "new", "made": "made"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
}

// A write leaves no descriptor open behind it: the directory it opens to
// sync the new entry is closed before the 204. The collector is off, so a
// forgotten *os.File cannot be closed by its finalizer behind the test's
// back. Catches, in WriteFile, the directory open's `err == nil` made
// `err != nil` (the opened directory never synced nor closed).
func TestWriteFileLeavesNoDescriptorOpen(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	d := bootedDaemon(t, nil)
	base := t.TempDir()
	dirs := map[string]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		dir := filepath.Join(base, name)
		dirs[dir] = true
		if r := daemonPut(t, d, "/v1/fs/file", filepath.Join(dir, "f"), strings.NewReader("x"), 1); r.status != http.StatusNoContent {
			t.Fatalf("PUT into %s: %d %q", dir, r.status, r.body)
		}
	}
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	for _, e := range es {
		if to, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && dirs[to] {
			t.Errorf("descriptor %s still open on %s after its write answered", e.Name(), to)
		}
	}
}

// A write that went well logs no warning: the close after the commit
// succeeded. Catches, in WriteFile, the committed file's close check
// `err != nil` made `err == nil` (every successful write logged as a failed
// close).
func TestSuccessfulWriteLogsNoWarning(t *testing.T) {
	d, logs := loggedDaemon(t)
	p := filepath.Join(t.TempDir(), "f")
	for _, content := range []string{"first", "overwrite"} {
		if r := daemonPut(t, d, "/v1/fs/file", p, strings.NewReader(content), int64(len(content))); r.status != http.StatusNoContent {
			t.Fatalf("PUT %q: %d %q", content, r.status, r.body)
		}
	}
	if got := logs.String(); strings.Contains(got, "level=WARN") {
		t.Fatalf("successful writes logged a warning:\n%s", got)
	}
}

// On a filesystem without O_TMPFILE a write stages a named temp file, and a
// write that fails removes it, as one that succeeds renames it: either way
// the directory holds only the target. Catches, in WriteFile's cleanup,
// `named != ""` made `named == ""` (the named temp of a failed write left
// behind, one per failure, on such a filesystem).
func TestFailedWriteWithoutOTmpfileLeavesNoTempName(t *testing.T) {
	tmpfileFlag = 0
	// Registered before the daemon's own cleanup, so it runs after it.
	t.Cleanup(func() { tmpfileFlag = unix.O_TMPFILE })
	dir := t.TempDir()
	probe, named, err := createTempIn(dir)
	if err != nil || named == "" {
		t.Fatalf("createTempIn without O_TMPFILE: name %q, %v; want the named fallback", named, err)
	}
	probe.Close()
	os.Remove(named)

	d := bootedDaemon(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Chunked and over the cap: the temp file has bytes when the copy fails.
	if r := daemonPut(t, d, "/v1/fs/file", p, bytes.NewReader(make([]byte, 4096)), -1); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked PUT over the cap: %d %q, want 413", r.status, r.body)
	}
	if extra := tempLeftovers(t, dir, "f"); len(extra) > 0 {
		t.Fatalf("the failed write left %v behind", extra)
	}
	if r := daemonPut(t, d, "/v1/fs/file", p, strings.NewReader("new"), 3); r.status != http.StatusNoContent {
		t.Fatalf("PUT: %d %q", r.status, r.body)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "new" {
		t.Fatalf("%s holds %q (%v), want %q", p, b, err, "new")
	}
	if extra := tempLeftovers(t, dir, "f"); len(extra) > 0 {
		t.Fatalf("the write left %v behind", extra)
	}
}
