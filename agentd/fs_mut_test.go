package agentd

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
)

// The daemon's fs warnings go to the logger the daemon was given, and an FS
// built without one still logs instead of panicking. Catches, in NewFS,
// `log == nil` made `log != nil` (a given logger is swapped for
// slog.Default, so a refused write is missing from the daemon's log, and a
// nil one is kept and panics on the first warning).
func TestFSWarnsOnTheDaemonsLogger(t *testing.T) {
	var logs syncBuffer
	cfg := testConfig()
	cfg.DiskReserveBytes = 1 << 62 // no disk has this much, so every write is refused
	srv, err := NewServer(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d := serveDaemon(t, srv)
	d.bootstrap(nil)
	target := t.TempDir() + "/f"
	if r := daemonPut(t, d, "/v1/fs/file", target, strings.NewReader("x"), 1); r.status != http.StatusInsufficientStorage {
		t.Fatalf("PUT under an impossible reserve: %d %q, want 507", r.status, r.body)
	}
	if got := logs.String(); !strings.Contains(got, "under the disk reserve") || !strings.Contains(got, target) {
		t.Fatalf("the refused write is not in the daemon's log; the log holds:\n%s", got)
	}

	// Without a logger: the same refusal, answered rather than panicking.
	f := NewFS(protocol.LimitSet{DiskReserveBytes: 1 << 62}, nil)
	if f.log == nil {
		t.Fatal("NewFS(…, nil) kept a nil logger; the first warning would panic")
	}
	r := fsDo(t, fsServer(t, f), "PUT", "/v1/fs/file", fsQuery("path", target), strings.NewReader("x"))
	if r.status != http.StatusInsufficientStorage {
		t.Fatalf("PUT through an FS built without a logger: %d %q, want 507", r.status, r.body)
	}
}

// Health's disk block measures the daemon's working directory, where a
// relative write lands, not the root filesystem. The probe is replaced so
// the two answer different numbers. Catches, in DiskHealth, Getwd's
// `err != nil` made `err == nil` (every successful Getwd measured "/").
func TestHealthMeasuresTheWorkingDirectory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if wd == "/" {
		t.Skip("the test runs in /, so the two paths cannot be told apart")
	}
	srv, err := NewServer(testConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	// Set before serving, so no handler goroutine can race the write.
	srv.fs.guard.probe = func(p string) (uint64, error) {
		if p == wd {
			return 4242, nil
		}
		return 0, fmt.Errorf("probe asked for %q, not the working directory %q", p, wd)
	}
	d := serveDaemon(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := d.client.HealthWithResponse(ctx)
	if err != nil || resp.JSON200 == nil {
		t.Fatalf("health: %v %s", err, resp.Body)
	}
	if h := resp.JSON200.Disk; h == nil || h.AvailableBytes != 4242 {
		t.Fatalf("health's disk block %+v (body %s); want the working directory %s measured (4242 available)", h, resp.Body, wd)
	}
}

// A NUL is refused whichever byte it is, the first included: 400 with the
// fs routes' refusal text, not the kernel's EINVAL answered as a 500.
// Catches, in badPath, `strings.IndexByte(p, 0) >= 0` made `> 0`.
func TestPathStartingWithNULIs400(t *testing.T) {
	d := bootedDaemon(t, nil)
	// Read routes only: under the mutant a write of the relative path "\x00"
	// would stage a temp file in the package directory.
	for _, route := range []string{"/v1/fs/file", "/v1/fs/tar"} {
		r := fsGet(t, d, route, "\x00")
		if r.status != http.StatusBadRequest || r.body != "path contains a NUL byte" {
			t.Errorf("GET %s of a path that is one NUL: %d %q, want 400 %q", route, r.status, r.body, "path contains a NUL byte")
		}
	}
}

// PATH_MAX counts the terminating NUL, so 4095 bytes is the longest path and
// one of 4096 is refused up front, with a body naming both numbers. Under
// the limit the kernel decides (here: no such file). Catches, in badPath,
// `len(p) >= pathMax` made `>` (4096 bytes reaches the kernel, whose
// ENAMETOOLONG gets a different text) and, in the refusal, `pathMax-1` made
// `pathMax+1` (the limit named as 4097).
func TestPathOfExactlyPathMaxIsRefusedByName(t *testing.T) {
	d := bootedDaemon(t, nil)
	p := t.TempDir()
	for len(p)+2 <= pathMax {
		p += "/d" // every component far under NAME_MAX
	}
	for len(p) < pathMax {
		p += "d"
	}
	want := "path is 4096 bytes; a path may have at most 4095"
	for _, route := range []string{"/v1/fs/file", "/v1/fs/tar"} {
		r := fsGet(t, d, route, p)
		if r.status != http.StatusBadRequest || r.body != want {
			t.Errorf("GET %s of a %d-byte path: %d %q, want 400 %q", route, len(p), r.status, r.body, want)
		}
	}
	// One byte shorter is a path the kernel takes: the answer is about the
	// file, which does not exist.
	r := fsGet(t, d, "/v1/fs/file", p[:pathMax-1])
	if r.status != http.StatusNotFound {
		t.Errorf("GET of a %d-byte path: %d %q, want 404", pathMax-1, r.status, r.body)
	}
}

// fsGet GETs path from a real daemon's fs route, bounded in time.
func fsGet(t *testing.T, d *daemon, route, path string) fsReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return daemonGet(t, ctx, d, route, fsQuery("path", path).Encode())
}

// NAME_MAX is the longest file name itself (no NUL counted), so a name of
// exactly 255 bytes is written and read back, and 256 is refused by name.
// Catches, in badPath, `len(c) > nameMax` made `>=` (the longest legal name
// refused as too long).
func TestFileNameOfExactlyNameMaxIsAllowed(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	longest := dir + "/" + strings.Repeat("n", nameMax)
	if r := daemonPut(t, d, "/v1/fs/file", longest, strings.NewReader("at the limit"), 12); r.status != http.StatusNoContent {
		t.Fatalf("PUT of a %d-byte name: %d %q, want 204", nameMax, r.status, r.body)
	}
	if r := fsGet(t, d, "/v1/fs/file", longest); r.status != http.StatusOK || r.body != "at the limit" {
		t.Fatalf("GET of a %d-byte name: %d %q", nameMax, r.status, r.body)
	}
	want := "a path component is 256 bytes; a file name may have at most 255"
	if r := fsGet(t, d, "/v1/fs/file", longest+"n"); r.status != http.StatusBadRequest || r.body != want {
		t.Fatalf("GET of a %d-byte name: %d %q, want 400 %q", nameMax+1, r.status, r.body, want)
	}
}

// The widest mode a write takes is 7777 octal: every permission bit plus
// setuid, setgid and sticky, which land on the file (one past it is refused,
// which TestWriteFileModes holds). Catches, in parseFileMode, `v > 0o7777` made `>=`
// (the full mode refused).
func TestWriteFileTakesTheWidestMode(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	put := func(name, mode string) fsReply {
		t.Helper()
		return daemonPut(t, d, "/v1/fs/file", dir+"/"+name, strings.NewReader("x"), 1, "mode", mode)
	}
	if r := put("widest", "7777"); r.status != http.StatusNoContent {
		t.Fatalf("PUT with mode 7777: %d %q, want 204", r.status, r.body)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir+"/widest", &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o7777 {
		t.Fatalf("mode 7777 landed as %o", st.Mode&0o7777)
	}
}
