package agentd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
)

// These tests are the file-route rows of issue 12's table, each against a
// real agentd over HTTP on 127.0.0.1.

// precious writes a 16,000-byte file the failed uploads below must not touch,
// and returns a check that it is still whole.
func precious(t *testing.T, path string) func() {
	t.Helper()
	want := bytes.Repeat([]byte("precious-"), 16000/9+1)[:16000]
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("the existing file is gone: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the existing file was replaced: %d bytes, want the same 16000", len(got))
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("the existing file's mode became %v", fi.Mode())
		}
	}
}

// noTemps fails when a temp file name is left anywhere under dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".agentd-") {
			t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
}

// A tar upload that fails midway never costs the file already at a member's
// path. Catches: truncating or unlinking the old file before the member's
// content is complete (a 16,000-byte file became a 4,096-byte 0600 partial
// in each of these cases before the fix).
func TestTarFailedMemberKeepsExistingFile(t *testing.T) {
	big := strings.Repeat("n", 3*diskProbeInterval)
	cases := []struct {
		name    string
		archive []byte
		reserve bool // the disk guard trips after the first probe
		status  int
	}{
		// The member is cut: the archive ends inside its content.
		{name: "cut-member", archive: tartest.Build(tartest.File("keep", strings.Repeat("x", 5000)))[:512+4096], status: 400},
		// The reserve refuses the rest of the member partway.
		{name: "reserve-midway", archive: tartest.Build(tartest.File("keep", big)), reserve: true, status: 507},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			intact := precious(t, filepath.Join(root, "keep"))
			d := bootedDaemon(t, func(cfg *Config) { cfg.DiskReserveBytes = 1 })
			if c.reserve {
				calls := 0
				d.srv.fs.guard.probe = func(p string) (uint64, error) {
					calls++
					if strings.HasPrefix(p, root) && calls > 1 {
						return 0, nil
					}
					return 1 << 40, nil
				}
			}
			r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(c.archive), int64(len(c.archive)))
			if r.status != c.status {
				t.Fatalf("status %d %q, want %d", r.status, r.body, c.status)
			}
			intact()
			noTemps(t, root)
		})
	}
}

// An archive cut at a member boundary, without its end-of-archive marker, is
// 400 and lands none of its members. Catches: trusting archive/tar's io.EOF
// (it answers the same for a cut archive as for a complete one: 204 with the
// later members silently dropped), and extracting before the whole archive
// is known good.
func TestTarWithoutEndMarkerIs400AndLandsNothing(t *testing.T) {
	full := tartest.Build(tartest.File("a", "first"), tartest.File("b", "second"), tartest.File("c", "third"))
	// Each member here is one header block and one content block.
	for _, cut := range []struct {
		name string
		n    int
	}{{"after-two-members", 4 * 512}, {"one-zero-block", 6*512 + 512}, {"after-all-members", 6 * 512}} {
		t.Run(cut.name, func(t *testing.T) {
			root := t.TempDir()
			d := bootedDaemon(t, nil)
			body := full[:cut.n]
			r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(body), int64(len(body)))
			if r.status != 400 || !strings.Contains(r.body, "end-of-archive") {
				t.Fatalf("status %d %q, want 400 naming the missing end marker", r.status, r.body)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Fatalf("a truncated archive landed members: %v", entries)
			}
		})
	}
	// The complete archive still extracts: the check is not just "refuse".
	root := t.TempDir()
	d := bootedDaemon(t, nil)
	if r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(full), int64(len(full))); r.status != 204 {
		t.Fatalf("complete archive: %d %q", r.status, r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "c")); string(b) != "third" {
		t.Fatalf("c = %q", b)
	}
}

// A sparse member's holes stay holes: 64 MiB of logical content with a few
// bytes of data costs the disk a few blocks. Catches: writing the zeros
// archive/tar expands a sparse member into (a 10 KiB archive wrote 513 MiB).
func TestTarSparseMemberStaysSparse(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		faultSkip(t, "GNU tar builds the sparse archive; none on PATH")
	}
	src := t.TempDir()
	f, err := os.Create(filepath.Join(src, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if _, err := f.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), size/2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(tarBin, "--sparse", "--format=gnu", "-C", src, "-cf", "-", "sparse.img").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 64<<10 {
		t.Fatalf("tar did not write a sparse member: %d bytes", len(out))
	}
	root := t.TempDir()
	d := bootedDaemon(t, nil)
	if r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(out), int64(len(out))); r.status != 204 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	p := filepath.Join(root, "sparse.img")
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size {
		t.Fatalf("size %d, want %d", st.Size, size)
	}
	if allocated := st.Blocks * 512; allocated > 1<<20 {
		t.Fatalf("%d bytes allocated for %d bytes of data: the holes were written", allocated, 14)
	}
	got, _ := os.ReadFile(p)
	want := make([]byte, size)
	copy(want, "head")
	copy(want[size/2:], "middle")
	copy(want[size-4:], "tail")
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatal("the sparse member's content differs from the original")
	}
}

