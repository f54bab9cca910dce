package agentd

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// Line bounds handed to ReadFile in its params, by a caller whose request
// URL does not carry them, still select the lines: either bound alone is a
// range. Catches, in ReadFile, `p.StartLine != nil` made `== nil` and
// `p.EndLine != nil` made `== nil` (a lone bound ignored, the whole file
// sent).
func TestReadFileTakesBoundsFromParamsAlone(t *testing.T) {
	f := testFS(protocol.LimitSet{})
	file := filepath.Join(t.TempDir(), "lines")
	if err := os.WriteFile(file, []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	two, one := uint64(2), uint64(1)
	for _, c := range []struct {
		name       string
		start, end *uint64
		want       string
	}{
		{"start_line=2 alone", &two, nil, "two\nthree\n"},
		{"end_line=1 alone", nil, &one, "one\n"},
		{"neither", nil, nil, "one\ntwo\nthree\n"},
	} {
		rec := httptest.NewRecorder()
		// The URL has no query at all: only the params say what to read.
		req := httptest.NewRequest("GET", "/v1/fs/file", nil)
		f.ReadFile(rec, req, protocol.FsReadFileParams{Path: file, StartLine: c.start, EndLine: c.end})
		if rec.Code != http.StatusOK || rec.Body.String() != c.want {
			t.Errorf("%s: %d %q, want 200 %q", c.name, rec.Code, rec.Body.String(), c.want)
		}
	}
}

// A regular file is sent with its length declared (the sendfile path), not
// chunked. The file is larger than the server buffers before it must choose
// chunking, so a streamed copy would show. Catches, in ReadFile,
// `info.Size() > 0` made `info.Size() <= 0` (every non-empty file streamed
// chunked).
func TestRegularFileReadDeclaresItsLength(t *testing.T) {
	d := bootedDaemon(t, nil)
	content := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, content, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := readWhole(t, d.http, d, file, "")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, content) {
		t.Fatalf("GET %s: %d, %d bytes, want 200 and the %d written", file, resp.StatusCode, len(body), len(content))
	}
	if resp.ContentLength != int64(len(content)) || len(resp.TransferEncoding) != 0 {
		t.Fatalf("GET of a %d-byte file: Content-Length %d, Transfer-Encoding %v; want the length declared", len(content), resp.ContentLength, resp.TransferEncoding)
	}
}

// A read that fails after the 200 is out can only be told in the daemon's
// log, so the log must name exactly those: a read that went well logs
// nothing, and one the kernel failed (/proc/self/mem at offset 0 is
// unmapped, so reading it is EIO) logs a warning, whole or ranged.
// Catches, in ReadFile, each of the three `err != nil` after a copy made
// `err == nil`: the ranged copy's (CopyContext), the declared-length
// copy's (io.CopyN) and the streamed copy's (io.Copy).
func TestFileReadsLogOnlyTheirFailures(t *testing.T) {
	d, logs := loggedDaemon(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("line\n"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, query string }{
		{big, ""},                         // declared length, io.CopyN
		{big, "&start_line=2&end_line=3"}, // ranged
		{empty, ""},                       // nothing to declare: streamed
		{"/proc/version", ""},             // a pseudo-file: streamed
		{"/proc/version", "&end_line=1"},  // ranged on a pseudo-file
	} {
		if resp, _ := readWhole(t, d.http, d, c.path, c.query); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s%s: %d", c.path, c.query, resp.StatusCode)
		}
	}
	if got := logs.String(); strings.Contains(got, "failed mid-stream") {
		t.Fatalf("reads that went well logged a failure:\n%s", got)
	}

	// A plain client: the body ends early on purpose, and the point is the
	// log, not the exchange.
	for _, c := range []struct{ query, msg string }{
		{"", `msg="read failed mid-stream" path=/proc/self/mem`},
		{"&start_line=1", `msg="ranged read failed mid-stream" path=/proc/self/mem`},
	} {
		if resp, _ := readWhole(t, http.DefaultClient, d, "/proc/self/mem", c.query); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /proc/self/mem%s: %d, want the 200 sent before the read fails", c.query, resp.StatusCode)
		}
		if got := logs.String(); !strings.Contains(got, c.msg) {
			t.Fatalf("GET /proc/self/mem%s: the failed read is not logged (want %s); the log holds:\n%s", c.query, c.msg, got)
		}
	}
}

// readWhole GETs /v1/fs/file for path with extra query text appended,
// bounded in time, and reads what body arrives.
func readWhole(t *testing.T, client *http.Client, d *daemon, path, extra string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/fs/file?"+fsQuery("path", path).Encode()+extra, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // an early end is for the caller to judge
	return resp, body
}
