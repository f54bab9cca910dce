package tarx

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
)

// flakyOpenat2 plays a kernel whose openat2 answers EAGAIN (a lookup that
// raced with a rename) the first failures times for each path, then answers
// for real. It stops with ELOOP after limit calls, so a retry loop that
// never ends fails the test instead of hanging it.
type flakyOpenat2 struct {
	mu       sync.Mutex
	failures int
	limit    int
	calls    map[string]int
}

func (f *flakyOpenat2) open(dirfd int, path string, how *unix.OpenHow) (int, error) {
	f.mu.Lock()
	f.calls[path]++
	n, total := f.calls[path], 0
	for _, c := range f.calls {
		total += c
	}
	f.mu.Unlock()
	if total > f.limit {
		return -1, unix.ELOOP
	}
	if n <= f.failures {
		return -1, unix.EAGAIN
	}
	return unix.Openat2(dirfd, path, how)
}

// Catches: no retry of EAGAIN (`i >= 8`), one retry too many (`i <= 8`),
// and a retry count that never reaches its bound (`i--`). Eight EAGAINs in
// a row are retried through; a ninth attempt that fails again is the
// answer, after exactly nine calls for that path.
func TestOpenat2EAGAINIsRetriedEightTimes(t *testing.T) {
	_, root, _ := layout(t)
	f := &flakyOpenat2{failures: 8, limit: 1000, calls: map[string]int{}}
	_, err := Extract(root, bytes.NewReader(tartest.Build(tartest.File("f", "x"))), Options{Log: quiet, Openat2: f.open})
	if err != nil {
		t.Fatalf("eight EAGAINs per lookup should be retried through: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "f")); string(got) != "x" {
		t.Fatalf("f = %q", got)
	}

	_, root2, _ := layout(t)
	f = &flakyOpenat2{failures: 1 << 30, limit: 1000, calls: map[string]int{}}
	_, err = Extract(root2, bytes.NewReader(tartest.Build(tartest.File("f", "x"))), Options{Log: quiet, Openat2: f.open})
	if !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("a lookup that keeps racing should fail with EAGAIN, got %v", err)
	}
	if n := f.calls[root2]; n != 9 {
		t.Fatalf("the root was tried %d times, want 1 + 8 retries", n)
	}
}

