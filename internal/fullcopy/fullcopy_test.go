package fullcopy

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

type chunkReader struct {
	data []byte
	step int
	err  error // returned once data is exhausted, instead of io.EOF
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.step)], c.data)
	c.data = c.data[n:]
	return n, nil
}

type countingWriter struct{ writes, bytes int }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	c.bytes += len(p)
	return len(p), nil
}

// A trickling source reaches the writer in full buffers and the rest.
// Catches: writing each read as it came (writes then follow the reads).
func TestCopyWritesFullBuffers(t *testing.T) {
	data := bytes.Repeat([]byte("w"), 3*1024+5)
	var w countingWriter
	n, err := Copy(&w, &chunkReader{data: data, step: 64}, make([]byte, 1024))
	if err != nil || n != int64(len(data)) || w.bytes != len(data) || w.writes != 4 {
		t.Fatalf("n=%d err=%v, %d writes of %d bytes; want 4 writes of %d", n, err, w.writes, w.bytes, len(data))
	}
}

// Only io.EOF ends a copy cleanly; io.ErrUnexpectedEOF (a body cut short)
// is returned, after the bytes read before it. Catches: treating it like
// io.EOF, which would commit a truncated upload as whole.
func TestCopyReturnsACutAsAnError(t *testing.T) {
	data := bytes.Repeat([]byte("c"), 1500)
	var dst bytes.Buffer
	n, err := Copy(&dst, &chunkReader{data: data, step: 100, err: io.ErrUnexpectedEOF}, make([]byte, 1024))
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != int64(len(data)) || dst.Len() != len(data) {
		t.Fatalf("n=%d err=%v wrote %d; want all %d bytes and io.ErrUnexpectedEOF", n, err, dst.Len(), len(data))
	}
}
