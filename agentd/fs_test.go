package agentd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// fsServer serves FS over real HTTP on 127.0.0.1. The mux decodes the query
// the way the generated wrapper does (required path, uint64 bounds) and calls
// the handlers directly; the real daemon's auth and routing are not under
// test here.
func fsServer(t testing.TB, f *FS) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	u64 := func(q url.Values, k string) *uint64 {
		if !q.Has(k) {
			return nil
		}
		v, err := strconv.ParseUint(q.Get(k), 10, 64)
		if err != nil {
			// Leave it to the handler, which re-reads the raw query.
			return nil
		}
		return &v
	}
	str := func(q url.Values, k string) *string {
		if !q.Has(k) {
			return nil
		}
		v := q.Get(k)
		return &v
	}
	mux.HandleFunc("GET /v1/fs/file", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f.ReadFile(w, r, protocol.FsReadFileParams{Path: q.Get("path"), StartLine: u64(q, "start_line"), EndLine: u64(q, "end_line")})
	})
	mux.HandleFunc("PUT /v1/fs/file", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f.WriteFile(w, r, protocol.FsWriteFileParams{Path: q.Get("path"), Mode: str(q, "mode")})
	})
	mux.HandleFunc("GET /v1/fs/tar", func(w http.ResponseWriter, r *http.Request) {
		f.ReadTar(w, r, r.URL.Query().Get("path"), false)
	})
	mux.HandleFunc("PUT /v1/fs/tar", func(w http.ResponseWriter, r *http.Request) {
		f.WriteTar(w, r, r.URL.Query().Get("path"), false)
	})
	mux.HandleFunc("GET /v1/fs/tar/exact", func(w http.ResponseWriter, r *http.Request) {
		f.ReadTar(w, r, r.URL.Query().Get("path"), true)
	})
	mux.HandleFunc("PUT /v1/fs/tar/exact", func(w http.ResponseWriter, r *http.Request) {
		f.WriteTar(w, r, r.URL.Query().Get("path"), true)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func testFS(cfg protocol.LimitSet) *FS {
	if cfg.MaxTarBytes == 0 {
		cfg.MaxTarBytes = 64 << 20
	}
	if cfg.MaxTarMembers == 0 {
		cfg.MaxTarMembers = 1000
	}
	return NewFS(cfg, quietLog)
}

type fsReply struct {
	status int
	body   string
	ctype  string
}

func fsDo(t testing.TB, srv *httptest.Server, method, route string, query url.Values, body io.Reader) fsReply {
	t.Helper()
	// Bounded: a handler broken into waiting for bytes never sent must fail
	// its test, not hang the package until go test's own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+route+"?"+query.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return fsReply{resp.StatusCode, string(b), resp.Header.Get("Content-Type")}
}

func fsQuery(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// Every fs route answers a missing path with the same 400, never 404.
// Catches: an edit that lets os.Open("") run and report 404.
func TestFSMissingPathIs400OnEveryRoute(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	for _, c := range []struct{ method, route string }{
		{"GET", "/v1/fs/file"}, {"PUT", "/v1/fs/file"}, {"GET", "/v1/fs/tar"}, {"PUT", "/v1/fs/tar"},
	} {
		r := fsDo(t, srv, c.method, c.route, fsQuery(), strings.NewReader(""))
		if r.status != 400 || r.body != fsMissingPath || !strings.HasPrefix(r.ctype, "text/plain") {
			t.Errorf("%s %s: %d %q %q", c.method, c.route, r.status, r.body, r.ctype)
		}
	}
}

func fiveLines(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "five.txt")
	os.WriteFile(p, []byte("one\ntwo\nthree\nfour\nfive"), 0o644)
	return p
}

// The harness contract, row by row. Catches: 0-based counting, exclusive
// ends, a line not owning its newline, 416 instead of reading through EOF,
// 404 for an empty window, and a non-integer bound answered as missing path.
func TestReadFileLineRanges(t *testing.T) {
	p := fiveLines(t)
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	cases := []struct {
		start, end string
		status     int
		body       string
	}{
		{"", "", 200, "one\ntwo\nthree\nfour\nfive"},
		{"2", "4", 200, "two\nthree\nfour\n"},
		{"1", "1", 200, "one\n"},
		{"5", "5", 200, "five"},
		{"4", "1000", 200, "four\nfive"},
		{"6", "", 200, ""},
		{"99", "100", 200, ""},
		{"", "2", 200, "one\ntwo\n"},
		{"3", "", 200, "three\nfour\nfive"},
		{"0", "2", 400, ""},
		{"3", "2", 400, ""},
		{"x", "", 400, "start_line and end_line must be integers"},
		{"1", "-2", 400, "start_line and end_line must be integers"},
		{"1.5", "", 400, "start_line and end_line must be integers"},
	}
	for _, c := range cases {
		v := fsQuery("path", p)
		if c.start != "" {
			v.Set("start_line", c.start)
		}
		if c.end != "" {
			v.Set("end_line", c.end)
		}
		r := fsDo(t, srv, "GET", "/v1/fs/file", v, nil)
		if r.status != c.status || (c.body != "" || c.status == 200) && r.body != c.body {
			t.Errorf("start=%q end=%q: %d %q, want %d %q", c.start, c.end, r.status, r.body, c.status, c.body)
		}
	}
	// Adjacent windows concatenate back into the file.
	a := fsDo(t, srv, "GET", "/v1/fs/file", fsQuery("path", p, "start_line", "1", "end_line", "2"), nil)
	b := fsDo(t, srv, "GET", "/v1/fs/file", fsQuery("path", p, "start_line", "3", "end_line", "5"), nil)
	if a.body+b.body != "one\ntwo\nthree\nfour\nfive" {
		t.Errorf("seam lost bytes: %q + %q", a.body, b.body)
	}
}

// Catches: mapping every open error to 404, or a directory to 500.
func TestReadFileAbsentAndDirectory(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	dir := t.TempDir()
	if r := fsDo(t, srv, "GET", "/v1/fs/file", fsQuery("path", filepath.Join(dir, "nope")), nil); r.status != 404 {
		t.Errorf("absent: %d", r.status)
	}
	if r := fsDo(t, srv, "GET", "/v1/fs/file", fsQuery("path", dir), nil); r.status != 400 {
		t.Errorf("directory: %d %q", r.status, r.body)
	}
	// Un-ranged reads are byte-identical, including non-UTF-8.
	p := filepath.Join(dir, "bin")
	raw := []byte{0, 0xff, '\n', 0xfe, '\r', '\n'}
	os.WriteFile(p, raw, 0o644)
	if r := fsDo(t, srv, "GET", "/v1/fs/file", fsQuery("path", p), nil); r.status != 200 || r.body != string(raw) || r.ctype != "application/octet-stream" {
		t.Errorf("raw read: %d %q %q", r.status, r.body, r.ctype)
	}
}

// Both octal spellings mean the same mode; a bad mode is 400 and nothing
// lands. Catches: base-10 parsing (644 would become 01204), or validating
// the mode after the file was written.
func TestWriteFileModes(t *testing.T) {
	dir := t.TempDir()
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	for _, m := range []string{"0644", "644", "0o644"} {
		p := filepath.Join(dir, "m"+m)
		if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p, "mode", m), strings.NewReader("x")); r.status != 204 {
			t.Fatalf("mode %s: %d %q", m, r.status, r.body)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %s gave %v", m, fi.Mode())
		}
	}
	p := filepath.Join(dir, "sub", "deeper", "secret")
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p, "mode", "600"), strings.NewReader("k")); r.status != 204 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("600 gave %v", fi.Mode())
	}
	// An explicit mode on an overwrite applies too.
	fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p, "mode", "0640"), strings.NewReader("k2"))
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("overwrite with 0640 gave %v", fi.Mode())
	}
	for _, bad := range []string{"9", "rw-r--r--", "", "10000", "-1", "0x1ff"} {
		p := filepath.Join(dir, "bad"+bad)
		r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p, "mode", bad), strings.NewReader("x"))
		if r.status != 400 {
			t.Errorf("mode %q: %d", bad, r.status)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("mode %q left a file behind", bad)
		}
	}
}

// tempLeftovers lists anything but the named files in dir.
func tempLeftovers(t *testing.T, dir string, keep ...string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var extra []string
outer:
	for _, e := range entries {
		for _, k := range keep {
			if e.Name() == k {
				continue outer
			}
		}
		extra = append(extra, e.Name())
	}
	return extra
}

// A body over the cap is 413 and the old file survives whole. The cap is
// the gate's alone (FS no longer re-checks it), so this goes through the real
// daemon. Catches: writing in place (the old file would be truncated), a
// missing cleanup of the temp file, and dropping the gate's wire cap or FS's
// mapping of *http.MaxBytesError to its 413 text now that the duplicate
// checks in FS.WriteFile are gone.
func TestWriteFileOverCapKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	d := bootedDaemon(t, func(c *Config) { c.MaxBodyBytes = 1024 })
	// Declared length over the cap: refused before reading.
	if r := daemonPut(t, d, "/v1/fs/file", p, bytes.NewReader(make([]byte, 2048)), 2048); r.status != 413 || !strings.HasPrefix(r.ctype, "text/plain") || !strings.Contains(r.body, "max_body_bytes") {
		t.Fatalf("declared: %d %q %q", r.status, r.ctype, r.body)
	}
	// Unknown length (chunked): caught on the wire.
	if r := daemonPut(t, d, "/v1/fs/file", p, bytes.NewReader(make([]byte, 2048)), -1); r.status != 413 || !strings.HasPrefix(r.ctype, "text/plain") || !strings.Contains(r.body, "max_body_bytes") {
		t.Fatalf("chunked: %d %q %q", r.status, r.ctype, r.body)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("old file damaged: %q", b)
	}
	if extra := tempLeftovers(t, dir, "f"); len(extra) > 0 {
		t.Fatalf("temp files left: %v", extra)
	}
}

