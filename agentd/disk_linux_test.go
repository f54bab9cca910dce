package agentd

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// The real guard (statvfs, no injected probe) measures a write's target on
// the filesystem it will land on even when the target, or its parent, does
// not exist yet, or when a component of the path is a regular file: it
// walks up to the nearest ancestor that exists. With a reserve larger than
// any disk, every such write is refused with 507 before anything is made.
//
// Catches, in availableBytes: either half of
// `err != unix.ENOENT && err != unix.ENOTDIR` negated, and the root test
// `parent == p` negated (a missing directory, or a path through a file, then
// reads as unmeasurable, and an unmeasurable filesystem is allowed: the
// write goes ahead past the reserve).
func TestRealGuardMeasuresPathsThatDoNotExistYet(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(dir, "new", "deeper", "f"), // ENOENT up to dir
		filepath.Join(file, "f"),                 // ENOTDIR at file
	} {
		if _, err := availableBytes(p); err != nil {
			t.Fatalf("availableBytes(%s): %v; want the nearest existing ancestor measured", p, err)
		}
	}

	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 62})
	srv := fsServer(t, f)
	for _, p := range []string{filepath.Join(dir, "new", "deeper", "f"), filepath.Join(file, "f")} {
		r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader("x"))
		if r.status != 507 || !strings.Contains(r.body, "reserve") {
			t.Fatalf("PUT %s under a reserve no disk has: %d %q, want 507", p, r.status, r.body)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatalf("a refused write created its parent: %v", err)
	}
}

// A refused write whose length was not declared says the filesystem is
// already below the reserve; only a declared length is named as "writing N
// more". Catches: PressureError.Error's `e.Incoming > 0` made `>= 0` (a
// chunked upload is told that "writing 0 more" would cross the reserve).
func TestPressureRefusalNamesOnlyADeclaredLength(t *testing.T) {
	dir := t.TempDir()
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1000})
	disk := &fakeDisk{}
	disk.avail.Store(999)
	f.guard.probe = disk.probe
	srv := fsServer(t, f)
	p := filepath.Join(dir, "f")
	chunked := struct{ io.Reader }{strings.NewReader("x")} // no length: sent chunked
	r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), chunked)
	want := "refusing to write " + p + ": 999 bytes available on the target filesystem, below the 1000 byte reserve"
	if r.status != 507 || !strings.Contains(r.body, want) {
		t.Fatalf("chunked write under the reserve: %d %q, want 507 saying %q", r.status, r.body, want)
	}
	disk.avail.Store(1500)
	r = fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader(strings.Repeat("x", 600)))
	want = "refusing to write " + p + ": 1500 bytes available on the target filesystem, and writing 600 more would go below the 1000 byte reserve"
	if r.status != 507 || !strings.Contains(r.body, want) {
		t.Fatalf("declared write over the reserve: %d %q, want 507 saying %q", r.status, r.body, want)
	}
}

// A declared length that lands exactly on the reserve is allowed: the rule
// is "would go below", not "would reach". Catches: preflight's
// `r.Available-r.Reserve < uint64(incoming)` made `<=`.
func TestDeclaredLengthUpToTheReserveIsAllowed(t *testing.T) {
	dir := t.TempDir()
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1000})
	disk := &fakeDisk{}
	disk.avail.Store(1500)
	f.guard.probe = disk.probe
	srv := fsServer(t, f)
	p := filepath.Join(dir, "f")
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader(strings.Repeat("x", 500))); r.status != 204 {
		t.Fatalf("500 bytes with 1500 available and a 1000 byte reserve: %d %q, want 204", r.status, r.body)
	}
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader(strings.Repeat("x", 501))); r.status != 507 {
		t.Fatalf("501 bytes with 1500 available and a 1000 byte reserve: %d %q, want 507", r.status, r.body)
	}
}

// The guard measures again once exactly diskProbeInterval bytes have landed,
// however the copy splits them: an upload of exactly that size, on a disk
// that fills after the pre-flight reading, is refused. Catches: the pacer's
// `p.since < diskProbeInterval` made `<=` (the second reading only comes one
// byte later, so this upload completes on a full disk).
func TestGuardMeasuresAgainAtExactlyTheProbeInterval(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 20})
	f.guard.probe = (&switchingDisk{}).probe
	srv := fsServer(t, f)
	body := struct{ io.Reader }{bytes.NewReader(make([]byte, diskProbeInterval))}
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), body); r.status != 507 {
		t.Fatalf("an upload of exactly diskProbeInterval bytes onto a disk that fills: %d %q, want 507", r.status, r.body)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the refused upload left %s: %v", p, err)
	}
}

// countingDisk always has room, and counts its readings.
type countingDisk struct{ calls atomic.Int64 }

func (d *countingDisk) probe(string) (uint64, error) { d.calls.Add(1); return 1 << 40, nil }

// An upload is measured once before anything lands and then once per
// diskProbeInterval bytes, not on every write of the copy: statvfs per 32
// KiB would cost more than the write. Catches: the pacer's
// `p.since < diskProbeInterval` negated (it then measures after every write
// until the interval is reached, and never after).
func TestGuardMeasuresOncePerProbeInterval(t *testing.T) {
	// copyBody writes whole uploadBufferBytes buffers, so the pacer's count
	// lands exactly on each interval.
	if diskProbeInterval%uploadBufferBytes != 0 {
		t.Fatalf("uploadBufferBytes (%d) no longer divides diskProbeInterval (%d): recount this test's readings", uploadBufferBytes, diskProbeInterval)
	}
	dir := t.TempDir()
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 20})
	disk := &countingDisk{}
	f.guard.probe = disk.probe
	srv := fsServer(t, f)
	body := struct{ io.Reader }{bytes.NewReader(make([]byte, 3*diskProbeInterval))}
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", filepath.Join(dir, "f")), body); r.status != 204 {
		t.Fatalf("upload: %d %q", r.status, r.body)
	}
	if n := disk.calls.Load(); n != 4 {
		t.Fatalf("a %d-byte upload measured the disk %d times, want 4 (before, then every %d bytes)", 3*diskProbeInterval, n, diskProbeInterval)
	}
}
