package tarx

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// layout is a base dir holding the extraction root and an empty sentinel
// sibling that must stay empty.
func layout(t testing.TB) (base, root, outside string) {
	t.Helper()
	base = t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "sentinel")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	return base, root, outside
}

func statusOf(err error) int {
	var me *MemberError
	var le *LimitError
	var mal *MalformedError
	switch {
	case err == nil:
		return 204
	case errors.As(err, &me), errors.As(err, &mal):
		return 400
	case errors.As(err, &le):
		return 413
	}
	return 500
}

func extract(t testing.TB, root string, archive []byte, caps Caps) error {
	t.Helper()
	if caps.MaxMembers == 0 {
		caps.MaxMembers = 1000
	}
	if caps.MaxBytes == 0 {
		caps.MaxBytes = 1 << 30
	}
	_, err := Extract(root, bytes.NewReader(archive), Options{Caps: caps, Log: quiet})
	return err
}

// Every hostile archive is refused with the right status and the member's
// name, and leaves nothing outside the root. Catches: dropping any single
// lexical rule, judging link targets by normpath alone (the
// symlink-through-symlink-dotdot and dotdot-through-*-symlink cases pass the
// lexical check and escape through sub/up), the RESOLVE_NO_SYMLINKS flag (symlink-to-dir-then-through and
// symlink-redirects-depth land writes elsewhere), the hard-link-to-symlink
// check, the type switch for devices, or the cap checks.
func TestHostileCorpusIsRefusedAndConfined(t *testing.T) {
	for _, c := range tartest.Hostile("/placeholder") {
		t.Run(c.Name, func(t *testing.T) {
			base, root, outside := layout(t)
			// Rebuild against this subtest's own sentinel so absolute
			// members aim at a directory the check can see.
			var cs tartest.Case
			for _, cc := range tartest.Hostile(outside) {
				if cc.Name == c.Name {
					cs = cc
				}
			}
			err := extract(t, root, cs.Archive, Caps{MaxMembers: cs.MaxMembers, MaxBytes: cs.MaxBytes})
			if got := statusOf(err); got != cs.Status {
				t.Fatalf("status %d (%v), want %d", got, err, cs.Status)
			}
			if cs.Member != "" && !strings.Contains(err.Error(), cs.Member) {
				t.Errorf("refusal %q does not name member %q", err, cs.Member)
			}
			if err := tartest.Confined(base, root, outside); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Catches an edit that deletes "hardlink to itself" handling: clearing the
// destination first would delete the only copy of the file.
func TestHardLinkToItselfKeepsTheFile(t *testing.T) {
	_, root, _ := layout(t)
	err := extract(t, root, tartest.Build(tartest.File("f", "data"), tartest.Hardlink("f", "f")), Caps{})
	if statusOf(err) != 400 {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "data" {
		t.Fatalf("f = %q", b)
	}
}

// A duplicate member replacing a symlink writes the new file in the link's
// place, never through it. Catches: opening with O_TRUNC without unlinking
// (or without RESOLVE_NO_SYMLINKS), which would write into sub/target.
func TestDuplicateMemberReplacesSymlinkWithoutFollowingIt(t *testing.T) {
	_, root, _ := layout(t)
	err := extract(t, root, tartest.Build(
		tartest.Dir("sub/"), tartest.File("sub/target", "orig"),
		tartest.Symlink("f", "sub/target"), tartest.File("f", "new")), Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "sub/target")); string(b) != "orig" {
		t.Fatalf("write went through the symlink: sub/target = %q", b)
	}
	fi, err := os.Lstat(filepath.Join(root, "f"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("f is not a regular file: %v %v", fi, err)
	}
}

// A pre-existing hard link inside the root to a file outside it is never
// written through. Catches: O_TRUNC on the existing name instead of unlink.
func TestExistingHardLinkIsNotWrittenThrough(t *testing.T) {
	base, root, _ := layout(t)
	secret := filepath.Join(base, "secret")
	os.WriteFile(secret, []byte("keep"), 0o644)
	os.MkdirAll(root, 0o755)
	if err := os.Link(secret, filepath.Join(root, "f")); err != nil {
		t.Skip("cannot hard link here:", err)
	}
	if err := extract(t, root, tartest.Build(tartest.File("f", "overwritten")), Caps{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep" {
		t.Fatalf("outside file changed to %q", b)
	}
}

// The legitimate shapes a harness packs must all work. Catches an
// over-tightened rule (refusing every link member, or every ".." target, was
// a real defect in a predecessor).
func TestLegitimateArchivesExtract(t *testing.T) {
	long := strings.Repeat("long-directory-name/", 12) + "file-with-a-long-name.txt"
	_, root, _ := layout(t)
	archive := tartest.Build(
		tartest.Dir("d/"),
		tartest.File("f.txt", "top"),
		tartest.Symlink("d/up", "../f.txt"),
		tartest.Symlink("d/dangling", "later.txt"),
		tartest.Symlink("d/self", "."),
		tartest.Hardlink("d/hard", "f.txt"),
		tartest.Dir("empty/"),
		tartest.Member{Name: "ro/", Type: tar.TypeDir, Mode: 0o500},
		tartest.File("ro/child", "written before the mode lands"),
		tartest.Member{Name: "exe", Type: tar.TypeReg, Body: "#!/bin/sh\n", Mode: 0o755},
		tartest.Member{Name: "private", Type: tar.TypeReg, Body: "k", Mode: 0o600},
		tartest.Member{Name: "setuid", Type: tar.TypeReg, Body: "s", Mode: 0o4777},
		tartest.File(long, "pax"),
		tartest.File("ünïcødé/日本語.txt", "utf8"),
		tartest.File("./dot/./slash//name", "normalized"),
	)
	if err := extract(t, root, archive, Caps{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "ro"), 0o755) })
	mustRead := func(p, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	mustRead("d/up", "top")
	mustRead(long, "pax")
	mustRead("ünïcødé/日本語.txt", "utf8")
	mustRead("ro/child", "written before the mode lands")
	mustRead("dot/slash/name", "normalized")
	if l, _ := os.Readlink(filepath.Join(root, "d/dangling")); l != "later.txt" {
		t.Errorf("dangling symlink target %q", l)
	}
	var a, b unix.Stat_t
	unix.Stat(filepath.Join(root, "f.txt"), &a)
	unix.Stat(filepath.Join(root, "d/hard"), &b)
	if a.Ino != b.Ino {
		t.Errorf("hard link is a copy, not a link")
	}
	if fi, err := os.Stat(filepath.Join(root, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty dir missing")
	}
	modes := map[string]os.FileMode{"ro": 0o500, "exe": 0o755, "private": 0o600, "setuid": 0o755}
	for p, want := range modes {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil || fi.Mode().Perm() != want || fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("%s mode %v, want %v (masked to 0755)", p, fi.Mode(), want)
		}
	}
}

// Symlink targets that pass through in-tree symlinks without climbing out of
// them still extract: library chains, a link through a directory symlink, and
// ".." through real directories. Catches over-tightening the walk against the
// tree into "refuse any target that touches a symlink".
func TestLinkTargetsThroughInTreeSymlinksExtract(t *testing.T) {
	_, root, _ := layout(t)
	archive := tartest.Build(
		tartest.File("lib64/libfoo.so.1.2", "elf"),
		tartest.Symlink("lib", "lib64"),
		tartest.Symlink("lib64/libfoo.so.1", "libfoo.so.1.2"),
		tartest.Symlink("lib64/libfoo.so", "libfoo.so.1"),
		tartest.Symlink("usr/foo", "../lib/libfoo.so"),
		tartest.Symlink("usr/back", "../lib64/../lib/libfoo.so"),
	)
	if err := extract(t, root, archive, Caps{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/foo", "usr/back"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != "elf" {
			t.Fatalf("%s = %q, %v", p, b, err)
		}
	}
}

// Targets the CPython data filter accepts, judged by realpath at extraction
// time: a ".." after a name not yet there, after a regular file, and after an
// in-tree directory symlink (which realpath expands first). Catches a target
// walk stricter than realpath (refusing any ".." after a missing name, a file
// or a symlink), and a re-check of earlier links that refuses a later symlink
// which redirects them harmlessly.
func TestDataFilterAcceptedLinkTargetsExtract(t *testing.T) {
	for _, c := range tartest.Legitimate() {
		t.Run(c.Name, func(t *testing.T) {
			base, root, outside := layout(t)
			if err := extract(t, root, c.Archive, Caps{}); err != nil {
				t.Fatal(err)
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

// A later symlink that would redirect an earlier one out of the root is the
// member refused, and the refusal names both, and the link is not written.
// Catches judging each link only when it lands (the earlier link passed then).
func TestLaterSymlinkRedirectingEarlierLinkIsRefused(t *testing.T) {
	base, root, outside := layout(t)
	err := extract(t, root, tartest.Build(tartest.Symlink("sub/esc", "up/.."), tartest.Symlink("sub/up", "..")), Caps{})
	var me *MemberError
	if !errors.As(err, &me) || me.Member != "sub/up" || !strings.Contains(me.Reason, "sub/esc") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "sub/up")); !os.IsNotExist(err) {
		t.Fatalf("refused sub/up was written: %v", err)
	}
	if err := tartest.Confined(base, root, outside); err != nil {
		t.Fatal(err)
	}
}

// A symlink chain longer than the kernel's 40 is refused, not walked forever.
func TestLinkTargetThroughTooManySymlinksIsRefused(t *testing.T) {
	_, root, _ := layout(t)
	ms := []tartest.Member{tartest.Dir("d/")}
	for i := 0; i < 41; i++ {
		ms = append(ms, tartest.Symlink(fmt.Sprintf("l%02d", i+1), fmt.Sprintf("l%02d", i)))
	}
	ms[1] = tartest.Symlink("l01", "d")
	ms = append(ms, tartest.Symlink("x", "l41/.."))
	err := extract(t, root, tartest.Build(ms...), Caps{})
	if statusOf(err) != 400 || !strings.Contains(err.Error(), "40 symlinks") {
		t.Fatalf("got %v", err)
	}
}

// A symlink already in the extraction root before the archive arrives is
// part of the tree the target is walked against. Catches: judging a target
// only by normpath (it lands in /etc through the pre-existing link), and
// walking only symlinks the archive itself created.
func TestLinkTargetThroughPreexistingSymlinkIsRefused(t *testing.T) {
	base, root, outside := layout(t)
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "pre")); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"../pre/x", "../pre"} {
		err := extract(t, root, tartest.Build(tartest.Symlink("sub/esc", target)), Caps{})
		if statusOf(err) != 400 || !strings.Contains(err.Error(), "sub/esc") {
			t.Fatalf("target %s through a pre-existing absolute symlink: %v", target, err)
		}
	}
	os.Remove(filepath.Join(root, "pre"))
	if err := tartest.Confined(base, root, outside); err != nil {
		t.Fatal(err)
	}
}

// Catches an edit that falls back to plain open/mkdir when openat2 is
// missing: the answer must be ErrNoOpenat2 and nothing may be created.
func TestNoOpenat2RefusesWithoutFallback(t *testing.T) {
	_, root, _ := layout(t)
	_, err := Extract(root, bytes.NewReader(tartest.Build(tartest.File("f", "x"))), Options{
		Log:     quiet,
		Openat2: func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS },
	})
	if !errors.Is(err, ErrNoOpenat2) {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("root was created on a kernel without openat2")
	}
}

// Caps decide at their boundary. Catches an off-by-one in either direction.
func TestCapsBoundary(t *testing.T) {
	ten := make([]tartest.Member, 10)
	for i := range ten {
		ten[i] = tartest.File(string(rune('a'+i)), "12345")
	}
	_, root, _ := layout(t)
	if err := extract(t, root, tartest.Build(ten...), Caps{MaxMembers: 10, MaxBytes: 50}); err != nil {
		t.Fatalf("exactly at both caps: %v", err)
	}
	_, root2, _ := layout(t)
	if statusOf(extract(t, root2, tartest.Build(ten...), Caps{MaxMembers: 9, MaxBytes: 50})) != 413 {
		t.Fatal("one member over the cap was accepted")
	}
	_, root3, _ := layout(t)
	if statusOf(extract(t, root3, tartest.Build(ten...), Caps{MaxMembers: 10, MaxBytes: 49})) != 413 {
		t.Fatal("one byte over the cap was accepted")
	}
}

// The huge declared size is refused before the member's file is created.
// Catches moving the size check after the create (a 0-byte file would land).
func TestHugeDeclaredSizeCreatesNothing(t *testing.T) {
	_, root, _ := layout(t)
	archive := append(append(tartest.RawHeader("huge.bin", tar.TypeReg, 1<<40), tartest.Pad([]byte("tiny"))...), tartest.End()...)
	if statusOf(extract(t, root, archive, Caps{MaxBytes: 1 << 30})) != 413 {
		t.Fatal("huge declared size accepted")
	}
	if _, err := os.Lstat(filepath.Join(root, "huge.bin")); !os.IsNotExist(err) {
		t.Fatal("huge.bin was created before the cap was checked")
	}
}

func TestNormalizeAndTargetInTree(t *testing.T) {
	for name, want := range map[string]string{"a/./b//c/": "a/b/c", "a/../b": "b", "./": "", "": ""} {
		got, ok := Normalize(name)
		if !ok || strings.Join(got, "/") != want {
			t.Errorf("Normalize(%q) = %v %v", name, got, ok)
		}
	}
	for _, bad := range []string{"/a", "..", "a/../../b", "../x"} {
		if _, ok := Normalize(bad); ok {
			t.Errorf("Normalize(%q) accepted", bad)
		}
	}
	if !TargetInTree(1, "..") || TargetInTree(1, "../..") || TargetInTree(0, "/x") || !TargetInTree(2, "../../a/../b") {
		t.Error("TargetInTree depth arithmetic wrong")
	}
}

// FuzzExtract: for any bytes, extraction never panics and nothing lands
// outside the root, and every symlink left inside points inside.
func FuzzExtract(f *testing.F) {
	for _, c := range tartest.Hostile("/tmp/fuzz-sentinel") {
		f.Add(c.Archive)
	}
	f.Add(tartest.Build(tartest.Dir("d/"), tartest.Symlink("d/s", ".."), tartest.File("d/s/x", "y")))
	f.Add(tartest.Build(tartest.Symlink("a", "b"), tartest.Symlink("b", "a"), tartest.File("a/x", "y")))
	// A ".." after an extracted symlink: normpath says in tree, the kernel
	// says the root's parent (sub/esc -> up/.. with sub/up -> ..).
	f.Add(tartest.Build(tartest.Dir("sub/"), tartest.Symlink("sub/up", ".."), tartest.Symlink("sub/esc", "up/..")))
	f.Add(tartest.Build(tartest.Symlink("a/up", ".."), tartest.Symlink("a/b/esc", "../up/../x"), tartest.File("x", "y")))
	for _, c := range tartest.Legitimate() {
		f.Add(c.Archive)
	}
	f.Fuzz(func(t *testing.T, archive []byte) {
		base, root, outside := layout(t)
		_, _ = Extract(root, bytes.NewReader(archive), Options{Caps: Caps{MaxMembers: 64, MaxBytes: 1 << 20}, Log: quiet})
		// Restore write permission the archive may have removed, so
		// TempDir cleanup cannot fail the run for a reason that is not a bug.
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := tartest.Confined(base, root, outside); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzCheck: for any bytes, Check never panics, and an archive it accepts is
// never found malformed by Extract, which reads every byte Check skipped.
// Catches: a Check that misses a truncation Extract then finds after writing
// members (the cut archive would be refused only halfway through the tree).
func FuzzCheck(f *testing.F) {
	for _, c := range tartest.Hostile("/tmp/fuzz-sentinel") {
		f.Add(c.Archive)
	}
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", strings.Repeat("b", 700)))
	for _, n := range []int{512, 1024, 2048, 2560, len(full) - 512, len(full)} {
		f.Add(full[:n])
	}
	f.Fuzz(func(t *testing.T, archive []byte) {
		caps := Caps{MaxMembers: 64, MaxBytes: 1 << 20}
		cerr := Check(bytes.NewReader(archive), caps)
		if cerr != nil {
			return
		}
		base, root, outside := layout(t)
		_, err := Extract(root, bytes.NewReader(archive), Options{Caps: caps, Log: quiet})
		var mal *MalformedError
		if errors.As(err, &mal) {
			t.Fatalf("Check accepted an archive Extract found malformed: %v", err)
		}
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := tartest.Confined(base, root, outside); err != nil {
			t.Fatal(err)
		}
	})
}

// Check refuses a cut archive, at a member boundary or inside a member, and
// accepts the whole one. Catches: trusting tar.Reader's io.EOF.
func TestCheckFindsTheEndMarker(t *testing.T) {
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", "second"))
	for _, n := range []int{0, 1024, 2048, 2048 + 512, 700} {
		var mal *MalformedError
		if err := Check(bytes.NewReader(full[:n]), Caps{}); !errors.As(err, &mal) {
			t.Errorf("cut at %d: %v", n, err)
		}
	}
	if err := Check(bytes.NewReader(full), Caps{}); err != nil {
		t.Fatal(err)
	}
}

// A request that has ended stops the walk, the pack and the extraction.
// Catches: request-scoped tree work that runs on after its client has gone.
func TestCancelledContextStopsTheWork(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, root, _ := layout(t)
	caps := Caps{MaxMembers: 10, MaxBytes: 1 << 20, Ctx: ctx}
	_, err := Extract(root, bytes.NewReader(tartest.Build(tartest.File("a", "x"))), Options{Caps: caps, Log: quiet})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("extract: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "a")); !os.IsNotExist(err) {
		t.Fatal("a member landed after the request ended")
	}
	os.WriteFile(filepath.Join(root, "f"), []byte("x"), 0o644)
	if _, _, err := Measure(root, caps); !errors.Is(err, context.Canceled) {
		t.Fatalf("measure: %v", err)
	}
	if err := Pack(io.Discard, root, caps, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("pack: %v", err)
	}
}