// daemonPut sends an authorized PUT of body to a real daemon's fs route;
// length -1 sends it chunked. query adds key, value pairs beside the path.
func daemonPut(t testing.TB, d *daemon, route, path string, body io.Reader, length int64, query ...string) fsReply {
	t.Helper()
	return daemonPutCtx(context.Background(), t, d, route, path, body, length, query...)
}

// daemonPutCtx is daemonPut under ctx (offContract for a request malformed
// on purpose).
func daemonPutCtx(ctx context.Context, t testing.TB, d *daemon, route, path string, body io.Reader, length int64, query ...string) fsReply {
	t.Helper()
	q := fsQuery(append([]string{"path", path}, query...)...)
	req, err := http.NewRequestWithContext(ctx, "PUT", d.base+route+"?"+q.Encode(), io.NopCloser(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/octet-stream")
	if strings.HasPrefix(route, "/v1/fs/tar") {
		req.Header.Set("Content-Type", "application/x-tar")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return fsReply{resp.StatusCode, string(b), resp.Header.Get("Content-Type")}
}

// fsFailingReader delivers n bytes, then fails like a dropped connection.
type fsFailingReader struct{ n int }

func (r *fsFailingReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("connection reset")
	}
	k := min(len(b), r.n)
	r.n -= k
	return k, nil
}

// A body cut short mid-stream leaves the old file in place (atomicity).
// Catches: O_TRUNC on the target instead of temp+rename.
func TestWriteFileTruncatedUploadKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old content"), 0o600)
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/fs/file?"+fsQuery("path", p).Encode(), &fsFailingReader{n: 100 << 10})
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
	}
	if b, _ := os.ReadFile(p); string(b) != "old content" {
		t.Fatalf("old file replaced by a partial upload: %d bytes", len(b))
	}
	// The handler may still be cleaning up when the client gives up; poll
	// briefly (bounded) for the temp file to go.
	for i := 0; i < 100; i++ {
		if len(tempLeftovers(t, dir, "f")) == 0 {
			break
		}
		srv.Client().Get(srv.URL + "/v1/fs/file?" + fsQuery("path", p).Encode())
	}
	if extra := tempLeftovers(t, dir, "f"); len(extra) > 0 {
		t.Fatalf("temp files left: %v", extra)
	}
	// Overwrite without a mode keeps the existing mode.
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader("new")); r.status != 204 {
		t.Fatal(r)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("overwrite widened mode to %v", fi.Mode())
	}
}

// Writing through a symlink updates the file it points to, like the
// reference's in-place write. Catches: renaming over the link itself.
func TestWriteFileFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.WriteFile(real, []byte("a"), 0o644)
	os.Symlink("real", filepath.Join(dir, "link"))
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", filepath.Join(dir, "link")), strings.NewReader("b")); r.status != 204 {
		t.Fatal(r)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "link")); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("symlink replaced by a file")
	}
	if b, _ := os.ReadFile(real); string(b) != "b" {
		t.Fatalf("target = %q", b)
	}
}

