package agentd

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// readerFromConn is a net.Conn whose ReadFrom records the call, standing in
// for the *net.TCPConn whose ReadFrom reaches sendfile.
type readerFromConn struct {
	net.Conn // nil: any other method panics, so none may be used
	got      string
	calls    int
}

func (c *readerFromConn) ReadFrom(r io.Reader) (int64, error) {
	c.calls++
	b, err := io.ReadAll(r)
	c.got += string(b)
	return int64(len(b)), err
}

// Catches: tlsProbeConn without its ReadFrom method (server.go), which hides
// the wrapped *net.TCPConn's ReadFrom from net/http so downloads are copied
// through a 32 KiB buffer instead of sendfile.
func TestTLSProbeConnPassesReadFromThrough(t *testing.T) {
	under := &readerFromConn{}
	var c net.Conn = &tlsProbeConn{Conn: under, log: quietLog}
	rf, ok := c.(io.ReaderFrom)
	if !ok {
		t.Fatal("tlsProbeConn does not expose io.ReaderFrom: sendfile is unreachable through it")
	}
	n, err := rf.ReadFrom(strings.NewReader("file body"))
	if err != nil || n != 9 {
		t.Fatalf("ReadFrom: %d %v", n, err)
	}
	if under.calls != 1 || under.got != "file body" {
		t.Fatalf("the wrapped conn's ReadFrom saw %d calls, %q", under.calls, under.got)
	}
}

// A prober that sent more than the daemon's first read took still gets the
// 400 and then a clean end of stream: the daemon half-closes and swallows the
// rest before closing, so the close is a FIN, not the reset Linux sends when a
// socket closes with unread bytes (a reset can destroy the 400 before a
// slower peer reads it). Catches: answerTLSProbe's write-error test negated
// (`err == nil` returns right after the 400, skipping the half-close and the
// drain).
func TestTLSProbeEndsCleanlyAfterALongHello(t *testing.T) {
	d := startDaemon(t, nil)
	c, br := dialRaw(t, d.addr)
	// A handshake record header, then 32 KiB: far more than net/http's 4 KiB
	// first read, and less than the 64 KiB the daemon swallows.
	hello := append([]byte{0x16, 0x03, 0x01, 0x80, 0x00}, bytes.Repeat([]byte{0x42}, 32<<10)...)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	resp := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("TLS probe: %d", resp.StatusCode)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the 400, the connection gave %d bytes and %v, want a clean end of stream (io.EOF)", n, err)
	}
}
