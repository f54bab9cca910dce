package agentd

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// tarLayout is a base dir with the extraction root and an empty sentinel
// sibling that every hostile archive aims at.
func tarLayout(t *testing.T) (base, root, outside string) {
	t.Helper()
	base = t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "sentinel")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	return base, root, outside
}

// Each hostile archive, over HTTP, gets its status and a body naming the
// member, and leaves the sentinel empty and nothing outside the root. The
// wrong edits each subtest catches are listed in tartest.Hostile; together
// they catch dropping any lexical rule, judging a link target by normpath
// alone (symlink-through-symlink-dotdot: sub/up -> .. then sub/esc -> up/..
// was a 204 with readlink -f root/sub/esc outside the root), the kernel's
// RESOLVE_NO_SYMLINKS walk, the device refusal, the caps, or mapping a refusal to 500.
func TestTarHostile(t *testing.T) {
	for _, name := range hostileNames() {
		t.Run(name, func(t *testing.T) {
			base, root, outside := tarLayout(t)
			c := hostileCase(name, outside)
			srv := fsServer(t, testFS(protocol.LimitSet{MaxTarMembers: orDefault(c.MaxMembers, 1000), MaxTarBytes: orDefault(c.MaxBytes, 1<<30)}))
			r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(c.Archive))
			if r.status != c.Status {
				t.Fatalf("status %d %q, want %d", r.status, r.body, c.Status)
			}
			if !strings.HasPrefix(r.ctype, "text/plain") {
				t.Errorf("content type %q", r.ctype)
			}
			if c.Member != "" && !strings.Contains(r.body, c.Member) {
				t.Errorf("body %q does not name member %q", r.body, c.Member)
			}
			if err := tartest.Confined(base, root, outside); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func hostileNames() []string {
	var names []string
	for _, c := range tartest.Hostile("/placeholder") {
		names = append(names, c.Name)
	}
	return names
}

func hostileCase(name, outside string) tartest.Case {
	for _, c := range tartest.Hostile(outside) {
		if c.Name == name {
			return c
		}
	}
	panic(name)
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

// Link targets the CPython data filter accepts answer 204 over the wire.
// Catches a target walk stricter than realpath at extraction time reaching
// the handler as a 400 for archives the reference daemon extracts.
func TestTarDataFilterAcceptedLinkTargetsAre204(t *testing.T) {
	for _, c := range tartest.Legitimate() {
		t.Run(c.Name, func(t *testing.T) {
			base, root, outside := tarLayout(t)
			srv := fsServer(t, testFS(protocol.LimitSet{}))
			r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(c.Archive))
			if r.status != 204 {
				t.Fatalf("status %d %q, want 204", r.status, r.body)
			}
			for p, want := range c.Reads {
				if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
					t.Errorf("%s = %q, %v; want %q", p, b, err, want)
				}
			}
			if err := tartest.Confined(base, root, outside); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Catches: accepting a relative root (it would land under the daemon's cwd).
func TestTarRelativeRootIs400(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", "relative/dir"), bytes.NewReader(tartest.Build(tartest.File("f", "x"))))
	if r.status != 400 || !strings.Contains(r.body, "absolute") {
		t.Fatalf("%d %q", r.status, r.body)
	}
}

// Catches: a fallback to unconfined extraction on an old kernel, or a 500
// that does not name the finding.
func TestTarWithoutOpenat2Is500NamingFinding(t *testing.T) {
	_, root, _ := tarLayout(t)
	f := testFS(protocol.LimitSet{})
	f.openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
	srv := fsServer(t, f)
	r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(tartest.Build(tartest.File("f", "x"))))
	if r.status != 500 || !strings.Contains(r.body, string(taxonomy.FindingGuestKernelOpenat2)) {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatal("something was created without openat2")
	}
}

// Catches: an upload buffered or extracted past the wire cap, which since
// FS.WriteTar's duplicate ContentLength check and MaxBytesReader were removed
// only the gate applies: dropping it there, or FS no longer answering the
// gate's *http.MaxBytesError with its 413 text, fails this.
func TestTarOverWireCapIs413(t *testing.T) {
	_, root, _ := tarLayout(t)
	d := bootedDaemon(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	archive := tartest.Build(tartest.File("big", strings.Repeat("x", 8192)))
	for _, length := range []int64{int64(len(archive)), -1} {
		r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(archive), length)
		if r.status != 413 || !strings.HasPrefix(r.ctype, "text/plain") || !strings.Contains(r.body, "max_body_bytes") {
			t.Fatalf("length %d: %d %q %q", length, r.status, r.ctype, r.body)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "big")); !os.IsNotExist(err) {
		t.Fatal("member extracted from an over-cap upload")
	}
}

// Catches: a tar upload that skips the reserve check.
func TestTarUnderReserveIs507(t *testing.T) {
	_, root, _ := tarLayout(t)
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 20})
	f.guard.probe = func(string) (uint64, error) { return 1000, nil }
	srv := fsServer(t, f)
	r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(tartest.Build(tartest.File("f", "x"))))
	if r.status != 507 || !strings.Contains(r.body, "1000 bytes available") || !strings.Contains(r.body, "1048576 byte reserve") {
		t.Fatalf("%d %q", r.status, r.body)
	}
}

// Crossing the reserve during extraction stops it with 507. Catches: a
// pacer wired to the spool only, or not at all.
func TestTarCrossingReserveDuringExtraction(t *testing.T) {
	_, root, _ := tarLayout(t)
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 20, MaxTarBytes: 1 << 30})
	var calls int
	f.guard.probe = func(p string) (uint64, error) {
		// Plenty for the pre-flight and the spool; the root then fills.
		calls++
		if strings.HasPrefix(p, root) && calls > 1 {
			return 10, nil
		}
		return 1 << 40, nil
	}
	srv := fsServer(t, f)
	archive := tartest.Build(tartest.File("a", strings.Repeat("a", 3*diskProbeInterval)), tartest.File("b", "after"))
	r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), struct{ io.Reader }{bytes.NewReader(archive)})
	if r.status != 507 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(root, "b")); !os.IsNotExist(err) {
		t.Fatal("extraction continued past the reserve")
	}
}

