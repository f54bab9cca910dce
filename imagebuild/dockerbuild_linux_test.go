//go:build linux

package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"github.com/microvms/microvms/localvm"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/microvms/microvms/internal/testimage"
	"github.com/microvms/microvms/internal/testvm"
)

func testContext(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\necho tool\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func ownerOf(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// Catches: a RUN that is not performed (or performed on the host's tree
// instead of the image's), ENV, ARG and WORKDIR not reaching it, a COPY
// that ignores --chmod or the WORKDIR, a USER the step does not run as,
// a RUN's files given the guest's host ids rather than the image's, and
// a repeated build that redoes steps instead of finding them made.
func TestDockerfileRunsEveryStepOnTheImageRoot(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	cache := t.TempDir()
	var events []BuildEvent
	b := DockerBuild{
		Dockerfile: []byte(testvm.Dockerfile), Context: testContext(t), BaseImage: testimage.Base(t, false), Cache: cache,
		Progress: func(e BuildEvent) { events = append(events, e) },
	}
	img, err := BuildDockerfile(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	// COPY, WORKDIR (a missing directory) and two RUNs change files.
	if img.Steps != 10 || img.Made != 4 || img.Cached != 0 {
		t.Fatalf("first build: %d steps, %d made, %d cached", img.Steps, img.Made, img.Cached)
	}
	got, err := os.ReadFile(filepath.Join(img.Root, "srv/app/made-by-run"))
	if err != nil || string(got) != "hello from run, base said yes\n" {
		t.Fatalf("the RUN's file: %q %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(img.Root, "srv/app/bin/tool.sh"))
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("COPY --chmod=0750: %v %v", fi, err)
	}
	if uid, _ := os.ReadFile(filepath.Join(img.Root, "opt/data/uid")); string(uid) != "1000\n" {
		t.Fatalf("USER builder: the RUN ran as uid %q", uid)
	}
	if os.Geteuid() == 0 {
		if u, g := ownerOf(t, filepath.Join(img.Root, "opt/data/owned-by-builder")); u != 1000 || g != 1000 {
			t.Fatalf("a file the image's uid 1000 made is owned by %d:%d on disk, want the image's ids", u, g)
		}
	}
	if img.Workdir != "/srv/app" || !strings.Contains(strings.Join(img.Env, " "), "APP_HOME=/srv/app") || strings.Join(img.Cmd, " ") != "/agentd" {
		t.Fatalf("config: workdir %q env %v cmd %v", img.Workdir, img.Env, img.Cmd)
	}
	var out bytes.Buffer
	for _, e := range events {
		out.Write(e.Output)
	}
	if len(events) == 0 || events[len(events)-1].Step != 10 || events[len(events)-1].Steps != 10 || !events[len(events)-1].Done {
		t.Fatalf("progress: %+v", events)
	}

	// Image roots hold the image's setuid files with the image's owners:
	// no other host user may reach them (a wrong edit making the cache
	// world-traversable hands them a setuid-root binary).
	for _, d := range []string{filepath.Join(cache, "steps"), filepath.Join(cache, "base")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s is reachable by other users: %v %v", d, fi.Mode(), err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "steps"))
	for _, e := range entries {
		if fi, _ := e.Info(); fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("snapshot %s has mode %v", e.Name(), fi.Mode())
		}
	}

	// The same build again: every step is found made, and the image is the
	// same snapshot.
	again, err := BuildDockerfile(t.Context(), DockerBuild{Dockerfile: b.Dockerfile, Context: b.Context, BaseImage: b.BaseImage, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	if again.Cached != 4 || again.Made != 0 || again.Root != img.Root {
		t.Fatalf("second build: %d steps made, %d cached, root %s (first %s)", again.Made, again.Cached, again.Root, img.Root)
	}
}

// Catches: a failing RUN that passes (its status lost), an error that
// does not name the Dockerfile line or the status, and a failed step that
// leaves a snapshot an image could be made of.
func TestFailingRunNamesItsLine(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	cache := t.TempDir()
	df := "FROM example.test/base:1\nRUN echo before > /before\nRUN echo doomed; exit 3\n"
	_, err := BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte(df), Context: t.TempDir(), BaseImage: testimage.Base(t, true), Cache: cache})
	var se *BuildStepError
	if !errors.As(err, &se) {
		t.Fatalf("a failing RUN: %v, want a *BuildStepError", err)
	}
	if se.Line != 3 || se.Exit != 3 || !strings.Contains(se.Output, "doomed") || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("the failure: line %d exit %d output %q: %v", se.Line, se.Exit, se.Output, err)
	}
	entries, _ := os.ReadDir(filepath.Join(cache, "steps"))
	if len(entries) != 1 {
		t.Fatalf("steps kept after the failure: %d, want only the first RUN's", len(entries))
	}
}

// Catches: a FROM that is not pulled from its registry when no base image
// is given, a pulled base not kept by digest (a second build offline
// failing), and an unreachable, never-pulled FROM that is not reported as
// such. The registry is go-containerregistry's own, on loopback.
func TestFromIsPulledAndKeptByDigest(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	img, err := imageFromFile(testimage.Base(t, false))
	if err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	host := strings.TrimPrefix(reg.URL, "http://")
	ref, err := name.ParseReference(host + "/base:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", t.TempDir()) // no Docker config: anonymous, as the keychain allows
	cache := t.TempDir()
	build := func(run string) (*BuiltImage, error) {
		return BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte("FROM " + ref.String() + "\nRUN " + run + "\n"), Cache: cache})
	}
	if _, err := build("echo pulled > /pulled"); err != nil {
		t.Fatalf("building from a registry's image: %v", err)
	}
	reg.Close()
	again, err := build("echo offline > /offline")
	if err != nil {
		t.Fatalf("building again with the registry gone: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(again.Root, "offline")); string(b) != "offline\n" {
		t.Fatalf("the offline build's RUN: %q", b)
	}
	want, _ := img.Digest()
	if again.BaseDigest != want.String() {
		t.Fatalf("base digest %s, want the pushed image's %s", again.BaseDigest, want)
	}
	_, err = BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte("FROM " + host + "/never-pulled:1\nRUN true\n"), Cache: cache})
	var unavailable *BaseUnavailableError
	if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a FROM neither reachable nor pulled before: %v", err)
	}
}