// Catches: closing the probe descriptor only when the probe failed
// (`err != nil`): every extraction would leak one descriptor, and agentd
// runs for the VM's life.
func TestExtractLeaksNoDescriptor(t *testing.T) {
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(es)
	}
	archive := tartest.Build(tartest.Dir("d/"), tartest.File("d/f", "x"), tartest.Symlink("l", "d/f"))
	before := count()
	for i := 0; i < 20; i++ {
		_, root, _ := layout(t)
		if err := extract(t, root, archive, Caps{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(); after > before+2 {
		t.Fatalf("open descriptors grew from %d to %d over 20 extractions", before, after)
	}
}

// Catches: a zero cap read as a cap of zero (`MaxMembers >= 0`): Caps{}
// means uncapped, as the field's zero value must for a caller that sets none.
func TestZeroCapsMeanUncapped(t *testing.T) {
	_, root, _ := layout(t)
	res, err := Extract(root, bytes.NewReader(tartest.Build(tartest.File("a", "12"), tartest.File("b", "345"))), Options{Log: quiet})
	if err != nil || res.Members != 2 || res.Bytes != 5 {
		t.Fatalf("uncapped extraction: %+v %v", res, err)
	}
}

// Catches: a ".." after a missing component that leaves the walk lexical
// (`lexical++` for `lexical--`, or `lexical <= 0`): the components after it
// are in the tree again and must be resolved for real. d/l -> ".." is the
// root, so missing/../d/l/.. climbs above it, though normpath says "d".
func TestDotDotAfterAMissingNameResolvesTheRestForReal(t *testing.T) {
	base, root, outside := layout(t)
	err := extract(t, root, tartest.Build(tartest.Dir("d/"), tartest.Symlink("d/l", ".."), tartest.Symlink("x", "missing/../d/l/..")), Caps{})
	if statusOf(err) != 400 || !strings.Contains(err.Error(), "x") {
		t.Fatalf("got %v", err)
	}
	if err := tartest.Confined(base, root, outside); err != nil {
		t.Fatal(err)
	}
}

// Catches: the symlink budget one short (`hops >= maxLinkHops`): a target
// through exactly 40 symlinks resolves, as the kernel's own limit allows
// (the 41st is refused, TestLinkTargetThroughTooManySymlinksIsRefused).
func TestLinkTargetThroughFortySymlinksExtracts(t *testing.T) {
	_, root, _ := layout(t)
	ms := []tartest.Member{tartest.Dir("d/"), tartest.Symlink("l01", "d")}
	for i := 2; i <= 40; i++ {
		ms = append(ms, tartest.Symlink(fmt.Sprintf("l%02d", i), fmt.Sprintf("l%02d", i-1)))
	}
	ms = append(ms, tartest.Symlink("x", "l40/.."))
	if err := extract(t, root, tartest.Build(ms...), Caps{}); err != nil {
		t.Fatalf("40 hops: %v", err)
	}
	if got, err := os.Readlink(filepath.Join(root, "x")); err != nil || got != "l40/.." {
		t.Fatalf("x -> %q, %v", got, err)
	}
}

// Catches: a nil Options.Log left nil (`opt.Log != nil`): the first warning
// would then panic the daemon. A kernel that refuses the final directory-mode
// open makes extraction warn, to the given logger or else to slog's default,
// and the content stays.
func TestNilLogStillWarns(t *testing.T) {
	refuseModeOpen := func(dirfd int, path string, how *unix.OpenHow) (int, error) {
		if how.Flags == unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC {
			return -1, unix.EACCES
		}
		return unix.Openat2(dirfd, path, how)
	}
	archive := tartest.Build(tartest.Dir("d/"), tartest.File("d/f", "x"))
	var logged, byDefault bytes.Buffer
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&byDefault, nil)))
	defer slog.SetDefault(was)
	for _, log := range []*slog.Logger{slog.New(slog.NewTextHandler(&logged, nil)), nil} {
		_, root, _ := layout(t)
		if _, err := Extract(root, bytes.NewReader(archive), Options{Log: log, Openat2: refuseModeOpen}); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(root, "d", "f")); string(got) != "x" {
			t.Fatalf("d/f = %q", got)
		}
	}
	for _, b := range []*bytes.Buffer{&logged, &byDefault} {
		if !strings.Contains(b.String(), "could not apply archive mode") || !strings.Contains(b.String(), "dir=d") {
			t.Fatalf("the refused mode was not logged (given logger %q, default %q)", logged.String(), byDefault.String())
		}
	}
}

// Catches: forgetting every link that depends on a path when one of them is
// replaced (`len(m) != 0` for `== 0` when pruning the dependents index).
// sub/esc -> up/.. is harmless while sub/up is missing; replacing its twin
// sub/esc2 with a file must not drop sub/esc from the index, or the final
// sub/up -> .. lands unjudged and sub/esc escapes.
func TestReplacingOneDependentLinkKeepsTheOthersJudged(t *testing.T) {
	base, root, outside := layout(t)
	err := extract(t, root, tartest.Build(
		tartest.Dir("sub/"),
		tartest.Symlink("sub/esc", "up/.."),
		tartest.Symlink("sub/esc2", "up/.."),
		tartest.File("sub/esc2", "now a file"),
		tartest.Symlink("sub/up", ".."),
	), Caps{})
	if statusOf(err) != 400 || !strings.Contains(err.Error(), "sub/esc ->") {
		t.Fatalf("got %v", err)
	}
	if err := tartest.Confined(base, root, outside); err != nil {
		t.Fatal(err)
	}
}