// tarEntry is what a round trip must preserve about one member.
type tarEntry struct {
	kind byte
	mode int64
	sum  string
	link string
}

func readArchive(t *testing.T, data []byte) map[string]tarEntry {
	t.Helper()
	out := map[string]tarEntry{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("downloaded archive does not parse: %v", err)
		}
		b, _ := io.ReadAll(tr)
		e := tarEntry{kind: h.Typeflag, mode: h.Mode & 0o7777, link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			e.sum = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		out[strings.TrimSuffix(h.Name, "/")] = e
	}
}

// Upload a tree, download it, compare byte for byte and mode for mode,
// symlinks as symlinks and hard links as links. Catches: following symlinks
// on download, dropping modes, PAX names truncated to 100 bytes, a
// buffered-then-truncated stream, and the legitimate shapes being refused.
func TestTarRoundTrip(t *testing.T) {
	_, root, _ := tarLayout(t)
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	long := strings.Repeat("a-long-directory-name/", 8) + "and-a-long-file-name.bin"
	big := strings.Repeat("0123456789abcdef", 70000) // > 1 MiB, spans copy buffers
	// Every directory is an explicit member so the download, which carries
	// every directory, can be compared name for name.
	var longDirs []tartest.Member
	for i := 1; i <= 8; i++ {
		longDirs = append(longDirs, tartest.Dir(strings.Repeat("a-long-directory-name/", i)))
	}
	upload := tartest.Build(append(longDirs,
		tartest.Dir("d/"),
		tartest.Member{Name: "d/exe", Type: tar.TypeReg, Body: "#!/bin/sh\necho hi\n", Mode: 0o755},
		tartest.Member{Name: "d/private", Type: tar.TypeReg, Body: "secret", Mode: 0o600},
		tartest.File("d/big.bin", big),
		// Linux symlinks are always 0777, so that is what a round trip can keep.
		tartest.Member{Name: "d/up", Type: tar.TypeSymlink, Link: "../top.txt", Mode: 0o777},
		tartest.File("top.txt", "top"),
		tartest.Hardlink("d/hard", "top.txt"),
		tartest.Dir("empty/"),
		tartest.Member{Name: "locked/", Type: tar.TypeDir, Mode: 0o500},
		tartest.File("locked/inside", "in"),
		tartest.File(long, "long"),
		tartest.Dir("ünïcødé/"),
		tartest.File("ünïcødé/日本語.txt", "utf8 ✓"),
	)...)
	if r := fsDo(t, srv, "PUT", "/v1/fs/tar", fsQuery("path", root), bytes.NewReader(upload)); r.status != 204 {
		t.Fatalf("upload: %d %q", r.status, r.body)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "locked"), 0o755) })
	r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", root), nil)
	if r.status != 200 || r.ctype != "application/x-tar" {
		t.Fatalf("download: %d %q", r.status, r.body[:min(len(r.body), 200)])
	}
	got := readArchive(t, []byte(r.body))
	want := readArchive(t, upload)
	// The download names a hard link's first path as the file and the other
	// as the link; which one comes first is walk order, so compare content.
	for _, name := range []string{"top.txt", "d/hard"} {
		if got[name].kind == tar.TypeLink {
			other := got[name].link
			e := got[other]
			e.link = ""
			got[name] = e
		}
		if want[name].kind == tar.TypeLink {
			want[name] = want[want[name].link]
		}
	}
	names := func(m map[string]tarEntry) []string {
		var s []string
		for k := range m {
			s = append(s, k)
		}
		sort.Strings(s)
		return s
	}
	if fmt.Sprint(names(got)) != fmt.Sprint(names(want)) {
		t.Fatalf("members differ:\n got %v\nwant %v", names(got), names(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}
}

// Catches: 404/400 swapped, following a non-directory, or a walk that
// counts symlink targets toward the caps.
func TestReadTarStatuses(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	srv := fsServer(t, testFS(protocol.LimitSet{MaxTarMembers: 3, MaxTarBytes: 10}))
	if r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", filepath.Join(dir, "absent")), nil); r.status != 404 {
		t.Errorf("absent: %d", r.status)
	}
	if r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", filepath.Join(dir, "file")), nil); r.status != 400 {
		t.Errorf("file: %d", r.status)
	}
	tree := filepath.Join(dir, "tree")
	os.Mkdir(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "a"), []byte("12345"), 0o644)
	// A symlink to something huge costs a header, not its target's bytes.
	os.Symlink("/proc/kcore", filepath.Join(tree, "huge"))
	if r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", tree), nil); r.status != 200 {
		t.Errorf("within caps: %d %q", r.status, r.body)
	}
	os.WriteFile(filepath.Join(tree, "b"), []byte("123456"), 0o644)
	if r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", tree), nil); r.status != 413 || !strings.Contains(r.body, "max_tar_bytes") {
		t.Errorf("over bytes: %d %q", r.status, r.body)
	}
	os.Remove(filepath.Join(tree, "b"))
	os.Mkdir(filepath.Join(tree, "c"), 0o755)
	os.Mkdir(filepath.Join(tree, "d"), 0o755)
	if r := fsDo(t, srv, "GET", "/v1/fs/tar", fsQuery("path", tree), nil); r.status != 413 || !strings.Contains(r.body, "max_tar_members") {
		t.Errorf("over members: %d %q", r.status, r.body)
	}
}