const deletionsDockerfile = `FROM example.test/base:1
RUN rm /bin/ls && rm -r /home/builder && mkdir -p /home/builder && echo fresh > /home/builder/only
RUN mkdir -p /srv && echo made > /srv/by-run
`

// checkDeletions builds deletionsDockerfile and checks its snapshot: a
// file the RUN deleted (an overlay whiteout) and a directory it replaced
// (an opaque directory) are gone from the image, not carried over from the
// base.
func checkDeletions(t *testing.T) {
	t.Helper()
	img, err := BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte(deletionsDockerfile), BaseImage: testimage.Base(t, false), Cache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(img.Root, "bin/ls")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file the RUN deleted is still in the image (%v)", err)
	}
	if _, err := os.Lstat(filepath.Join(img.Root, "bin/cat")); err != nil {
		t.Fatalf("a file the RUN kept is gone: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(img.Root, "home/builder"))
	if len(entries) != 1 || entries[0].Name() != "only" {
		t.Fatalf("a directory the RUN replaced holds %v, want only its new file", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(img.Root, "srv/by-run")); string(b) != "made\n" {
		t.Fatalf("the second RUN's file: %q", b)
	}
}

// Catches: deletions in a RUN (whiteouts, opaque directories) lost when
// its upper layer becomes the image, so a removed file comes back.
func TestRunDeletionsReachTheImage(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	checkDeletions(t)
}

// Catches: a build that works only as root (chowns it cannot make, an
// idmapped mount it may not create, a layer it cannot read back): as an
// unprivileged user the base is extracted as the caller's, RUN steps run as
// guest root mapped to the caller, and their changes, deletions included,
// become the image.
func TestUnprivilegedBuildRunsTheDockerfile(t *testing.T) {
	if os.Getenv("EMULATOR_UNPRIVILEGED_BUILD") == "1" {
		if err := localvm.CheckIsolation(); err != nil {
			t.Fatalf("localvm.CheckIsolation as an unprivileged user: %v", err)
		}
		checkDeletions(t)
		fmt.Println("rootless-build-checked")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become an unprivileged user")
	}
	testvm.RerunAsNobody(t, "TestUnprivilegedBuildRunsTheDockerfile", "rootless-build-checked", "EMULATOR_UNPRIVILEGED_BUILD=1")
}

// Catches: a RUN cancelled mid-step whose clean-up removes the step's
// state directory while the image's root is still mounted in it, deleting
// the image (the base, here) through the mount.
func TestCancelledRunLeavesTheImageWhole(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	cache := t.TempDir()
	base := testimage.Base(t, false)
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{}, 1)
	go func() {
		<-started
		time.Sleep(300 * time.Millisecond)
		cancel()
	}()
	_, err := BuildDockerfile(ctx, DockerBuild{
		Dockerfile: []byte("FROM example.test/base:1\nRUN echo spinning; while :; do :; done\n"), BaseImage: base, Cache: cache,
		Progress: func(e BuildEvent) {
			if len(e.Output) > 0 {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled RUN: %v, want context.Canceled", err)
	}
	roots, _ := filepath.Glob(filepath.Join(cache, "base", "*", "root", "bin", "sh"))
	if len(roots) != 1 {
		t.Fatalf("the base image lost its /bin/sh when the RUN was cancelled: %v", roots)
	}
}

// Catches: a guest whose daemon exits before it listens, stopped (its
// state directory removed) while the image's root is still mounted in
// that directory, deleting the image through the mount.
func TestGuestDyingAtStartLeavesItsImageWhole(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	img, err := BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte("FROM example.test/base:1\n"), BaseImage: testimage.Base(t, false), Cache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	quitter := filepath.Join(t.TempDir(), "agentd")
	if err := os.WriteFile(quitter, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = localvm.AgentdLauncher(agentdBin, nil)(t.Context(), localvm.GuestSpec{MicrovmID: "microvm-dies", HookPort: 9000, RootDir: img.Root, Daemon: quitter})
	if err == nil {
		t.Fatal("a daemon that exits at once was reported as started")
	}
	if _, err := os.Stat(filepath.Join(img.Root, "bin", "sh")); err != nil {
		t.Fatalf("the image lost its /bin/sh when its guest died at start: %v", err)
	}
}

// Catches: a COPY to a path the image has as a directory that replaces the
// directory instead of copying into it, an ADD of a local tar archive that
// is copied rather than unpacked (or unpacked when it is not one), and a
// --chown by name that is not the image's user.
func TestCopyAndAddFollowDockerSemantics(t *testing.T) {
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "conf.txt"), []byte("conf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	zw.Write(tarOf(t, tarEntry{name: "a/b.txt", typ: tar.TypeReg, body: "from the archive\n"}))
	zw.Close()
	if err := os.WriteFile(filepath.Join(ctxDir, "bundle.tar.gz"), tgz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	df := "FROM example.test/base:1\nCOPY conf.txt /etc\nADD bundle.tar.gz /opt/bundle/\nADD conf.txt /opt/plain\nCOPY --chown=builder:builder conf.txt /home/builder/\n"
	img, err := BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte(df), Context: ctxDir, BaseImage: testimage.Base(t, true), Cache: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(img.Root, "etc/conf.txt")); err != nil || string(b) != "conf\n" {
		t.Fatalf("COPY into the image's /etc: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(img.Root, "etc/passwd")); err != nil {
		t.Fatalf("COPY to /etc replaced the directory: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(img.Root, "opt/bundle/a/b.txt")); err != nil || string(b) != "from the archive\n" {
		t.Fatalf("ADD of a local archive: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(img.Root, "opt/plain")); err != nil || string(b) != "conf\n" {
		t.Fatalf("ADD of a plain file: %q %v", b, err)
	}
	if os.Geteuid() == 0 {
		if u, g := ownerOf(t, filepath.Join(img.Root, "home/builder/conf.txt")); u != 1000 || g != 1000 {
			t.Fatalf("COPY --chown=builder:builder gave %d:%d", u, g)
		}
	}
}

// Catches: a snapshot that fails once a file reaches the filesystem's hard
// link limit (every snapshot adds a link to each unchanged file, and a
// busybox image starts with hundreds to one binary): such a file is copied.
func TestSnapshotCopiesAFileAtTheLinkLimit(t *testing.T) {
	src := filepath.Join(t.TempDir(), "root")
	links := filepath.Join(t.TempDir(), "links")
	for _, d := range []string{src, links} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	full := filepath.Join(src, "busybox")
	if err := os.WriteFile(full, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	limited := false
	for i := 0; i < 70000; i++ { // bounded: ext4's limit is 65,000
		err := os.Link(full, filepath.Join(links, strconv.Itoa(i)))
		if errors.Is(err, syscall.EMLINK) {
			limited = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !limited {
		t.Skip("this filesystem allows more than 70,000 links to a file")
	}
	dst := filepath.Join(t.TempDir(), "snap")
	if err := linkTree(src, dst); err != nil {
		t.Fatalf("snapshotting a tree with a file at the link limit: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "busybox")); err != nil || string(b) != "binary" {
		t.Fatalf("the copied file: %q %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "busybox")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the copy's mode: %v", fi)
	}
}

// Catches: a RUN that is not confined as a run-time guest is: without the
// syscall filter or no_new_privs, in the host's user namespace (its root
// the host's root), or in the host's network namespace (reaching the
// host's interfaces without an egress connector).
func TestBuildStepIsConfinedLikeAGuest(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	probe, err := testvm.EscapeProbe()
	if err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	raw, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "escapeprobe"), raw, 0o755); err != nil {
		t.Fatal(err)
	}
	df := "FROM example.test/base:1\nCOPY escapeprobe /escapeprobe\n" +
		`RUN /escapeprobe syscalls; echo "nnp=$(cat /proc/self/status | while read k v; do [ "$k" = NoNewPrivs: ] && echo $v; done)"; echo "uidmap=$(cat /proc/self/uid_map)"; echo "ifaces=$(cat /proc/net/dev | while read i rest; do case $i in *:) echo -n "$i";; esac; done)"` + "\n"
	var out bytes.Buffer
	_, err = BuildDockerfile(t.Context(), DockerBuild{Dockerfile: []byte(df), Context: ctxDir, BaseImage: testimage.Base(t, false), Cache: t.TempDir(),
		Progress: func(e BuildEvent) { out.Write(e.Output) }})
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, name := range []string{"keyctl", "add_key", "userfaultfd", "perf_event_open", "io_uring_setup"} {
		if !strings.Contains(got, name+" EPERM") {
			t.Errorf("%s in a build step: want EPERM from the filter; the step said:\n%s", name, got)
		}
	}
	if !strings.Contains(got, "nnp=1\n") {
		t.Errorf("NoNewPrivs is not set in a build step:\n%s", got)
	}
	_, after, _ := strings.Cut(got, "uidmap=")
	line, _, _ := strings.Cut(after, "\n")
	// A step runs in a user namespace nested in its init's, mapped onto the
	// init's ids as they are (localvm/guestinit, nestedAttr): seen from
	// inside, its map is "0 0 N". The host's namespace maps every id; which
	// host uid the init's root is, the launch tests check from the host
	// (TestEscapeKeysUIDMapAndFilteredSyscalls; steps start the same way).
	if f := strings.Fields(line); len(f) != 3 || f[0] != "0" || f[2] == "4294967295" {
		t.Errorf("a build step's uid map is %q: it is in the host's user namespace", line)
	}
	if !strings.Contains(got, "ifaces=lo:\n") {
		t.Errorf("a build step without egress sees more than its loopback:\n%s", got)
	}
}

// Catches: a RUN step's writable layer without the run-time guest's bound
// (issue 44.4: its upper layer was a directory on the host's disk, 4.6 GiB
// were written past the 4 GiB a guest has, then copied into the cache), a
// refusal that does not name the bound, and a failed step that leaves its
// bytes on the host. The bound is made small here; the default is
// LOCAL_GUEST_WRITABLE_MIB.
func TestRunStepWritableLayerIsBounded(t *testing.T) {
	if err := localvm.CheckIsolation(); err != nil {
		t.Fatalf("this host cannot isolate guests: %v", err)
	}
	if os.Getenv("EMULATOR_UNPRIVILEGED_STEP_BOUND") == "1" {
		checkStepBound(t)
		fmt.Println("rootless-step-bound-checked")
		return
	}
	checkStepBound(t)
	if os.Geteuid() == 0 {
		// The same bound, the same way, for a rootless emulator.
		testvm.RerunAsNobody(t, "TestRunStepWritableLayerIsBounded", "rootless-step-bound-checked", "EMULATOR_UNPRIVILEGED_STEP_BOUND=1")
	}
}

func checkStepBound(t *testing.T) {
	cache := t.TempDir()
	// Where the step's state directory is made: searchable by a guest's
	// mapped ids, as the host's /tmp is.
	tmp, err := os.MkdirTemp("", "step-bound-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	build := func(run string) (*BuiltImage, error) {
		return BuildDockerfile(t.Context(), DockerBuild{
			Dockerfile: []byte("FROM example.test/base:1\nRUN " + run + "\n"), BaseImage: testimage.Base(t, false), Cache: cache, WritableMiB: 8,
		})
	}
	// 16 MiB into an 8 MiB layer, with the shell's builtins; set -e ends
	// the step at the first failed write.
	_, err = build("set -e; i=0; while [ $i -lt 16384 ]; do printf %1024s; i=$((i+1)); done > /fill")
	var se *BuildStepError
	if !errors.As(err, &se) || se.Exit == 0 || se.FullAtMiB != 8 {
		t.Fatalf("16 MiB written by a RUN bounded at 8 MiB: %v, want a failed step whose layer was full at 8 MiB", err)
	}
	if !strings.Contains(err.Error(), "8 MiB") || !strings.Contains(err.Error(), "LOCAL_GUEST_WRITABLE_MIB") {
		t.Fatalf("the refusal does not name the bound: %v", err)
	}
	var left int64
	_ = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				left += fi.Size()
			}
		}
		return nil
	})
	if left > 1<<20 {
		t.Fatalf("the failed step left %d bytes under the host's temporary directory", left)
	}
	// Under the bound, the step's changes still become its layer.
	img, err := build("i=0; while [ $i -lt 2048 ]; do printf %1024s; i=$((i+1)); done > /fits")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(img.Root, "fits")); err != nil || fi.Size() != 2<<20 {
		t.Fatalf("a 2 MiB file under the 8 MiB bound: %v %v", fi, err)
	}
}

// Catches: a layer whose files' sizes pass the bound copied into the cache
// anyway: a sparse file costs its step's tmpfs nothing and the cache its
// whole size.
func TestSparseFileInAStepLayerIsBounded(t *testing.T) {
	upper := t.TempDir()
	if err := os.WriteFile(filepath.Join(upper, "small"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(upper, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	err = applyUpper(upper, root, 0, 8<<20)
	if err == nil || !strings.Contains(err.Error(), "LOCAL_GUEST_WRITABLE_MIB") {
		t.Fatalf("a 64 MiB sparse file in a layer bounded at 8 MiB: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "sparse")); err == nil {
		t.Fatal("the sparse file was copied")
	}
}