// Catches: reading a symlink of 256 bytes or more as complete when the
// buffer filled (`n <= size`): its target would be cut at 256 bytes. long
// points at d through 300 bytes of "./", so long/.. is the root; cut, it
// would be the root itself and long/.. would climb above it.
func TestLongSymlinkTargetIsReadWhole(t *testing.T) {
	_, root, _ := layout(t)
	long := strings.Repeat("./", 150) + "d"
	err := extract(t, root, tartest.Build(tartest.Dir("d/"), tartest.Symlink("long", long), tartest.Symlink("x", "long/..")), Caps{})
	if err != nil {
		t.Fatalf("a link through a %d-byte symlink target: %v", len(long), err)
	}
}

// Catches: the byte cap refusing a single member of exactly the cap
// (`size >= MaxBytes`); TestCapsBoundary reaches the cap over ten members.
func TestOneMemberOfExactlyTheByteCapExtracts(t *testing.T) {
	_, root, _ := layout(t)
	if err := extract(t, root, tartest.Build(tartest.File("a", strings.Repeat("x", 64))), Caps{MaxBytes: 64}); err != nil {
		t.Fatalf("a member of exactly the cap: %v", err)
	}
	_, root2, _ := layout(t)
	if statusOf(extract(t, root2, tartest.Build(tartest.File("a", strings.Repeat("x", 65))), Caps{MaxBytes: 64})) != 413 {
		t.Fatal("a member one byte over the cap was accepted")
	}
}

// Catches: Check counting members or bytes wrongly (`members--`, a cap
// read as `>=` or negated, a zero cap read as a cap), refusing an empty file
// (`hdr.Size <= 0`), or skipping every member as if it were a global header
// (`Typeflag != TypeXGlobalHeader`): Check must refuse exactly what Extract
// refuses before its first write, at the same boundaries.
func TestCheckAppliesTheCapsAtTheirBoundaries(t *testing.T) {
	ten := make([]tartest.Member, 10)
	for i := range ten {
		ten[i] = tartest.File(string(rune('a'+i)), "12345")
	}
	archive := tartest.Build(ten...)
	for _, c := range []struct {
		caps Caps
		want int
	}{
		{Caps{}, 204},
		{Caps{MaxMembers: 10, MaxBytes: 50}, 204},
		{Caps{MaxMembers: 9, MaxBytes: 50}, 413},
		{Caps{MaxMembers: 10, MaxBytes: 49}, 413},
		{Caps{MaxBytes: 5}, 413},
	} {
		if got := statusOf(Check(bytes.NewReader(archive), c.caps)); got != c.want {
			t.Errorf("caps %+v: %d, want %d", c.caps, got, c.want)
		}
	}
	one := tartest.Build(tartest.File("big", strings.Repeat("x", 64)), tartest.File("empty", ""))
	if err := Check(bytes.NewReader(one), Caps{MaxBytes: 64}); err != nil {
		t.Errorf("one member of exactly the byte cap, and an empty one: %v", err)
	}
	if got := statusOf(Check(bytes.NewReader(one), Caps{MaxBytes: 63})); got != 413 {
		t.Errorf("one member a byte over the cap: %d", got)
	}
	fifo := tartest.Build(tartest.Member{Name: "p", Type: tar.TypeFifo})
	if got := statusOf(Check(bytes.NewReader(fifo), Caps{})); got != 400 {
		t.Errorf("a fifo member: %d", got)
	}
}

// Catches: a member cut short found only as a missing end marker, without
// its name and byte counts (the seek check negated, `pos-hdr.Size`, the
// count in the message inverted, or every member taken for sparse), and a
// member that ends exactly at the end of the bytes blamed as cut
// (`pos+hdr.Size >= total`): that archive lacks only its end marker.
func TestCheckNamesAMemberCutShort(t *testing.T) {
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", strings.Repeat("b", 700)))
	err := Check(bytes.NewReader(full[:1536+100]), Caps{})
	if statusOf(err) != 400 || !strings.Contains(err.Error(), "member b ends after 100 of its 700 declared bytes") {
		t.Fatalf("cut inside b: %v", err)
	}
	whole := tartest.Build(tartest.File("a", strings.Repeat("a", 1024)))
	err = Check(bytes.NewReader(whole[:512+1024]), Caps{})
	if !errors.Is(err, ErrNoEndMarker) {
		t.Fatalf("content complete, end marker missing: %v", err)
	}
}

