package client

import (
	"bytes"
	"errors"
	"io"
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
	body := newUploadBody(c)
	var dst bytes.Buffer
	if n, err := io.Copy(&dst, body); err != nil || n != int64(len(data)) || dst.String() != data {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if err := body.(io.Closer).Close(); err != nil || c.closed != 1 {
		t.Fatalf("close: err=%v closed=%d", err, c.closed)
	}
	if r := strings.NewReader(data); newUploadBody(r) != io.Reader(r) {
		t.Fatal("a known-length reader was wrapped")
	}
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }
