package tarx

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
)

func extractExact(t testing.TB, root string, archive []byte) error {
	t.Helper()
	_, err := Extract(root, bytes.NewReader(archive), Options{Caps: Caps{MaxMembers: 1000, MaxBytes: 1 << 30}, Log: quiet, Exact: true})
	return err
}

// exactTree is an archive of what a checkpoint carries that the data
// filter drops: a setuid file, foreign owners, nanosecond times, an
// absolute and a climbing symlink, a hard link, and the root's own
// metadata ("./"), with the directories written before their children.
func exactTree(t testing.TB, uid, gid int) ([]byte, map[string]time.Time) {
	t.Helper()
	times := map[string]time.Time{
		".":       time.Unix(1400000000, 111111111),
		"d":       time.Unix(1500000000, 222222222),
		"d/tool":  time.Unix(1600000000, 333333333),
		"d/abs":   time.Unix(1700000000, 444444444),
		"d/up":    time.Unix(1710000000, 555555555),
		"d/empty": time.Unix(1720000000, 666666666),
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Format = tar.FormatPAX
		h.Uid, h.Gid = uid, gid
		if _, ok := times[strings.TrimSuffix(h.Name, "/")]; ok {
			h.ModTime = times[strings.TrimSuffix(h.Name, "/")]
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o700}, "")
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750}, "")
	add(&tar.Header{Name: "d/empty/", Typeflag: tar.TypeDir, Mode: 0o1777}, "")
	add(&tar.Header{Name: "d/tool", Typeflag: tar.TypeReg, Mode: 0o4755}, "#!/bin/sh\n")
	add(&tar.Header{Name: "d/abs", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")
	add(&tar.Header{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}, "")
	add(&tar.Header{Name: "d/hard", Typeflag: tar.TypeLink, Linkname: "d/tool"}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), times
}

// Exact puts back every mode bit, owner, time and symlink target the
// archive carries. Catches: the owner applied after the mode (the chown
// clears setuid), a directory's times applied when it is made (its
// children's arrival moves them), the data filter's 0755 mask or its
// absolute-target refusal left in force, and the root's "./" ignored.
func TestExactKeepsWhatTheArchiveSays(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1000, 1001 // foreign owners, which only root may give
	}
	_, root, _ := layout(t)
	archive, times := exactTree(t, uid, gid)
	if err := extractExact(t, root, archive); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{".": unix.S_IFDIR | 0o700, "d": unix.S_IFDIR | 0o750, "d/empty": unix.S_IFDIR | 0o1777, "d/tool": unix.S_IFREG | 0o4755, "d/abs": unix.S_IFLNK | 0o777, "d/up": unix.S_IFLNK | 0o777}
	for name, mode := range want {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode != mode {
			t.Errorf("%s: mode %o, want %o", name, st.Mode, mode)
		}
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(times[name]) {
			t.Errorf("%s: mtime %v, want %v", name, got, times[name])
		}
	}
	for name, target := range map[string]string{"d/abs": "/etc/passwd", "d/up": "../../outside"} {
		if got, err := os.Readlink(filepath.Join(root, name)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want %q", name, got, err, target)
		}
	}
	var a, b unix.Stat_t
	unix.Lstat(filepath.Join(root, "d/tool"), &a)
	unix.Lstat(filepath.Join(root, "d/hard"), &b)
	if a.Ino != b.Ino {
		t.Error("d/hard is not a hard link of d/tool")
	}
	// Without Exact the same archive meets the data filter.
	_, root2, _ := layout(t)
	if err := extract(t, root2, archive, Caps{}); err == nil || !strings.Contains(err.Error(), "absolute link target") {
		t.Fatalf("the data filter took an absolute symlink: %v", err)
	}
}

// Exact judges no symlink target, so the kernel's confinement is all that
// stands between a hostile archive and the host: every hostile archive
// still writes nothing outside the root. Catches an Exact path that opens
// or creates through a symlink (RESOLVE_NO_SYMLINKS dropped for it), or a
// hard link let out of the tree.
func TestExactHostileCorpusStaysConfined(t *testing.T) {
	for _, c := range tartest.Hostile("/placeholder") {
		t.Run(c.Name, func(t *testing.T) {
			base, root, outside := layout(t)
			for _, cc := range tartest.Hostile(outside) {
				if cc.Name == c.Name {
					caps := Caps{MaxMembers: cc.MaxMembers, MaxBytes: cc.MaxBytes}
					if caps.MaxMembers == 0 {
						caps.MaxMembers = 1000
					}
					if caps.MaxBytes == 0 {
						caps.MaxBytes = 1 << 30
					}
					_, _ = Extract(root, bytes.NewReader(cc.Archive), Options{Caps: caps, Log: quiet, Exact: true})
				}
			}
			if err := tartest.WroteOnlyInside(base, root, outside); err != nil {
				t.Fatal(err)
			}
		})
	}
}