// Catches: a name component of exactly NAME_MAX (255 bytes) refused
// (`len(c) >= maxNameBytes`), by Check or by Extract.
func TestNameComponentOfNameMaxIsAccepted(t *testing.T) {
	long := strings.Repeat("n", 255)
	archive := tartest.Build(tartest.Dir("d/"), tartest.File("d/"+long, "x"))
	if err := Check(bytes.NewReader(archive), Caps{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	_, root, _ := layout(t)
	if err := extract(t, root, archive, Caps{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if got := statusOf(Check(bytes.NewReader(tartest.Build(tartest.File(long+"n", "x"))), Caps{})); got != 400 {
		t.Fatalf("256 bytes: %d", got)
	}
}

// Catches: content written at the wrong offsets or lengths across the
// 1 MiB read buffer and 4 KiB block boundaries (`size+written`,
// `off-int64(n)`, a hole test one off, a coalescing loop that stops or
// runs on wrongly), Pace not told what landed (`landed <= 0`) or told of a
// hole (`landed >= 0`), and a mode warning logged for a chmod that worked.
// The member mixes data, whole zero blocks, a zero run that is not block
// aligned and a trailing hole, and is larger than the buffer.
func TestContentLandsWholeAroundHoles(t *testing.T) {
	var content []byte
	block := func(b byte, n int) { content = append(content, bytes.Repeat([]byte{b}, n)...) }
	block('a', 100)   // data, unaligned end
	block(0, 3*4096)  // zeros that straddle block boundaries
	block('b', 4096)  // one whole data block
	block(0, 256<<10) // a hole of whole blocks
	block('c', 1<<20) // data across the read buffer's boundary
	block(0, 7)       // a short zero run inside a block
	block('d', 5000)  // data
	block(0, 64<<10)  // a trailing hole
	// h's first read of the buffer is all hole: nothing lands, so nothing is
	// paced for it.
	hole := string(make([]byte, 1<<20)) + "x"
	archive := tartest.Build(tartest.File("f", string(content)), tartest.File("g", ""), tartest.File("h", hole))
	_, root, _ := layout(t)
	var paced int64
	var logged bytes.Buffer
	_, err := Extract(root, bytes.NewReader(archive), Options{
		Caps: Caps{MaxMembers: 10, MaxBytes: 1 << 30},
		Log:  slog.New(slog.NewTextHandler(&logged, nil)),
		Pace: func(n int64) error {
			if n <= 0 {
				t.Errorf("Pace(%d): only bytes that landed are paced", n)
			}
			paced += n
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "f"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("content differs (%d bytes read, want %d): %v", len(got), len(content), err)
	}
	if g, err := os.ReadFile(filepath.Join(root, "g")); err != nil || len(g) != 0 {
		t.Fatalf("empty member: %q %v", g, err)
	}
	if h, err := os.ReadFile(filepath.Join(root, "h")); err != nil || string(h) != hole {
		t.Fatalf("h: %d bytes, %v", len(h), err)
	}
	var nonzero int64
	for _, c := range content {
		if c != 0 {
			nonzero++
		}
	}
	// Every data byte is paced; holes of whole blocks are not, so the paced
	// total is the data plus the zeros that share a block with data.
	if paced < nonzero+1 || paced >= int64(len(content))-256<<10 {
		t.Fatalf("paced %d bytes: the data is %d, the holes are not paced", paced, nonzero)
	}
	if logged.Len() != 0 {
		t.Fatalf("a clean extraction logged: %s", logged.String())
	}
}

// Catches: a member cut inside its content reported without its name and
// counts (a negated io.EOF / ErrUnexpectedEOF test).
func TestExtractNamesAMemberCutShort(t *testing.T) {
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", strings.Repeat("b", 700)))
	for cut, want := range map[int]string{1536 + 100: "member b ends after 100 of its 700 declared bytes", 1536: "member b ends after 0 of its 700 declared bytes"} {
		_, root, _ := layout(t)
		_, err := Extract(root, bytes.NewReader(full[:cut]), Options{Log: quiet})
		if statusOf(err) != 400 || !strings.Contains(err.Error(), want) {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
}

// Catches: a special file in the way not refused (a negated Fstatat check
// in refuseSpecial or in clear): extraction never replaces a fifo (on a
// guest the name may be /dev/null), and a directory that already exists is
// entered, not refused (`err == unix.EEXIST` for `!=` after Mkdirat).
func TestExistingTreeIsEnteredButSpecialFilesAreNotReplaced(t *testing.T) {
	_, root, _ := layout(t)
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "p"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := extract(t, root, tartest.Build(tartest.File("d/f", "x")), Caps{}); err != nil {
		t.Fatalf("into an existing directory: %v", err)
	}
	for _, m := range []tartest.Member{tartest.File("p", "x"), tartest.Symlink("p", "d"), tartest.Hardlink("p", "d/f")} {
		err := extract(t, root, tartest.Build(m), Caps{})
		if statusOf(err) != 400 || !strings.Contains(err.Error(), "fifo") {
			t.Fatalf("%s over a fifo: %v", m.Name, err)
		}
	}
	if st, err := os.Lstat(filepath.Join(root, "p")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the fifo was replaced: %v %v", st, err)
	}
}

// leftovers lists the temp names extraction left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), ".agentd-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// Catches: the temp name beside a member left behind when its rename over
// the target fails (a negated Renameat check unlinks only on success): a
// file member onto a directory is refused and leaves nothing.
func TestFileOntoADirectoryLeavesNoTempName(t *testing.T) {
	_, root, _ := layout(t)
	if err := os.MkdirAll(filepath.Join(root, "d", "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := extract(t, root, tartest.Build(tartest.File("d", "x")), Caps{}); statusOf(err) != 400 {
		t.Fatalf("a file onto a directory: %v", err)
	}
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("left behind: %v", l)
	}
}

// Catches: a named temp file (the fallback on a filesystem without
// O_TMPFILE) kept after its member failed (`named == ""` in the cleanup),
// or not given its name when it succeeded, and a refusal of O_TMPFILE that
// is not taken as "no O_TMPFILE here" (a negated EISDIR or EINVAL test; old
// kernels answer those). Openat2 plays such a filesystem.
func TestWithoutOTmpfileTheNamedTempIsCleanedUp(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL} {
		withoutTmpfile(t, errno)
	}
}

func withoutTmpfile(t *testing.T, errno unix.Errno) {
	noTmpfile := func(dirfd int, path string, how *unix.OpenHow) (int, error) {
		if how.Flags&unix.O_TMPFILE == unix.O_TMPFILE {
			return -1, errno
		}
		return unix.Openat2(dirfd, path, how)
	}
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", strings.Repeat("b", 700)))
	_, root, _ := layout(t)
	if _, err := Extract(root, bytes.NewReader(full), Options{Log: quiet, Openat2: noTmpfile}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "b")); string(got) != strings.Repeat("b", 700) {
		t.Fatalf("b = %q", got)
	}
	_, root2, _ := layout(t)
	if _, err := Extract(root2, bytes.NewReader(full[:1536+100]), Options{Log: quiet, Openat2: noTmpfile}); statusOf(err) != 400 {
		t.Fatalf("cut inside b: %v", err)
	}
	if l := leftovers(t, root); len(l) != 0 {
		t.Fatalf("left behind after success: %v", l)
	}
	if l := leftovers(t, root2); len(l) != 0 {
		t.Fatalf("left behind after a cut member: %v", l)
	}
}
