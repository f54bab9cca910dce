package agentd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
	"github.com/microvms/microvms/gen/protocol"
)

// An upload's spool is one anonymous file, opened once and closed with the
// upload: twenty tar uploads leave the descriptor count where it was.
// Catches: openAnonymous ignoring its O_TMPFILE success (`err == nil`
// negated), which opens a named temp file as well and leaks the anonymous
// one, a descriptor and its disk space per upload for the daemon's life.
func TestTarUploadSpoolLeaksNoDescriptor(t *testing.T) {
	_, root, _ := tarLayout(t)
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	archive := tartest.Build(tartest.File("f", "x"))
	upload := func() {
		if r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(archive)); r.status != 204 {
			t.Fatalf("upload: %d %q", r.status, r.body)
		}
	}
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(es)
	}
	upload() // warm the connection
	before := count()
	for range 20 {
		upload()
	}
	if after := count(); after > before+3 {
		t.Fatalf("open descriptors grew from %d to %d over 20 uploads", before, after)
	}
}

// Overwriting a file without a mode keeps its setuid, setgid and sticky
// bits, each alone, and adds none to a plain file. Catches: any of the three
// tests negated in unixSpecialBits (reading the old mode) or in
// specialBitsMode (applying it), which drops the bit from such a file and
// adds it to every other overwritten file.
func TestOverwriteKeepsTheSpecialBits(t *testing.T) {
	dir := t.TempDir()
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	for _, mode := range []uint32{0o4750, 0o2750, 0o1750, 0o640} {
		p := filepath.Join(dir, fmt.Sprintf("f%o", mode))
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader("new")); r.status != 204 {
			t.Fatalf("overwrite: %d %q", r.status, r.body)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != mode {
			t.Errorf("overwriting a %04o file without a mode left %04o", mode, got)
		}
	}
}

// The daemon reads its umask from /proc/self/status, so a new file written
// without a mode gets 0666 less the umask the daemon really runs with, not
// the usual 022. Catches, in processUmask: the read's success test negated
// (`err == nil`) or the parse's (`err == nil` after ParseUint), either of
// which falls back to 022 and makes files group-readable under umask 027.
func TestNewFileModeFollowsTheProcessUmask(t *testing.T) {
	was := unix.Umask(0o027)
	defer unix.Umask(was)
	dir := t.TempDir()
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	p := filepath.Join(dir, "new")
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader("x")); r.status != 204 {
		t.Fatalf("write: %d %q", r.status, r.body)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("a new file under umask 027: %v %v, want 0640", fi.Mode(), err)
	}
}