// Device nodes, fifos and sockets are never replaced, by PUT /v1/fs/file or
// by a tar member. Catches: rename over a device (on a guest, /dev/null
// became a regular file) and the extractor's unlink-then-create.
func TestDeviceNodesAreNeverReplaced(t *testing.T) {
	dir := t.TempDir()
	null := filepath.Join(dir, "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		faultSkip(t, "mknod needs root: "+err.Error())
	}
	fifo := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d := bootedDaemon(t, nil)
	still := func(p string, kind uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != kind {
			t.Fatalf("%s was replaced (mode %o, err %v)", p, st.Mode, err)
		}
	}
	for _, p := range []string{null, fifo} {
		r := daemonPut(t, d, "/v1/fs/file", p, strings.NewReader("data"), 4)
		if r.status != 400 || !strings.HasPrefix(r.ctype, "text/plain") {
			t.Fatalf("PUT onto %s: %d %q", p, r.status, r.body)
		}
	}
	still(null, unix.S_IFCHR)
	still(fifo, unix.S_IFIFO)
	for _, m := range []tartest.Member{tartest.File("null", "data"), tartest.Symlink("null", "x"), tartest.File("pipe", "data")} {
		archive := tartest.Build(m)
		r := daemonPut(t, d, "/v1/fs/tar", dir, bytes.NewReader(archive), int64(len(archive)))
		if r.status != 400 || !strings.Contains(r.body, m.Name) {
			t.Fatalf("tar member %s (%c): %d %q", m.Name, m.Type, r.status, r.body)
		}
	}
	still(null, unix.S_IFCHR)
	still(fifo, unix.S_IFIFO)
}

// GET of a fifo with no writer answers at once instead of blocking in open()
// forever (one OS thread per request). Catches: a blocking open.
func TestReadFifoDoesNotHang(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d := bootedDaemon(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := daemonGet(t, ctx, d, "/v1/fs/file", fsQuery("path", fifo).Encode())
	if r.status != 400 || !strings.Contains(r.body, "fifo") {
		t.Fatalf("%d %q", r.status, r.body)
	}
}

// daemonGet sends an authorized GET of route?query to a real daemon.
func daemonGet(t *testing.T, ctx context.Context, d *daemon, route, query string) fsReply {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+route+"?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fsReply{resp.StatusCode, string(b), resp.Header.Get("Content-Type")}
}

// A NUL or an over-long component is the caller's mistake: 400 with the fs
// routes' text body on every route, never 500. Catches: letting the kernel's
// EINVAL/ENAMETOOLONG reach the 500 branch.
func TestBadPathShapesAre400(t *testing.T) {
	d := bootedDaemon(t, nil)
	base := t.TempDir()
	for _, p := range []string{base + "/a\x00b", base + "/" + strings.Repeat("n", 256), base + "/" + strings.Repeat("d/", 2100)} {
		for _, route := range []struct{ method, path string }{{"GET", "/v1/fs/file"}, {"PUT", "/v1/fs/file"}, {"GET", "/v1/fs/tar"}, {"PUT", "/v1/fs/tar"}} {
			var body io.Reader = http.NoBody
			if route.method == "PUT" {
				body = bytes.NewReader(tartest.Build(tartest.File("f", "x")))
			}
			req, _ := http.NewRequest(route.method, d.base+route.path+"?"+fsQuery("path", p).Encode(), body)
			req.Header.Set("Authorization", "Bearer "+testToken)
			if route.path == "/v1/fs/tar" {
				req.Header.Set("Content-Type", "application/x-tar")
			} else {
				req.Header.Set("Content-Type", "application/octet-stream")
			}
			resp, err := d.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
				t.Errorf("%s %s with path of %d bytes: %d %q", route.method, route.path, len(p), resp.StatusCode, b)
			}
		}
	}
	// A tar member with an over-long name is the archive's fault too.
	archive := tartest.Build(tartest.File(strings.Repeat("m", 256), "x"))
	if r := daemonPut(t, d, "/v1/fs/tar", base, bytes.NewReader(archive), int64(len(archive))); r.status != 400 {
		t.Fatalf("over-long member name: %d %q", r.status, r.body)
	}
}

// waitReadsEnd waits, bounded, until the daemon has no file read in progress.
func waitReadsEnd(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d.srv.fs.reading.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d file read(s) still running after the client left", d.srv.fs.reading.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A ranged read of an endless file stops when the client goes, and when the
// daemon shuts down. Catches: a read loop that only stops on a failed write
// (start_line=2 of /dev/zero never writes, so it spun at 100% CPU after the
// disconnect and held shutdown for the whole grace).
func TestRangedReadStopsWhenTheClientGoes(t *testing.T) {
	d := bootedDaemon(t, nil)
	for _, q := range []string{"start_line=2", "end_line=1", ""} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/fs/file?path=/dev/zero&"+q, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := d.http.Do(req); err == nil {
				_, _ = io.CopyN(io.Discard, resp.Body, 1<<20)
				resp.Body.Close()
			}
		}()
		deadline := time.Now().Add(20 * time.Second)
		for d.srv.fs.reading.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
		waitReadsEnd(t, d)
	}
	// Shutdown ends a read whose client is still there.
	req, _ := http.NewRequest("GET", d.base+"/v1/fs/file?path=/dev/zero&start_line=2", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	go func() {
		if resp, err := d.http.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for d.srv.fs.reading.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	d.srv.stop()
	waitReadsEnd(t, d)
}
