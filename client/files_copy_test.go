package client

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/microvms/microvms/gen/taxonomy"
)

// A body copied with io.Copy goes through transportBody.WriteTo; a failure
// mid-body must still surface as a Transport error, and the bytes before it
// must all arrive.
func TestTransportBodyWriteToClassifiesBreak(t *testing.T) {
	data := strings.Repeat("x", 3<<20)
	broken := io.NopCloser(io.MultiReader(strings.NewReader(data), iotest.ErrReader(errors.New("reset"))))
	var dst bytes.Buffer
	n, err := io.Copy(&dst, &transportBody{op: "fsReadFile", rc: broken})
	if n != int64(len(data)) || dst.String() != data {
		t.Fatalf("copied %d bytes, want %d", n, len(data))
	}
	if !errors.Is(err, WireKindError(taxonomy.WireTransport)) {
		t.Fatalf("err = %v, want a Transport error", err)
	}
	n, err = io.Copy(&dst, &transportBody{op: "fsReadFile", rc: io.NopCloser(strings.NewReader(data))})
	if err != nil || n != int64(len(data)) {
		t.Fatalf("clean body: n=%d err=%v", n, err)
	}
}

// An upload body keeps the reader's bytes and closes it as the reader
// itself would have been closed.
func TestUploadBodyCopiesAndCloses(t *testing.T) {
	data := strings.Repeat("y", 3<<20+7)
	c := &closeCounter{Reader: iotest.HalfReader(strings.NewReader(data))}
	body, size := newUploadBody(c)
	if size != -1 {
		t.Fatalf("a reader of unknown length got size %d", size)
	}
	var dst bytes.Buffer
	if n, err := io.Copy(&dst, body); err != nil || n != int64(len(data)) || dst.String() != data {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if err := body.(io.Closer).Close(); err != nil || c.closed != 1 {
		t.Fatalf("close: err=%v closed=%d", err, c.closed)
	}
	if r := strings.NewReader(data); func() io.Reader { b, _ := newUploadBody(r); return b }() != io.Reader(r) {
		t.Fatal("a known-length reader was wrapped")
	}
}

// A regular file is sent as itself with what is left of it as the size, so
// the transport can sendfile it with a Content-Length. Catches: the whole
// file's size for a file already read into (a Content-Length the body
// cannot fill), and a file wrapped like any reader (chunked, copied through
// this process).
func TestUploadBodyOfAFileKeepsItsSize(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "up")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Repeat("z", 1000)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(300, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	body, size := newUploadBody(f)
	if body != io.Reader(f) || size != 700 {
		t.Fatalf("body %T size %d, want the file itself and 700", body, size)
	}
	// A pipe is a file too, but has no size to promise.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if body, size := newUploadBody(pr); body == io.Reader(pr) || size != -1 {
		t.Fatalf("a pipe got body %T size %d", body, size)
	}
}

// A download is written to its destination in full buffers: a body that
// trickles in small reads still reaches the writer in copyBufferBytes
// writes. Catches: writing each read as it came (the write count then
// follows the reads, here 64 KiB each).
func TestTransportBodyWritesFullBuffers(t *testing.T) {
	data := bytes.Repeat([]byte("w"), 3*copyBufferBytes+5)
	src := io.NopCloser(&chunkReader{data: data, step: 64 << 10})
	var w countingSink
	n, err := io.Copy(&w, &transportBody{op: "fsReadFile", rc: src})
	if err != nil || n != int64(len(data)) || w.bytes != len(data) {
		t.Fatalf("n=%d err=%v wrote %d", n, err, w.bytes)
	}
	if w.writes != 4 {
		t.Fatalf("%d writes for %d bytes, want 4 (three full buffers and the rest)", w.writes, len(data))
	}
}

type chunkReader struct {
	data []byte
	step int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.step)], c.data)
	c.data = c.data[n:]
	return n, nil
}

type countingSink struct{ writes, bytes int }

func (c *countingSink) Write(p []byte) (int, error) {
	c.writes++
	c.bytes += len(p)
	return len(p), nil
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// A SizedReader is sent with its size as the Content-Length and read no
// further than it. Catches: the size lost (sent chunked), and bytes past it
// read, which the transport would refuse after the daemon had the file.
func TestSizedReaderKeepsItsSizeAndStops(t *testing.T) {
	data := strings.Repeat("s", 5000)
	body, size := newUploadBody(SizedReader(iotest.HalfReader(strings.NewReader(data)), 3000))
	if size != 3000 {
		t.Fatalf("size %d, want 3000", size)
	}
	got, err := io.ReadAll(body)
	if err != nil || len(got) != 3000 {
		t.Fatalf("read %d bytes (%v), want 3000", len(got), err)
	}
	if got, _ := io.ReadAll(body); len(got) != 0 {
		t.Fatalf("read %d bytes past the size", len(got))
	}
}