// PUT /v1/fs/tar/exact, on a real daemon over HTTP, keeps what the data
// filter drops (a setuid bit, a foreign owner, a nanosecond time, an
// absolute symlink), while PUT /v1/fs/tar refuses the same archive.
// Catches: the route wired to the data-filter extraction, or Exact not
// passed through to tarx.
func TestTarExactRouteKeepsTheArchivesMetadata(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1000, 1001
	}
	mtime := time.Unix(1600000000, 123456789)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 3},
		{Name: "bin/passwd", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
	} {
		h.Uid, h.Gid, h.ModTime, h.Format = uid, gid, mtime, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("hi\n")[:h.Size])
	}
	tw.Close()
	archive := buf.Bytes()
	d := bootedDaemon(t, nil)
	if r := daemonPut(t, d, "/v1/fs/tar", t.TempDir(), bytes.NewReader(archive), int64(len(archive))); r.status != 400 || !strings.Contains(r.body, "bin/passwd") {
		t.Fatalf("the data-filter route answered %d %q, want a 400 naming bin/passwd", r.status, r.body)
	}
	root := t.TempDir()
	if r := daemonPut(t, d, "/v1/fs/tar/exact", root, bytes.NewReader(archive), int64(len(archive))); r.status != 204 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, "bin/tool"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o4755 || int(st.Uid) != uid || int(st.Gid) != gid || st.Mtim.Nano() != mtime.UnixNano() {
		t.Fatalf("bin/tool: mode %o owner %d:%d mtime %d; want 4755 %d:%d %d", st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Nano(), uid, gid, mtime.UnixNano())
	}
	if got, _ := os.Readlink(filepath.Join(root, "bin/passwd")); got != "/etc/passwd" {
		t.Fatalf("bin/passwd -> %q", got)
	}
}