// fakeDisk is a probe a test can turn.
type fakeDisk struct{ avail atomic.Uint64 }

func (d *fakeDisk) probe(string) (uint64, error) { return d.avail.Load(), nil }

// A write to a filesystem under the reserve is 507 before anything exists,
// and the body names both numbers. Catches: checking after creating the
// file (an empty file would land), or answering 500.
func TestWriteFileUnderReserveIs507BeforeAnything(t *testing.T) {
	dir := t.TempDir()
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1000})
	disk := &fakeDisk{}
	disk.avail.Store(999)
	f.guard.probe = disk.probe
	srv := fsServer(t, f)
	p := filepath.Join(dir, "new", "f")
	r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), strings.NewReader("x"))
	if r.status != 507 || !strings.Contains(r.body, "999 bytes available") || !strings.Contains(r.body, "1000 byte reserve") {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatal("parent created for a refused write")
	}
	// A declared length that would cross the reserve is refused too.
	disk.avail.Store(1500)
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), bytes.NewReader(make([]byte, 600))); r.status != 507 {
		t.Fatalf("projected crossing: %d", r.status)
	}
	if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), bytes.NewReader(make([]byte, 400))); r.status != 204 {
		t.Fatalf("fits: %d %q", r.status, r.body)
	}
}

// switchingDisk reports plenty until after its first reading, then nearly
// nothing: the filesystem fills during the upload.
type switchingDisk struct{ calls atomic.Int64 }

func (d *switchingDisk) probe(string) (uint64, error) {
	if d.calls.Add(1) == 1 {
		return 1 << 40, nil
	}
	return 10, nil
}

// Crossing the reserve mid-stream aborts with 507 and the old file stays.
// Catches: a pre-flight-only guard (the write would complete).
func TestWriteFileCrossingReserveMidStream(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("old"), 0o644)
	f := testFS(protocol.LimitSet{DiskReserveBytes: 1 << 20})
	f.guard.probe = (&switchingDisk{}).probe
	srv := fsServer(t, f)
	body := struct{ io.Reader }{bytes.NewReader(make([]byte, 3*diskProbeInterval))}
	r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), body)
	if r.status != 507 {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatal("old file damaged")
	}
	if extra := tempLeftovers(t, dir, "f"); len(extra) > 0 {
		t.Fatalf("temp files left: %v", extra)
	}
}

// Health's disk block: nil when unmeasurable, and under_pressure uses the
// write path's comparison. Catches: reporting 0 available on a statvfs
// failure (which reads as a full disk).
func TestDiskHealth(t *testing.T) {
	f := testFS(protocol.LimitSet{DiskReserveBytes: 100})
	f.guard.probe = func(string) (uint64, error) { return 0, errors.New("statvfs failed") }
	if h := f.DiskHealth(); h != nil {
		t.Fatalf("unmeasurable reported as %+v", h)
	}
	f.guard.probe = func(string) (uint64, error) { return 99, nil }
	if h := f.DiskHealth(); h == nil || !h.UnderPressure || h.AvailableBytes != 99 || h.ReserveBytes != 100 {
		t.Fatalf("%+v", h)
	}
	f.guard.probe = func(string) (uint64, error) { return 100, nil }
	if h := f.DiskHealth(); h.UnderPressure {
		t.Fatal("at exactly the reserve is not pressure")
	}
	real := NewFS(protocol.LimitSet{}, quietLog).DiskHealth()
	if real == nil || real.AvailableBytes == 0 || real.UnderPressure {
		t.Fatalf("real statvfs: %+v", real)
	}
}

// The generated wrapper's decoding errors get the fs bodies. Catches: the
// wrapper's own "Query argument path is required" text leaking out, or a
// bad bound answered as a missing path.
func TestFSParamErrorBodies(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&protocol.RequiredParamError{ParamName: "path"}, fsMissingPath},
		{&protocol.InvalidParamFormatError{ParamName: "start_line", Err: errors.New("x")}, "start_line and end_line must be integers"},
		{&protocol.InvalidParamFormatError{ParamName: "end_line", Err: errors.New("x")}, "start_line and end_line must be integers"},
	} {
		w := httptest.NewRecorder()
		FSParamError(w, c.err)
		if w.Code != 400 || w.Body.String() != c.want {
			t.Errorf("%v: %d %q", c.err, w.Code, w.Body.String())
		}
	}
}
