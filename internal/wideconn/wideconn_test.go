package wideconn

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// gatedReader returns first, then blocks until release before returning
// rest and EOF.
type gatedReader struct {
	first, rest []byte
	release     chan struct{}
	step        int
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.step++
	switch g.step {
	case 1:
		return copy(p, g.first), nil
	case 2:
		<-g.release
		return copy(p, g.rest), nil
	}
	return 0, io.EOF
}

// A read's bytes reach the peer before the next read returns: the copy
// never waits to fill its buffer. Catches: ReadFrom through
// internal/fullcopy (or any full-buffer copy), which would hold "hello"
// until the source ends and stall an interactive stream through the proxy.
func TestReadFromWritesEachReadAtOnce(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	src := &gatedReader{first: []byte("hello"), rest: []byte(" world"), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := Conn(a).(io.ReaderFrom).ReadFrom(src)
		a.Close()
		done <- err
	}()
	_ = b.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, 5)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "hello" {
		t.Fatalf("the first read's bytes did not arrive before the source went on: %q, %v", got, err)
	}
	close(src.release)
	rest, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(rest, []byte(" world")) {
		t.Fatalf("the rest arrived as %q, %v", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
}

// A large source goes out in writes larger than io.Copy's 32 KiB.
// Catches: the wrapper dropped or its buffer shrunk back to io.Copy's.
func TestReadFromWritesWidePieces(t *testing.T) {
	a, b := net.Pipe() // a net.Pipe write blocks until read: each Write is seen whole
	defer b.Close()
	payload := bytes.Repeat([]byte("x"), 4<<20)
	go func() {
		_, _ = Conn(a).(io.ReaderFrom).ReadFrom(bytes.NewReader(payload))
		a.Close()
	}()
	biggest, total := 0, 0
	buf := make([]byte, 1<<20)
	_ = b.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		n, err := b.Read(buf)
		biggest, total = max(biggest, n), total+n
		if err != nil {
			break
		}
	}
	if total != len(payload) || biggest <= 32<<10 {
		t.Fatalf("moved %d of %d bytes, in reads of at most %d (want over 32 KiB)", total, len(payload), biggest)
	}
}