// GET /v1/fs/tar/exact carries each member's modification time to the
// nanosecond (PAX), and what it carries, PUT /v1/fs/tar/exact puts back:
// a tree round-trips with every time exact. GET /v1/fs/tar keeps whole
// seconds. Catches: the exact route wired to the narrowest-format packer
// (nanoseconds lost), the plain route made PAX (its bytes change for every
// reference client), or the access or change time sent (reading the tree
// moves access times, and a checkpoint of the same tree twice would differ).
func TestTarExactDownloadRoundTripsNanoseconds(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	src := t.TempDir()
	want := map[string]time.Time{"a": time.Unix(1600000000, 123456789), "d": time.Unix(1500000000, 987654321), "d/b": time.Unix(1400000000, 5)}
	os.Mkdir(filepath.Join(src, "d"), 0o755)
	for name := range want {
		if name != "d" {
			os.WriteFile(filepath.Join(src, name), []byte(name), 0o644)
		}
	}
	for _, name := range []string{"a", "d/b", "d"} { // d last: writing d/b moves it
		os.Chtimes(filepath.Join(src, name), want[name], want[name])
	}
	headers := func(route string) (map[string]*tar.Header, []byte) {
		r := fsDo(t, srv, "GET", route, fsQuery("path", src), nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %q", route, r.status, r.body)
		}
		out := map[string]*tar.Header{}
		tr := tar.NewReader(strings.NewReader(r.body))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			out[strings.TrimSuffix(h.Name, "/")] = h
		}
		return out, []byte(r.body)
	}
	plain, _ := headers("/v1/fs/tar")
	exact, archive := headers("/v1/fs/tar/exact")
	for name, mt := range want {
		if p := plain[name]; p == nil || p.ModTime.Nanosecond() != 0 || p.ModTime.Sub(mt).Abs() >= time.Second {
			t.Errorf("GET /v1/fs/tar %s: %v, want %v in whole seconds", name, p, mt)
		}
		if e := exact[name]; e == nil || !e.ModTime.Equal(mt) || !e.ChangeTime.IsZero() || !e.AccessTime.IsZero() {
			t.Errorf("GET /v1/fs/tar/exact %s: %+v, want mtime %v and no atime or ctime", name, e, mt)
		}
	}
	dst := t.TempDir()
	if r := fsDo(t, srv, "PUT", "/v1/fs/tar/exact", fsQuery("path", dst), bytes.NewReader(archive)); r.status != 204 {
		t.Fatalf("exact upload: %d %q", r.status, r.body)
	}
	for name, mt := range want {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || !fi.ModTime().Equal(mt) {
			t.Errorf("%s round-tripped to %v (%v), want %v", name, fi.ModTime(), err, mt)
		}
	}
}
